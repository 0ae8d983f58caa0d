rule evaluate_target:
    """One run's metric file: per-language dev and test scores, and its predictions."""
    input:
        unpack(evaluate_inputs),
    output:
        metrics=f"{RESULTS}/metrics/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.json",
        # the test predictions in the XTREME leaderboard layout (predictions.py)
        predictions=directory(f"{RESULTS}/metrics/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.predictions"),
    log:
        f"{LOGS}/evaluate_target/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_target/{{backbone}}/{{setting}}/{{intermediate}}/{{target}}/seed{{seed}}.tsv",
    params:
        settings=settings(grid.eval_settings, "backbone", "target", "setting"),
        models=model_args,
        data=data_args,
        run=run_id,
        code=module_digest("evaluation.evaluate"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.target_tasks(config, w.target)),
    threads: res("evaluate_target", "threads")
    resources:
        mem_mb=res("evaluate_target", "mem_mb"),
        runtime=res("evaluate_target", "runtime"),
        gpu=res("evaluate_target", "gpu"),
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.evaluation.evaluate --target {wildcards.target} --model {params.models}"
        " --data {params.data} --settings {params.settings:q} --run {params.run:q}"
        " --seed {wildcards.seed} --threads {threads} --output {output.metrics}"
        " --predictions {output.predictions} > $(fresh_log {log:q}) 2>&1"
