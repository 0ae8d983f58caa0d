"""The curves report: where a training output sits, which runs are flagged and why, the table
and one figure per config, read from real curves written by the training engine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from conftest import train_log_record
from workflow_scripts.reporting import training_curves
from workflow_scripts.reporting.training_curves import diagnose, locate
from workflow_scripts.spec.result_files import TrainLog
from workflow_scripts.training.curves import CURVE_FILE, read_curve, write_curve

pytestmark = pytest.mark.unit


def test_training_outputs_are_located_by_the_grid_layout():
    run = locate(Path("results/demo/intermediate/xlmr_tiny/mnli/seed2/encoder"))
    assert (run.phase, run.config, run.seed) == ("intermediate", "mnli", 2)
    run = locate(Path("results/demo/target/xlmr_tiny/mnli/xnli/en.dev-en/seed1/model"))
    assert (run.phase, run.config, run.target, run.setting, run.seed) == ("target", "mnli", "xnli", "en.dev-en", 1)
    run = locate(Path("results/x/target/b/baseline/xcopa/stages/siqa/seed3/model"))
    assert (run.phase, run.config, run.target, run.setting, run.seed) == ("stage", "baseline", "xcopa", "siqa", 3)
    with pytest.raises(ValueError, match="results/demo/metrics/a.json: not a training output"):
        locate(Path("results/demo/metrics/a.json"))


def rows(losses: list[float], scores: list[float]) -> list[dict]:
    """A curve: train losses at steps 10, 20, ... and dev scores at steps 0, 10, 20, ..."""
    found = [
        {"step": 10 * (i + 1), "event": "train", "task": "", "quantity": "loss", "value": v}
        for i, v in enumerate(losses)
    ]
    found += [
        {"step": 10 * i, "event": "eval", "task": "", "quantity": "score", "value": v} for i, v in enumerate(scores)
    ]
    return found


LOG = train_log_record(best={"step": 20}, total_steps=30)


@pytest.mark.parametrize(
    ("losses", "scores", "stopped_early", "flags"),
    [
        ([1.0, 0.8, 0.6], [0.3, 0.5, 0.6, 0.55], False, ""),
        ([1.0, 0.9, 1.3], [0.3, 0.5, 0.6, 0.55], False, "diverged"),
        ([1.0, 0.9, math.inf], [0.3, 0.5, 0.6, 0.55], False, "diverged"),
        ([1.0, 0.8, 0.6], [0.6, 0.5, 0.6, 0.4], False, "never learnt"),
        ([1.0, 0.8, 0.6], [0.3, 0.5, 0.6, 0.55], True, "stopped early"),
        ([1.0, 1.2, 1.4], [0.6, 0.3, 0.2, 0.1], True, "diverged; never learnt; stopped early"),
    ],
)
def test_runs_are_flagged_by_their_curves(losses, scores, stopped_early, flags):
    found = diagnose(rows(losses, scores), TrainLog.parse({**LOG, "stopped_early": stopped_early}))
    assert found["flags"] == flags
    assert found["initial_score"] == scores[0] and found["best_score"] == max(scores[1:])
    assert (found["first_loss"], found["last_loss"]) == (losses[0], losses[-1])


def test_a_phase_without_dev_evaluation_is_never_called_unlearnt():
    """An MLM-only intermediate phase has no dev score: only its loss can flag it."""
    assert diagnose(rows([2.0, 1.5], []), TrainLog.parse(LOG))["flags"] == ""


def write_run(root: Path, relative: str, losses: list[float], scores: list[float], stopped_early=False) -> Path:
    """A trained model's record beside its path; the model itself discarded (disk.py)."""
    model = root / relative
    model.parent.mkdir(parents=True)
    write_curve(rows(losses, scores), model.parent / CURVE_FILE)
    (model.parent / "train_log.json").write_text(json.dumps({**LOG, "stopped_early": stopped_early}))
    return model


def test_the_report_step_writes_the_table_and_a_figure_per_config(tmp_path):
    runs = [
        write_run(tmp_path, "intermediate/b/mnli/seed1/encoder", [1.0, 0.7, 0.5], [0.3, 0.5, 0.6, 0.6]),
        write_run(tmp_path, "intermediate/b/mnli/seed2/encoder", [1.0, 1.1, 1.5], [0.3, 0.2, 0.2, 0.1]),
        write_run(tmp_path, "target/b/mnli/xnli/en.dev-en/seed1/model", [1.0, 0.7, 0.5], [0.3, 0.5, 0.6, 0.6], True),
        write_run(tmp_path, "target/b/baseline/xnli/en.dev-en/seed1/model", [1.0, 0.7, 0.5], [0.3, 0.5, 0.6, 0.6]),
    ]
    out = tmp_path / "out"
    training_curves.main(
        [
            "--backbone",
            "b",
            "--runs",
            *map(str, runs),
            "--configs",
            "baseline",
            "mnli",
            "--figures",
            str(out / "figures"),
            "--md",
            str(out / "training.md"),
            "--csv",
            str(out / "training.csv"),
        ]
    )
    table = pd.read_csv(out / "training.csv", keep_default_na=False)
    assert list(table.columns) == training_curves.COLUMNS
    assert table[["phase", "config", "seed", "flags"]].values.tolist() == [
        ["intermediate", "mnli", 2, "diverged; never learnt"],
        ["target", "mnli", 1, "stopped early"],
    ]
    assert table.path.tolist() == [str(runs[1]), str(runs[2])]
    text = (out / "training.md").read_text()
    assert "2 of 4 training runs flagged: 1 diverged, 1 never learnt, 1 stopped early" in text
    for config in ("baseline", "mnli"):
        for fmt in ("png", "svg"):
            assert (out / "figures" / f"{config}.{fmt}").stat().st_size > 1000


def test_a_missing_curve_is_named(tmp_path, capsys):
    model = tmp_path / "intermediate/b/mnli/seed1/encoder"
    model.mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"seed1/curve.csv: missing"):
        training_curves.main(
            ["--backbone", "b", "--runs", str(model), "--configs", "mnli"]
            + ["--figures", str(tmp_path), "--md", str(tmp_path / "a.md"), "--csv", str(tmp_path / "a.csv")]
        )


def test_a_file_that_is_not_a_curve_is_refused(tmp_path):
    path = tmp_path / CURVE_FILE
    path.write_text("step,loss\n1,0.5\n")
    with pytest.raises(ValueError, match="not a training curve"):
        read_curve(path)
