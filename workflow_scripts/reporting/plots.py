"""Figures of a finished grid, drawn from the tables `aggregate_tables` wrote (so a figure
and its table always agree), as PNG (for reading) and SVG (for papers).

- ``main_deltas``: the main table as a heatmap, rows = configs, columns = targets + Avg,
  each cell the config's median minus the baseline config's;
- ``per_language/<target>``: per target, rows = configs, columns = languages + avg,
  differences to the baseline config per language;
- ``seed_spread``: per target, each seed's language average as a point and the median as a
  bar, so a reader sees whether a difference exceeds the spread over seeds;
- ``settings/<setting>``: per transfer setting, per target and language, the setting's
  median minus the baseline setting's (same config, same language);
- ``translation``: span recovery by markers, fuzzy matching and drops per translated split,
  and BLEU / chrF per direction.

Differences use a diverging colour map centred on 0 with the values printed in the cells.

CLI: ``python -m workflow_scripts.reporting.plots results --tables DIR --settings JSON --output DIR``
and ``python -m workflow_scripts.reporting.plots translation --table CSV --output DIR``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from workflow_scripts.common import atomic_path, read_result_table, setup_logging
from workflow_scripts.reporting.seeds import over_seeds
from workflow_scripts.spec import availability
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import FigureSettings, TableSettings
from workflow_scripts.spec.tasks import get_task, primary_metric
from workflow_scripts.spec.transfer_names import path_token

FORMATS = ("png", "svg")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on cluster nodes
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "xstilts", "font.size": 9})  # reproducible SVG ids
    return plt


def save(fig, stem: Path) -> None:
    """Write ``stem.png`` and ``stem.svg``, each atomically."""
    for fmt in FORMATS:
        with atomic_path(stem.with_suffix(f".{fmt}")) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else {})
    _pyplot().close(fig)


def delta_heatmap(ax, values, rows: list[str], columns: list[str], title: str, limit: float | None = None) -> None:
    """Rows x columns of differences (NaN: no value), diverging colours centred on 0."""
    import numpy as np

    data = np.array(values, dtype=float)
    finite = data[np.isfinite(data)]
    span = limit or max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
    image = ax.imshow(np.ma.masked_invalid(data), cmap="RdBu", vmin=-span, vmax=span, aspect="auto")
    ax.set_xticks(
        range(len(columns)),
        [c.replace(".exact_match", " EM").replace(".f1", " F1") for c in columns],
        rotation=30 if len(columns) > 6 else 0,
        ha="right" if len(columns) > 6 else "center",
    )
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title(title)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            value = data[i, j]
            text = "–" if not math.isfinite(value) else f"{value:+.1f}"
            dark = math.isfinite(value) and abs(value) > 0.6 * span
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label="difference (points)")


def _empty(ax, title: str, message: str) -> None:
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)


def main_deltas(main, settings: TableSettings, output: Path) -> None:
    plt = _pyplot()
    baseline = settings.baseline
    table = main[main["setting"] == settings.baseline_setting].set_index("intermediate")
    configs = [c for c in settings.intermediate if c != baseline and c in table.index]
    columns = [c for c in table.columns if c not in ("setting",)]
    fig, ax = plt.subplots(figsize=(1.1 * len(columns) + 2, 0.5 * max(1, len(configs)) + 1.5))
    title = f"Median test score minus `{baseline}` (seeds {', '.join(map(str, settings.seeds))})"
    if configs:
        delta_heatmap(ax, table.loc[configs, columns].to_numpy(), configs, columns, title)
    else:
        _empty(ax, title, "only the baseline config in this grid")
    save(fig, output / "main_deltas")


def per_language_deltas(per_language, settings: TableSettings, target: str, output: Path) -> None:
    plt = _pyplot()
    baseline = settings.baseline
    sub = per_language[
        (per_language["setting"] == settings.baseline_setting) & (per_language["target"] == target)
    ].set_index("intermediate")
    columns = list(settings.target_languages[target]) + ["avg"]
    configs = [c for c in settings.intermediate if c != baseline and c in sub.index]
    metric = primary_metric(get_task(target).metric)
    fig, ax = plt.subplots(figsize=(0.8 * len(columns) + 2.5, 0.5 * max(1, len(configs)) + 1.5))
    title = f"{target} ({metric}): median minus `{baseline}` per language"
    if configs and baseline in sub.index:
        deltas = sub.loc[configs, columns].to_numpy(dtype=float) - sub.loc[baseline, columns].to_numpy(dtype=float)
        delta_heatmap(ax, deltas, configs, columns, title)
    else:
        _empty(ax, title, "no config besides the baseline has results for this target")
    save(fig, output / "per_language" / target)


def seed_spread(runs, settings: TableSettings, output: Path) -> None:
    plt = _pyplot()
    setting = settings.baseline_setting
    targets = settings.targets
    configs = settings.intermediate
    cols = min(3, len(targets))
    fig, axes = plt.subplots(
        math.ceil(len(targets) / cols), cols, squeeze=False, figsize=(4.2 * cols, 3.0 * math.ceil(len(targets) / cols))
    )
    for ax, target in zip(axes.flat, targets):
        metric = primary_metric(get_task(target).metric)
        sub = runs[
            (runs["setting"] == setting)
            & (runs["target"] == target)
            & (runs["split"] == "test")
            & (runs["language"] == "avg")
            & (runs["metric"] == metric)
        ]
        for x, config in enumerate(configs):
            values = sub[sub["intermediate"] == config].sort_values("seed")
            if values.empty:
                continue
            ax.scatter([x] * len(values), values["value"], s=18, color="tab:blue", alpha=0.7, zorder=2)
            ax.hlines(over_seeds(values["value"]), x - 0.3, x + 0.3, color="black", linewidth=2, zorder=3)
        ax.set_xticks(range(len(configs)), configs, rotation=30, ha="right")
        ax.set_title(f"{target} ({metric})")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(targets) :]:
        ax.set_axis_off()
    fig.suptitle(f"{setting}: each seed's mean over languages (points) and the median (bar)")
    fig.tight_layout()
    save(fig, output / "seed_spread")


def setting_deltas(per_language, settings: TableSettings, setting: str, output: Path) -> None:
    """Per config that ran ``setting``: targets x languages, the setting minus the baseline
    setting on the same config and language."""
    plt = _pyplot()
    reference = settings.baseline_setting
    rows_of = per_language[per_language["setting"] == setting]
    configs = [c for c in settings.intermediate if c in set(rows_of["intermediate"])]
    languages = list(dict.fromkeys(l for t in settings.targets for l in settings.target_languages[t]))
    fig, axes = plt.subplots(
        max(1, len(configs)), 1, squeeze=False, figsize=(0.8 * len(languages) + 3, 2.2 * max(1, len(configs)))
    )
    for ax, config in zip(axes.flat, configs or [None]):
        title = f"{setting} minus {reference}" + (f", config `{config}`" if config else "")
        if config is None:
            _empty(ax, title, "this setting has no results")
            continue
        mine = rows_of[rows_of["intermediate"] == config].set_index("target")
        base = per_language[
            (per_language["setting"] == reference) & (per_language["intermediate"] == config)
        ].set_index("target")
        targets = [t for t in settings.targets if t in mine.index]
        deltas = [
            [
                float(mine.loc[t, l]) - float(base.loc[t, l]) if t in base.index and l in mine.columns else math.nan
                for l in languages
            ]
            for t in targets
        ]
        delta_heatmap(ax, deltas, targets, languages, title)
    fig.tight_layout()
    save(fig, output / "settings" / path_token(setting))


def translation_figure(table, output: Path) -> None:
    plt = _pyplot()
    data = table[table["kind"] == "data"].copy()
    spans = data[data["by_markers"].notna()]
    quality = table[table["kind"] == "quality"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    if spans.empty:
        _empty(left, "Answer spans", "no span task translated")
    else:
        labels = [f"{r.task} {r.direction}\n{r.split}" for r in spans.itertuples()]
        bottom = [0.0] * len(spans)
        for column, colour in (("by_markers", "tab:green"), ("by_fuzzy_match", "tab:orange"), ("dropped", "tab:red")):
            share = (100 * spans[column] / spans["examples"]).tolist()
            left.bar(labels, share, bottom=bottom, color=colour, label=column.replace("_", " "))
            bottom = [b + s for b, s in zip(bottom, share)]
        left.set_ylabel("% of examples")
        left.set_title("Answer spans after translation")
        left.legend(fontsize=7)
    if quality.empty:
        _empty(right, "Translation quality", "no quality scores")
    else:
        labels = [f"{r.direction} {r.split}" for r in quality.itertuples()]
        xs = range(len(labels))
        right.bar([x - 0.2 for x in xs], quality["bleu"], width=0.4, label="BLEU")
        right.bar([x + 0.2 for x in xs], quality["chrf"], width=0.4, label="chrF")
        right.set_xticks(list(xs), labels)
        right.set_title("Quality against XNLI's human translations")
        right.legend(fontsize=7)
    fig.tight_layout()
    save(fig, output / "translation")


def plot_results(tables: Path, settings: TableSettings, output: Path) -> None:
    main = read_result_table(tables / "main.csv")
    per_language = read_result_table(tables / "per_language.csv")
    runs = read_result_table(tables / "runs.csv")
    # One figure per target and setting of the config; one without data (spec/availability.py) is a
    # placeholder saying why, which the report leaves out of its results.
    if (reason := availability.main_deltas(settings)) is None:
        main_deltas(main, settings, output)
    else:
        placeholder("main table, differences", reason, output / "main_deltas")
    for target in settings.targets_drawn():
        stem = output / "per_language" / target
        if (reason := availability.per_language(settings, target)) is None:
            per_language_deltas(per_language, settings, target, output)
        else:
            placeholder(f"target {target}", reason, stem)
    seed_spread(runs, settings, output)
    for setting in settings.settings_drawn():
        if setting == settings.baseline_setting:
            continue
        stem = output / "settings" / path_token(setting)
        if (reason := availability.setting_deltas(settings, setting)) is None:
            setting_deltas(per_language, settings, setting, output)
        else:
            placeholder(f"setting {setting}", reason, stem)


def placeholder(title: str, reason: str, stem: Path) -> None:
    """The image written in place of a figure without data: its title and the reason."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 1.5))
    _empty(ax, title, reason)
    save(fig, stem)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Draw the figures of a finished grid from its tables.")
    sub = ap.add_subparsers(dest="command", required=True)
    res = sub.add_parser("results")
    res.add_argument("--tables", required=True, type=Path)
    res.add_argument("--settings", required=True, help="the table settings (JSON)")
    res.add_argument("--output", required=True, type=Path)
    tr = sub.add_parser("translation")
    tr.add_argument("--table", required=True, type=Path)
    tr.add_argument("--output", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        if args.command == "results":
            plot_results(args.tables, FigureSettings.parse(args.settings, "--settings"), args.output)
        else:
            translation_figure(read_result_table(args.table), args.output)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
