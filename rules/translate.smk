rule translate_task_data:
    """English task data machine-translated, answer spans re-aligned, with alignment counts."""
    input:
        unpack(translator_inputs("translator")),
        data=f"{RESULTS}/data/{{task}}/{{split}}.parquet",
    output:
        data=f"{RESULTS}/data_mt/{{task}}/{{lang}}/{{split}}.parquet",
        stats=f"{RESULTS}/data_mt/{{task}}/{{lang}}/{{split}}.stats.json",
    log:
        f"{LOGS}/translate_task_data/{{task}}/{{lang}}/{{split}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/translate_task_data/{{task}}/{{lang}}/{{split}}.tsv"
    params:
        settings=settings(grid_settings.translation_settings, "task", "lang"),
        # Shared by every translation into {lang}: a rerun translates only new text.
        cache=f"{RESULTS}/cache/translation/{{lang}}.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: [w.task]),
    threads: res("translate_task_data", "threads")
    resources:
        **gpu_resources("translate_task_data"),
        # Speed only: a resource, so changing it reruns nothing (the cache key leaves it out too).
        mem_mb=res("translate_task_data", "mem_mb"),
        runtime=job_runtime("translate_task_data"),
        translation_batch_size=translation_of(config).batch_size,
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.translation.translate data --task {wildcards.task} --lang {wildcards.lang}"
        " --model {input.model} {params.converted} --input {input.data} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.data} --stats {output.stats} > $(fresh_log {log:q}) 2>&1"


rule translate_test_data:
    """A target's test set translated into English (translate-test)."""
    input:
        unpack(translator_inputs("translator_to_en")),
        data=f"{RESULTS}/data/{{task}}/test.parquet",
    output:
        data=f"{RESULTS}/translate_test/{{task}}/{{lang}}/test.parquet",
        stats=f"{RESULTS}/translate_test/{{task}}/{{lang}}/test.stats.json",
    log:
        f"{LOGS}/translate_test_data/{{task}}/{{lang}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/translate_test_data/{{task}}/{{lang}}.tsv"
    params:
        settings=settings(grid_settings.translation_settings, "task"),
        cache=f"{RESULTS}/cache/translation/{{lang}}-en.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: [w.task]),
    threads: res("translate_test_data", "threads")
    resources:
        **gpu_resources("translate_test_data"),
        mem_mb=res("translate_test_data", "mem_mb"),
        runtime=job_runtime("translate_test_data"),
        translation_batch_size=translation_of(config).batch_size,
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.translation.translate data --task {wildcards.task} --from-lang {wildcards.lang} --lang en"
        " --model {input.model} {params.converted} --input {input.data} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.data} --stats {output.stats} > $(fresh_log {log:q}) 2>&1"


rule score_translation_quality:
    """BLEU and chrF of a translator against XNLI's human translations."""
    input:
        unpack(translator_inputs("translator")),
        dev=f"{RESULTS}/data/xnli/dev.parquet",
        test=f"{RESULTS}/data/xnli/test.parquet",
    output:
        quality=f"{RESULTS}/translation/quality/{{lang}}.json",
    log:
        f"{LOGS}/score_translation_quality/{{lang}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score_translation_quality/{{lang}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.translation_settings(config, None, wildcards.lang)),
        cache=f"{RESULTS}/cache/translation/{{lang}}.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: ["xnli"]),
    threads: res("translate_task_data", "threads")
    resources:
        **gpu_resources("translate_task_data"),
        # Speed only: a resource, so changing it reruns nothing (the cache key leaves it out too).
        mem_mb=res("translate_task_data", "mem_mb"),
        runtime=job_runtime("score_translation_quality"),
        translation_batch_size=translation_of(config).batch_size,
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.translation.translate quality --lang {wildcards.lang} --model {input.model} {params.converted}"
        " --data dev={input.dev} test={input.test} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.quality} > $(fresh_log {log:q}) 2>&1"


rule score_translation_quality_to_english:
    """BLEU and chrF of a translator into English against XNLI's English."""
    input:
        unpack(translator_inputs("translator_to_en")),
        dev=f"{RESULTS}/data/xnli/dev.parquet",
        test=f"{RESULTS}/data/xnli/test.parquet",
    output:
        quality=f"{RESULTS}/translation/quality/{{lang}}-en.json",
    log:
        f"{LOGS}/score_translation_quality_to_english/{{lang}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score_translation_quality_to_english/{{lang}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.translation_settings(config)),
        cache=f"{RESULTS}/cache/translation/{{lang}}-en.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: ["xnli"]),
    threads: res("translate_test_data", "threads")
    resources:
        **gpu_resources("translate_test_data"),
        mem_mb=res("translate_test_data", "mem_mb"),
        runtime=job_runtime("score_translation_quality_to_english"),
        translation_batch_size=translation_of(config).batch_size,
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.translation.translate quality --from-lang {wildcards.lang} --lang en --model {input.model} {params.converted}"
        " --data dev={input.dev} test={input.test} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.quality} > $(fresh_log {log:q}) 2>&1"


rule tabulate_translation:
    """The translation table: re-alignment counts and quality per language."""
    input:
        stats=lambda wildcards: grid.translation_stats_files(config),
        quality=lambda wildcards: grid.quality_files(config),
        # the intermediate models' train logs, kept beside them (disk.py discards the models)
        train_logs=lambda wildcards: [
            grid.training_record(m)["train_log"] for m in grid.translated_intermediate_models(config)
        ],
    output:
        md=f"{RESULTS}/tables/translation.md",
        csv=f"{RESULTS}/tables/translation.csv",
        html=report(
            f"{RESULTS}/tables/translation.html",
            caption="../report/translation_table.rst",
            category="Translation",
            labels={"table": "translation"},
        ),
    log:
        f"{LOGS}/tabulate_translation.log",
    benchmark:
        f"{RESULTS}/benchmarks/tabulate_translation.tsv"
    params:
        code=module_digest("reporting.tables"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
        models=lambda wildcards: " ".join(grid.translated_intermediate_models(config)),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.tables translation --stats {input.stats} --quality {input.quality}"
        " --intermediate {params.models} --md {output.md} --csv {output.csv} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"
