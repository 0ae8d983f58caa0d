# One set of tables per backbone (results/<experiment>/tables/<backbone>/), from its metric files.


rule aggregate_tables:
    """A backbone's tables: medians over seeds, per language, every run, significance."""
    input:
        metrics=lambda wildcards: grid.metric_files(config, wildcards.backbone),
    output:
        main_md=f"{RESULTS}/tables/{{backbone}}/main.md",
        main_csv=f"{RESULTS}/tables/{{backbone}}/main.csv",
        main_html=report(
            f"{RESULTS}/tables/{{backbone}}/main.html",
            caption="../report/main_table.rst",
            category="Results",
            labels={"backbone": "{backbone}", "table": "main table"},
        ),
        best_csv=f"{RESULTS}/tables/{{backbone}}/best.csv",
        best_html=report(
            f"{RESULTS}/tables/{{backbone}}/best.html",
            caption="../report/best_table.rst",
            category="Results",
            labels={"backbone": "{backbone}", "table": "best models"},
        ),
        per_language_md=f"{RESULTS}/tables/{{backbone}}/per_language.md",
        per_language_csv=f"{RESULTS}/tables/{{backbone}}/per_language.csv",
        per_language_html=report(
            f"{RESULTS}/tables/{{backbone}}/per_language.html",
            caption="../report/per_language_table.rst",
            category="Results",
            labels={"backbone": "{backbone}", "table": "per language"},
        ),
        translated_md=f"{RESULTS}/tables/{{backbone}}/translated.md",
        translated_csv=f"{RESULTS}/tables/{{backbone}}/translated.csv",
        translated_html=report(
            f"{RESULTS}/tables/{{backbone}}/translated.html",
            caption="../report/translated_table.rst",
            category="Results",
            labels={"backbone": "{backbone}", "table": "translated intermediate data"},
        ),
        runs_csv=f"{RESULTS}/tables/{{backbone}}/runs.csv",
        runs_html=report(
            f"{RESULTS}/tables/{{backbone}}/runs.html",
            caption="../report/runs_table.rst",
            category="Results",
            labels={"backbone": "{backbone}", "table": "every run"},
        ),
        settings_md=f"{RESULTS}/tables/{{backbone}}/settings.md",
        settings_csv=f"{RESULTS}/tables/{{backbone}}/settings.csv",
        settings_html=report(
            f"{RESULTS}/tables/{{backbone}}/settings.html",
            caption="../report/settings_table.rst",
            category="Transfer settings",
            labels={"backbone": "{backbone}", "table": "settings table"},
        ),
        significance_csv=f"{RESULTS}/tables/{{backbone}}/significance.csv",
        significance_html=report(
            f"{RESULTS}/tables/{{backbone}}/significance.html",
            caption="../report/significance_table.rst",
            category="Results",
            labels={"backbone": "{backbone}", "table": "significance"},
        ),
        source_md=f"{RESULTS}/tables/{{backbone}}/source_languages.md",
        source_csv=f"{RESULTS}/tables/{{backbone}}/source_languages.csv",
        source_html=report(
            f"{RESULTS}/tables/{{backbone}}/source_languages.html",
            caption="../report/source_table.rst",
            category="Transfer settings",
            labels={"backbone": "{backbone}", "table": "source languages"},
        ),
    log:
        f"{LOGS}/aggregate_tables/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aggregate_tables/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.table_settings(config, wildcards.backbone)),
        code=module_digest("reporting.tables"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
        pages=table_pages(
            decimals=TABLES.decimals,
            main_html="main_md",
            best_html="best_csv",
            per_language_html="per_language_md",
            translated_html="translated_md",
            runs_html="runs_csv",
            settings_html="settings_md",
            significance_html="significance_csv",
            source_html="source_md",
        ),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.tables results --settings {params.settings:q} --metrics {input.metrics}"
        " --main-md {output.main_md} --main-csv {output.main_csv} --best-csv {output.best_csv}"
        " --per-language-md {output.per_language_md} --per-language-csv {output.per_language_csv}"
        " --translated-md {output.translated_md} --translated-csv {output.translated_csv}"
        " --runs-csv {output.runs_csv} --settings-md {output.settings_md} --settings-csv {output.settings_csv}"
        " --source-md {output.source_md} --source-csv {output.source_csv}"
        " --significance-csv {output.significance_csv} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


rule tabulate_modality:
    """The image-vs-text comparison of a backbone's image tasks and their controls."""
    input:
        runs=rules.aggregate_tables.output.runs_csv,
    output:
        md=f"{RESULTS}/tables/{{backbone}}/modality.md",
        csv=f"{RESULTS}/tables/{{backbone}}/modality.csv",
        html=report(
            f"{RESULTS}/tables/{{backbone}}/modality.html",
            caption="../report/modality.rst",
            category="Modality",
            labels={"backbone": "{backbone}", "table": "image minus text premise"},
        ),
        # in the report through list_unavailable_figures: without a pair of arms it has no data
        png=f"{RESULTS}/figures/{{backbone}}/modality.png",
        svg=f"{RESULTS}/figures/{{backbone}}/modality.svg",
    log:
        f"{LOGS}/tabulate_modality/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tabulate_modality/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.modality_settings(config, wildcards.backbone)),
        stem=lambda wildcards: f"{RESULTS}/figures/{wildcards.backbone}/modality",
        code=module_digest("reporting.modality"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.modality --settings {params.settings:q} --runs {input.runs}"
        " --md {output.md} --csv {output.csv} --figure {params.stem} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


rule compare_modality:
    """The image-vs-text differences of every backbone against its size."""
    input:
        modality=expand(rules.tabulate_modality.output.csv, backbone=BACKBONES),
        backbones=backbone_grid.base_dirs(config, BACKBONES),
    output:
        md=f"{RESULTS}/tables/modality_scaling.md",
        csv=f"{RESULTS}/tables/modality_scaling.csv",
        html=report(
            f"{RESULTS}/tables/modality_scaling.html",
            caption="../report/modality_scaling.rst",
            category="Modality",
            labels={"backbone": "all", "table": "image minus text premise, by backbone size"},
        ),
        # in the report through list_unavailable_figures: without a pair of arms it has no data
        png=f"{RESULTS}/figures/modality_scaling.png",
        svg=f"{RESULTS}/figures/modality_scaling.svg",
    log:
        f"{LOGS}/compare_modality.log",
    benchmark:
        f"{RESULTS}/benchmarks/compare_modality.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.modality_scaling_settings(config)),
        tables=lambda wildcards, output: os.path.dirname(output.md),
        models=lambda wildcards, input: os.path.dirname(input.backbones[0]),
        figure=lambda wildcards, output: os.path.splitext(output.png)[0],
        code=module_digest("reporting.modality_scaling"),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.modality_scaling --settings {params.settings:q}"
        " --tables {params.tables} --models {params.models} --md {output.md} --csv {output.csv}"
        " --figure {params.figure} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


if sweep.sweeping(config):

    rule tabulate_sweep:
        """A backbone's sweep: each seed's points, their dev scores and the point selected."""
        input:
            metrics=lambda wildcards: grid.metric_files(config, wildcards.backbone),
        output:
            md=f"{RESULTS}/tables/{{backbone}}/sweep.md",
            csv=f"{RESULTS}/tables/{{backbone}}/sweep.csv",
            html=report(
                f"{RESULTS}/tables/{{backbone}}/sweep.html",
                caption="../report/sweep_table.rst",
                category="Results",
                labels={"backbone": "{backbone}", "table": "hyperparameter sweep"},
            ),
        log:
            f"{LOGS}/tabulate_sweep/{{backbone}}.log",
        params:
            code=module_digest("reporting.sweep_table"),
            pages=table_pages(html="md"),
            page_code=module_digest("reporting.html_page"),
        conda:
            "../envs/data.yaml"
        shell:
            "python -m workflow_scripts.reporting.sweep_table --metrics {input.metrics}"
            " --md {output.md} --csv {output.csv} > $(fresh_log {log:q}) 2>&1"
            " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"
