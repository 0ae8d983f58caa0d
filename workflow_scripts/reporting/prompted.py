"""Fine-tuned and prompted, side by side: a backbone's table (docs/prompted.md) from its
prompted files (evaluation/prompted.py) and its runs (tables.py).

Per task and language: the fine-tuned arm's zero-shot test score of each intermediate config
(median over seeds, the main table's numbers) beside lm-eval's score of the same test rows,
prompted at each shot count, for the pretrained backbone (the baseline config) and after
each intermediate phase (median over seeds). Each row ends with its average over languages
and its cross-lingual transfer gap: English minus the mean of the other languages. A target
lm-eval does not prompt is listed with the reason.

- ``prompted.csv``: arm, shots, config, task, metric, language (and ``avg``, ``gap``), seeds, value;
- ``prompted.md``: one table per task.

CLI: ``python -m workflow_scripts.reporting.prompted --settings JSON --prompted F... --runs CSV
--md F --csv F``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path, read_json, setup_logging
from workflow_scripts.reporting.seeds import of_seeds
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.prompted import LM_EVAL_TASKS, PromptedTableSettings
from workflow_scripts.spec.transfer_names import ZERO_SHOT

AVG, GAP = "avg", "gap"
FINE_TUNED, PROMPTED = "fine-tuned", "prompted"
COLUMNS = ["arm", "shots", "config", "task", "metric", "language", "seeds", "value"]


def prompted_rows(paths: list[str | Path]) -> list[dict[str, Any]]:
    """One row per (file, shot count, language) with the task's table metric."""
    rows = []
    for path in paths:
        record = read_json(path)
        run, task = record["run"], record["run"]["task"]
        metric = LM_EVAL_TASKS[task].metric
        for shots, by_lang in record["scores"].items():
            for lang, scores in by_lang.items():
                if metric not in scores:
                    raise InputError(
                        f"{path}: no {metric!r} score for {lang} at {shots} shots (lm-eval's metrics: {list(scores)})"
                    )
                rows.append(
                    {"arm": PROMPTED, "shots": int(shots), "config": run["config"], "task": task,
                     "metric": metric, "language": lang, "seed": run["run"], "value": scores[metric]}
                )  # fmt: skip
    return rows


def fine_tuned_rows(runs, settings: PromptedTableSettings) -> list[dict[str, Any]]:
    """The zero-shot test scores of the prompted tasks, one row per run and language."""
    chosen = runs[(runs["setting"] == ZERO_SHOT) & (runs["split"] == "test") & runs["target"].isin(settings.prompted)]
    return [
        {"arm": FINE_TUNED, "shots": None, "config": r.intermediate, "task": r.target, "metric": r.metric,
         "language": r.language, "seed": str(r.seed), "value": float(r.value)}
        for r in chosen.itertuples()
    ]  # fmt: skip


def _summaries(values: dict[str, float]) -> dict[str, float]:
    """The average over languages and the transfer gap (English minus the others' mean)."""
    foreign = [v for lang, v in values.items() if lang != "en"]
    found = {AVG: statistics.fmean(values.values())}
    if "en" in values and foreign:
        found[GAP] = values["en"] - statistics.fmean(foreign)
    return found


def table(rows: list[dict[str, Any]], settings: PromptedTableSettings):
    """Medians over seeds per (arm, shots, config, task, language), with each group's avg and gap
    computed per seed first."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    out = []
    keys = ["arm", "shots", "config", "task", "metric"]
    for key, group in frame.groupby(keys, sort=False, dropna=False):
        per_seed = {}
        for seed, sub in group.groupby("seed", sort=False):
            values = dict(zip(sub["language"], sub["value"]))
            per_seed[seed] = {**values, **_summaries(values)}
        seeds = len(per_seed)
        for lang in dict.fromkeys(k for v in per_seed.values() for k in v):
            found = [v[lang] for v in per_seed.values() if lang in v]
            out.append({**dict(zip(keys, key)), "language": lang, "seeds": seeds, "value": of_seeds(found)})
    found = pd.DataFrame(out, columns=COLUMNS)
    order = {name: i for i, name in enumerate(settings.intermediate)}
    found["_config"] = found["config"].map(order)
    found["_shots"] = found["shots"].fillna(-1)
    found = found.sort_values(["task", "arm", "_shots", "_config"], kind="stable")
    return found.drop(columns=["_config", "_shots"]).reset_index(drop=True)


def _label(row, settings: PromptedTableSettings) -> tuple[str, str]:
    if row["arm"] == FINE_TUNED:
        return "fine-tuned, zero-shot", row["config"]
    phase = f"{row['config']} (pretrained)" if row["config"] == settings.baseline else row["config"]
    return f"prompted, {int(row['shots'])}-shot", phase


def render(found, settings: PromptedTableSettings) -> str:
    lines = [f"# Fine-tuned and prompted ({settings.backbone})", ""]
    for task in settings.prompted:
        sub = found[found["task"] == task]
        if sub.empty:
            continue
        languages = [lang for lang in dict.fromkeys(sub["language"]) if lang not in (AVG, GAP)]
        columns = [*languages, AVG, GAP]
        metrics = dict(zip(sub["arm"], sub["metric"]))
        named = "; ".join(f"{arm}: {metric}" for arm, metric in metrics.items())
        lines += [f"## {task} (test; {named})", ""]
        lines += ["| Arm | Model | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
        for _, group in sub.groupby(["arm", "shots", "config"], sort=False, dropna=False):
            values = dict(zip(group["language"], group["value"]))
            arm, phase = _label(group.iloc[0], settings)
            cells = [f"{values[c]:.{settings.decimals}f}" if c in values else "–" for c in columns]
            lines.append(f"| {arm} | {phase} | " + " | ".join(cells) + " |")
        lines.append("")
    if settings.why_not:
        lines += ["## Not prompted", ""]
        lines += [f"- {target}: {why}" for target, why in settings.why_not.items()]
        lines.append("")
    seeds = ", ".join(map(str, settings.seeds))
    lines += [
        f"Seeds: {seeds}; each cell is a median over seeds (the pretrained backbone is prompted once), "
        f"`{AVG}` the mean over languages and `{GAP}` English minus the mean of the other languages, "
        "each per seed first. Prompted: lm-evaluation-harness's own prompt and metric for the task, "
        "on the test rows the fine-tuned arm scores (docs/prompted.md).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", required=True, help="PromptedTableSettings JSON (workflow/prompted.py)")
    ap.add_argument("--prompted", nargs="*", default=[], help="the backbone's prompted files")
    ap.add_argument("--runs", required=True, help="the backbone's runs.csv (tables.py)")
    ap.add_argument("--md", required=True)
    ap.add_argument("--csv", required=True)
    args = ap.parse_args(argv)
    try:
        settings = PromptedTableSettings.parse(args.settings, "--settings")
        rows = prompted_rows(args.prompted) + fine_tuned_rows(pd.read_csv(args.runs), settings)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    found = table(rows, settings) if rows else pd.DataFrame(columns=COLUMNS)
    with atomic_path(args.csv) as tmp:
        found.to_csv(tmp, index=False, float_format="%.4f")
    with atomic_path(args.md) as tmp:
        Path(tmp).write_text(render(found, settings), encoding="utf-8")


if __name__ == "__main__":
    main()
