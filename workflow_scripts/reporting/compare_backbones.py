"""Across backbones: does intermediate-task training help more, less or differently as the
backbone grows? (docs/protocol.md §10)

From each backbone's main table (baseline transfer setting; tables.py), per target: the
baseline config's absolute score and every other config's difference to it, one row per
backbone, ordered by parameter count; the same for the average over the targets every
backbone ran (backbones may run different parts of the grid, and averages over different
targets do not compare); and a figure of each config's average difference against the
backbone's parameter count, one line per backbone family (a family's ladder of sizes: encoder,
decoder, seq2seq), so that no line joins backbones that differ in architecture. Targets a
backbone's training mixture contained are marked (‡: not zero-shot), as the per-backbone
tables do.

Parameter counts come from the config (``backbones.<name>.parameters``) or, when it names
none (the demo's models), from the safetensors headers of the prepared backbone: shapes
only, no weights read.

CLI: ``python -m workflow_scripts.reporting.compare_backbones --settings JSON --tables DIR --models DIR
--md FILE --csv FILE --figure STEM``.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.common import read_result_table, setup_logging
from workflow_scripts.reporting.tables import metrics_shown, write_csv, write_text
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import BackboneDescription, ComparisonSettings

CONTAMINATED = "‡"
COLUMNS = ["backbone", "family", "method", "parameters", "target", "intermediate", "value", "kind", "contaminated"]


def safetensors_parameters(model_dir: Path) -> int:
    """The number of values in every tensor of a directory's safetensors files (tied weights
    are stored once)."""
    total = 0
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise InputError(
            f"{model_dir}: no safetensors weights to count parameters from "
            "(give backbones.<name>.parameters in the config)"
        )
    for file in files:
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        header.pop("__metadata__", None)
        total += sum(math.prod(meta["shape"]) for meta in header.values())
    return total


def parameter_count(backbone: BackboneDescription, models: Path) -> int:
    """The config's count (written as a float: 2.78e+8) or the prepared weights' count."""
    if backbone.parameters:
        return round(backbone.parameters)
    return safetensors_parameters(models / (backbone.prepared_as or backbone.name))


def comparison(settings: ComparisonSettings, tables: Path, models: Path):
    """The long comparison frame: per backbone, target (and "avg") and config, the baseline's
    absolute score or a config's difference to it."""
    import pandas as pd

    baseline, setting = settings.baseline, settings.baseline_setting
    mains = {}
    for name in settings.backbones:
        main = read_result_table(tables / name / "main.csv")
        mains[name] = main[main["setting"] == setting].set_index("intermediate")
        if baseline not in mains[name].index:
            raise InputError(f"{tables / name / 'main.csv'}: no row for the baseline config {baseline!r}")
    shared = shared_targets(settings.targets, mains.values())
    records = []
    for name, backbone in settings.backbones.items():
        main, params = mains[name], parameter_count(backbone, models)
        contaminated = set(backbone.contaminated_targets)
        for config in [c for c in settings.intermediate if c in main.index]:
            kind = "absolute" if config == baseline else "difference"
            for target in settings.targets:
                if _column(target) in main.columns:  # else a target this backbone's grid leaves out
                    records.append(
                        (
                            name,
                            backbone.family,
                            backbone.method,
                            params,
                            target,
                            config,
                            float(main.loc[config, _column(target)]),
                            kind,
                            target in contaminated,
                        )
                    )
            # Avg over the targets every backbone ran: Avgs over different targets do not compare.
            # (A difference of means is the mean of the differences the table holds.)
            scores = [_task_score(main, config, target) for target in shared]
            records.append(
                (
                    name,
                    backbone.family,
                    backbone.method,
                    params,
                    "avg",
                    config,
                    sum(scores) / len(scores) if scores else math.nan,
                    kind,
                    bool(contaminated & set(shared)),
                )
            )
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    return frame.sort_values(["parameters", "backbone"], kind="stable").reset_index(drop=True), shared


def _column(target: str) -> str:
    return target if len(metrics_shown(target)) == 1 else f"{target}.f1"


def shared_targets(targets: Sequence[str], mains) -> list[str]:
    """The targets whose column every backbone's main table has."""
    return [t for t in targets if all(_column(t) in main.columns for main in mains)]


def _task_score(main, config: str, target: str) -> float:
    """A target's one number for the average: QA as (F1 + EM) / 2, as the main tables."""
    if len(metrics_shown(target)) == 1:
        return float(main.loc[config, target])
    return sum(float(main.loc[config, f"{target}.{m}"]) for m in metrics_shown(target)) / 2


def _params_text(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def render(frame, settings: ComparisonSettings, shared: list[str]) -> str:
    decimals, baseline = settings.decimals, settings.baseline
    configs = [c for c in settings.intermediate if c in set(frame["intermediate"])]
    parts = []
    for target in [*settings.targets, "avg"]:
        sub = frame[frame["target"] == target]
        if sub.empty:
            continue
        metric = (
            f"Avg over the targets every backbone ran ({', '.join(shared)}; QA as (F1 + EM) / 2)"
            if target == "avg"
            else f"{target} ({'F1' if len(metrics_shown(target)) > 1 else metrics_shown(target)[0]})"
        )
        header = ["backbone", "family", "method", "parameters", baseline] + [f"Δ {c}" for c in configs if c != baseline]
        lines = [
            f"## {metric}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] * 4 + ["---:"] * (len(header) - 4)) + "|",
        ]
        for name in dict.fromkeys(sub["backbone"]):
            rows = sub[sub["backbone"] == name].set_index("intermediate")
            first = rows.iloc[0]
            mark = f" {CONTAMINATED}" if bool(rows["contaminated"].any()) else ""
            cells = [name + mark, first["family"], first["method"], _params_text(int(first["parameters"]))]
            for config in configs:
                if config not in rows.index:
                    cells.append("–")
                    continue
                value = float(rows.loc[config, "value"])
                cells.append(f"{value:.{decimals}f}" if config == baseline else f"{value:+.{decimals}f}")
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n")
    note = (
        f"Setting {settings.baseline_setting}, test scores, medians over each backbone's seeds: `{baseline}` "
        "absolute, Δ the config's difference to it (QA: F1). Backbones ordered by parameter count."
    )
    if frame["contaminated"].any():
        note += (
            f" {CONTAMINATED}: the backbone's training mixture holds this target's data (e.g. xP3 holds XNLI and "
            "XCOPA): not zero-shot."
        )
    return "# Across backbones\n\n" + "\n".join(parts) + "\n" + note + "\n"


@dataclass(frozen=True)
class Ladder:
    """One line of the figure: a config's Avg difference on the backbones of one family,
    smallest first."""

    family: str
    config: str
    backbones: tuple[str, ...]
    parameters: tuple[int, ...]
    values: tuple[float, ...]


def ladders(frame, settings: ComparisonSettings) -> list[Ladder]:
    """The figure's lines: one per family and config. Backbones of different families differ in
    architecture and pre-training, not only in size, so no line joins them."""
    avg = frame[(frame["target"] == "avg") & (frame["kind"] == "difference")].sort_values(
        ["parameters", "backbone"], kind="stable"
    )
    lines = []
    for family in dict.fromkeys(avg["family"]):
        for config in [c for c in settings.intermediate if c in set(avg["intermediate"])]:
            sub = avg[(avg["family"] == family) & (avg["intermediate"] == config)]
            if not sub.empty:
                lines.append(
                    Ladder(
                        family,
                        config,
                        tuple(sub["backbone"]),
                        tuple(int(n) for n in sub["parameters"]),
                        tuple(float(v) for v in sub["value"]),
                    )
                )
    return lines


def delta_figure(frame, settings: ComparisonSettings, shared: list[str], stem: Path) -> None:
    """Each config's Avg difference to the baseline (over the shared targets) against the
    backbone's parameter count, one line per family ladder (ladders); each backbone's tick
    names it."""
    from workflow_scripts.reporting.plots import _pyplot, save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    lines = ladders(frame, settings)
    families = list(dict.fromkeys(line.family for line in lines))
    configs = list(dict.fromkeys(line.config for line in lines))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # colour: the config; marker and line style: the family (a one-backbone family is a point)
    markers, styles = "osD^v", ["-", "--", ":", "-."]
    for line in lines:
        f, c = families.index(line.family), configs.index(line.config)
        ax.plot(
            line.parameters,
            line.values,
            color=colours[c % len(colours)],
            marker=markers[f % len(markers)],
            linestyle=styles[f % len(styles)],
            label=f"{line.family}: {line.config}",
        )
    _size_axis(ax, frame)
    ax.set_ylabel(f"Avg minus `{settings.baseline}`")
    ax.set_title(
        f"Intermediate-task gain against backbone size, per family\n(Avg over {', '.join(shared) or 'no shared target'})",
        fontsize=10,
    )
    if lines:
        ax.legend(title="family: config", fontsize=7, title_fontsize=7)
    fig.tight_layout()
    save(fig, stem)


def _size_axis(ax, frame) -> None:
    """Parameters on a log scale, a tick per backbone naming it."""
    ticks = frame.drop_duplicates("backbone")[["backbone", "parameters"]]
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(
        list(ticks["parameters"]),
        [f"{b}\n{_params_text(int(n))}" for b, n in zip(ticks["backbone"], ticks["parameters"])],
        fontsize=7,
    )
    ax.set_xlabel("backbone (parameters, log scale)")


def cross_backbone_args(description: str, argv: list[str] | None) -> argparse.Namespace:
    """The command line of a table across backbones (this one, modality_scaling.py)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--settings", required=True)
    ap.add_argument("--tables", required=True, type=Path, help="results/<experiment>/tables (one folder per backbone)")
    ap.add_argument("--models", required=True, type=Path, help="results/<experiment>/models/backbones")
    ap.add_argument("--md", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--figure", required=True, type=Path, help="figure path without suffix (PNG and SVG)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    args = cross_backbone_args("Compare intermediate-task gains across backbones.", argv)
    try:
        settings = ComparisonSettings.parse(args.settings, "--settings")
        frame, shared = comparison(settings, args.tables, args.models)
        text = render(frame, settings, shared)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    write_csv(args.csv, frame, index=False)
    write_text(args.md, text)
    delta_figure(frame, settings, shared, args.figure)
    print(text)


if __name__ == "__main__":
    main()
