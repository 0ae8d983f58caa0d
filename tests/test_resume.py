"""Training survives being killed: a rerun resumes from the newest checkpoint and ends with
the same metric file as an uninterrupted run; Ctrl-C on Snakemake leaves a checkpoint of the
step it reached, and the interrupted attempt's log."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import checkpoint_step, comparable_metrics, copy_repo, phase_settings, snakemake
from workflow_scripts.operations import logs
from workflow_scripts.spec.model_settings import BackboneProvenance
from workflow_scripts.training.curves import CURVE_FILE, TIMING_QUANTITIES, read_curve

pytestmark = pytest.mark.integration

SETTINGS = phase_settings(
    {"xnli": {"batch_size": 8, "epochs": 5, "max_length": 48, "select_language": "en"}},
    dev_examples=60,
    eval_batch_size=32,
    eval_every=15,
    learning_rate=5e-4,
    max_micro_batch=4,
    multitask_epochs=1,
)


def train_cmd(encoder, data, output, checkpoints, settings=SETTINGS):
    return [
        sys.executable,
        "-m",
        "workflow_scripts.training.train",
        "target",
        "--encoder",
        str(encoder),
        "--data",
        json.dumps(data),
        "--settings",
        settings.to_json(),
        "--seed",
        "4",
        "--output",
        str(output),
        "--checkpoint-dir",
        str(checkpoints),
        "--checkpoint-every",
        "10",
    ]


# The demo encoder as the evaluate_target rule describes a demo backbone (backbone_grid.provenance).
PROVENANCE = BackboneProvenance(name="xlmr_tiny", family="encoder", source="demo", method="full", precision="bf16")


def evaluate(model: Path, xnli_dev: Path, out: Path, backbone: Path) -> dict:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts.evaluation.metric_file",
            "--target",
            "xnli",
            "--model",
            str(model),
            "--data",
            f"dev={xnli_dev}",
            f"test={xnli_dev}",
            "--seed",
            "4",
            "--output",
            str(out),
            "--backbone",
            str(backbone),
            "--backbone-settings",
            PROVENANCE.to_json(),
            "--settings",
            json.dumps(
                {"languages": ["en", "de", "ru", "sw"], "max_length": 48, "eval_batch_size": 32, "precision": "bf16"}
            ),
        ],
        check=True,
        capture_output=True,
    )
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
    metrics = evaluate(tmp / "model", demo_data["xnli.dev"], tmp / "metrics.json", demo_encoder_dir)
    return data, metrics, training_curve(tmp / "model")


def training_curve(model: Path) -> list[dict]:
    """The curve's rows but the timing quantities (a measurement of the machine, not of the run)."""
    return [r for r in read_curve(model / CURVE_FILE) if r["quantity"] not in TIMING_QUANTITIES]


def test_a_metric_file_says_how_its_backbone_was_trained(reference, demo_encoder_dir):
    """Read on its own, a metric file names the backbone, its family, method and precision,
    and which model it was: a demo model built locally, by the digest of its weights (a Hub
    backbone: its id, revision and resolved commit, tests/test_metric_file.py)."""
    metrics = reference[1]
    digest = hashlib.sha256(b"model.safetensors\0" + (demo_encoder_dir / "model.safetensors").read_bytes())
    assert metrics["backbone"] == {**PROVENANCE.to_dict(), "built_locally": True, "weights_sha256": digest.hexdigest()}


# A kill without warning, and a stop signal. SIGTERM and SIGINT take the same handler as
# SIGUSR1 (checkpoints.STOP_SIGNALS); they are sent for real by the Ctrl-C test below, the
# sharded runs' (tests/test_sharded_training.py) and Slurm's scancel (tests/test_slurm.py).
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGUSR1], ids=["SIGKILL", "SIGUSR1"])
def test_interrupted_run_resumes_to_the_same_metric_file(tmp_path, reference, demo_data, demo_encoder_dir, sig):
    data, expected, expected_curve = reference
    cmd = train_cmd(demo_encoder_dir, data, tmp_path / "model", tmp_path / "ckpt")
    code = interrupt(cmd, tmp_path / "ckpt", sig, after_step=30)
    assert code == (-sig if sig == signal.SIGKILL else 128 + sig)
    assert not (tmp_path / "model").exists(), "an interrupted job leaves no output"
    stopped_at = checkpoint_step(tmp_path / "ckpt")
    assert stopped_at >= 30
    subprocess.run(cmd, check=True, capture_output=True)
    log = json.loads((tmp_path / "model/train_log.json").read_text())
    assert log["resumed_at_step"] == stopped_at
    assert evaluate(tmp_path / "model", demo_data["xnli.dev"], tmp_path / "metrics.json", demo_encoder_dir) == expected
    assert not (tmp_path / "ckpt").exists()
    # The curve resumed with the run: the same rows, value for value, as the uninterrupted run's.
    assert training_curve(tmp_path / "model") == expected_curve


@pytest.mark.parametrize("change", ["settings", "encoder rebuilt"])
def test_a_checkpoint_of_another_run_is_discarded(tmp_path, demo_data, demo_encoder_dir, reference, change):
    """Snakemake reruns a training whose settings, code or inputs changed: the old run's
    checkpoint must not carry on under the new run's name."""
    data = reference[0]
    encoder = tmp_path / "encoder"
    shutil.copytree(demo_encoder_dir, encoder)
    cmd = train_cmd(encoder, data, tmp_path / "model", tmp_path / "ckpt")
    interrupt(cmd, tmp_path / "ckpt", signal.SIGTERM, after_step=10)
    assert checkpoint_step(tmp_path / "ckpt") >= 10
    if change == "settings":
        cmd = train_cmd(encoder, data, tmp_path / "model", tmp_path / "ckpt", SETTINGS.replace(learning_rate=1e-4))
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
    diverging = SETTINGS.replace(learning_rate=1e30, max_grad_norm=1e30, warmup_ratio=0.0)
    run = {"job": "target", "backbone": "xlmr_tiny", "config": "baseline", "seed": 4, "target": "xnli"}
    proc = subprocess.run(
        [
            *train_cmd(demo_encoder_dir, data, tmp_path / "model", tmp_path / "ckpt", diverging),
            *("--run-identity", json.dumps(run), "--log-every", "5"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    # The error names the run, the first step whose loss was not finite, and its task.
    error = re.search(
        r"error: run (.*): training diverged: the loss of task (\w+) at step (\d+) is (\S+),", proc.stderr
    )
    assert error, proc.stderr[-2000:]
    assert error[1] == "job=target, backbone=xlmr_tiny, config=baseline, seed=4, target=xnli"
    assert error[2] == "xnli" and error[4] in ("nan", "inf", "-inf")
    # No checkpoint kept weights trained past it (test_training.py: how soon it stops).
    assert "learning rate 1e+30" in proc.stderr
    assert not (tmp_path / "model").exists() and checkpoint_step(tmp_path / "ckpt") < int(error[3])


def test_checkpoints_can_be_kept(tmp_path, demo_data, demo_encoder_dir):
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    short = SETTINGS.replace(max_steps=25)
    subprocess.run(
        train_cmd(demo_encoder_dir, data, tmp_path / "model", tmp_path / "ckpt", short) + ["--keep-checkpoints", "1"],
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "model/heads.pt").is_file()
    assert checkpoint_step(tmp_path / "ckpt") == 20


def one_training_job(repo: Path) -> Path:
    """The demo config cut to a single training job: the tiny encoder (pre-trained for 20
    steps), no intermediate phase, XNLI, seed 1; 1,140 steps with a checkpoint every 10 (and
    few evaluations), so an interrupt after the second checkpoint lands mid-run. Idle, the
    tiny model takes about 65 steps a second: 380 steps (5.8 s) could end before a poller
    starved by a busy machine saw its second checkpoint."""
    config = yaml.safe_load((repo / "config.yaml").read_text())
    encoder = config["backbones"]["xlmr_tiny"]
    encoder["demo"]["pretraining"]["steps"] = 20
    config.update(
        seeds=[1],
        backbones={"xlmr_tiny": encoder},
        intermediate={"none": {"tasks": []}},
        targets=["xnli"],
        resources={"default": {"checkpoint_every": 10}},
    )
    config.pop("transfer")
    config["translation"].pop("datasets")
    config["tasks"] = {name: spec for name, spec in config["tasks"].items() if name in ("mnli", "xnli")}
    config["models"]["demo_pretraining"]["text"] = {"mnli": ["train"], "xnli": ["dev"]}
    config["tasks"]["xnli"]["epochs"] = 60
    config["training"]["target"]["eval_every"] = 100
    path = repo / "one_job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_ctrl_c_on_snakemake_checkpoints_and_the_rerun_resumes_keeping_the_interrupted_log(tmp_path):
    """Ctrl-C in a terminal: SIGINT to the whole foreground process group, i.e. Snakemake, the
    job's shell and the training process. Snakemake (local executor) sends its running jobs no
    signal of its own and waits for them; training writes a checkpoint at the end of the step
    it is in and exits 130; the checkpoint directory is no output of the rule, so Snakemake
    leaves it. The rerun resumes from that step, and the interrupted attempt's log, which
    Snakemake deletes before the rerun starts, is kept as <log>.1."""
    repo = copy_repo(tmp_path)
    args = ["--cores", "2", "--configfile", str(one_training_job(repo)), "--until", "train_target"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with open(tmp_path / "interrupted.out", "w") as out:
        # its own process group, like a terminal's foreground job
        proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", *args],
            cwd=repo,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline, meta = time.time() + 300, None
        while meta is None or checkpoint_step(meta.parent.parent) < 20:
            assert proc.poll() is None, (tmp_path / "interrupted.out").read_text()[-3000:]
            assert time.time() < deadline
            meta = meta or next((repo / "results").rglob("checkpoint/meta.json"), None)  # a cheap poll
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    said = (tmp_path / "interrupted.out").read_text()
    # Snakemake waited for the job, which exited by itself: 128 + SIGINT. (Whether Snakemake
    # also says "Terminating processes on user request" depends on whether it handles its own
    # SIGINT before it sees the job's exit: both come from the same Ctrl-C.)
    assert "non-zero exit status 130" in said, said[-3000:]
    checkpoints = meta.parent.parent
    stopped_at = checkpoint_step(checkpoints)
    assert stopped_at >= 20
    log = next(p for p in repo.rglob("seed1.log") if "train_target" in p.parts)
    interrupted = log.read_text()
    assert f"stopped by SIGINT after step {stopped_at}; checkpoint written to" in interrupted, interrupted[-3000:]
    assert "Traceback" not in interrupted

    rerun = snakemake(repo, *args, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming from {checkpoints.relative_to(repo)}/checkpoint at step {stopped_at}" in log.read_text()
    assert logs.kept(log, 1).read_text() == interrupted
    (train_log,) = [  # the model's own (its record beside it is a copy)
        p for p in repo.rglob("model/train_log.json") if json.loads(p.read_text()).get("phase") == "target"
    ]
    assert json.loads(train_log.read_text())["resumed_at_step"] == stopped_at
    assert not checkpoints.exists(), "checkpoints are removed once the output exists"
