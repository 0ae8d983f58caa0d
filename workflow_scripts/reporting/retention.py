"""Forgetting at every stage: a backbone's retention table and figure (docs/multimodal.md,
"Forgetting"), from its probe files (evaluation/retention.py) and its runs (tables.py).

- ``retention.csv``: per intermediate config ("arm"), stage and language (and ``avg``, the
  mean over languages), the LM loss and alignment before (the pretrained backbone) and after
  the stage, and their change (after minus before; a positive loss change is forgetting, a
  negative alignment change too), medians over seeds. Stage ``intermediate`` is the model an
  intermediate config left (the baseline has none); ``target:<t>`` the zero-shot model of
  target t trained from it, so its change counts both phases.
- ``retention_pairs.csv``: per pair of arms (an image config and its text twin,
  ``grid_settings.arm_pairs``), probed target and language, the image arm's change minus its twin's
  at each stage, beside the image arm's zero-shot test score minus its twin's on that target
  (the modality table's difference, per language), each a median over seeds of the
  seed-paired difference.
- ``retention.md`` both, and the figure: the loss (or, without an LM head, alignment)
  change by arm and language, and each pair's forgetting difference against its transfer
  difference, one point per language.

Every probe of a backbone must have read the very inputs its ``before`` probe read (the
files' digests per language); a probe that did not stops the table, naming its file.

CLI: ``python -m workflow_scripts.reporting.retention --settings JSON --probes F... --runs CSV
--md F --csv F --pairs-csv F --figure STEM``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path, read_json, setup_logging
from workflow_scripts.reporting.seeds import SEED_STATISTIC, over_seeds
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.retention_settings import RetentionTableSettings
from workflow_scripts.spec.tasks import get_task, primary_metric
from workflow_scripts.spec.transfer_names import ZERO_SHOT

PROBE_COLUMNS = ["stage", "config", "seed", "language", "loss", "tokens", "alignment", "inputs_sha256", "file"]
COLUMNS = [
    "config",
    "stage",
    "language",
    "seeds",
    "loss_before",
    "loss_after",
    "loss_change",
    "alignment_before",
    "alignment_after",
    "alignment_change",
]
PAIR_COLUMNS = [
    "visual",
    "control",
    "control_task",
    "target",
    "language",
    "seeds",
    "loss_change_difference_intermediate",
    "loss_change_difference_target",
    "alignment_change_difference_intermediate",
    "alignment_change_difference_target",
    "metric",
    "transfer_difference",
]
AVG = "avg"


# ----- the probe files ------------------------------------------------------------------------


def _stage(identity: dict[str, Any], where: str) -> str:
    stage = identity.get("stage")
    if stage == "target":
        return f"target:{identity['target']}"
    if stage in ("before", "intermediate"):
        return stage
    raise InputError(f"{where}: probe.stage {stage!r} is none of before, intermediate, target")


def probe_rows(record: dict[str, Any], where: str) -> list[tuple]:
    """One row per language of one probe file."""
    identity = record.get("probe")
    if not isinstance(identity, dict) or not isinstance(record.get("languages"), dict):
        raise InputError(f"{where}: not a retention probe file (no 'probe' or 'languages')")
    stage = _stage(identity, where)
    rows = []
    for lang, found in record["languages"].items():
        aligned = (found.get("alignment") or {}).get("mean", math.nan)
        rows.append(
            (
                stage,
                identity.get("config", ""),
                identity.get("seed", 0),
                lang,
                found.get("loss", math.nan),
                found.get("tokens", 0),
                aligned,
                found.get("inputs_sha256", ""),
                where,
            )
        )
    return rows


def probe_frame(paths: list[str | Path]):
    """Every probe's rows; each probe's inputs checked against the ``before`` probe's."""
    import pandas as pd

    rows = [row for path in paths for row in probe_rows(read_json(path), str(path))]
    frame = pd.DataFrame.from_records(rows, columns=PROBE_COLUMNS)
    before = frame[frame["stage"] == "before"]
    if before.empty:
        raise InputError(f"no 'before' probe among {len(paths)} probe files: nothing to compare with")
    expected = before.drop_duplicates("language").set_index("language")["inputs_sha256"]
    for row in frame.itertuples():
        if expected.get(row.language) != row.inputs_sha256:
            raise InputError(
                f"{row.file}: language {row.language} was probed on other inputs than the 'before' probe "
                "(another text, tokenizer, seed or mask draw); rerun it"
            )
    return frame


# ----- changes by arm, stage and language ---------------------------------------------------------


def seed_changes(frame):
    """Per (config, stage, seed, language), the after-minus-before change, with ``avg`` (the
    mean over languages) per seed."""
    before = frame[frame["stage"] == "before"].set_index("language")[["loss", "alignment"]]
    after = frame[frame["stage"] != "before"].copy()
    after["loss_before"] = after["language"].map(before["loss"])
    after["alignment_before"] = after["language"].map(before["alignment"])
    after["loss_change"] = after["loss"] - after["loss_before"]
    after["alignment_change"] = after["alignment"] - after["alignment_before"]
    keys = ["config", "stage", "seed"]
    values = ["loss", "loss_before", "loss_change", "alignment", "alignment_before", "alignment_change"]
    means = after.groupby(keys, sort=False)[values].mean().reset_index().assign(language=AVG)
    return _concat([after[[*keys, "language", *values]], means], [*keys, "language", *values])


def _concat(frames, columns: list[str]):
    import pandas as pd

    frames = [f[columns] for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def retention_table(frame, settings: RetentionTableSettings):
    """One row per (config, stage, language): medians over seeds, configs in the config's order."""
    import pandas as pd

    changes = seed_changes(frame)
    if changes.empty:
        return pd.DataFrame(columns=COLUMNS)
    grouped = changes.groupby(["config", "stage", "language"], sort=False)
    table = grouped.agg(
        seeds=("seed", "nunique"),
        loss_before=("loss_before", SEED_STATISTIC),
        loss_after=("loss", SEED_STATISTIC),
        loss_change=("loss_change", SEED_STATISTIC),
        alignment_before=("alignment_before", SEED_STATISTIC),
        alignment_after=("alignment", SEED_STATISTIC),
        alignment_change=("alignment_change", SEED_STATISTIC),
    ).reset_index()
    order = {name: k for k, name in enumerate(settings.intermediate)}
    languages = {lang: k for k, lang in enumerate([*settings.languages, AVG])}
    table = table.assign(
        _config=table["config"].map(order),
        _stage=table["stage"].map(lambda s: (s != "intermediate", s)),
        _language=table["language"].map(languages),
    )
    table = table.sort_values(["_config", "_stage", "_language"]).drop(columns=["_config", "_stage", "_language"])
    return table[COLUMNS].reset_index(drop=True)


# ----- image arm minus its text twin -------------------------------------------------------------


def transfer_differences(runs, visual: str, control: str, target: str):
    """Per language (and ``avg``), the median over seeds of the image arm's zero-shot test
    score minus its twin's (primary metric), paired by seed; with the metric's name."""
    metric = primary_metric(get_task(target).metric)
    sub = runs[
        (runs["setting"] == ZERO_SHOT)
        & (runs["split"] == "test")
        & (runs["target"] == target)
        & (runs["metric"] == metric)
        & (runs["language"] != AVG)
        & (runs["intermediate"].isin([visual, control]))
    ]
    table = sub.pivot_table(index=["seed", "language"], columns="intermediate", values="value", aggfunc="first")
    if visual not in table or control not in table:
        return {}, metric
    diffs = (table[visual] - table[control]).dropna().unstack("language")
    per_language = over_seeds(diffs).to_dict()
    per_language[AVG] = float(over_seeds(diffs.mean(axis=1))) if not diffs.empty else math.nan
    return per_language, metric


def _paired(changes, visual: str, control: str, stage: str, value: str):
    """Per language, the median over seeds of the image arm's change minus its twin's."""
    sub = changes[(changes["stage"] == stage) & (changes["config"].isin([visual, control]))]
    table = sub.pivot_table(index=["seed", "language"], columns="config", values=value, aggfunc="first")
    if visual not in table or control not in table:
        return {}
    return over_seeds((table[visual] - table[control]).dropna().groupby(level="language")).to_dict()


def pairs_table(frame, runs, settings: RetentionTableSettings):
    """One row per (pair, probed target, language): forgetting and transfer differences."""
    import pandas as pd

    changes = seed_changes(frame)
    rows = []
    for pair in settings.pairs:
        for target in settings.targets or ("",):
            transfer, metric = transfer_differences(runs, pair.visual, pair.control, target) if target else ({}, "")
            stages = {"intermediate": "intermediate", "target": f"target:{target}"}
            found = {
                (what, stage): _paired(changes, pair.visual, pair.control, stage_name, f"{what}_change")
                for what in ("loss", "alignment")
                for stage, stage_name in stages.items()
            }
            seeds = changes[changes["config"] == pair.visual]["seed"].nunique()
            for lang in [*settings.languages, AVG]:
                cells = [found[(w, s)].get(lang, math.nan) for w in ("loss", "alignment") for s in stages]
                rows.append(
                    (pair.visual, pair.control, pair.control_task, target, lang, seeds, *cells, metric,
                     transfer.get(lang, math.nan))
                )  # fmt: skip
    return pd.DataFrame.from_records(rows, columns=PAIR_COLUMNS)


# ----- Markdown ---------------------------------------------------------------------------------


def _cell(value: float, decimals: int, signed: bool = True) -> str:
    if value != value:  # NaN
        return "–"
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def _wide(table, value: str, settings: RetentionTableSettings, languages: list[str]) -> list[str]:
    """Rows (config, stage) x columns languages of one value, as Markdown lines."""
    decimals = settings.decimals
    lines = [f"| config | stage | {' | '.join(languages)} |", "|---|---|" + "---:|" * len(languages)]
    for (config, stage), sub in table.groupby(["config", "stage"], sort=False):
        cells = sub.set_index("language")[value].reindex(languages)
        lines.append(f"| {config} | {stage} | {' | '.join(_cell(v, decimals) for v in cells)} |")
    return lines


def _before_line(table, value: str, settings: RetentionTableSettings, languages: list[str]) -> str:
    before = table.drop_duplicates("language").set_index("language")[f"{value}_before"].reindex(languages)
    cells = " | ".join(_cell(v, settings.decimals, signed=False) for v in before)
    return f"| (pretrained) | before | {cells} |"


def _pair_lines(pairs, settings: RetentionTableSettings) -> list[str]:
    if pairs.empty:
        return ["No pair of configs differing only by an image task and one of its text-only controls."]
    d = settings.decimals
    lines = [
        "| image config | minus | target | language | Δloss, intermediate | Δloss, target | "
        "Δalignment, intermediate | Δalignment, target | transfer Δ |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in pairs.itertuples():
        metric = f" ({r.metric})" if r.metric else ""
        lines.append(
            f"| {r.visual} | {r.control} | {r.target or '–'}{metric} | {r.language} | "
            f"{_cell(r.loss_change_difference_intermediate, d)} | {_cell(r.loss_change_difference_target, d)} | "
            f"{_cell(r.alignment_change_difference_intermediate, d)} | "
            f"{_cell(r.alignment_change_difference_target, d)} | {_cell(r.transfer_difference, d)} |"
        )
    return lines


def render(table, pairs, settings: RetentionTableSettings, objective: str | None) -> str:
    languages = [*settings.languages, AVG]
    foreign = [lang for lang in languages if lang != "en"]
    lines = [f"# Retention: forgetting at every stage ({settings.backbone})", ""]
    if objective:
        lines += [f"## {objective} loss change (after − before; positive: forgot)", ""]
        lines += _wide(table, "loss_change", settings, languages)
        lines += [_before_line(table, "loss", settings, languages), ""]
    else:
        lines += [f"A {settings.family} backbone has no LM head: alignment only.", ""]
    lines += ["## Alignment change with English (accuracy points, after − before; negative: forgot)", ""]
    lines += _wide(table, "alignment_change", settings, foreign)
    lines += [_before_line(table, "alignment", settings, foreign), ""]
    lines += ["## Image arm minus its text twin", ""]
    lines += _pair_lines(pairs, settings)
    lines += ["", *_notes(settings, objective)]
    return "\n".join(lines) + "\n"


def _notes(settings: RetentionTableSettings, objective: str | None) -> list[str]:
    seeds = ", ".join(map(str, settings.seeds))
    return [
        f"Seeds: {seeds}; every cell is a median over seeds, `avg` the mean over languages per seed first. "
        "`intermediate`: the model an intermediate config left (the baseline has no intermediate phase); "
        "`target:<t>`: the zero-shot model of target t trained from it, so its change counts both phases.",
        "",
        f"Loss: the {objective or 'no'} loss per predicted token on a fixed held-out sample of each language, "
        "the same inputs (masked positions included) at every stage, read through the pretrained checkpoint's "
        "LM head (saved models keep only the backbone). Alignment: Tatoeba-style accuracy of each sentence and "
        "its English translation found as each other's nearest neighbour, the mean of both directions.",
        "",
        "Image arm minus its twin: the image config's change minus its text twin's (paired by seed): a positive "
        "Δloss means the image arm forgot more. Transfer Δ: its zero-shot test score minus the twin's on the "
        "target (the modality table's difference, per language).",
    ]


# ----- the figure -------------------------------------------------------------------------------


def _heatmap(ax, table, value: str, settings: RetentionTableSettings, title: str, label: str) -> None:
    """Rows (config, stage) x languages of a change, diverging colours centred on 0 (red: forgot)."""
    import numpy as np

    languages = [*settings.languages, AVG] if value == "loss_change" else [
        lang for lang in [*settings.languages, AVG] if lang != "en"
    ]  # fmt: skip
    groups = list(table.groupby(["config", "stage"], sort=False))
    data = np.array([sub.set_index("language")[value].reindex(languages).to_numpy(float) for _, sub in groups])
    finite = data[np.isfinite(data)]
    span = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    colours = "RdBu_r" if value == "loss_change" else "RdBu"  # forgetting in red either way
    image = ax.imshow(np.ma.masked_invalid(data), cmap=colours, vmin=-span, vmax=span, aspect="auto")
    ax.set_xticks(range(len(languages)), languages)
    ax.set_yticks(range(len(groups)), [f"{config} · {stage}" for (config, stage), _ in groups])
    ax.set_title(title)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            text = _cell(data[i, j], settings.decimals)
            dark = math.isfinite(data[i, j]) and abs(data[i, j]) > 0.6 * span
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label=label)


def _scatter(ax, pairs, value: str, title: str, xlabel: str) -> None:
    """Each pair's forgetting difference against its transfer difference, one point per language."""
    shown = pairs[(pairs["language"] != AVG) & pairs[value].notna() & pairs["transfer_difference"].notna()]
    if shown.empty:
        ax.set_axis_off()
        ax.set_title(title)
        ax.text(0.5, 0.5, "no image / text-twin pair with both\na probe and a transfer score", ha="center", va="center")
        return
    for (visual, control, target), sub in shown.groupby(["visual", "control", "target"], sort=False):
        points = ax.scatter(sub[value], sub["transfer_difference"], label=f"{visual} − {control} ({target})")
        for r in sub.itertuples():
            ax.annotate(
                r.language, (getattr(r, value), r.transfer_difference), fontsize=7, color=points.get_facecolor()[0]
            )
    ax.axhline(0, color="grey", linewidth=0.8, linestyle="--")
    ax.axvline(0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"transfer Δ ({shown['metric'].iloc[0]}, image − twin)")
    ax.set_title(title)
    ax.legend(fontsize=7)


def figure(table, pairs, settings: RetentionTableSettings, objective: str | None, stem: Path) -> None:
    from workflow_scripts.reporting.plots import _pyplot, save

    plt = _pyplot()
    rows = max(1, table.groupby(["config", "stage"]).ngroups) if not table.empty else 1
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.4 * rows + 2.5), squeeze=False)
    value = "loss_change" if objective else "alignment_change"
    what = f"{objective} loss" if objective else "alignment (accuracy points)"
    if table.empty:
        axes[0][0].set_axis_off()
        axes[0][0].text(0.5, 0.5, "no probe after a phase", ha="center", va="center")
    else:
        title = f"{settings.backbone}: {what}, after − before (median over seeds)"
        _heatmap(axes[0][0], table, value, settings, title, f"{what} change")
    xlabel = f"{what} change after the intermediate phase, image − twin"
    _scatter(axes[0][1], pairs, f"{value}_difference_intermediate", "image arm minus its text twin", xlabel)
    save(fig, stem)


# ----- CLI --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", required=True, help="RetentionTableSettings JSON (workflow/retention.py)")
    ap.add_argument("--probes", required=True, nargs="+", help="the backbone's probe files")
    ap.add_argument("--runs", required=True, help="the backbone's runs.csv (tables.py)")
    ap.add_argument("--md", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--pairs-csv", required=True)
    ap.add_argument("--figure", required=True, help="output stem: STEM.png and STEM.svg")
    args = ap.parse_args(argv)
    import pandas as pd

    try:
        settings = RetentionTableSettings.parse(args.settings, "--settings")
        frame = probe_frame(args.probes)
        runs = pd.read_csv(args.runs, dtype={"language": str, "seed": int})
        table, pairs = retention_table(frame, settings), pairs_table(frame, runs, settings)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    with atomic_path(args.md) as tmp:
        tmp.write_text(render(table, pairs, settings, settings.objective))
    for path, found in ((args.csv, table), (args.pairs_csv, pairs)):
        with atomic_path(path) as tmp:
            found.to_csv(tmp, index=False)
    figure(table, pairs, settings, settings.objective, Path(args.figure))


if __name__ == "__main__":
    main()
