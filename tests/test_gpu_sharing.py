"""Small jobs sharing a GPU (workflow_scripts/workflow/gpu_sharing.py): the k the cost model
and the memory plan give each job, slots locked on a simulated GPU (never more jobs on a
device than its slots, never a shared job beside a whole-GPU one), the workflow's resources
under --resources gpu=1, and the cost plan charging a shared job its share."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import copy_repo, snakemake
from workflow_scripts.planning import memory_model
from workflow_scripts.workflow import gpu_sharing

REPO = Path(__file__).resolve().parent.parent
TARGET = {"backbone": "xlmr_large", "recipe": "en.dev-en", "intermediate": "mnli", "seed": "1", "setting": "zero_shot"}


@pytest.fixture(scope="module")
def paper_config():
    from workflow_scripts.preflight import load_config

    return load_config(["config/paper.yaml"])


def _sharing(config, jobs_per_gpu: int, memory_gb: float | None = None):
    config = copy.deepcopy(config)
    config["gpu_sharing"] = {"jobs_per_gpu": jobs_per_gpu}
    if memory_gb is not None:
        config["backbones"]["xlmr_large"].setdefault("gpus", {})["memory_gb"] = memory_gb
    return config


@pytest.mark.unit
def test_a_host_bound_target_shares_as_far_as_its_gpu_time_and_memory_allow(paper_config):
    from workflow_scripts.planning import job_estimates

    config = _sharing(paper_config, 8)
    xnli = {**TARGET, "target": "xnli"}
    share = gpu_sharing.job_share(config, "train_target", xnli)
    found = job_estimates.job_estimate(config, "train_target", xnli)
    peak = gpu_sharing.job_peak_bytes(config, "train_target", xnli)
    # XNLI's batch of 4 keeps XLM-R large's GPU computing a fraction of each step
    assert found.busy < 0.5
    fitting = min(8, math.floor(1 / found.busy), math.floor(memory_model.usable_bytes(80) / peak))
    # as many as fit, in slots of the eight: jobs of ceil(8 / fitting) slots each
    assert share.jobs == 8 // math.ceil(8 / fitting)
    assert 1 < share.jobs <= fitting and share.jobs * found.busy <= 1 and "fit its time" in share.reason
    # at most jobs_per_gpu; and on a smaller card, as many as its memory holds
    assert gpu_sharing.job_share(_sharing(paper_config, 2), "train_target", xnli).jobs == 2
    small = _sharing(paper_config, 4, memory_gb=16)
    assert math.floor(memory_model.usable_bytes(16) / peak) == 1  # one copy fits a 16 GB card
    assert gpu_sharing.job_share(small, "train_target", xnli).jobs == 1


@pytest.mark.unit
def test_compute_bound_jobs_and_other_rules_take_whole_gpus(paper_config):
    config = _sharing(paper_config, 8)
    assert gpu_sharing.job_share(config, "train_target", {**TARGET, "target": "panx"}).jobs == 1
    assert gpu_sharing.job_share(config, "train_intermediate", {**TARGET}).jobs == 1
    off = gpu_sharing.job_share(paper_config, "train_target", {**TARGET, "target": "xnli"})
    assert off.jobs == 1 and "jobs_per_gpu is 1" in off.reason


@pytest.mark.unit
def test_slots_and_shards_of_a_job():
    assert gpu_sharing.slots(1, 2, 4) == 8  # two whole GPUs of four slots each
    assert gpu_sharing.slots(4, 1, 4) == 1 and gpu_sharing.slots(3, 1, 4) == 2
    # shards round up: three jobs of ceil(8 / 3) = 3 shards never crowd a GPU of 8
    assert gpu_sharing.shards(4, 8) == 2 and gpu_sharing.shards(3, 8) == 3 and gpu_sharing.shards(16, 8) == 1


@pytest.mark.unit
def test_the_cost_plan_charges_a_shared_job_its_share(paper_config):
    from workflow_scripts.planning import cost

    config = _sharing(paper_config, 8)
    k = gpu_sharing.job_share(config, "train_target", {**TARGET, "target": "xnli"}).jobs
    job = {"rule": "train_target", "gpu": 1.0, "wildcards": {**TARGET, "target": "xnli"}}
    (whole,) = cost.estimate_jobs(paper_config, [job])
    # the dry run shares it (no whole GPU, k to one): charged 1/k
    (shared,) = cost.estimate_jobs(config, [{**job, "gpu": 0.0, "gpu_share": float(k)}])
    assert shared["gpu_h"] == pytest.approx(whole["gpu_h"] / k) and f"shared {k} to a GPU" in shared["basis"]
    assert shared["gpus_per_job"] == pytest.approx(1 / k)
    # a run that does not share it (sharing on, but no bound GPUs and no shards) pays it whole
    (unshared,) = cost.estimate_jobs(config, [job])
    assert unshared["gpu_h"] == pytest.approx(whole["gpu_h"])


# Jobs that record the devices they see and when they ran: eight shared ones (one slot of a
# GPU's two each) and a whole-GPU one (both slots).
SNAKEFILE = """
import sys
sys.path.insert(0, {repo!r})
from workflow_scripts.workflow import gpu_binding
DEVICES = gpu_binding.run_devices(gpu_binding.granted_gpus(workflow))
workflow.register_resource("gpu_slots", len(DEVICES) * 2)
shell.prefix("set -euo pipefail;" + gpu_binding.shell_prefix(DEVICES, 2))
RECORD = "python3 -c 'import os, time; s = time.time(); time.sleep(0.8); print(os.environ[\\"CUDA_VISIBLE_DEVICES\\"], s, time.time())'"
rule all:
    input: expand("shared/{{i}}.txt", i=range(8)), "whole.txt"
rule shared:
    output: "shared/{{i}}.txt"
    resources: gpu=0, gpu_slots=1
    shell: "bind_gpus {{resources.gpu}} {{resources.gpu_slots}}; " + RECORD + " > {{output}}"
use rule shared as whole with:
    output: "whole.txt"
    resources: gpu=1, gpu_slots=2
"""


@pytest.mark.integration
def test_shared_jobs_run_two_to_a_gpu_and_never_beside_a_whole_gpu_job(tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(repo=str(REPO)))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "8", "-q", "--resources", "gpu=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = []
    for path in sorted(tmp_path.glob("shared/*.txt")) + [tmp_path / "whole.txt"]:
        device, start, end = path.read_text().split()
        runs.append((path.name, device, float(start), float(end)))
    assert all("," not in device for _, device, _, _ in runs)  # one GPU each

    def beside(run):
        return [o for o in runs if o is not run and o[1] == run[1] and o[2] < run[3] and run[2] < o[3]]

    whole = runs[-1]
    assert beside(whole) == []  # a whole-GPU job has its device to itself
    for run in runs[:-1]:
        assert len(beside(run)) <= 1  # two slots a GPU: at most one other job beside it
    assert any(beside(run) for run in runs[:-1])  # and jobs did share a GPU


@pytest.mark.integration
def test_the_workflow_shares_a_host_bound_target_under_resources_gpu(tmp_path):
    """The demo grid with its encoder sized as XLM-R large in bf16, XNLI's batch at 2 and
    gpu_sharing on: under --resources gpu=1 each XNLI target training asks for no whole
    GPU, one slot of four; every other GPU job takes all four slots of its GPU."""
    repo = copy_repo(tmp_path / "repo")
    layer = {
        "gpu_sharing": {"jobs_per_gpu": 4},
        "backbones": {
            "xlmr_tiny": {
                "precision": "bf16",
                "parameters": 5.6e8,
                "architecture": {
                    "hidden_size": 1024,
                    "num_layers": 24,
                    "num_attention_heads": 16,
                    "vocab_size": 250002,
                },
            }
        },
        "tasks": {"xnli": {"batch_size": 2}},
        "resources": {"train_target": {"gpu": 1}, "evaluate_target": {"gpu": 1}, "train_intermediate": {"gpu": 1}},
    }
    (repo / "sharing.yaml").write_text(yaml.safe_dump(layer))
    proc = snakemake(
        repo, "-n", "--forceall", "--cores", "2", "--resources", "gpu=1", "--configfile", "config.yaml", "sharing.yaml"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from workflow_scripts.planning.cost import parse_dry_run

    jobs = [j for j in parse_dry_run(proc.stdout + proc.stderr) if j.get("gpu_slots")]
    shared = [j for j in jobs if j.get("gpu_share", 1) > 1]
    assert shared and {j["rule"] for j in shared} <= set(gpu_sharing.SHAREABLE_RULES)
    assert all(j["gpu"] == 0 and j["gpu_slots"] == math.ceil(4 / j["gpu_share"]) for j in shared)
    assert any(j["wildcards"].get("target") == "xnli" and j["rule"] == "train_target" for j in shared)
    whole = [j for j in jobs if j.get("gpu_share", 1) == 1]
    assert whole and all(j["gpu_slots"] == 4 * j["gpu"] for j in whole)
    # under Slurm (no bound GPUs, shards named): the same jobs ask for shards, no GPU
    layer["gpu_sharing"]["slurm_shards_per_gpu"] = 8
    (repo / "sharing.yaml").write_text(yaml.safe_dump(layer))
    proc = snakemake(repo, "-n", "--forceall", "--cores", "2", "--configfile", "config.yaml", "sharing.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    sharded = [line for line in lines if "gpu_share=4" in line]
    assert sharded and all("gpu=0" in line and "gres=shard:2" in line for line in sharded)


@pytest.mark.unit
def test_the_preflight_stops_a_shared_run_on_a_cluster_without_shards(paper_config, monkeypatch):
    from workflow_scripts import preflight

    assert preflight.gres_count("gpu:h100:8(S:0-1),shard:32 gpu:4", "shard") == 32
    assert preflight.gres_count("gpu:h100:8(S:0-1),shard:32 gpu:4", "gpu") == 8
    config = copy.deepcopy(paper_config)
    config["gpu_sharing"] = {"jobs_per_gpu": 4, "slurm_shards_per_gpu": 8}
    sinfo = {"gres": "gpu:h100:8"}
    monkeypatch.setattr(preflight.shutil, "which", lambda name: "/usr/bin/sinfo")
    monkeypatch.setattr(
        preflight.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=sinfo["gres"], stderr="")
    )
    (blocker,) = preflight.check_shards(config, ["gpu"])
    assert blocker.status == preflight.BLOCKER and "slurm_shards_per_gpu is 8" in blocker.detail
    sinfo["gres"] = "gpu:h100:8,shard:64"
    assert preflight.check_shards(config, ["gpu"])[0].status == preflight.OK
    assert preflight.check_shards(paper_config, ["gpu"]) == []  # no sharing asked: nothing to check
