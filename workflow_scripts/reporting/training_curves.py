"""How a backbone's runs trained: their curves on one figure per intermediate config, and
the table of runs that went wrong (docs/training.md).

Every training job leaves ``curve.csv`` and ``train_log.json`` beside its model
(training/curves.py). This step reads them for one backbone and writes:

- ``figures/<backbone>/training/<config>.{png,svg}``: one row of panels per phase of the
  config (its intermediate phase, then each target's stages and training), training loss on
  the left and dev selection score on the right, one line per seed;
- ``tables/<backbone>/training.{md,csv}``: the runs that *diverged* (a non-finite value, or a
  last training loss above the first), *never learnt* (no dev score above the one before the
  first step) or *stopped early* (patience ran out before the last scheduled step), each with
  its model's path. A diverged run with a NaN loss never gets here: it stops with an error and
  writes no model (the job's log names run, step and task; ``make status`` lists it).

CLI: ``python -m workflow_scripts.reporting.training_curves --backbone NAME --runs DIR... --configs NAME...
--figures DIR --md F --csv F``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path, setup_logging
from workflow_scripts.spec.result_files import TRAIN_LOG, TrainLog
from workflow_scripts.training.curves import CURVE_FILE, EVAL, SELECTION, TRAIN, read_curve

FLAGS = ("diverged", "never learnt", "stopped early")
COLUMNS = [
    "phase",
    "config",
    "target",
    "setting",
    "seed",
    "flags",
    "initial_score",
    "best_score",
    "best_step",
    "last_step",
    "total_steps",
    "first_loss",
    "last_loss",
    "path",
]


@dataclass(frozen=True)
class TrainingRun:
    """Where a training output sits in the results tree (workflow/grid.py names these paths:
    ``intermediate_encoder``, ``target_model``, ``stage_model``)."""

    path: Path
    phase: str  # intermediate, target or stage
    config: str
    target: str
    setting: str  # the target's recipe (its transfer setting's data), or the stage's task
    seed: int

    @property
    def panel(self) -> str:
        if self.phase == "intermediate":
            return f"intermediate: {self.config}"
        if self.phase == "stage":
            return f"{self.target}: stage {self.setting}"
        return f"{self.target} ({self.setting})"


def locate(path: Path) -> TrainingRun:
    """A training output's identity from its path (grid.py's layout)."""
    parts = path.parts
    try:
        if parts[-1] == "encoder" and parts[-5] == "intermediate":  # intermediate/<b>/<config>/seed<N>/encoder
            return TrainingRun(path, "intermediate", parts[-3], "", "", _seed(parts[-2]))
        if parts[-1] == "model" and parts[-4] == "stages":  # target/<b>/<config>/<target>/stages/<stage>/seed<N>/model
            return TrainingRun(path, "stage", parts[-6], parts[-5], parts[-3], _seed(parts[-2]))
        if parts[-1] == "model" and parts[-7] == "target":  # target/<b>/<config>/<target>/<recipe>/seed<N>/model
            return TrainingRun(path, "target", parts[-5], parts[-4], parts[-3], _seed(parts[-2]))
    except (IndexError, ValueError):
        pass
    raise ValueError(f"{path}: not a training output (an intermediate encoder, a target's model or a stage's)")


def _seed(part: str) -> int:
    if not part.startswith("seed"):
        raise ValueError(part)
    return int(part.removeprefix("seed"))


def read_run(run: TrainingRun) -> tuple[list[dict[str, Any]], TrainLog]:
    """A run's curve and train log, from its record beside the model (which may have been
    discarded: planning/disk.py)."""
    curve_file, log_file = run.path.parent / CURVE_FILE, run.path.parent / TRAIN_LOG
    for needed in (curve_file, log_file):
        if not needed.is_file():
            raise FileNotFoundError(f"{needed}: missing; was {run.path} written by the training step?")
    return read_curve(curve_file), TrainLog.read(log_file)


def diagnose(rows: list[dict[str, Any]], log: TrainLog) -> dict[str, Any]:
    """One run's flags and the values they rest on."""
    losses = [r for r in rows if r["event"] == TRAIN and r["quantity"] == "loss" and not r["task"]]
    scores = [r for r in rows if r["event"] == EVAL and r["quantity"] == SELECTION]
    initial = next((r["value"] for r in scores if r["step"] == 0), math.nan)
    later = [r["value"] for r in scores if r["step"] > 0]
    best = max(later) if later else math.nan
    first_loss = losses[0]["value"] if losses else math.nan
    last_loss = losses[-1]["value"] if losses else math.nan
    flags = []
    if any(not math.isfinite(r["value"]) for r in rows if r["quantity"] != "lr") or (
        len(losses) > 1 and last_loss > first_loss
    ):
        flags.append("diverged")
    if later and math.isfinite(initial) and best <= initial:
        flags.append("never learnt")
    if log.stopped_early:
        flags.append("stopped early")
    return {
        "flags": "; ".join(flags),
        "initial_score": initial,
        "best_score": best,
        "best_step": log.best.step,
        "last_step": max((r["step"] for r in rows), default=0),
        "total_steps": log.total_steps,
        "first_loss": first_loss,
        "last_loss": last_loss,
    }


def flagged_table(runs: list[TrainingRun], curves: dict[Path, tuple[list, dict]]):
    import pandas as pd

    records = []
    for run in runs:
        found = diagnose(*curves[run.path])
        if found["flags"]:
            records.append(
                {
                    "phase": run.phase,
                    "config": run.config,
                    "target": run.target,
                    "setting": run.setting,
                    "seed": run.seed,
                    **found,
                    "path": str(run.path),
                }
            )
    return pd.DataFrame(records, columns=COLUMNS)


def render(table, backbone: str, runs: int) -> str:
    lines = [f"# Runs to look at: {backbone}", ""]
    if table.empty:
        lines.append(f"None of the {runs} training runs diverged, never learnt or stopped early.")
        return "\n".join(lines) + "\n"
    counts = {flag: int(table["flags"].str.contains(flag).sum()) for flag in FLAGS}
    lines.append(
        f"{len(table)} of {runs} training runs flagged: "
        + ", ".join(f"{n} {flag}" for flag, n in counts.items())
        + ". Diverged: a last training loss above the first; never learnt: no dev score above"
        " the one before the first step; stopped early: patience ran out before the last step."
    )
    lines.append("")
    shown = table.copy()
    for column in ("initial_score", "best_score", "first_loss", "last_loss"):
        shown[column] = shown[column].map(lambda v: "" if v != v else f"{v:.4g}")
    lines.append(shown.to_markdown(index=False))
    return "\n".join(lines) + "\n"


def figure(config: str, runs: list[TrainingRun], curves: dict[Path, tuple[list, dict]], stem: Path) -> None:
    """One config's phases, one row each: training loss | dev score, a line per seed."""
    from workflow_scripts.reporting.plots import _pyplot, save

    plt = _pyplot()
    mine = sorted((r for r in runs if r.config == config), key=_phase_order)
    panels = list(dict.fromkeys(r.panel for r in mine))
    fig, axes = plt.subplots(max(1, len(panels)), 2, figsize=(9, 2.1 * max(1, len(panels)) + 0.6), squeeze=False)
    if not panels:  # the baseline config of a grid with no target to train
        for ax in axes[0]:
            ax.set_axis_off()
        axes[0][0].text(0.5, 0.5, f"{config}: no training run", ha="center", va="center")
    seeds = sorted({r.seed for r in mine})
    colours = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(seeds)}
    for row, panel in zip(axes, panels):
        loss_ax, score_ax = row
        for run in (r for r in mine if r.panel == panel):
            rows, _ = curves[run.path]
            for ax, event, quantity in ((loss_ax, TRAIN, "loss"), (score_ax, EVAL, SELECTION)):
                points = [
                    (r["step"], r["value"])
                    for r in rows
                    if (r["event"], r["quantity"], r["task"]) == (event, quantity, "")
                ]
                if points:
                    steps, values = zip(*points)
                    ax.plot(
                        steps,
                        values,
                        color=colours[run.seed],
                        lw=1.2,
                        marker="." if len(points) < 30 else None,
                        label=f"seed {run.seed}",
                    )
        loss_ax.set_title(f"{panel}: training loss", fontsize=9)
        score_ax.set_title(f"{panel}: dev score", fontsize=9)
        for ax in row:
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        if score_ax.lines:
            score_ax.legend(fontsize=7, loc="lower right")
        else:
            score_ax.text(
                0.5, 0.5, "no dev evaluation (MLM only)", ha="center", va="center", transform=score_ax.transAxes
            )
    fig.suptitle(f"{config}: training curves", fontsize=10)
    fig.tight_layout()
    save(fig, stem)


def _phase_order(run: TrainingRun) -> tuple:
    return ({"intermediate": 0, "stage": 1, "target": 2}[run.phase], run.target, run.setting, run.seed)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backbone", required=True)
    ap.add_argument("--runs", nargs="*", default=[], type=Path, help="the backbone's training outputs")
    ap.add_argument("--configs", nargs="+", required=True, help="the intermediate configs: one figure each")
    ap.add_argument("--figures", required=True, type=Path, help="folder of <config>.png/.svg")
    ap.add_argument("--md", required=True)
    ap.add_argument("--csv", required=True)
    args = ap.parse_args(argv)
    try:
        runs = [locate(p) for p in args.runs]
        curves = {run.path: read_run(run) for run in runs}
    except (OSError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    table = flagged_table(runs, curves)
    with atomic_path(args.csv) as tmp:
        table.to_csv(tmp, index=False)
    with atomic_path(args.md) as tmp:
        tmp.write_text(render(table, args.backbone, len(runs)))
    for config in args.configs:
        figure(config, runs, curves, args.figures / config)


if __name__ == "__main__":
    main()
