"""Training survives being killed: a rerun resumes from the newest checkpoint and ends with
the same metric file as an uninterrupted run."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import checkpoint_step, comparable_metrics

SETTINGS = {"dropout": 0.1, "dev_examples": 60, "eval_batch_size": 32, "eval_every": 15, "learning_rate": 5e-4,
            "max_grad_norm": 1.0, "max_micro_batch": 4, "multitask_cap": 131072, "multitask_epochs": 1,
            "patience": 30, "warmup_ratio": 0.1, "weight_decay": 0.0,
            "tasks": {"xnli": {"batch_size": 8, "epochs": 5, "max_length": 48, "select_language": "en"}}}


def train_cmd(encoder, data, output, checkpoints, settings=SETTINGS):
    return [sys.executable, "-m", "workflow_scripts.training.train", "target", "--encoder", str(encoder),
            "--data", json.dumps(data), "--settings", json.dumps(settings), "--seed", "4",
            "--output", str(output), "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "10"]


def evaluate(model: Path, xnli_dev: Path, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "workflow_scripts.evaluation.evaluate", "--target", "xnli", "--model", str(model),
                    "--data", f"dev={xnli_dev}", f"test={xnli_dev}", "--seed", "4", "--output", str(out),
                    "--settings", json.dumps({"languages": ["en", "de", "ru", "sw"], "max_length": 48,
                                              "eval_batch_size": 32})], check=True, capture_output=True)
    return comparable_metrics(json.loads(out.read_text()))


def interrupt(cmd, checkpoints: Path, sig: int, after_step: int) -> int:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while checkpoint_step(checkpoints) < after_step:
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    return proc.returncode


@pytest.fixture(scope="module")
def reference(tmp_path_factory, demo_data, demo_encoder_dir):
    tmp = tmp_path_factory.mktemp("reference")
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    subprocess.run(train_cmd(demo_encoder_dir, data, tmp / "model", tmp / "ckpt"), check=True, capture_output=True)
    assert not (tmp / "ckpt").exists(), "checkpoints are removed once the output exists"
    log = json.loads((tmp / "model/train_log.json").read_text())
    assert log["total_steps"] > 100 and log["resumed_at_step"] is None
    return data, evaluate(tmp / "model", demo_data["xnli.dev"], tmp / "metrics.json")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1], ids=["SIGKILL", "SIGTERM", "SIGUSR1"])
def test_interrupted_run_resumes_to_the_same_metric_file(tmp_path, reference, demo_data, demo_encoder_dir, sig):
    data, expected = reference
    cmd = train_cmd(demo_encoder_dir, data, tmp_path / "model", tmp_path / "ckpt")
    code = interrupt(cmd, tmp_path / "ckpt", sig, after_step=30)
    assert code == (-sig if sig == signal.SIGKILL else 128 + sig)
    assert not (tmp_path / "model").exists(), "an interrupted job leaves no output"
    stopped_at = checkpoint_step(tmp_path / "ckpt")
    assert stopped_at >= 30
    subprocess.run(cmd, check=True, capture_output=True)
    log = json.loads((tmp_path / "model/train_log.json").read_text())
    assert log["resumed_at_step"] == stopped_at
    assert evaluate(tmp_path / "model", demo_data["xnli.dev"], tmp_path / "metrics.json") == expected
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("change", ["settings", "encoder rebuilt"])
def test_a_checkpoint_of_another_run_is_discarded(tmp_path, demo_data, demo_encoder_dir, reference, change):
    """Snakemake reruns a training whose settings, code or inputs changed: the old run's
    checkpoint must not carry on under the new run's name."""
    data, _ = reference
    encoder = tmp_path / "encoder"
    shutil.copytree(demo_encoder_dir, encoder)
    cmd = train_cmd(encoder, data, tmp_path / "model", tmp_path / "ckpt")
    interrupt(cmd, tmp_path / "ckpt", signal.SIGTERM, after_step=10)
    assert checkpoint_step(tmp_path / "ckpt") >= 10
    if change == "settings":
        cmd = train_cmd(encoder, data, tmp_path / "model", tmp_path / "ckpt", {**SETTINGS, "learning_rate": 1e-4})
    else:  # same path, new files: as a rerun of prepare_encoder leaves them
        weights = encoder / "model.safetensors"
        weights.write_bytes(weights.read_bytes())
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "discarding checkpoint" in proc.stderr and "written by a different run" in proc.stderr
    log = json.loads((tmp_path / "model/train_log.json").read_text())
    assert log["resumed_at_step"] is None


def test_diverging_loss_stops_without_output(tmp_path, demo_data, demo_encoder_dir):
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    diverging = {**SETTINGS, "learning_rate": 1e30, "max_grad_norm": 1e30, "warmup_ratio": 0.0}
    proc = subprocess.run(train_cmd(demo_encoder_dir, data, tmp_path / "model", tmp_path / "ckpt", diverging),
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "training diverged: non-finite loss" in proc.stderr
    assert not (tmp_path / "model").exists()


def test_checkpoints_can_be_kept(tmp_path, demo_data, demo_encoder_dir):
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    short = {**SETTINGS, "max_steps": 25}
    subprocess.run(train_cmd(demo_encoder_dir, data, tmp_path / "model", tmp_path / "ckpt", short)
                   + ["--keep-checkpoints", "1"], check=True, capture_output=True)
    assert (tmp_path / "model/heads.pt").is_file()
    assert checkpoint_step(tmp_path / "ckpt") == 20
