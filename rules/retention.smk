# The retention probe (config `retention`, workflow_scripts/workflow/retention.py): every
# backbone probed before its intermediate phase, after it and after the zero-shot target phase,
# on the same held-out multilingual text, and a table per backbone that sets the changes beside
# each image arm's transfer difference from its text twin (docs/multimodal.md, "Forgetting").
# The rules exist in every config; `all` asks for their outputs only with retention.probe on.


rule probe_retention:
    """The retention probe of an intermediate model: LM loss per language and alignment with English."""
    input:
        unpack(
            probe_inputs(
                lambda w: grid.intermediate_encoder(config, w.backbone, w.intermediate, w.seed),
            )
        ),
    output:
        probe=f"{RESULTS}/retention/{{backbone}}/{{intermediate}}/seed{{seed}}/intermediate.json",
    log:
        f"{LOGS}/probe_retention/{{backbone}}/{{intermediate}}/seed{{seed}}/intermediate.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_retention/{{backbone}}/{{intermediate}}/seed{{seed}}/intermediate.tsv"
    params:
        settings=settings(retention_grid.probe_settings, "backbone"),
        identity=probe_identity("intermediate"),
        code=module_digest("evaluation.retention"),
        # the catalogue entry and converter of the text's task, and no other
        tasks=job_tasks(lambda w: [retention_grid.options(config).text.task]),
    threads: res("probe_retention", "threads")
    resources:
        **gpu_resources("probe_retention"),
        mem_mb=res("probe_retention", "mem_mb"),
        runtime=job_runtime("probe_retention"),
    conda:
        "../envs/training.yaml"
    shell:
        "bind_gpus {resources.gpu}; python -m workflow_scripts.evaluation.retention --settings {params.settings:q} --probe {params.identity:q}"
        " --model {input.model} --base {input.base} --text {input.text} --threads {threads}"
        " --output {output.probe} > $(fresh_log {log:q}) 2>&1"


use rule probe_retention as probe_retention_before with:
    """The retention probe of a pretrained backbone (once per backbone: every arm starts from it)."""
    input:
        unpack(probe_inputs(lambda w: backbone_grid.base_dir(config, w.backbone))),
    output:
        probe=f"{RESULTS}/retention/{{backbone}}/before.json",
    log:
        f"{LOGS}/probe_retention/{{backbone}}/before.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_retention/{{backbone}}/before.tsv"
    params:
        settings=settings(retention_grid.probe_settings, "backbone"),
        identity=probe_identity("before"),
        tasks=job_tasks(lambda w: [retention_grid.options(config).text.task]),


use rule probe_retention as probe_retention_target with:
    """The retention probe of a zero-shot target model (the target phase's own change on top)."""
    input:
        unpack(
            probe_inputs(
                lambda w: retention_grid.target_model(config, w.backbone, w.intermediate, w.target, w.seed),
            )
        ),
    output:
        probe=f"{RESULTS}/retention/{{backbone}}/{{intermediate}}/seed{{seed}}/target-{{target}}.json",
    log:
        f"{LOGS}/probe_retention/{{backbone}}/{{intermediate}}/seed{{seed}}/target-{{target}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/probe_retention/{{backbone}}/{{intermediate}}/seed{{seed}}/target-{{target}}.tsv"
    params:
        settings=settings(retention_grid.probe_settings, "backbone"),
        identity=probe_identity("target"),
        tasks=job_tasks(lambda w: [retention_grid.options(config).text.task]),


rule tabulate_retention:
    """A backbone's retention table and figure: loss and alignment change by language and arm, beside each image arm's transfer difference."""
    input:
        probes=lambda wildcards: retention_grid.probe_files(config, wildcards.backbone),
        runs=rules.aggregate_tables.output.runs_csv,
    output:
        md=f"{RESULTS}/tables/{{backbone}}/retention.md",
        csv=f"{RESULTS}/tables/{{backbone}}/retention.csv",
        pairs_csv=f"{RESULTS}/tables/{{backbone}}/retention_pairs.csv",
        html=report(
            f"{RESULTS}/tables/{{backbone}}/retention.html",
            caption="../report/retention.rst",
            category="Modality",
            labels={"backbone": "{backbone}", "table": "retention: forgetting by stage"},
        ),
        png=report(
            f"{RESULTS}/figures/{{backbone}}/retention.png",
            caption="../report/retention_figure.rst",
            category="Modality",
            labels={"backbone": "{backbone}", "figure": "retention: forgetting by stage"},
        ),
        svg=f"{RESULTS}/figures/{{backbone}}/retention.svg",
    log:
        f"{LOGS}/tabulate_retention/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tabulate_retention/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(retention_grid.table_settings(config, wildcards.backbone)),
        stem=lambda wildcards: f"{RESULTS}/figures/{wildcards.backbone}/retention",
        code=module_digest("reporting.retention"),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.retention --settings {params.settings:q} --probes {input.probes}"
        " --runs {input.runs} --md {output.md} --csv {output.csv} --pairs-csv {output.pairs_csv}"
        " --figure {params.stem} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"
