# The figures that can lack data (spec/availability.py), each with its report entry
# (called by rules/report.smk, once the rules that draw them are defined). A rule
# writes the same figures for every backbone, so a part of the grid a backbone leaves out is a
# placeholder image; the report lists only the figures drawn from data and names the others on
# one page, with the reason.


def figure_entry(path, caption, category, labels, reason):
    return {
        "figure": path,
        "caption": f"../report/{caption}.rst",
        "category": category,
        "labels": labels,
        "reason": reason,
    }


def backbone_figures(backbone):
    """A backbone's figures that can lack data: differences (main, per language, per setting),
    training curves, image minus text."""
    settings = grid_settings.table_settings(config, backbone)
    path = lambda pattern: expand(pattern, backbone=backbone)[0]
    labels = lambda **more: {"backbone": backbone, **more}
    plots, baseline = rules.plot_results.output, transfer.baseline_setting(config)
    entries = [
        figure_entry(
            path(plots.main_png),
            "main_deltas",
            "Results",
            labels(figure="main table, differences"),
            availability.main_deltas(settings),
        )
    ]
    for target, pattern in zip(config["targets"], plots.per_language_png):
        reason = availability.per_language(settings, target)
        entries.append(
            figure_entry(path(pattern), "per_language", "Results", labels(figure="per language", target=target), reason)
        )
    for setting, pattern in zip([s for s in transfer.configured(config) if s != baseline], plots.settings_png):
        token, reason = transfer.path_token(setting), availability.setting_deltas(settings, setting)
        entries.append(
            figure_entry(
                path(pattern),
                "setting_deltas",
                "Transfer settings",
                labels(figure="per language", setting=token),
                reason,
            )
        )
    for name, pattern in zip(INTERMEDIATE, rules.plot_training.output.figures):
        reason = availability.training_curves(settings, name)
        entries.append(
            figure_entry(
                path(pattern), "training_curves", "Training", labels(figure="training curves", config=name), reason
            )
        )
    pairs = grid_settings.modality_settings(config, backbone).pairs
    entries.append(
        figure_entry(
            path(rules.tabulate_modality.output.png),
            "modality",
            "Modality",
            labels(figure="image minus text premise"),
            availability.modality(pairs),
        )
    )
    return entries


def report_figures():
    """Every figure of the grid that can lack data: each backbone's, then those across backbones."""
    entries = [entry for backbone in BACKBONES for entry in backbone_figures(backbone)]
    pairs = [pair for backbone in BACKBONES for pair in grid_settings.modality_settings(config, backbone).pairs]
    entries.append(
        figure_entry(
            rules.compare_modality.output.png,
            "modality_scaling",
            "Modality",
            {"backbone": "all", "figure": "image minus text premise, by backbone size"},
            availability.modality(pairs),
        )
    )
    entries.append(
        figure_entry(
            rules.compare_backbones.output.png,
            "backbones_figure",
            "Backbones",
            {"figure": "delta against parameters, per family"},
            availability.across_backbones(grid_settings.comparison_settings(config)),
        )
    )
    return entries

# ----- the retention probe (rules/retention.smk) -----
