rule train_intermediate:
    """The intermediate phase: a backbone trained on an intermediate config's tasks."""
    input:
        unpack(intermediate_inputs),
    output:
        model=intermediate_model_output(f"{RESULTS}/intermediate/{{backbone}}/{{intermediate}}/seed{{seed}}/encoder"),
        # the model's record, kept beside it (grid.training_record): the training figures read it
        curve=f"{RESULTS}/intermediate/{{backbone}}/{{intermediate}}/seed{{seed}}/curve.csv",
        train_log=f"{RESULTS}/intermediate/{{backbone}}/{{intermediate}}/seed{{seed}}/train_log.json",
    log:
        f"{LOGS}/train_intermediate/{{backbone}}/{{intermediate}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_intermediate/{{backbone}}/{{intermediate}}/seed{{seed}}.tsv"
    params:
        settings=settings(grid_settings.intermediate_settings, "backbone", "intermediate"),
        data=data_map(grid.intermediate_data, "intermediate"),
        # Resumable state of an interrupted job; removed once the output exists.
        checkpoints=f"{RESULTS}/checkpoints/intermediate/{{backbone}}/{{intermediate}}/seed{{seed}}",
        code=module_digest("training.train"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.intermediate_data(config, w.intermediate)),
        # the job's identity in the experiment trackers
        run=training_run_id("intermediate"),
    threads: res("train_intermediate", "threads")
    # Each retry resumes from the checkpoint: enough for the expected training time in
    # allocations of `runtime` minutes, plus retries for failures (slurm.training_retries).
    retries: training_retries("train_intermediate")
    resources:
        **training_geometry(),
        **gpu_resources("train_intermediate", training_gpus("train_intermediate"), training_gres()),
        mem_mb=res("train_intermediate", "mem_mb"),
        runtime=job_runtime("train_intermediate"),
        # eager or compiled forwards (models/compiled.py): operational, so switching reruns nothing
        compile=res("train_intermediate", "compile"),
        # padded or padding-free encoder batches (models/packing.py): operational too
        padding_free=res("train_intermediate", "padding_free"),
        launcher=training_launcher,
        slurm_extra=training_slurm_extra("train_intermediate"),
        # Checkpointing is operational: resources, so changing it reruns nothing.
        checkpoint_every=res("train_intermediate", "checkpoint_every"),
        keep_checkpoints=res("train_intermediate", "keep_checkpoints"),
        # Rows of the curve (curve.csv): operational too.
        log_every=res("train_intermediate", "log_every"),
        # Tracking is operational too (common.smk: TRACKING).
        tracking=TRACKING,
    conda:
        "../envs/training.yaml"
    shell:
        # exec (in the launcher): the training process, or torchrun, receives Slurm's signals.
        "bind_gpus {resources.gpu}; {resources.launcher} -m workflow_scripts.training.train intermediate --encoder {input.encoder}"
        " --data {params.data:q} --settings {params.settings:q} --seed {wildcards.seed}"
        " --threads {threads} --output {output.model} --checkpoint-dir {params.checkpoints}"
        " --checkpoint-every {resources.checkpoint_every} --log-every {resources.log_every}"
        " --keep-checkpoints {resources.keep_checkpoints} --compile {resources.compile}"
        " --padding-free {resources.padding_free}"
        f" --tracking {{resources.tracking}} --tracking-dir {shlex.quote(TRACKING_DIR)} --run-identity {{params.run:q}}"
        " > $(fresh_log {log:q}) 2>&1"


rule train_target:
    """The target phase: a target trained (and selected) from an intermediate encoder."""
    input:
        unpack(target_inputs),
    output:
        # deleted once evaluated unless the config keeps target models (disk.py)
        model=target_model_output(
            f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/model"
        ),
        curve=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/curve.csv",
        train_log=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/train_log.json",
    log:
        f"{LOGS}/train_target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}.tsv"
    params:
        settings=settings(grid_settings.target_settings, "backbone", "target"),
        # The recipe's files and the languages taken from each (transfer.py).
        data=target_data_map,
        checkpoints=f"{RESULTS}/checkpoints/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}",
        code=module_digest("training.train"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.target_tasks(config, w.target)),
        # the job's identity in the experiment trackers
        run=training_run_id("target"),
    threads: res("train_target", "threads")
    # before any further intermediate phase: an intermediate model is discarded once its
    # targets are trained, so finishing them first keeps few on disk (disk.py)
    priority: 5
    # Each retry resumes from the checkpoint: enough for the expected training time in
    # allocations of `runtime` minutes, plus retries for failures (slurm.training_retries).
    retries: training_retries("train_target")
    resources:
        **training_geometry(),
        **gpu_resources("train_target", training_gpus("train_target"), training_gres()),
        mem_mb=res("train_target", "mem_mb"),
        runtime=job_runtime("train_target"),
        # eager or compiled forwards (models/compiled.py): operational, so switching reruns nothing
        compile=res("train_target", "compile"),
        # padded or padding-free encoder batches (models/packing.py): operational too
        padding_free=res("train_target", "padding_free"),
        launcher=training_launcher,
        slurm_extra=training_slurm_extra("train_target"),
        # Checkpointing is operational: resources, so changing it reruns nothing.
        checkpoint_every=res("train_target", "checkpoint_every"),
        keep_checkpoints=res("train_target", "keep_checkpoints"),
        # Rows of the curve (curve.csv): operational too.
        log_every=res("train_target", "log_every"),
        # Tracking is operational too (common.smk: TRACKING).
        tracking=TRACKING,
    conda:
        "../envs/training.yaml"
    shell:
        # exec (in the launcher): the training process, or torchrun, receives Slurm's signals.
        "bind_gpus {resources.gpu} {resources.gpu_slots}; {resources.launcher} -m workflow_scripts.training.train target --encoder {input.encoder}"
        " --data {params.data:q} --settings {params.settings:q} --seed {wildcards.seed}"
        " --threads {threads} --output {output.model} --checkpoint-dir {params.checkpoints}"
        " --checkpoint-every {resources.checkpoint_every} --log-every {resources.log_every}"
        " --keep-checkpoints {resources.keep_checkpoints} --compile {resources.compile}"
        " --padding-free {resources.padding_free}"
        f" --tracking {{resources.tracking}} --tracking-dir {shlex.quote(TRACKING_DIR)} --run-identity {{params.run:q}}"
        " > $(fresh_log {log:q}) 2>&1"


# A target's stages (XTREME-R's XCOPA: SIQA, then COPA): each trains on the stage task's
# English data, selected on its English dev split, starting from the previous stage's model;
# the target's own training starts from the last one (grid.target_start).
# The same job as train_target (command, threads, retries, resources, environment) on
# other files: `use rule` keeps the two from drifting apart. Its params keep their keys and
# values (code is inherited), so finished stages do not rerun.
use rule train_target as train_target_stage with:
    """A stage before a target's own training (XCOPA: SIQA)."""
    input:
        unpack(stage_inputs),
    output:
        model=target_model_output(
            f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/stages/{{stage}}/seed{{seed}}/model"
        ),
        curve=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/stages/{{stage}}/seed{{seed}}/curve.csv",
        train_log=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/stages/{{stage}}/seed{{seed}}/train_log.json",
    log:
        f"{LOGS}/train_target_stage/{{backbone}}/{{intermediate}}/{{target}}/{{stage}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_target_stage/{{backbone}}/{{intermediate}}/{{target}}/{{stage}}/seed{{seed}}.tsv"
    params:
        settings=stage_settings,
        data=stage_data_map,
        checkpoints=f"{RESULTS}/checkpoints/target/{{backbone}}/{{intermediate}}/{{target}}/stages/{{stage}}/seed{{seed}}",
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: [w.stage, *grid.target_tasks(config, w.target)]),
        run=training_run_id("stage"),


# A hyperparameter sweep (config `sweep`, sweep.py): each point trains as train_target does,
# into its own folder; selection links the winner to the recipe's model path, where
# evaluation reads it. Without a sweep these rules do not exist and the paths are as above.
if sweep.sweeping(config):

    use rule train_target as train_target_sweep_point with:
        """One sweep point of a target's training."""
        output:
            model=target_model_output(
                f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/sweep/{{point}}/model"
            ),
            curve=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/sweep/{{point}}/curve.csv",
            train_log=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/sweep/{{point}}/train_log.json",
        log:
            f"{LOGS}/train_target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/{{point}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/{{point}}.tsv"
        params:
            settings=settings(grid_settings.sweep_point_settings, "backbone", "target", "point"),
            data=target_data_map,
            checkpoints=f"{RESULTS}/checkpoints/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/{{point}}",
            tasks=job_tasks(lambda w: grid.target_tasks(config, w.target)),
            run=training_run_id("target"),

    ruleorder: select_target_hyperparameters > train_target

    rule select_target_hyperparameters:
        """A seed's sweep point with the best score on the recipe's selection (English) dev
        data, its model linked to the recipe's model path."""
        input:
            unpack(sweep_inputs),
        output:
            model=target_model_output(
                f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/model"
            ),
            curve=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/curve.csv",
            train_log=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/train_log.json",
        log:
            f"{LOGS}/select_target_hyperparameters/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}.log",
        params:
            candidates=candidate_args(sweep_inputs),
            code=module_digest("workflow.sweep"),
        # before further training, so unselected models are discarded early (disk.py)
        priority: 10
        conda:
            "../envs/data.yaml"
        shell:
            "python -m workflow_scripts.workflow.sweep {params.candidates} --recipe {wildcards.recipe} --output {output.model}"
            " > $(fresh_log {log:q}) 2>&1"
            " && cp {output.model}/curve.csv {output.curve} && cp {output.model}/train_log.json {output.train_log}"


# IGLUE's few-shot setting (few_shot:<N>, spec/few_shot.py): each learning rate of a few-shot
# recipe trains as train_target does, from the target's zero-shot model and its head, into its
# own folder; the best on the translated dev split is linked to the recipe's model path.
use rule train_target as train_few_shot_candidate with:
    """One learning rate of a target's few-shot training on one language's shots."""
    input:
        unpack(few_shot_inputs),
    output:
        model=target_model_output(
            f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{FEW_SHOT_RECIPE}}}/seed{{seed}}/sweep/{{point}}/model"
        ),
        curve=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{FEW_SHOT_RECIPE}}}/seed{{seed}}/sweep/{{point}}/curve.csv",
        train_log=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{FEW_SHOT_RECIPE}}}/seed{{seed}}/sweep/{{point}}/train_log.json",
    log:
        f"{LOGS}/train_few_shot_candidate/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/{{point}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_few_shot_candidate/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/{{point}}.tsv"
    params:
        settings=settings(grid_settings.few_shot_settings, "backbone", "target", "recipe", "point"),
        data=few_shot_data_map,
        checkpoints=f"{RESULTS}/checkpoints/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}/{{point}}",
        tasks=job_tasks(lambda w: grid_settings.few_shot_tasks(w.target)),
        run=training_run_id("few_shot"),


rule select_few_shot_learning_rate:
    """A seed's few-shot model: the learning rate whose model scores best on the English dev
    split machine-translated into the language, its model linked to the recipe's model path."""
    input:
        unpack(few_shot_candidate_inputs),
    output:
        model=target_model_output(
            f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{FEW_SHOT_RECIPE}}}/seed{{seed}}/model"
        ),
        curve=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{FEW_SHOT_RECIPE}}}/seed{{seed}}/curve.csv",
        train_log=f"{RESULTS}/target/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{FEW_SHOT_RECIPE}}}/seed{{seed}}/train_log.json",
    log:
        f"{LOGS}/select_few_shot_learning_rate/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}/seed{{seed}}.log",
    params:
        candidates=candidate_args(few_shot_candidate_inputs),
        code=module_digest("workflow.sweep"),
    priority: 10
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.workflow.sweep {params.candidates} --recipe {wildcards.recipe} --output {output.model}"
        " > $(fresh_log {log:q}) 2>&1"
        " && cp {output.model}/curve.csv {output.curve} && cp {output.model}/train_log.json {output.train_log}"


# disk.keep_target_models: best keeps, of every config, target and recipe, the model of the
# seed with the best selection score, linked (no second copy) under kept/.
rule keep_best_target_model:
    """The best seed's model of one config, target and recipe, kept."""
    input:
        unpack(kept_model_inputs),
    output:
        model=directory(f"{RESULTS}/kept/{{backbone}}/{{intermediate}}/{{target}}/{{recipe,{ANY_RECIPE}}}/model"),
    log:
        f"{LOGS}/keep_best_target_model/{{backbone}}/{{intermediate}}/{{target}}/{{recipe}}.log",
    params:
        candidates=lambda w, input: " ".join(shlex.quote(f"--candidate={seed}={input[seed]}") for seed in input.keys()),
        code=module_digest("workflow.sweep"),
    priority: 10
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.workflow.sweep {params.candidates} --recipe {wildcards.recipe} --output {output.model} > $(fresh_log {log:q}) 2>&1"
