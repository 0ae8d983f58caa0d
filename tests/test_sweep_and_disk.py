"""Sweeps (workflow/sweep.py) and the disk policy's plan (planning/disk.py), in process; the
grid that runs both end to end is in tests/test_experiments.py."""

from __future__ import annotations

import json
import math

import pytest

from conftest import metric_file_record, phase_settings, train_log_record
from workflow_scripts import preflight
from workflow_scripts.planning import disk
from workflow_scripts.spec import paths
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.sweep_entry import SweepEntry
from workflow_scripts.workflow import sweep

pytestmark = pytest.mark.unit


def test_points_are_every_combination_in_the_configs_order_named_by_their_values():
    config = {"sweep": {"batch_size": [16, 32], "learning_rate": [1.0e-5, 3.0e-6]}}
    found = sweep.points(config)
    # learning rate first (SweepEntry's order), the first key slowest
    assert [p.token for p in found] == ["lr1e-05_bs16", "lr1e-05_bs32", "lr3e-06_bs16", "lr3e-06_bs32"]
    assert found[1].values == {"learning_rate": 1.0e-5, "batch_size": 32}
    assert sweep.points({}) == [] and not sweep.sweeping({"sweep": {}})
    with pytest.raises(InputError, match="lr1e-05_bs64"):
        sweep.point(config, "lr1e-05_bs64")
    assert list(sweep.SWEPT_KEYS) == list(SweepEntry.keys()), "every swept key has its short name, in order"
    with pytest.raises(InputError, match=r"sweep\.warmup_ratio\[1\]: 2 must be at most 1"):
        sweep.points({"sweep": {"warmup_ratio": [0.1, 2]}})


def test_a_points_values_replace_the_configs_where_training_reads_them():
    settings = phase_settings(
        {"xnli": {"batch_size": 16, "epochs": 4, "max_length": 128}}, learning_rate=2e-3, warmup_ratio=0.1
    )
    swept = sweep.apply(settings, "xnli", {"learning_rate": 1e-5, "batch_size": 32, "epochs": 2, "warmup_ratio": 0.0})
    assert (swept.learning_rate, swept.warmup_ratio) == (1e-5, 0.0)
    assert swept.tasks["xnli"] == settings.tasks["xnli"].replace(batch_size=32, epochs=2)
    assert swept.replace(learning_rate=2e-3, warmup_ratio=0.1, tasks=settings.tasks) == settings, "nothing else changes"
    assert settings.tasks["xnli"].batch_size == 16, "the config's settings are not changed"


def write_model(root, token: str, score: float | None):
    model = root / token / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights of " + token.encode())
    (model / "sub").mkdir()
    (model / "sub" / "heads.pt").write_bytes(b"heads")
    (model / "train_log.json").write_text(json.dumps(train_log_record(best={"score": score, "step": 10})))
    return model


def test_selection_takes_the_best_dev_score_and_the_first_listed_on_a_tie(tmp_path):
    models = {t: write_model(tmp_path, t, s) for t, s in [("lr1", 0.4), ("lr2", 0.7), ("lr3", 0.7), ("lr4", math.nan)]}
    record = sweep.select(models)
    assert record["selected"] == "lr2"
    assert record["scores"]["lr4"] == -math.inf, "a run that never scored a finite dev score never wins"
    del models["lr2"], models["lr3"]
    assert sweep.select(models)["selected"] == "lr1"


def test_a_candidate_without_its_train_log_is_named(tmp_path):
    (tmp_path / "lr1" / "model").mkdir(parents=True)
    with pytest.raises(InputError, match=r"lr1/model/train_log.json: missing"):
        sweep.select({"lr1": tmp_path / "lr1" / "model"})


def test_the_selected_model_is_linked_not_copied_and_records_the_selection(tmp_path):
    low, high = write_model(tmp_path, "lr1", 0.2), write_model(tmp_path, "lr2", 0.9)
    output = tmp_path / "seed1" / "model"
    output.parent.mkdir()
    sweep.main(
        ["--candidate", f"lr1={low}", "--candidate", f"lr2={high}", "--recipe", "mt-de.dev-en", "--output", str(output)]
    )
    assert (output / "model.safetensors").read_bytes() == b"weights of lr2"
    assert (output / "model.safetensors").stat().st_ino == (high / "model.safetensors").stat().st_ino
    assert (output / "sub" / "heads.pt").is_file()
    record = json.loads((output / paths.SWEEP_SELECTION_FILE).read_text())
    assert record["selected"] == "lr2" and record["scores"] == {"lr1": 0.2, "lr2": 0.9}
    assert record["selected_on"] == "dev-en"
    assert record["candidates"] == {"lr1": str(low), "lr2": str(high)}
    assert not list(tmp_path.glob("seed1/*.linking")), "no half-written folder is left"


COUNTS = disk.ModelCounts(intermediate=90, target=651, kept_best=217, jobs_at_once=1, points=1)


@pytest.mark.parametrize(
    "policy, keep_intermediate, expected",
    [
        ("all", True, 741),
        ("none", True, 92),  # every intermediate model + 2 target models at once
        ("none", False, 4),  # 2 intermediate + 2 target models at once
        ("best", False, 4 + 217),
    ],
)
def test_the_peak_follows_the_policy(policy, keep_intermediate, expected):
    assert disk.peak_models(COUNTS, policy, keep_intermediate)[0] == expected


def test_the_peak_grows_with_the_jobs_at_once_and_the_sweeps_points_and_is_bounded_by_the_grid():
    wide = disk.ModelCounts(intermediate=90, target=651, kept_best=0, jobs_at_once=8, points=3)
    models, how = disk.peak_models(wide, "none", False)
    assert models == 16 + 48 and "8 jobs at once, 3 sweep points" in how
    small = disk.ModelCounts(intermediate=1, target=3, kept_best=0, jobs_at_once=100, points=1)
    assert disk.peak_models(small, "none", False)[0] == 4


def test_jobs_at_once_come_from_the_option_then_the_profile_then_the_gpus(monkeypatch):
    monkeypatch.setattr(preflight, "local_gpus", lambda: [])
    assert preflight.jobs_at_once({"jobs": 100}, 4) == 4
    assert preflight.jobs_at_once({"jobs": 100}, None) == 100
    assert preflight.jobs_at_once(None, None) == 1
    monkeypatch.setattr(preflight, "local_gpus", lambda: [("H100", 80.0)] * 8)
    assert preflight.jobs_at_once(None, None) == 8


def test_the_sweep_table_lists_every_point_and_marks_the_selected_one(tmp_path):
    from workflow_scripts.reporting import sweep_table

    metrics = tmp_path / "metrics/b/zero_shot/mnli/xnli"
    metrics.mkdir(parents=True)
    record = {"selected": "lr2", "selected_on": "dev-en", "scores": {"lr1": 0.25, "lr2": 0.5}}
    run = {"intermediate": "mnli", "target": "xnli"}
    scores = {"test": {"en": {"accuracy": 1.0}}}
    (metrics / "seed3.json").write_text(
        json.dumps(metric_file_record({**run, "seed": 3}, scores, sweep={"target/m": record}))
    )
    # a run without a sweep: no rows
    (metrics / "seed4.json").write_text(json.dumps(metric_file_record({**run, "seed": 4}, scores)))
    rows = sweep_table.sweep_rows([str(metrics / "seed3.json"), str(metrics / "seed4.json")])
    assert [(r["seed"], r["point"], r["selected"]) for r in rows] == [(3, "lr1", False), (3, "lr2", True)]
    text = sweep_table.render(rows)
    assert "| zero_shot | mnli | xnli | 3 | **lr2** | 0.5000 | dev-en |" in text
    assert "| 3 | lr1 | 0.2500 |" in text


def test_keeping_the_best_of_selected_models_leaves_their_own_records_as_they_were(tmp_path):
    """`keep_best_target_model` links a seed's model that a sweep selected (it holds its own
    sweep_selection.json); the kept record is a new file, not written through the link."""
    seed_model = write_model(tmp_path, "seed1", 0.5)
    (seed_model / paths.SWEEP_SELECTION_FILE).write_text('{"selected": "lr2"}')
    kept = tmp_path / "kept" / "model"
    kept.parent.mkdir()
    sweep.main(["--candidate", f"seed1={seed_model}", "--output", str(kept)])
    assert json.loads((seed_model / paths.SWEEP_SELECTION_FILE).read_text()) == {"selected": "lr2"}
    assert json.loads((kept / paths.SWEEP_SELECTION_FILE).read_text())["selected"] == "seed1"


def test_each_sweep_point_is_its_own_tracker_run():
    from workflow_scripts.training import tracking

    base = {"job": "target", "backbone": "b", "config": "none", "target": "xnli", "recipe": "en.dev-en", "seed": 1}
    names = {
        tracking.run_name(tracking.identity_of({**base, "point": p}, None, "target")) for p in ("lr1e-05", "lr3e-06")
    }
    assert names == {"target/b/en.dev-en/none/xnli/lr1e-05/seed1", "target/b/en.dev-en/none/xnli/lr3e-06/seed1"}
