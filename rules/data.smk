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
        code=module_digest("data.prepare"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.data.prepare --task {wildcards.task} --split {wildcards.split}"
        " --settings {params.settings:q} --output {output.data} > $(fresh_log {log:q}) 2>&1"


rule embed_images:
    input:
        unpack(embed_inputs),
        encoder=grid.VISION_ENCODER,
    output:
        features=directory("results/data/images/{task}"),
    log:
        "logs/embed_images/{task}.log",
    benchmark:
        "results/benchmarks/embed_images/{task}.tsv",
    params:
        images=lambda wildcards: grid.image_dir(config, wildcards.task),
        kind=config["vision"]["features"],
        cache=config["vision"]["cache"],
        batch_size=config["vision"]["batch_size"],
        code=module_digest("multimodal.embed"),
    threads: res("embed_images", "threads")
    resources:
        mem_mb=res("embed_images", "mem_mb"),
        runtime=res("embed_images", "runtime"),
        gpu=res("embed_images", "gpu"),
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.multimodal.embed --data {input.data} --images {params.images:q}"
        " --encoder {input.encoder} --kind {params.kind} --cache {params.cache:q}"
        " --batch-size {params.batch_size} --output {output.features} > $(fresh_log {log:q}) 2>&1"
