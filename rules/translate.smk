rule translate_task_data:
    input:
        unpack(translator_inputs("translator")),
        data="results/data/{task}/{split}.parquet",
    output:
        data="results/data_mt/{task}/{lang}/{split}.parquet",
        stats="results/data_mt/{task}/{lang}/{split}.stats.json",
    log:
        "logs/translate_task_data/{task}/{lang}/{split}.log",
    benchmark:
        "results/benchmarks/translate_task_data/{task}/{lang}/{split}.tsv",
    params:
        settings=settings(grid.translation_settings, "task", "lang"),
        # Shared by every translation into {lang}: a rerun translates only new text.
        cache="results/cache/translation/{lang}.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
    threads: res("translate_task_data", "threads")
    resources:
        mem_mb=res("translate_task_data", "mem_mb"),
        runtime=res("translate_task_data", "runtime"),
        gpu=res("translate_task_data", "gpu"),
        # Speed only: a resource, so changing it reruns nothing (the cache key leaves it out too).
        translation_batch_size=config["translation"]["batch_size"],
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.translation.translate data --task {wildcards.task} --lang {wildcards.lang}"
        " --model {input.model} {params.converted} --input {input.data} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.data} --stats {output.stats} > $(fresh_log {log:q}) 2>&1"


rule translate_test_data:
    input:
        unpack(translator_inputs("translator_to_en")),
        data="results/data/{task}/test.parquet",
    output:
        data="results/translate_test/{task}/{lang}/test.parquet",
        stats="results/translate_test/{task}/{lang}/test.stats.json",
    log:
        "logs/translate_test_data/{task}/{lang}.log",
    benchmark:
        "results/benchmarks/translate_test_data/{task}/{lang}.tsv",
    params:
        settings=settings(grid.translation_settings, "task"),
        cache="results/cache/translation/{lang}-en.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
    threads: res("translate_test_data", "threads")
    resources:
        mem_mb=res("translate_test_data", "mem_mb"),
        runtime=res("translate_test_data", "runtime"),
        gpu=res("translate_test_data", "gpu"),
        translation_batch_size=config["translation"]["batch_size"],
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.translation.translate data --task {wildcards.task} --from-lang {wildcards.lang} --lang en"
        " --model {input.model} {params.converted} --input {input.data} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.data} --stats {output.stats} > $(fresh_log {log:q}) 2>&1"


rule score_translation_quality:
    input:
        unpack(translator_inputs("translator")),
        dev="results/data/xnli/dev.parquet",
        test="results/data/xnli/test.parquet",
    output:
        quality="results/translation/quality/{lang}.json",
    log:
        "logs/score_translation_quality/{lang}.log",
    benchmark:
        "results/benchmarks/score_translation_quality/{lang}.tsv",
    params:
        settings=lambda wildcards: canonical_json(grid.translation_settings(config, None, wildcards.lang)),
        cache="results/cache/translation/{lang}.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
    threads: res("translate_task_data", "threads")
    resources:
        mem_mb=res("translate_task_data", "mem_mb"),
        runtime=res("translate_task_data", "runtime"),
        gpu=res("translate_task_data", "gpu"),
        # Speed only: a resource, so changing it reruns nothing (the cache key leaves it out too).
        translation_batch_size=config["translation"]["batch_size"],
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.translation.translate quality --lang {wildcards.lang} --model {input.model} {params.converted}"
        " --data dev={input.dev} test={input.test} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.quality} > $(fresh_log {log:q}) 2>&1"


rule score_translation_quality_to_english:
    input:
        unpack(translator_inputs("translator_to_en")),
        dev="results/data/xnli/dev.parquet",
        test="results/data/xnli/test.parquet",
    output:
        quality="results/translation/quality/{lang}-en.json",
    log:
        "logs/score_translation_quality_to_english/{lang}.log",
    benchmark:
        "results/benchmarks/score_translation_quality_to_english/{lang}.tsv",
    params:
        settings=lambda wildcards: canonical_json(grid.translation_settings(config)),
        cache="results/cache/translation/{lang}-en.sqlite",
        converted=converted_arg,
        code=module_digest("translation.translate"),
    threads: res("translate_test_data", "threads")
    resources:
        mem_mb=res("translate_test_data", "mem_mb"),
        runtime=res("translate_test_data", "runtime"),
        gpu=res("translate_test_data", "gpu"),
        translation_batch_size=config["translation"]["batch_size"],
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.translation.translate quality --from-lang {wildcards.lang} --lang en --model {input.model} {params.converted}"
        " --data dev={input.dev} test={input.test} --settings {params.settings:q} --batch-size {resources.translation_batch_size} --cache {params.cache}"
        " --threads {threads} --output {output.quality} > $(fresh_log {log:q}) 2>&1"


rule tabulate_translation:
    input:
        stats=lambda wildcards: grid.translation_stats_files(config),
        quality=lambda wildcards: grid.quality_files(config),
        models=lambda wildcards: grid.translated_intermediate_models(config),
    output:
        md="results/tables/translation.md",
        csv=report("results/tables/translation.csv", caption="../report/translation_table.rst",
                   category="Translation", labels={"table": "translation"}),
    log:
        "logs/tabulate_translation.log",
    benchmark:
        "results/benchmarks/tabulate_translation.tsv",
    params:
        code=module_digest("reporting.tables"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.tables translation --stats {input.stats} --quality {input.quality}"
        " --intermediate {input.models} --md {output.md} --csv {output.csv} > $(fresh_log {log:q}) 2>&1"
