"""Hyperparameter sweeps of the target phase: the config's ``sweep`` block.

Each combination of the swept values (a *point*) trains its own model per seed, from the
same intermediate model; the point whose model scores best on the recipe's own selection
data wins: English dev for every zero-shot and translate-train recipe, the rule XTREME's
protocol states (no target-language dev data in zero-shot transfer). The winner is chosen
per seed, as early stopping chooses a step per seed, so adding a seed never changes the
models another seed evaluates. The selected model is linked (not copied) to the recipe's
usual model path, so evaluation, tables and reports read it as any other target model, and
its record (``sweep_selection.json``) travels into the metric file and the sweep table.

No ``sweep`` (the default): one point, the config's constants, and the grid's paths and jobs
are those of a grid without this module.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from workflow_scripts.spec import paths
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.result_files import TRAIN_LOG, TrainLog
from workflow_scripts.spec.sweep_entry import sweep_of

# Each swept key's short name in a point's token (the keys and their order: SweepEntry's;
# where each lives in a target job's settings: grid_settings.target_settings).
SWEPT_KEYS = {"learning_rate": "lr", "batch_size": "bs", "epochs": "ep", "warmup_ratio": "wu"}
# Per-task keys (tasks.<target>.<key>) sit in the settings' "tasks" entry of the target.
TASK_KEYS = ("batch_size", "epochs")


@dataclasses.dataclass(frozen=True)
class Point:
    """One combination of swept values; ``token`` names it in paths (``lr1e-05_bs32``)."""

    token: str
    values: dict[str, Any]


def points(config: dict[str, Any]) -> list[Point]:
    """The sweep's points in the config's order (first key slowest), or [] without a sweep."""
    swept = sweep_of(config).swept()
    if not swept:
        return []
    found = []
    for combination in itertools.product(*swept.values()):
        values = dict(zip(swept, combination))
        found.append(Point("_".join(f"{SWEPT_KEYS[k]}{_short(v)}" for k, v in values.items()), values))
    return found


def sweeping(config: dict[str, Any]) -> bool:
    return bool(points(config))


def point(config: dict[str, Any], token: str) -> Point:
    for found in points(config):
        if found.token == token:
            return found
    raise InputError(f"sweep point {token!r} is not one of {[p.token for p in points(config)]}")


def apply(settings: PhaseSettings, target: str, values: dict[str, Any]) -> PhaseSettings:
    """A target job's settings with one point's values in place of the config's."""
    task_values = {key: value for key, value in values.items() if key in TASK_KEYS}
    phase_values = {key: value for key, value in values.items() if key not in TASK_KEYS}
    tasks = {**settings.tasks, target: settings.tasks[target].replace(**task_values)}
    return settings.replace(**phase_values, tasks=tasks)


def _short(value: Any) -> str:
    """A value as a path segment: 3e-06, 32, 0.1."""
    return f"{value:g}" if isinstance(value, float) else str(value)


# ----- selection (the select_target_hyperparameters job) ------------------------------------


def selection_score(train_log: TrainLog) -> float:
    """The score a point is selected on: its model's best score on the recipe's selection
    data (English dev for zero-shot and translate-train), as early stopping kept it."""
    score = train_log.best.score
    if not math.isfinite(score):
        return -math.inf
    return float(score)


def select(candidates: dict[str, Path], selected_on: str = "") -> dict[str, Any]:
    """The selection record: each point's selection score, and the winner (ties: the
    point listed first, i.e. the config's order); ``selected_on``: the dev data that scored
    them (a recipe's ``dev-en``)."""
    scores = {}
    for token, model in candidates.items():
        log_file = model / TRAIN_LOG
        if not log_file.is_file():
            raise InputError(f"{log_file}: missing; was {model} written by the training step?")
        scores[token] = selection_score(TrainLog.read(log_file))
    best = max(scores, key=lambda t: (scores[t], -list(scores).index(t)))
    return {"selected": best, "selected_on": selected_on, "scores": scores}


def link_model(source: Path, output: Path) -> None:
    """``output``: the selected model's files as hard links (no second copy on disk), or
    copies where the file system cannot link; written under a temporary name first."""
    tmp = output.with_name(output.name + ".linking")
    shutil.rmtree(tmp, ignore_errors=True)
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        dest = tmp / file.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(file, dest)
        except OSError:
            shutil.copy2(file, dest)
    if output.exists():
        shutil.rmtree(output)
    tmp.rename(output)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Select a target's sweep point on its dev data and link its model.")
    ap.add_argument("--candidate", action="append", required=True, help="TOKEN=MODEL_DIR, one per point")
    ap.add_argument("--output", required=True, type=Path, help="the recipe's model path (linked)")
    ap.add_argument("--recipe", default="", help="the recipe (en.dev-en): its dev data scored the candidates")
    args = ap.parse_args(argv)
    candidates = dict(c.split("=", 1) for c in args.candidate)
    selected_on = args.recipe.rsplit(".", 1)[-1] if args.recipe else ""  # en.dev-en -> dev-en
    record = select({t: Path(d) for t, d in candidates.items()}, selected_on)
    record["candidates"] = candidates
    link_model(Path(candidates[record["selected"]]), args.output)
    written = args.output / paths.SWEEP_SELECTION_FILE
    written.unlink(missing_ok=True)  # a linked candidate's own record: writing through the link would change it
    written.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"selected {record['selected']}: " + ", ".join(f"{t} {s:.4f}" for t, s in record["scores"].items()))


if __name__ == "__main__":
    main()
