"""Does the image help more as the backbone grows? The image-minus-text differences of every
backbone (modality.py) against its parameter count, one line per backbone family
(docs/protocol.md §9-10).

Each backbone's modality table already holds, per pair of arms (an image config and a config
that is the same but for one text-only control), target and language group (English, the
other languages, all), the mean test-score difference with its paired bootstrap interval
(seeds, then languages within a seed). This module stacks those tables, orders them by family
and size, and draws them: one panel per target and language group, the difference against
the parameter count (log scale), one line per family and contrast, each point with its
interval. Targets a backbone's training mixture held are marked (‡: not zero-shot).

Parameter counts come from ``backbones.<name>.parameters`` or, for the demo's models, the
prepared backbone's safetensors headers (compare_backbones.py).

CLI: ``python -m workflow_scripts.reporting.modality_scaling --settings JSON --tables DIR
--models DIR --md FILE --csv FILE --figure STEM``.
"""

from __future__ import annotations

import math
from pathlib import Path

from workflow_scripts.common import setup_logging
from workflow_scripts.reporting import significance
from workflow_scripts.reporting.compare_backbones import (
    CONTAMINATED,
    _params_text,
    cross_backbone_args,
    parameter_count,
)
from workflow_scripts.reporting.modality import COLUMNS as MODALITY_COLUMNS
from workflow_scripts.reporting.modality import GROUPS
from workflow_scripts.reporting.tables import write_csv, write_text
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import ModalityScalingSettings

BACKBONE_COLUMNS = ["backbone", "family", "method", "parameters"]
COLUMNS = [*BACKBONE_COLUMNS, *MODALITY_COLUMNS, "contaminated"]
GROUP_NAMES = {"en": "English", "zero-shot": "other languages", "all": "all languages"}


def scaling_frame(settings: ModalityScalingSettings, tables: Path, models: Path):
    """Every backbone's modality rows with the backbone's family, method, size and
    contamination, ordered by family, then size."""
    import pandas as pd

    frames = []
    for name, backbone in settings.backbones.items():
        path = tables / name / "modality.csv"
        if not path.is_file():
            raise InputError(f"{path}: missing (the backbone's modality table, rule tabulate_modality)")
        rows = pd.read_csv(path)
        missing = [c for c in MODALITY_COLUMNS if c not in rows.columns]
        if missing:
            raise InputError(f"{path}: lacks column(s) {missing}")
        if rows.empty:
            continue
        rows.insert(0, "backbone", name)
        rows.insert(1, "family", backbone.family)
        rows.insert(2, "method", backbone.method)
        rows.insert(3, "parameters", parameter_count(backbone, models))
        rows["contaminated"] = rows["target"].isin(backbone.contaminated_targets)
        frames.append(rows[COLUMNS])
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.concat(frames, ignore_index=True)
    frame["_family"] = frame["family"].map(settings.family_rank())
    frame = frame.sort_values(["_family", "parameters", "backbone"], kind="stable").drop(columns="_family")
    return frame.reset_index(drop=True)


def _contrast(row) -> str:
    return f"{row.visual} − {row.control}"


def _cell(row, decimals: int) -> str:
    mark = f" {significance.MARKER}" if row.excludes_zero else ""
    if row.ci_low != row.ci_low:  # NaN: a single paired score
        return f"{row.mean_difference:+.{decimals}f}{mark} (one score)"
    return f"{row.mean_difference:+.{decimals}f}{mark} [{row.ci_low:+.{decimals}f}, {row.ci_high:+.{decimals}f}]"


def render(frame, settings: ModalityScalingSettings) -> str:
    decimals = settings.decimals
    lines = ["# Image premise minus text premise, across backbone sizes (zero-shot test scores)", ""]
    if frame.empty:
        lines.append(
            "No backbone has a pair of configs differing only by an image task and one of its text-only "
            "controls with test scores in both arms."
        )
        return "\n".join(lines) + "\n"
    backbones = list(dict.fromkeys(frame["backbone"]))
    sizes = frame.drop_duplicates("backbone").set_index("backbone")
    contaminated = set(frame.loc[frame["contaminated"], "backbone"] + "/" + frame.loc[frame["contaminated"], "target"])
    for target in [t for t in settings.targets if t in set(frame["target"])]:
        sub = frame[frame["target"] == target]
        lines += [f"## {target} ({sub['metric'].iloc[0]})", ""]
        header = ["image config − control", "control", "languages"] + [
            f"{b} ({sizes.loc[b, 'family']}, {_params_text(int(sizes.loc[b, 'parameters']))})"
            + (f" {CONTAMINATED}" if f"{b}/{target}" in contaminated else "")
            for b in backbones
        ]
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * len(backbones)) + "|"]
        keys = list(dict.fromkeys((r.visual, r.control, r.group) for r in sub.itertuples()))
        keys.sort(key=lambda k: GROUPS.index(k[2]))
        for visual, control, group in keys:
            part = sub[(sub["visual"] == visual) & (sub["control"] == control) & (sub["group"] == group)]
            first = part.iloc[0]
            by_backbone = {r.backbone: r for r in part.itertuples()}
            cells = [f"{visual} − {control}", first["control_kind"], GROUP_NAMES[group]]
            cells += [_cell(by_backbone[b], decimals) if b in by_backbone else "–" for b in backbones]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    seeds = ", ".join(map(str, settings.seeds))
    lines.append(
        f"Seeds: {seeds}. Each cell: the mean over seeds and languages of the image config's test score minus "
        "the control's, paired by seed and language, with its 95% paired bootstrap interval (seeds resampled, "
        f"then languages within a seed; {significance.MARKER}: the interval excludes zero). Within a backbone "
        "both arms share its training method, so a difference is the premise's modality alone; across "
        "backbones the method may change (LoRA on the larger ones)."
    )
    if frame["contaminated"].any():
        lines.append(f"\n{CONTAMINATED}: the backbone's training mixture holds this target's data: not zero-shot.")
    return "\n".join(lines) + "\n"


def figure(frame, settings: ModalityScalingSettings, stem: Path) -> None:
    """One panel per target (rows) and language group (columns): each contrast's difference
    against parameters, one line per family, intervals as error bars."""
    from workflow_scripts.reporting.plots import _pyplot, save

    plt = _pyplot()
    targets = [t for t in settings.targets if not frame.empty and t in set(frame["target"])]
    groups = [g for g in GROUPS if not frame.empty and g in set(frame["group"])]
    fig, axes = plt.subplots(
        max(1, len(targets)),
        max(1, len(groups)),
        figsize=(4.0 * max(1, len(groups)), 2.9 * max(1, len(targets)) + 0.8),
        squeeze=False,
    )
    if not targets:
        axes[0][0].set_axis_off()
        axes[0][0].text(0.5, 0.5, "no image / text-control pair with test scores", ha="center", va="center")
        save(fig, stem)
        return
    families = list(dict.fromkeys(frame["family"]))
    contrasts = list(dict.fromkeys(_contrast(r) for r in frame.itertuples()))
    # Points of different lines at one size are spread sideways (in log space, by a share of
    # the axis' span) so that their intervals do not hide each other.
    decades = max(0.5, math.log10(frame["parameters"].max() / frame["parameters"].min()))
    step = 10 ** (0.012 * decades)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, target in enumerate(targets):
        for j, group in enumerate(groups):
            ax = axes[i][j]
            sub = frame[(frame["target"] == target) & (frame["group"] == group)]
            _draw_lines(ax, sub, families, contrasts, step, colours)
            _size_axis(ax)
            if not sub.empty:
                ax.set_ylabel(f"{sub['metric'].iloc[0]} difference (points)", fontsize=8)
            ax.set_title(f"{target}, {GROUP_NAMES[group]}", fontsize=9)
            if i == len(targets) - 1:
                ax.set_xlabel("parameters (log scale)", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7, frameon=False)
    fig.suptitle("Image premise minus text premise against backbone size (95% paired intervals)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    save(fig, stem)


def _draw_lines(ax, sub, families: list[str], contrasts: list[str], step: float, colours: list[str]) -> None:
    """One panel's lines: per family (colour) and contrast (marker, line style), the difference
    against parameters with its interval, each line shifted sideways by a power of ``step``."""
    markers, styles = "osD^v<>", ["-", "--", ":", "-."]
    lines_total = len(families) * len(contrasts)
    for f, family in enumerate(families):
        for c, contrast in enumerate(contrasts):
            line = sub[(sub["family"] == family) & (sub.apply(_contrast, axis=1) == contrast)]
            if line.empty:
                continue
            line = line.sort_values("parameters")
            k = f * len(contrasts) + c
            shift = step ** (k - (lines_total - 1) / 2)
            ax.errorbar(
                line["parameters"] * shift,
                line["mean_difference"],
                yerr=[
                    (line["mean_difference"] - line["ci_low"]).fillna(0),
                    (line["ci_high"] - line["mean_difference"]).fillna(0),
                ],
                color=colours[f % len(colours)],
                marker=markers[c % len(markers)],
                linestyle=styles[c % len(styles)],
                capsize=3,
                label=f"{family}: {contrast}",
            )


def _size_axis(ax) -> None:
    """Parameters on a log scale, ticks at 1, 2 and 5 of each decade, named as sizes (278M)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _params_text(round(value))))
    ax.xaxis.set_minor_formatter(NullFormatter())


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    args = cross_backbone_args("The image-vs-text differences across backbone sizes.", argv)
    try:
        settings = ModalityScalingSettings.parse(args.settings, "--settings")
        frame = scaling_frame(settings, args.tables, args.models)
        text = render(frame, settings)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    write_csv(args.csv, frame, index=False)
    write_text(args.md, text)
    figure(frame, settings, args.figure)
    print(text)


if __name__ == "__main__":
    main()
