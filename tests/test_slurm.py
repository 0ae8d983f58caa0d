"""The Slurm profile on a real (throwaway, single-node) Slurm cluster.

A reduced demo runs through `snakemake --profile slurm` while the test interrupts it the
ways a cluster does: each of three training jobs, once it has written a checkpoint, gets
`scancel --signal=USR1`, a plain `scancel` or `scontrol requeue`; and a job still pending in
the queue is cancelled. A fourth training job is sharded: its backbone asks for 2 GPUs with
the srun launcher, so the job (2 GPUs on the test cluster's node, which has none behind
them: the ranks train on CPU with gloo) starts one Slurm task per rank through srun; it gets
`scancel --signal=USR1` too, which both ranks must see, agree on and checkpoint for. Every path must end in a resumed training whose metric file equals
the uninterrupted one (a local run of the same config), with the workflow finishing on its
own: no hang, no manual step.

Skipped, saying why, where no cluster can be started (needs root and the Debian packages
listed in tests/slurm_cluster.py; CI installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import HIDDEN_GPUS, REPO, checkpoint_step, comparable_metrics, copy_repo, workflow_env
from slurm_cluster import Cluster, unavailable_reason
from workflow_scripts.operations import status

REASON = unavailable_reason()
pytestmark = [pytest.mark.cluster, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

# (backbone, target) -> how its running training job is interrupted once it has a checkpoint.
SHARDED = "sharded_tiny"  # the 2-rank backbone; no name here is a prefix of another plus "_"
INTERRUPTIONS = {
    ("xlmr_tiny", "xnli"): "usr1",
    ("xlmr_tiny", "udpos"): "scancel",
    ("xlmr_tiny", "panx"): "requeue",
    (SHARDED, "xnli"): "usr1",
}
TARGETS = sorted({target for _, target in INTERRUPTIONS})
AFTER_STEP = 20
RUN_TIMEOUT = int(os.environ.get("XSTILTS_SLURM_TIMEOUT", "900"))


def reduced_config(path: Path) -> Path:
    """The demo config cut to the baseline, one seed and the three trained targets, plus a
    copy of the tiny encoder trained on 2 ranks (XNLI only); targets train for more epochs so
    that each job can be interrupted after its first checkpoint."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["seeds"] = [1]
    tiny = config["backbones"]["xlmr_tiny"]
    config["backbones"] = {
        "xlmr_tiny": tiny,
        SHARDED: {
            **tiny,
            "gpus": {"per_node": 2, "launcher": "srun"},
            "grid": {"intermediate": ["none"], "targets": ["xnli"], "settings": ["zero_shot"]},
        },
    }
    config["intermediate"] = {"none": {"tasks": []}}
    config["targets"] = TARGETS
    config.pop("transfer")
    config["translation"].pop("datasets")
    config["tasks"] = {name: spec for name, spec in config["tasks"].items() if name in {"mnli", *TARGETS}}
    config["models"]["demo_pretraining"]["text"] = {"mnli": ["train"], **{t: ["dev"] for t in TARGETS}}
    for target in TARGETS:
        # ~15 s of training (760 steps at ~60 steps/s on 2 cores): the test's poll, which sees
        # the step-20 checkpoint and then signals, must land before the job is done, also on a
        # loaded machine (with 12 epochs, 3.7 s, one CI run's signal came after the job ended)
        config["tasks"][target]["epochs"] = 40
    config["resources"] = {"default": {"checkpoint_every": 10}}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def metric_files(workdir: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((workdir / "results/slurm_test/metrics").rglob("seed*.json")):
        out[str(path.relative_to(workdir))] = comparable_metrics(json.loads(path.read_text()))
    return out


def target_checkpoints(workdir: Path, backbone: str, target: str) -> Path:
    return workdir / "results/slurm_test/checkpoints/target" / backbone / "none" / target / "en.dev-en/seed1"


def queue(cluster: Cluster) -> list[tuple[str, str, str]]:
    """(job id, state, comment) of every job the controller holds."""
    out = cluster.run("squeue", "--noheader", "--states=all", "--format=%i|%T|%k", check=False).stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") >= 2]


def accounting(cluster: Cluster) -> list[dict[str, str]]:
    """Every job record of the cluster's accounting, requeued runs included."""
    out = cluster.run(
        "sacct",
        "--noheader",
        "--parsable2",
        "--duplicates",
        "--allusers",
        "-X",
        "--starttime",
        "now-1days",
        "--format=JobIDRaw,State,ExitCode,Comment",
    ).stdout
    keys = ("id", "state", "exit", "comment")
    return [dict(zip(keys, line.split("|", 3))) for line in out.splitlines() if line]


def step_records(cluster: Cluster) -> list[tuple[str, str]]:
    """(step id, number of tasks) of every job step the accounting holds."""
    out = cluster.run(
        "sacct",
        "--noheader",
        "--parsable2",
        "--duplicates",
        "--allusers",
        "--starttime",
        "now-1days",
        "--format=JobIDRaw,NTasks",
    ).stdout
    return [tuple(line.split("|", 1)) for line in out.splitlines() if line.count("|") == 1]


def cluster_steps(records: list[tuple[str, str]], job_id: str) -> list[tuple[str, str]]:
    return [(step, tasks) for step, tasks in records if step.split(".")[0] == job_id and "." in step]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        assert all(proc.poll() is not None for proc in cluster.processes.values())


def metric_file_name(backbone: str, target: str) -> str:
    return f"results/slurm_test/metrics/{backbone}/zero_shot/none/{target}/seed1.json"


class LocalRun:
    """The uninterrupted local run of the reduced config (its metric files only), started at
    once and waited for when its result is first needed: it runs while the cluster starts
    and while the cluster run waits on its queue, which leaves the CPUs idle much of the time."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        config = reduced_config(workdir / "slurm_test.yaml")
        targets = [metric_file_name(*run) for run in INTERRUPTIONS]
        self.log = (workdir / "snakemake.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", *targets, "--cores", "2", "--configfile", str(config)],
            cwd=workdir,
            env=workflow_env(HIDDEN_GPUS),  # the sharded job's 2 ranks train on CPU (gloo) on any host
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._metrics: dict[str, dict] | None = None

    def metrics(self) -> dict[str, dict]:
        if self._metrics is None:
            returncode = self.proc.wait(timeout=RUN_TIMEOUT)
            self.log.close()
            assert returncode == 0, (self.workdir / "snakemake.log").read_text()[-4000:]
            self._metrics = metric_files(self.workdir)
            assert len(self._metrics) == len(INTERRUPTIONS)
        return self._metrics

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    run = LocalRun(copy_repo(tmp_path_factory.mktemp("local")))
    try:
        yield run
    finally:
        run.stop()


@pytest.fixture(scope="module")
def reference(local_run):
    """Metric files of an uninterrupted local run of the reduced config."""
    return local_run.metrics()


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory, local_run, cluster):
    """The reduced demo under `--profile slurm`, interrupted as INTERRUPTIONS says and with
    one pending job cancelled; returns what happened."""
    workdir = copy_repo(tmp_path_factory.mktemp("cluster"))
    config = reduced_config(workdir / "slurm_test.yaml")
    # A job holding every CPU keeps the workflow's first jobs pending, so one can be
    # cancelled while it waits; it is cancelled itself once that is done.
    blocker = cluster.run(
        "sbatch", "--parsable", f"--cpus-per-task={os.cpu_count()}", "--output=/dev/null", "--wrap", "sleep 600"
    ).stdout.strip()
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # Status checks every few seconds instead of the profile's (cluster-friendly) cadence.
    log_path = workdir / "snakemake.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "slurm",
            "--configfile",
            str(config),
            "--slurm-init-seconds-before-status-checks",
            "2",
            "--seconds-between-status-checks",
            "2",
        ],
        cwd=workdir,
        env=env,
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    events = {"pending_cancelled": None, "interrupted": {}}
    status_looks, next_look = [], time.monotonic()
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while proc.poll() is None:
            if time.monotonic() >= next_look:  # the progress view, as a user would open it
                next_look = time.monotonic() + 5
                with contextlib.suppress(status.StatusError):  # before Snakemake wrote its log
                    status_looks.append(status.collect(workdir))
            assert time.monotonic() < deadline, (
                f"the workflow did not finish: it hangs; {events}\n{log_path.read_text()[-3000:]}"
            )
            jobs = queue(cluster)
            if events["pending_cancelled"] is None:
                pending = [(i, c) for i, state, c in jobs if state == "PENDING" and c.startswith("rule_")]
                if pending:
                    time.sleep(3)  # let the workflow see it pending first
                    cluster.run("scancel", pending[0][0])
                    events["pending_cancelled"] = pending[0]
                    cluster.run("scancel", blocker)
            for job_id, state, comment in jobs:
                run = next(
                    (
                        r
                        for r in INTERRUPTIONS
                        if comment.startswith("rule_train_target") and f"_{r[0]}_" in comment and f"_{r[1]}_" in comment
                    ),
                    None,
                )
                if (
                    run is None
                    or run in events["interrupted"]
                    or state != "RUNNING"
                    or checkpoint_step(target_checkpoints(workdir, *run)) < AFTER_STEP
                ):
                    continue
                how = INTERRUPTIONS[run]
                if how == "usr1":
                    cluster.run("scancel", "--signal=USR1", job_id)
                elif how == "scancel":
                    cluster.run("scancel", job_id)
                else:
                    cluster.run("scontrol", "requeue", job_id)
                events["interrupted"][run] = {
                    "job": job_id,
                    "at_step": checkpoint_step(target_checkpoints(workdir, *run)),
                }
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.run("scancel", blocker, check=False)
    log = log_path.read_text()
    return {
        "workdir": workdir,
        "status_looks": status_looks,
        "status": status.collect(workdir),
        "returncode": proc.returncode,
        "log": log,
        "events": events,
        "accounting": accounting(cluster),
        "accounting_steps": step_records(cluster),
    }


def test_interrupted_workflow_finishes_by_itself(slurm_run):
    assert slurm_run["returncode"] == 0, slurm_run["log"][-6000:]
    assert slurm_run["events"]["pending_cancelled"] is not None, "no job was ever pending"
    assert set(slurm_run["events"]["interrupted"]) == set(INTERRUPTIONS), slurm_run["events"]


def test_progress_view_follows_the_slurm_run(slurm_run):
    """The progress view read the Slurm executor's main log every 5 s while the run went
    on, and once it ended: every rule done, the interrupted jobs' retries included."""
    final = slurm_run["status"]
    assert final["state"] == "finished" and final["executor"] == "cluster", final["state"]
    assert final["rules"] and all(
        c["done"] == c["total"] and c["failed"] == c["running"] == c["pending"] == 0 for c in final["rules"].values()
    ), final["rules"]
    assert final["eta"]["parallelism"] == yaml.safe_load((REPO / "slurm/config.yaml").read_text())["jobs"]
    running = [look for look in slurm_run["status_looks"] if look["state"] == "running"]
    assert any(look["totals"]["running"] >= 1 for look in running), "no look saw a job running"
    for look in running:
        for rule, counts in look["rules"].items():
            assert sum(counts[k] for k in status.COUNTS) == counts["total"], (rule, counts)


def test_every_job_ends_completed(slurm_run):
    """Each rule job's last Slurm record is COMPLETED; the interrupted ones end as Slurm
    reports them (the plugin then retries them)."""
    last = {}
    for record in slurm_run["accounting"]:
        if record["comment"].startswith("rule_"):
            last[record["comment"]] = record["state"]
    assert last and all(state == "COMPLETED" for state in last.values()), last


def test_cancelled_pending_job_is_retried(slurm_run):
    job_id, comment = slurm_run["events"]["pending_cancelled"]
    records = [r for r in slurm_run["accounting"] if r["comment"] == comment]
    states = [r["state"] for r in records]
    assert any(r["id"] == job_id and r["state"].startswith("CANCELLED by") for r in records), states
    assert states[-1] == "COMPLETED", states


@pytest.mark.parametrize("backbone,target", list(INTERRUPTIONS), ids=["/".join(r) for r in INTERRUPTIONS])
def test_interrupted_training_resumes_to_the_same_metric_file(slurm_run, reference, backbone, target):
    how = INTERRUPTIONS[backbone, target]
    event = slurm_run["events"]["interrupted"][backbone, target]
    workdir = slurm_run["workdir"]
    records = [r for r in slurm_run["accounting"] if r["id"] == event["job"]]
    expected_state = {"usr1": "FAILED", "scancel": "CANCELLED by", "requeue": "REQUEUED"}[how]
    assert any(r["state"].startswith(expected_state) for r in records), records
    if how == "usr1":  # the training process stopped on the signal itself: 128 + SIGUSR1
        assert any(r["exit"] == "1:0" for r in records), records
    train_log = json.loads(
        (
            workdir / "results/slurm_test/target" / backbone / "none" / target / "en.dev-en/seed1/model/train_log.json"
        ).read_text()
    )
    assert train_log["resumed_at_step"] is not None and train_log["resumed_at_step"] >= event["at_step"], (
        train_log["resumed_at_step"],
        event,
    )
    if backbone == SHARDED:  # both ranks trained, started by srun as Slurm tasks
        assert train_log["throughput"]["processes"] == 2, train_log["throughput"]
        steps = cluster_steps(slurm_run["accounting_steps"], event["job"])
        assert any(tasks == "2" for _, tasks in steps), steps
    name = metric_file_name(backbone, target)
    assert metric_files(workdir)[name] == reference[name]
    assert checkpoint_step(target_checkpoints(workdir, backbone, target)) == 0, (
        "checkpoints are removed once the model exists"
    )


def test_preflight_checks_the_profile_against_the_cluster(cluster, tmp_path):
    """The preflight reads the partitions and accounts a profile names and the GPUs the
    cluster's nodes offer: the test cluster has partition debug with GPUS GPUs a node."""
    from slurm_cluster import GPUS

    workdir = copy_repo(tmp_path / "repo")
    profile = workdir / "site_profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "executor": "slurm",
                "default-resources": {"slurm_partition": "debug", "slurm_account": "no_such_account"},
                "set-resources": {"train_target": {"slurm_partition": "gpu_a100"}},
            }
        )
    )
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["backbones"]["xlmr_tiny"]["gpus"] = {"per_node": GPUS + 2}
    (workdir / "wide.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **cluster.env,
        "PYTHONPATH": str(workdir),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts.preflight",
            "--configfile",
            "wide.yaml",
            "--profile",
            "site_profile",
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    status = {
        (r[0], r[1]): r[2]
        for r in (
            [c.strip() for c in line.strip("|").split(" | ")]
            for line in proc.stdout.splitlines()
            if line.startswith("| ")
        )
    }
    assert status[("slurm", "partition debug")] == "ok"
    assert status[("slurm", "partition gpu_a100")] == "BLOCKER"
    assert status[("slurm", "account no_such_account")] == "BLOCKER"
    assert status[("gpus", "xlmr_tiny")] == "BLOCKER"
    assert ("gpus", "llama_tiny") not in status  # it asks for what a node has
    assert f"debug: {GPUS}" in proc.stdout
