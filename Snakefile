# xstilts: English intermediate-task training (STILTs) before target-task fine-tuning,
# evaluated zero-shot on XTREME (Phang et al. 2020). See README.md and docs/protocol.md.
#
#   snakemake --cores 2                                   # the embedded offline demo
#   snakemake --cores 8 --configfile config/paper.yaml    # the paper grid, locally
#   snakemake --profile slurm --configfile config/paper.yaml


# A --configfile replaces the demo config instead of being merged into it.
if not workflow.config_settings.configfiles:

    configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/resources.smk"
include: "rules/figures.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/translate.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/tables.smk"
include: "rules/report.smk"
include: "rules/retention.smk"
include: "rules/prompted.smk"


report: "report/workflow.rst"


rule all:
    input:
        expand(f"{RESULTS}/tables/{{backbone}}/main.md", backbone=BACKBONES),
        expand(f"{RESULTS}/figures/{{backbone}}/main_deltas.png", backbone=BACKBONES),
        expand(f"{RESULTS}/tables/{{backbone}}/latex/main.tex", backbone=BACKBONES),
        expand(f"{RESULTS}/submission/{{backbone}}/{{benchmark}}", backbone=BACKBONES, benchmark=BENCHMARK),
        rules.compare_backbones.output,
        rules.tabulate_cost.output,
        rules.tabulate_translation.output if grid.translation_stats_files(config) else [],
        rules.plot_translation.output if grid.translation_stats_files(config) else [],
        # the image-vs-text comparison (docs/protocol.md §9); a grid without an image task and its
        # controls gets a table saying so, as the other tables do for what a grid lacks
        expand(rules.tabulate_modality.output, backbone=BACKBONES),
        rules.compare_modality.output,
        # forgetting at every stage (retention.probe): a table and a figure per backbone
        expand(rules.tabulate_retention.output, backbone=BACKBONES) if retention_grid.enabled(config) else [],
        # fine-tuned beside prompted (prompted.enabled): a table per decoder backbone prompted
        expand(rules.tabulate_prompted.output, backbone=prompted_grid.backbones(config))
        if prompted_grid.enabled(config)
        else [],
        rules.compare_prompted.output if prompted_grid.enabled(config) and prompted_grid.backbones(config) else [],
        # how every run trained: curves per config, and the runs that diverged or never learnt
        expand(rules.plot_training.output, backbone=BACKBONES),
        # disk.keep_target_models: best keeps each config's best seed's model (disk.py)
        [m for b in BACKBONES for m in grid.kept_models(config, b)] if disk.keep_target_models(config) == "best" else [],
        # which sweep point each run selected (sweep.py)
        expand(rules.tabulate_sweep.output, backbone=BACKBONES) if sweep.sweeping(config) else [],
        # the report's page of figures without data; its inputs register the others in the report
        rules.list_unavailable_figures.output,
    default_target: True


onsuccess:
    summary = run_summary(RESULTS, BACKBONES, EXPERIMENT)
    if summary:
        print(summary)
