"""config/xtreme_small.yaml, the small real grid between the demo and the paper grid: its DAG
builds offline with the job counts its header and docs/configuration/index.md state."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import copy_repo, job_counts, snakemake
from workflow_scripts.planning import memory_plan
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.workflow import config_layers

pytestmark = pytest.mark.integration

CONFIG = "config/xtreme_small.yaml"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


def test_the_small_preset_builds_its_grid_offline(repo):
    config = config_layers.load([repo / CONFIG])
    proc = snakemake(repo, "-n", "--configfile", CONFIG, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    counts = job_counts(out)
    assert list(config["backbones"]) == ["xlmr_base"]
    assert config["backbones"]["xlmr_base"]["hub_id"] == "FacebookAI/xlm-roberta-base"
    assert config["data"]["source"] == "hub" and config["models"]["source"] == "hub"
    assert config["targets"] == ["xnli", "pawsx", "udpos"] and list(config["intermediate"]) == ["none", "mnli"]
    # every target in its full XTREME language list
    assert all(config["tasks"][t]["languages"] == sorted(benchmark.XTREME.languages[t]) for t in config["targets"])
    n_inter, n_targets, n_seeds = 2, 3, len(config["seeds"])
    assert n_seeds == 3 and all(get_task(t).trains for t in config["targets"])
    assert counts["evaluate_target"] == n_inter * n_targets * n_seeds == 18
    assert counts["train_target"] == n_inter * n_targets * n_seeds
    assert counts["train_intermediate"] == (n_inter - 1) * n_seeds
    # mnli train/dev, xnli dev/test, pawsx and udpos train/dev/test
    assert counts["prepare_task_data"] == 10 and counts["prepare_backbone"] == 1
    assert not any(rule.startswith(("translate", "prepare_translator")) for rule in counts)
    assert counts["total"] == 61  # 60 jobs and `all`
    # the job count the preset's header and the configuration docs state
    assert "Its DAG has 60 jobs" in (repo / CONFIG).read_text()
    assert "Its DAG has 60 jobs (61\nwith `all`)" in (repo / "docs/configuration/index.md").read_text()
    assert "results/xtreme_small/metrics/xlmr_base/zero_shot/mnli/udpos/seed3.json" in out


def test_the_small_preset_fits_one_24_gb_gpu(repo):
    config = config_layers.load([repo / CONFIG])
    plans = memory_plan.plan_config(config)
    assert {p.phase for p in plans} == {"intermediate", "target"}
    assert all(p.fits and p.skipped is None and p.gpus_asked == 1 and p.memory_gb == 24 for p in plans)
