"""XTREME-R as a second benchmark: the paper-scale preset's DAG, config errors, and the
demo-scale XTREME-R grid end to end (all 10 targets, the XTREME-R table)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from conftest import copy_repo, snakemake
from workflow_scripts import benchmark
from workflow_scripts.tasks import get_task

DEMO_CONFIG = "config/xtreme_r_demo.yaml"


def job_counts(out: str) -> dict[str, int]:
    return {line.split()[0]: int(line.split()[1]) for line in out.split("Job stats:")[1].splitlines()[3:]
            if len(line.split()) == 2 and line.split()[1].isdigit()}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


def test_the_xtreme_r_preset_builds_its_grid_offline(repo):
    config = yaml.safe_load((repo / "config/xtreme_r.yaml").read_text())
    proc = snakemake(repo, "-n", "--configfile", "config/xtreme_r.yaml", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    counts = job_counts(out)
    n_inter, n_seeds = len(config["intermediate"]), len(config["seeds"])
    bench = benchmark.XTREME_R
    assert config["targets"] == list(bench.targets) and n_inter == 22 and n_seeds == 3
    # every target in its full XTREME-R language list
    assert all(config["tasks"][t]["languages"] == sorted(bench.languages[t]) for t in bench.targets)
    trained = [t for t in config["targets"] if get_task(t).trains]
    assert len(trained) == 9  # all but Tatoeba
    assert counts["evaluate_target"] == n_inter * 10 * n_seeds
    assert counts["train_target"] == n_inter * len(trained) * n_seeds
    assert counts["train_target_stage"] == n_inter * n_seeds  # XCOPA's SIQA stage
    assert counts["train_intermediate"] == (n_inter - 1) * n_seeds
    # XCOPA trains from its SIQA stage; Tatoeba embeds with the run's SQuAD-trained XQuAD model
    assert "results/target/xlmr_large/mnli/xcopa/stages/siqa/seed2/model" in out
    assert "results/submission/xlmr_large/xtreme_r" in out


def write_config(repo: Path, name: str, edit) -> str:
    config = yaml.safe_load((repo / DEMO_CONFIG).read_text())
    edit(config)
    (repo / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return f"{name}.yaml"


@pytest.mark.parametrize("name, edit, message", [
    ("xtreme_target", lambda c: c.update(targets=c["targets"] + ["pawsx"]),
     "targets[10]: 'pawsx' is not a XTREME-R target"),
    ("tatoeba_without_xquad", lambda c: c.update(targets=[t for t in c["targets"] if t != "xquad"]),
     "retrieval.encoders.tatoeba: tatoeba embeds with the model of target 'xquad'"),
    ("stage_of_another_format", lambda c: c["tasks"]["xcopa"].update(stages=["mnli"]),
     "tasks.xcopa.stages[0]: a stage must be a multiple_choice task"),
    ("setting_on_a_ranking_target", lambda c: c.update(transfer={"settings": {
        "zero_shot": {}, "translate_train": {"targets": ["mewslix"]}}}),
     "translate_train does not apply to mewslix: mewslix trains on English data only"),
])
def test_an_impossible_xtreme_r_config_stops_before_any_job(repo, name, edit, message):
    proc = snakemake(repo, "-n", "--configfile", write_config(repo, name, edit), timeout=300)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_switching_xcopa_stages_off_trains_it_from_the_intermediate_encoder(repo):
    proc = snakemake(repo, "-n", "--configfile",
                     write_config(repo, "no_stages", lambda c: c["tasks"]["xcopa"].update(stages=[])), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train_target_stage" not in job_counts(proc.stdout + proc.stderr)
