# Only these rules (and the model downloads) touch the network: run them on the login node.
localrules:
    prepare_task_data,


rule prepare_task_data:
    input:
        mirror=local_source_files,
    output:
        data="results/data/{task}/{split}.parquet",
    log:
        "logs/prepare_task_data/{task}/{split}.log",
    benchmark:
        "results/benchmarks/prepare_task_data/{task}/{split}.tsv",
    params:
        settings=settings(grid.data_settings, "task", "split"),
        code=module_digest("data"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.data --task {wildcards.task} --split {wildcards.split}"
        " --settings {params.settings:q} --output {output.data} > {log} 2>&1"
