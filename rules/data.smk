# Only these rules (and the model downloads) touch the network: run them on the login node.
localrules:
    prepare_task_data,


rule prepare_task_data:
    """One split of one task as canonical Parquet rows (provenance and the converter's repair report in its metadata)."""
    input:
        mirror=local_source_files,
        rows=own_data_file,
    output:
        data=f"{RESULTS}/data/{{task}}/{{split}}.parquet",
    log:
        f"{LOGS}/prepare_task_data/{{task}}/{{split}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_task_data/{{task}}/{{split}}.tsv"
    params:
        settings=settings(grid_settings.data_settings, "task", "split"),
        code=module_digest("data.prepare"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: [w.task]),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.data.prepare --task {wildcards.task} --split {wildcards.split}"
        " --settings {params.settings:q} --output {output.data} > $(fresh_log {log:q}) 2>&1"


rule embed_images:
    """An image task's image features through the frozen vision tower (the shared, content-keyed cache)."""
    input:
        unpack(embed_inputs),
        encoder=grid.vision_encoder_dir(),
    output:
        features=directory(f"{RESULTS}/data/images/{{task}}"),
    log:
        f"{LOGS}/embed_images/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/embed_images/{{task}}.tsv"
    params:
        images=lambda wildcards: grid.image_dir(config, wildcards.task),
        kind=vision_of(config).features,
        cache=vision_of(config).cache,
        batch_size=vision_of(config).batch_size,
        code=module_digest("multimodal.embed"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: [w.task]),
    threads: res("embed_images", "threads")
    resources:
        **gpu_resources("embed_images"),
        mem_mb=res("embed_images", "mem_mb"),
        runtime=job_runtime("embed_images"),
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.multimodal.embed --data {input.data} --images {params.images:q}"
        " --encoder {input.encoder} --kind {params.kind} --cache {params.cache:q}"
        " --batch-size {params.batch_size} --output {output.features} > $(fresh_log {log:q}) 2>&1"


rule check_leakage:
    """What an intermediate task's rows share with a multimodal target's test rows (images, texts)."""
    input:
        intermediate=lambda wildcards: grid.leakage_inputs(wildcards.task, wildcards.target)["intermediate"],
        target=lambda wildcards: grid.leakage_inputs(wildcards.task, wildcards.target)["target"],
    output:
        report=f"{RESULTS}/data/leakage/{{task}}/{{target}}.json",
    log:
        f"{LOGS}/check_leakage/{{task}}/{{target}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/check_leakage/{{task}}/{{target}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.leakage_settings(config)),
        code=module_digest("data.leakage"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: [w.task, w.target]),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.data.leakage --task {wildcards.task} --target {wildcards.target}"
        " --intermediate-data {input.intermediate} --target-data {input.target} --settings {params.settings:q}"
        " --output {output.report} > $(fresh_log {log:q}) 2>&1"
