# What is built from the finished grid: figures, LaTeX tables, the leaderboard submission and
# the cost table; the captions `snakemake --report report.html` shows with them and with the
# tables (categories: Results, Transfer settings, Translation, Cost).


rule plot_results:
    input:
        main=rules.aggregate_tables.output.main_csv,
        per_language=rules.aggregate_tables.output.per_language_csv,
        runs=rules.aggregate_tables.output.runs_csv,
    output:
        main_png=report("results/figures/main_deltas.png", caption="../report/main_deltas.rst",
                        category="Results", labels={"figure": "main table, differences"}),
        main_svg="results/figures/main_deltas.svg",
        per_language_png=[
            report(f"results/figures/per_language/{target}.png", caption="../report/per_language.rst",
                   category="Results", labels={"figure": "per language", "target": target})
            for target in config["targets"]
        ],
        per_language_svg=expand("results/figures/per_language/{target}.svg", target=config["targets"]),
        seeds_png=report("results/figures/seed_spread.png", caption="../report/seed_spread.rst",
                         category="Results", labels={"figure": "spread over seeds"}),
        seeds_svg="results/figures/seed_spread.svg",
        settings_png=[
            report(f"results/figures/settings/{token}.png", caption="../report/setting_deltas.rst",
                   category="Transfer settings", labels={"figure": "per language", "setting": token})
            for token in other_setting_tokens()
        ],
        settings_svg=expand("results/figures/settings/{token}.svg", token=other_setting_tokens()),
    log:
        "logs/plot_results.log",
    benchmark:
        "results/benchmarks/plot_results.tsv"
    params:
        settings=lambda wildcards: canonical_json(grid.table_settings(config)),
        code=module_digest("plots"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.plots results --tables results/tables --settings {params.settings:q}"
        " --output results/figures > {log} 2>&1"


rule plot_translation:
    input:
        table=rules.tabulate_translation.output.csv,
    output:
        png=report("results/figures/translation.png", caption="../report/translation.rst",
                   category="Translation", labels={"figure": "spans and quality"}),
        svg="results/figures/translation.svg",
    log:
        "logs/plot_translation.log",
    benchmark:
        "results/benchmarks/plot_translation.tsv"
    params:
        code=module_digest("plots"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.plots translation --table {input.table} --output results/figures > {log} 2>&1"


rule typeset_tables:
    input:
        main=rules.aggregate_tables.output.main_csv,
        significance=rules.aggregate_tables.output.significance_csv,
        per_language=rules.aggregate_tables.output.per_language_csv,
    output:
        main="results/tables/latex/main.tex",
        per_language=expand("results/tables/latex/per_language/{target}.tex", target=config["targets"]),
    log:
        "logs/typeset_tables.log",
    benchmark:
        "results/benchmarks/typeset_tables.tsv"
    params:
        settings=lambda wildcards: canonical_json(grid.table_settings(config)),
        code=module_digest("latex"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.latex --tables results/tables --settings {params.settings:q}"
        " --output results/tables/latex > {log} 2>&1"


rule collect_submission:
    input:
        best=rules.aggregate_tables.output.best_csv,
        predictions=lambda wildcards: list(grid.submission_predictions(config).values()),
    output:
        submission=directory("results/submission/xtreme"),
    log:
        "logs/collect_submission.log",
    params:
        runs=lambda wildcards: " ".join(f"{run}={path}" for run, path in grid.submission_predictions(config).items()),
        targets=config["targets"],
        code=module_digest("predictions"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.predictions --best {input.best} --targets {params.targets}"
        " --predictions {params.runs} --output {output.submission} > {log} 2>&1"


rule tabulate_cost:
    input:
        # Runs last: every job that writes a benchmark record has finished.
        tables=rules.aggregate_tables.output.main_csv,
        translation=lambda wildcards: rules.tabulate_translation.output.csv if grid.translation_stats_files(config) else [],
        figures=rules.plot_results.output.main_png,
        latex=rules.typeset_tables.output.main,
        translation_figure=lambda wildcards: rules.plot_translation.output.png
        if grid.translation_stats_files(config)
        else [],
    output:
        md="results/tables/cost.md",
        csv=report(
            "results/tables/cost.csv",
            caption="../report/cost_table.rst",
            category="Cost",
            labels={"table": "cost per rule"},
        ),
    log:
        "logs/tabulate_cost.log",
    params:
        resources=lambda wildcards: canonical_json(rule_resources()),
        code=module_digest("cost"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.cost measured --benchmarks results/benchmarks --resources {params.resources:q}"
        " --md {output.md} --csv {output.csv} > {log} 2>&1"
