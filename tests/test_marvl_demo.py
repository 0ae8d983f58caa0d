"""MaRVL as a zero-shot target end to end (tests/configs/marvl_demo.yaml): the demo encoder
trained on the demo's English NLVR2 with both images of a pair, its visual branch saved, and
scored on the demo's MaRVL release in de, ru and sw, each language with its own images.
The config has every experiment tracker on: their records of the training and evaluation
jobs are read back, and switching tracking off reruns nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import run_config_from_scratch, snakemake
from workflow_scripts.training.curves import CURVE_FILE, read_curve

pytestmark = pytest.mark.integration

CONFIG = "tests/configs/marvl_demo.yaml"
RESULTS = "results/marvl_demo"
LANGS = ["de", "ru", "sw"]
TRAINING_RUN = "target/xlmr_tiny/en.dev-en/none/marvl/seed1"
EVALUATION_RUN = "evaluate/xlmr_tiny/zero_shot/none/marvl/seed1"
IDENTITY = {"backbone": "xlmr_tiny", "config": "none", "target": "marvl", "seed": "1", "grid": "marvl_demo"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return run_config_from_scratch(tmp_path_factory, CONFIG) / RESULTS


def test_marvl_is_trained_on_nlvr2_pairs_and_scored_with_each_languages_images(run):
    model = run / "target/xlmr_tiny/none/marvl/en.dev-en/seed1/model"
    log = json.loads((model / "train_log.json").read_text())
    assert log["visual"]["saved"] is True
    assert log["visual"]["tasks"]["marvl"]["images"] == f"{RESULTS}/data/images/nlvr2"
    heads = torch.load(model / "heads.pt", weights_only=True)
    assert heads["marvl.slots"].shape[0] == 2  # a slot vector for the left and the right image
    metrics = json.loads((run / "metrics/xlmr_tiny/zero_shot/none/marvl/seed1.json").read_text())
    assert metrics["languages"] == LANGS
    # 12 pairs per language, two statements each, one true and one false
    assert metrics["visual"]["rows_with_images"] == {"test": dict.fromkeys(LANGS, 24)}
    assert metrics["visual"]["images"] == f"{RESULTS}/data/images/marvl" and metrics["visual"]["bank_images"] == 72
    main = (run / "tables/xlmr_tiny/main.md").read_text()
    assert "| Intermediate task | marvl | Avg |" in main


def mlflow_runs(run: Path):
    """The experiment's MLflow client and its runs by job kind, read from its SQLite store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'tracking/mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("marvl_demo").experiment_id])
    assert sorted(r.data.tags["job"] for r in runs) == ["evaluate", "target"]  # one run per job
    return client, {r.data.tags["job"]: r for r in runs}


def scalars(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return events


def test_tracking_records_of_the_evaluation_job_read_back(run):
    _, runs = mlflow_runs(run)
    evaluation = runs["evaluate"]
    assert evaluation.info.status == "FINISHED" and evaluation.info.run_name == EVALUATION_RUN
    assert {k: evaluation.data.tags[k] for k in IDENTITY} == IDENTITY
    assert evaluation.data.tags["setting"] == "zero_shot"
    metrics = json.loads((run / "metrics/xlmr_tiny/zero_shot/none/marvl/seed1.json").read_text())
    metric = metrics["primary"]
    for lang in LANGS:
        assert evaluation.data.metrics[f"test/{lang}/{metric}"] == pytest.approx(
            metrics["scores"]["test"][lang][metric]
        )
    assert evaluation.data.metrics[f"test/avg/{metric}"] == pytest.approx(metrics["average"]["test"][metric])
    events = scalars(run / "tracking/tensorboard" / EVALUATION_RUN)
    assert events.Scalars(f"test/avg/{metric}")[0].value == pytest.approx(metrics["average"]["test"][metric])
    # one offline W&B run per job (the training job's too)
    assert len(list((run / "tracking/wandb").glob("offline-run-*/run-*.wandb"))) == 2


def test_tracking_records_of_the_training_job_read_back(run):
    """Every row of the job's curve reached the trackers as it was written, step for step."""
    client, runs = mlflow_runs(run)
    training = runs["target"]
    assert training.info.status == "FINISHED" and training.info.run_name == TRAINING_RUN
    assert {k: training.data.tags[k] for k in IDENTITY} == IDENTITY
    assert training.data.tags["setting"] == "en.dev-en"
    curve = read_curve(run / "target/xlmr_tiny/none/marvl/en.dev-en/seed1/model" / CURVE_FILE)
    for key, (event, quantity) in {"train/loss": ("train", "loss"), "dev/score": ("eval", "score")}.items():
        history = sorted(client.get_metric_history(training.info.run_id, key), key=lambda m: m.step)
        expected = [
            (r["step"], r["value"]) for r in curve if (r["event"], r["quantity"], r["task"]) == (event, quantity, "")
        ]
        assert len(expected) > 1 and [(m.step, m.value) for m in history] == pytest.approx(expected)
    assert expected[0][0] == 0, "the dev score before the first step is logged too"
    log = json.loads((run / "target/xlmr_tiny/none/marvl/en.dev-en/seed1/model/train_log.json").read_text())
    assert training.data.metrics["best/score"] == pytest.approx(log["best"]["score"])
    events = scalars(run / "tracking/tensorboard" / TRAINING_RUN)
    assert {"train/loss", "dev/score", "best/score"} <= set(events.Tags()["scalars"])


def test_switching_tracking_off_reruns_nothing(run):
    repo = run.parents[1]
    (repo / "marvl_demo_untracked.yaml").write_text(
        "extends: tests/configs/marvl_demo.yaml\nexperiment: marvl_demo\ntracking: {tensorboard: false, mlflow: false, wandb: false}\n"
    )
    proc = snakemake(repo, "-n", "--configfile", "marvl_demo_untracked.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr
