"""The experiment trackers (workflow_scripts/training/tracking.py): each tracker's records
written under a tmp folder and read back with the tracker's own reader; tracking off
imports no tracker library; concurrent jobs share one MLflow store; the config names a
tracker key that is wrong or a library that is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from workflow_scripts.evaluation.metric_file import final_metrics
from workflow_scripts.spec import trackers
from workflow_scripts.training import tracking
from workflow_scripts.workflow import config_check, grid, grid_checks

RUN = {"backbone": "xlmr_tiny", "config": "mnli", "target": "xnli", "recipe": "en.dev-en", "seed": 1}
SETTINGS = {"learning_rate": 1e-5, "tasks": {"xnli": {"batch_size": 16, "epochs": 2}}, "long": "x" * 7000}
FINAL = {"best/score": 0.63, "best/step": 20, "steps": 30, "stopped_early": 1, "wall_time_s": 5.5}


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """An MLflow SQLite store with its tables made once (MLflow's migrations take seconds)."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


def store_in(root: Path, empty_store: Path) -> Path:
    root.mkdir(parents=True)
    shutil.copy(empty_store, root / "mlflow.db")
    return root


def write_run(root: Path, token: str, run: dict | None = None, seed_offset: float = 0.0) -> None:
    """What a training job logs: curve rows every 10 steps, a dev evaluation at 20 and 30."""
    trackers = tracking.open_trackers(token, root, json.dumps(run or RUN), SETTINGS, job="target")
    for step in (10, 20, 30):
        trackers.log(step, {"train/loss": 1.0 / step + seed_offset, "train/lr": 1e-5, "train/loss/xnli": 0.5})
        if step >= 20:
            trackers.log(step, {"dev/score": 0.6 + step / 1000, "dev/xnli/accuracy": 0.6})
    trackers.finish(FINAL)


@pytest.mark.unit
def test_token_follows_the_config_and_parses_back():
    assert trackers.token(None) == trackers.token({}) == "off"
    assert trackers.token({"tensorboard": True, "mlflow": True, "wandb": False}) == "tensorboard+mlflow"
    assert trackers.token({"wandb": True, "wandb_project": "xstilts"}) == "wandb"
    assert trackers.token({"wandb": True, "wandb_project": "mine"}) == "wandb=mine"
    assert trackers.parse_token("mlflow+wandb=mine") == {"mlflow": None, "wandb": "mine"}
    with pytest.raises(trackers.TrackingError, match="unknown tracker 'neptune'"):
        trackers.parse_token("mlflow+neptune")


@pytest.mark.unit
def test_identity_tags_and_run_name(tmp_path):
    identity = tracking.identity_of(json.dumps(RUN), tmp_path / "grid1" / "tracking", "target")
    assert identity == {**{k: str(v) for k, v in RUN.items()}, "setting": "en.dev-en", "job": "target", "grid": "grid1"}
    assert tracking.run_name(identity) == "target/xlmr_tiny/en.dev-en/mnli/xnli/seed1"
    # the metric file's identity: the transfer setting, the intermediate config, no file lists
    evaluation = {"backbone": "b", "setting": "source:de", "intermediate": "none", "target": "t", "seed": 2}
    identity = tracking.identity_of(
        {**evaluation, "leakage_reports": ["r.json"]}, tmp_path / "g" / "tracking", "evaluate"
    )
    assert identity["config"] == "none" and "leakage_reports" not in identity
    assert tracking.run_name(identity) == "evaluate/b/source-de/none/t/seed2"


@pytest.mark.unit
def test_off_imports_no_tracker_library(tmp_path):
    code = (
        "import sys, json\n"
        "from workflow_scripts.training.tracking import open_trackers\n"
        f"t = open_trackers('off', {str(tmp_path)!r}, '{{}}', {{}}, job='target')\n"
        "t.log(1, {'train/loss': 1.0}); t.finish({'steps': 1})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorboard', 'mlflow', 'wandb', 'torch', 'filelock', 'sqlalchemy'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    assert list(tmp_path.iterdir()) == []  # and writes nothing


@pytest.mark.unit
def test_tensorboard_records_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    write_run(tmp_path / "grid1" / "tracking", "tensorboard")
    run_dir = tmp_path / "grid1/tracking/tensorboard/target/xlmr_tiny/en.dev-en/mnli/xnli/seed1"
    events = EventAccumulator(str(run_dir))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"train/loss", "train/lr", "dev/score", "dev/xnli/accuracy", "best/score"} <= set(scalars)
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("train/loss")] == [(10, 0.1), (20, 0.05), (30, 0.0333)]
    assert [e.step for e in events.Scalars("dev/score")] == [20, 30]
    assert events.Scalars("best/score")[0].value == pytest.approx(0.63)
    assert "run/text_summary" in events.Tags()["tensors"]  # identity and settings as a table


@pytest.mark.unit
def test_mlflow_records_read_back(tmp_path, empty_store):
    from mlflow.tracking import MlflowClient

    root = store_in(tmp_path / "grid1" / "tracking", empty_store)
    write_run(root, "mlflow")
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("grid1")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "target/xlmr_tiny/en.dev-en/mnli/xnli/seed1"
    tags = run.data.tags
    assert {k: tags[k] for k in ("backbone", "setting", "config", "target", "seed", "job", "grid")} == {
        "backbone": "xlmr_tiny",
        "setting": "en.dev-en",
        "config": "mnli",
        "target": "xnli",
        "seed": "1",
        "job": "target",
        "grid": "grid1",
    }
    params = run.data.params
    assert params["learning_rate"] == "1e-05" and params["tasks.xnli.batch_size"] == "16"
    assert len(params["long"]) == tracking.MLFLOW_PARAM_VALUE_MAX  # cut to MLflow's limit
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(m.step, round(m.value, 4)) for m in history] == [(10, 0.1), (20, 0.05), (30, 0.0333)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "dev/score")] == [20, 30]
    assert run.data.metrics["best/score"] == pytest.approx(0.63) and run.data.metrics["stopped_early"] == 1


@pytest.mark.unit
def test_failed_job_ends_its_mlflow_run_failed(tmp_path, empty_store):
    from mlflow.tracking import MlflowClient

    root = store_in(tmp_path / "grid1" / "tracking", empty_store)
    with pytest.raises(FloatingPointError):
        with tracking.open_trackers("mlflow", root, json.dumps(RUN), {}, job="target") as trackers:
            trackers.log(10, {"train/loss": 1.0})
            raise FloatingPointError("loss is nan")
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("grid1").experiment_id])
    assert run.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [10]  # flushed at the end


@pytest.mark.multiprocess
def test_two_processes_share_one_mlflow_store(tmp_path, empty_store):
    """Two jobs writing into one store at once (their runs, params and metric batches)."""
    from mlflow.tracking import MlflowClient

    root = store_in(tmp_path / "grid1" / "tracking", empty_store)
    code = (
        "import json, sys\n"
        "from workflow_scripts.training.tracking import open_trackers\n"
        f"t = open_trackers('mlflow', sys.argv[1], json.dumps({{**{RUN!r}, 'seed': int(sys.argv[2])}}), {{}}, job='target')\n"
        "for step in (10, 20, 30):\n"
        "    t.log(step, {'train/loss': 1.0 / step}); t.log(step, {'dev/score': 0.5})\n"
        "t.finish({'steps': 30})\n"
    )
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(root), str(seed)], cwd=REPO, stderr=subprocess.PIPE, text=True
        )
        for seed in (1, 2)
    ]
    for job in jobs:
        assert job.wait(timeout=120) == 0, job.stderr.read()
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("grid1").experiment_id])
    assert sorted(r.data.tags["seed"] for r in runs) == ["1", "2"]
    for run in runs:
        assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 3


@pytest.mark.unit
def test_wandb_offline_run_folder(tmp_path):
    root = tmp_path / "grid1" / "tracking"
    write_run(root, "wandb=demo-project")
    (folder,) = (root / "wandb").glob("offline-run-*")
    (records,) = folder.glob("run-*.wandb")
    # no reader of the .wandb log is exposed: its records hold the run's name and metric keys
    data = records.read_bytes()
    assert b"target/xlmr_tiny/en.dev-en/mnli/xnli/seed1" in data and b"demo-project" in data
    assert b"train/loss" in data and b"best/score" in data
    assert not (folder / "files" / "code").exists()


@pytest.mark.unit
def test_a_tracker_that_cannot_open_is_named(tmp_path, monkeypatch):
    class Broken:
        def __init__(self, *args):
            raise ImportError("No module named 'mlflow'")

    monkeypatch.setattr(tracking, "_MLflow", Broken)
    root = tmp_path / "grid1" / "tracking"
    with pytest.raises(
        trackers.TrackingError, match=r"tracking: mlflow could not be opened .*No module named 'mlflow'"
    ):
        tracking.open_trackers("tensorboard+mlflow", root, json.dumps(RUN), {}, job="target")
    with pytest.raises(trackers.TrackingError, match="needs --tracking-dir"):
        tracking.open_trackers("tensorboard", None, json.dumps(RUN), {}, job="target")


@pytest.mark.unit
def test_a_tracker_failing_mid_job_is_dropped_and_the_others_go_on(caplog):
    class Recorder:
        name = "recorder"

        def __init__(self, fail: bool) -> None:
            self.fail, self.calls = fail, []

        def log(self, step, values, flush):
            if self.fail:
                raise OSError("disk full")
            self.calls.append((step, values, flush))

        def finish(self, final, status):
            self.calls.append((final, status))

    broken, working = Recorder(fail=True), Recorder(fail=False)
    with pytest.raises(SystemExit):
        with tracking.RunTrackers([broken, working]) as trackers:
            trackers.log(5, {"train/loss": 1, "note": "text"})
            trackers.log(5, {"dev/score": 0.5})
            raise SystemExit(128 + 15)  # preempted: SIGTERM
    assert "tracking: recorder failed at log (OSError: disk full)" in caplog.text
    assert trackers.trackers == [working]
    assert working.calls == [(5, {"train/loss": 1.0}, False), (5, {"dev/score": 0.5}, True), ({}, "KILLED")]


@pytest.mark.unit
def test_config_check_names_the_tracking_key(monkeypatch):
    schema = str(config_check.schema_for_validation())
    with pytest.raises(grid.ConfigError, match="config key tracking.mlflow: 'yes' is not of type 'boolean'"):
        grid_checks.check_schema({"tracking": {"mlflow": "yes"}}, schema)
    with pytest.raises(grid.ConfigError, match="config key tracking: Additional properties"):
        grid_checks.check_schema({"tracking": {"neptune": True}}, schema)
    monkeypatch.setattr(trackers, "_module_found", lambda name: name != "wandb")
    config_check.check_tracking({"tracking": {"mlflow": True}})  # mlflow's modules are found
    with pytest.raises(grid.ConfigError, match=r"config key tracking.wandb: wandb not installed"):
        config_check.check_tracking({"tracking": {"mlflow": True, "wandb": True}})


@pytest.mark.unit
def test_evaluation_final_metrics_from_a_metric_file():
    result = {
        "scores": {"test": {"de": {"accuracy": 0.5, "by_length": {"short": 0.4}}, "sw": {"accuracy": 0.7}}},
        "average": {"test": {"accuracy": 0.6}},
        "task_score": {"test": 0.6},
        "wall_time_s": 3.0,
    }
    assert final_metrics(result) == {
        "test/de/accuracy": 0.5,
        "test/sw/accuracy": 0.7,
        "test/avg/accuracy": 0.6,
        "test/score": 0.6,
        "wall_time_s": 3.0,
    }
