# What is built from the finished grid: figures, LaTeX tables, the leaderboard submission and
# the cost table, per backbone, and the comparison across backbones; the captions
# `snakemake --report report.html` shows with them and with the tables' HTML pages (categories:
# Results, Transfer settings, Translation, Backbones, Training, Cost, Modality, Not available).


rule plot_results:
    """A backbone's figures: deltas against the baseline, per language, seed spread."""
    input:
        main=rules.aggregate_tables.output.main_csv,
        per_language=rules.aggregate_tables.output.per_language_csv,
        runs=rules.aggregate_tables.output.runs_csv,
    output:
        # The figures that can lack data are in the report through list_unavailable_figures.
        main_png=f"{RESULTS}/figures/{{backbone}}/main_deltas.png",
        main_svg=f"{RESULTS}/figures/{{backbone}}/main_deltas.svg",
        per_language_png=[f"{RESULTS}/figures/{{backbone}}/per_language/{target}.png" for target in config["targets"]],
        per_language_svg=[f"{RESULTS}/figures/{{backbone}}/per_language/{target}.svg" for target in config["targets"]],
        seeds_png=report(
            f"{RESULTS}/figures/{{backbone}}/seed_spread.png",
            caption="../report/seed_spread.rst",
            category="Results",
            labels={"backbone": "{backbone}", "figure": "spread over seeds"},
        ),
        seeds_svg=f"{RESULTS}/figures/{{backbone}}/seed_spread.svg",
        settings_png=[f"{RESULTS}/figures/{{backbone}}/settings/{token}.png" for token in other_setting_tokens()],
        settings_svg=[f"{RESULTS}/figures/{{backbone}}/settings/{token}.svg" for token in other_setting_tokens()],
    log:
        f"{LOGS}/plot_results/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_results/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.table_settings(config, wildcards.backbone)),
        tables=lambda wildcards: backbone_grid.tables_dir(wildcards.backbone),
        figures=lambda wildcards: backbone_grid.figures_dir(wildcards.backbone),
        code=module_digest("reporting.plots"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.plots results --tables {params.tables} --settings {params.settings:q}"
        " --output {params.figures} > $(fresh_log {log:q}) 2>&1"


rule plot_translation:
    """The translation figure."""
    input:
        table=rules.tabulate_translation.output.csv,
    output:
        png=report(
            f"{RESULTS}/figures/translation.png",
            caption="../report/translation.rst",
            category="Translation",
            labels={"figure": "spans and quality"},
        ),
        svg=f"{RESULTS}/figures/translation.svg",
    log:
        f"{LOGS}/plot_translation.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_translation.tsv"
    params:
        figures=lambda wildcards, output: os.path.dirname(output.png),
        code=module_digest("reporting.plots"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.plots translation --table {input.table} --output {params.figures} > $(fresh_log {log:q}) 2>&1"


rule typeset_tables:
    """A backbone's tables as LaTeX."""
    input:
        main=rules.aggregate_tables.output.main_csv,
        significance=rules.aggregate_tables.output.significance_csv,
        per_language=rules.aggregate_tables.output.per_language_csv,
    output:
        main=f"{RESULTS}/tables/{{backbone}}/latex/main.tex",
        per_language=[f"{RESULTS}/tables/{{backbone}}/latex/per_language/{target}.tex" for target in config["targets"]],
    log:
        f"{LOGS}/typeset_tables/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/typeset_tables/{{backbone}}.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.table_settings(config, wildcards.backbone)),
        tables=lambda wildcards: backbone_grid.tables_dir(wildcards.backbone),
        code=module_digest("reporting.latex"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.latex --tables {params.tables} --settings {params.settings:q}"
        " --output {params.tables}/latex > $(fresh_log {log:q}) 2>&1"


rule collect_submission:
    """A backbone's leaderboard submission from its best models."""
    input:
        best=rules.aggregate_tables.output.best_csv,
        predictions=lambda wildcards: list(grid.submission_predictions(config, wildcards.backbone).values()),
    output:
        submission=directory(f"{RESULTS}/submission/{{backbone}}/{BENCHMARK}"),
    log:
        f"{LOGS}/collect_submission/{{backbone}}.log",
    params:
        runs=lambda wildcards: " ".join(
            f"{run}={path}" for run, path in grid.submission_predictions(config, wildcards.backbone).items()
        ),
        targets=lambda wildcards: backbone_grid.grid_of(config, wildcards.backbone)["targets"],
        baseline=TABLES.baseline,
        benchmark=BENCHMARK,
        code=module_digest("reporting.submission"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.submission --best {input.best} --targets {params.targets}"
        " --baseline {params.baseline} --benchmark {params.benchmark} --predictions {params.runs}"
        " --output {output.submission} > $(fresh_log {log:q}) 2>&1"


rule plot_training:
    """A backbone's training curves, one figure per config, and the runs that went wrong."""
    input:
        # the models' records, not the models: a discarded model stays discarded (disk.py)
        records=lambda wildcards: grid.training_records(config, wildcards.backbone),
    output:
        # in the report through list_unavailable_figures: a config the grid leaves out has no run
        figures=[f"{RESULTS}/figures/{{backbone}}/training/{name}.png" for name in INTERMEDIATE],
        figures_svg=[f"{RESULTS}/figures/{{backbone}}/training/{name}.svg" for name in INTERMEDIATE],
        md=f"{RESULTS}/tables/{{backbone}}/training.md",
        csv=f"{RESULTS}/tables/{{backbone}}/training.csv",
        html=report(
            f"{RESULTS}/tables/{{backbone}}/training.html",
            caption="../report/training_table.rst",
            category="Training",
            labels={"backbone": "{backbone}", "table": "runs to look at", "config": "all"},
        ),
    log:
        f"{LOGS}/plot_training/{{backbone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_training/{{backbone}}.tsv"
    params:
        figures=lambda wildcards: f"{RESULTS}/figures/{wildcards.backbone}/training",
        runs=lambda wildcards: " ".join(shlex.quote(m) for m in grid.training_outputs(config, wildcards.backbone)),
        configs=" ".join(shlex.quote(name) for name in INTERMEDIATE),
        code=module_digest("reporting.training_curves"),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.training_curves --backbone {wildcards.backbone} --runs {params.runs}"
        " --configs {params.configs} --figures {params.figures} --md {output.md} --csv {output.csv}"
        " > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


rule compare_backbones:
    """The table and figure across backbones."""
    input:
        main=expand(f"{RESULTS}/tables/{{backbone}}/main.csv", backbone=BACKBONES),
        backbones=backbone_grid.base_dirs(config, BACKBONES),
    output:
        md=f"{RESULTS}/tables/backbones.md",
        csv=f"{RESULTS}/tables/backbones.csv",
        html=report(
            f"{RESULTS}/tables/backbones.html",
            caption="../report/backbones_table.rst",
            category="Backbones",
            labels={"table": "across backbones"},
        ),
        # in the report through list_unavailable_figures: without a config besides the baseline it has no data
        png=f"{RESULTS}/figures/backbones_delta.png",
        svg=f"{RESULTS}/figures/backbones_delta.svg",
    log:
        f"{LOGS}/compare_backbones.log",
    benchmark:
        f"{RESULTS}/benchmarks/compare_backbones.tsv"
    params:
        settings=lambda wildcards: settings_json(grid_settings.comparison_settings(config)),
        tables=lambda wildcards, output: os.path.dirname(output.md),
        models=lambda wildcards, input: os.path.dirname(input.backbones[0]),
        figure=lambda wildcards, output: os.path.splitext(output.png)[0],
        code=module_digest("reporting.compare_backbones"),
        # the catalogue entries and converters of the tasks this job reads, and no other
        tasks=job_tasks(lambda w: grid.grid_tasks(config)),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.compare_backbones --settings {params.settings:q} --tables {params.tables}"
        " --models {params.models} --md {output.md} --csv {output.csv}"
        " --figure {params.figure} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


rule tabulate_cost:
    """What the experiment cost per rule, from its benchmark records."""
    input:
        # Runs last: every job that writes a benchmark record has finished.
        tables=expand(f"{RESULTS}/tables/{{backbone}}/main.csv", backbone=BACKBONES),
        translation=lambda wildcards: (
            rules.tabulate_translation.output.csv if grid.translation_stats_files(config) else []
        ),
        figures=expand(f"{RESULTS}/figures/{{backbone}}/main_deltas.png", backbone=BACKBONES),
        latex=expand(f"{RESULTS}/tables/{{backbone}}/latex/main.tex", backbone=BACKBONES),
        comparison=rules.compare_backbones.output.csv,
        training=expand(f"{RESULTS}/tables/{{backbone}}/training.md", backbone=BACKBONES),
        translation_figure=lambda wildcards: (
            rules.plot_translation.output.png if grid.translation_stats_files(config) else []
        ),
    output:
        md=f"{RESULTS}/tables/cost.md",
        csv=f"{RESULTS}/tables/cost.csv",
        html=report(
            f"{RESULTS}/tables/cost.html",
            caption="../report/cost_table.rst",
            category="Cost",
            labels={"table": "cost per rule"},
        ),
    log:
        f"{LOGS}/tabulate_cost.log",
    params:
        resources=lambda wildcards: canonical_json(rule_resources()),
        benchmarks=f"{RESULTS}/benchmarks",
        code=module_digest("planning.cost"),
        pages=table_pages(html="md"),
        page_code=module_digest("reporting.html_page"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.planning.cost measured --benchmarks {params.benchmarks} --resources {params.resources:q}"
        " --md {output.md} --csv {output.csv} > $(fresh_log {log:q}) 2>&1"
        " && python -m workflow_scripts.reporting.html_page {params.pages} >> {log:q} 2>&1"


# Every figure that can lack data, with its report entry and the reason it has none, if any.
FIGURES = report_figures()


rule list_unavailable_figures:
    """The report's figures that can lack data: those drawn from data are registered, with
    their captions, as this rule's inputs; the others are named, with the reason, on its page."""
    input:
        # not ancient(): Snakemake skips a job downstream of a rerun one whose inputs are all
        # ancient, even when its own params changed, so the page would lag a grid change by a
        # run; a redrawn figure reruns this one-second job instead
        figures=[
            report(entry["figure"], caption=entry["caption"], category=entry["category"], labels=entry["labels"])
            for entry in FIGURES
            if entry["reason"] is None
        ],
    output:
        html=report(
            f"{RESULTS}/figures/not_available.html",
            caption="../report/not_available.rst",
            category="Not available",
            labels={"page": "figures without data"},
        ),
    log:
        f"{LOGS}/list_unavailable_figures.log",
    params:
        missing=canonical_json([{"figure": e["figure"], "reason": e["reason"]} for e in FIGURES if e["reason"]]),
        code=module_digest("reporting.unavailable"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.reporting.unavailable --missing {params.missing:q} --html {output.html}"
        " > $(fresh_log {log:q}) 2>&1"
