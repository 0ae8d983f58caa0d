localrules:
    prepare_backbone,
    prepare_vision_encoder,
    prepare_translator,
    prepare_translator_to_english,


rule prepare_backbone:
    """A backbone: a Hub snapshot, or the demo's tiny model pre-trained on its declared text."""
    input:
        text=demo_text_inputs,
        corpora=demo_encoder_corpora,
    output:
        model=directory(f"{RESULTS}/models/backbones/{{backbone}}"),
    log:
        f"{LOGS}/prepare_backbone/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_backbone/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(backbone_grid.prepare_settings(config, wildcards.backbone)),
        code=module_digest("models.prepare"),
    # The demo backbones' pre-training is on the critical path of the whole DAG: it goes first.
    # One thread unless `resources` asks for more: OpenMP threads spin while they wait, so a
    # two-thread job beside other busy processes burns up to 16 times the CPU of one thread
    # (docs/development.md, "Threads").
    threads: res("prepare_backbone", "threads")
    priority: 10
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.models.prepare backbone --settings {params.settings:q} --threads {threads}"
        " --output {output.model} --text {input.text} --corpus {input.corpora} > $(fresh_log {log:q}) 2>&1"


rule prepare_translator:
    """The MarianMT translator out of English into one language."""
    input:
        text=demo_text_inputs,
        corpus=demo_translator_corpus,
    output:
        model=directory(f"{RESULTS}/models/translator/{{lang}}"),
    log:
        f"{LOGS}/prepare_translator/{{lang}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_translator/{{lang}}.tsv"
    params:
        settings=settings(grid_settings.translator_settings, "lang"),
        code=module_digest("models.prepare"),
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.models.prepare translator --lang {wildcards.lang}"
        " --settings {params.settings:q} --output {output.model} --text {input.text} --corpus {input.corpus}"
        " > $(fresh_log {log:q}) 2>&1"


rule prepare_translator_to_english:
    """The MarianMT translator from one language into English (translate-test)."""
    input:
        text=demo_text_inputs,
        corpus=demo_translator_corpus,
    output:
        model=directory(f"{RESULTS}/models/translator_to_en/{{lang}}"),
    log:
        f"{LOGS}/prepare_translator_to_english/{{lang}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_translator_to_english/{{lang}}.tsv"
    params:
        settings=lambda wildcards: settings_json(
            grid_settings.translator_settings(config, wildcards.lang, to_english=True)
        ),
        code=module_digest("models.prepare"),
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.models.prepare translator --from-lang {wildcards.lang} --lang en"
        " --settings {params.settings:q} --output {output.model} --text {input.text} --corpus {input.corpus}"
        " > $(fresh_log {log:q}) 2>&1"


rule convert_translator:
    """A translator converted for CTranslate2."""
    input:
        model=f"{RESULTS}/models/{{translator}}/{{lang}}",
    output:
        converted=directory(f"{RESULTS}/models/ctranslate2/{{translator}}/{{lang}}"),
    log:
        f"{LOGS}/convert_translator/{{translator}}/{{lang}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/convert_translator/{{translator}}/{{lang}}.tsv"
    params:
        code=module_digest("translation.translators"),
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.translation.translators convert --model {input.model} --output {output.converted} > $(fresh_log {log:q}) 2>&1"


rule prepare_vision_encoder:
    """The frozen vision tower of the image tasks."""
    input:
        unpack(vision_encoder_inputs),
    output:
        model=directory(grid.vision_encoder_dir()),
    log:
        f"{LOGS}/prepare_vision_encoder.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_vision_encoder.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.vision_settings(config)),
        demo_args=demo_vision_args,
        code=module_digest("models.prepare"),
    threads: res("prepare_vision_encoder", "threads")
    conda:
        "../envs/training.yaml"
    shell:
        "python -m workflow_scripts.models.prepare vision --settings {params.settings:q} --threads {threads}"
        " --output {output.model} {params.demo_args} > $(fresh_log {log:q}) 2>&1"
