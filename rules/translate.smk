rule translate_task_data:
    input:
        data="results/data/{task}/{split}.parquet",
        model="results/models/translator/{lang}",
    output:
        data="results/data_mt/{task}/{lang}/{split}.parquet",
        stats="results/data_mt/{task}/{lang}/{split}.stats.json",
    log:
        "logs/translate_task_data/{task}/{lang}/{split}.log",
    params:
        settings=settings(grid.translation_settings, "task"),
        code=module_digest("translate"),
    threads: res("translate_task_data", "threads")
    resources:
        mem_mb=res("translate_task_data", "mem_mb"),
        runtime=res("translate_task_data", "runtime"),
        gpu=res("translate_task_data", "gpu"),
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.translate --task {wildcards.task} --lang {wildcards.lang}"
        " --model {input.model} --input {input.data} --settings {params.settings:q}"
        " --threads {threads} --output {output.data} --stats {output.stats} > {log} 2>&1"
