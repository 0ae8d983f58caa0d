rule evaluate_target:
    """One run's metric file: per-language dev and test scores, the run, how its backbone was
    trained, and its predictions."""
    input:
        unpack(evaluate_inputs),
        # the prepared backbone: the Hub commit it resolved to, or the demo model's weights
        backbone=lambda wildcards: backbone_grid.base_dir(config, wildcards.backbone),
    output:
        metrics=f"{RESULTS}/metrics/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.json",
        # the test predictions in the XTREME leaderboard layout (predictions.py)
        predictions=directory(
            f"{RESULTS}/metrics/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.predictions"
        ),
    log:
        f"{LOGS}/evaluate_target/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_target/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.tsv"
    params:
        settings=settings(grid_settings.eval_settings, "backbone", "target", "setting"),
        models=model_args,
        data=data_args,
        images=images_arg,
        run=run_id,
        backbone=settings(backbone_grid.provenance, "backbone"),
        code=module_digest("evaluation.metric_file"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.target_tasks(config, w.target)),
    threads: res("evaluate_target", "threads")
    # evaluated before further training starts: a discarded model lives no longer than needed (disk.py)
    priority: 10
    resources:
        **gpu_resources("evaluate_target"),
        mem_mb=res("evaluate_target", "mem_mb"),
        runtime=job_runtime("evaluate_target"),
        # eager or compiled forwards (models/compiled.py): operational, so switching reruns nothing
        compile=res("evaluate_target", "compile"),
        # padded or padding-free encoder batches (models/packing.py): operational too
        padding_free=res("evaluate_target", "padding_free"),
        # Tracking is operational: a resource, so switching it reruns nothing (common.smk).
        tracking=TRACKING,
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu} {resources.gpu_slots}; python -m workflow_scripts.evaluation.metric_file --target {wildcards.target} --model {params.models}"
        " --data {params.data} --settings {params.settings:q} --run {params.run:q}"
        " --backbone {input.backbone} --backbone-settings {params.backbone:q}"
        " --seed {wildcards.seed} --threads {threads} --compile {resources.compile}"
        " --padding-free {resources.padding_free}"
        " --output {output.metrics} {params.images}"
        " --predictions {output.predictions}"
        f" --tracking {{resources.tracking}} --tracking-dir {shlex.quote(TRACKING_DIR)}"
        " > $(fresh_log {log:q}) 2>&1"
