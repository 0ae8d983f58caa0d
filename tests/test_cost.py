"""The cost tables: measured from Snakemake benchmark records, planned from a dry run."""

from pathlib import Path

import pytest

from workflow_scripts.planning.cost import (
    backbone_table,
    bases_table,
    cut_off_jobs,
    dry_run_jobs,
    measured_table,
    plan_table,
    read_records,
)
from workflow_scripts.spec.basics import InputError

REPO = Path(__file__).resolve().parent.parent
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def record(path: Path, seconds: float, rss: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:01\t{rss}\t1\t1\t1\t0\t0\t50\t1\n")


@pytest.mark.unit
def test_measured_cost_sums_records_per_rule_with_requested_gpus(tmp_path):
    record(tmp_path / "train_target/xnli/seed1.tsv", 3600, "2048")
    record(tmp_path / "train_target/xnli/seed2.tsv", 1800, "NA")  # too short for Snakemake to sample memory
    record(tmp_path / "prepare_task_data/xnli/train.tsv", 60, "512")
    record(tmp_path / "aggregate_tables.tsv", 6, "100")
    resources = {"train_target": {"gpu": 1, "threads": 8}, "prepare_task_data": {"gpu": 0, "threads": 1}}
    table = measured_table(read_records(tmp_path), resources).set_index("rule")
    assert table.loc["train_target", "jobs"] == 2
    assert table.loc["train_target", "gpu_h"] == pytest.approx(1.5)
    assert table.loc["train_target", "cpu_h"] == pytest.approx(12.0)
    assert table.loc["train_target", "max_rss_gb"] == pytest.approx(2.0)
    assert table.loc["prepare_task_data", "gpu_h"] == 0 and table.loc["aggregate_tables", "jobs"] == 1
    assert table.loc["total", "gpu_h"] == pytest.approx(1.5) and table.loc["total", "jobs"] == 4


@pytest.mark.unit
def test_a_broken_benchmark_record_is_named(tmp_path):
    (tmp_path / "evaluate_target").mkdir()
    (tmp_path / "evaluate_target" / "bad.tsv").write_text("seconds\n")
    with pytest.raises(InputError, match="bad.tsv"):
        read_records(tmp_path)
    with pytest.raises(InputError, match="no benchmark records"):
        measured_table([], {})


@pytest.mark.unit
def test_the_plan_sums_estimates_and_counts_jobs_without_one_at_their_time_limit():
    def job(rule, backbone, gpu_h, estimated=True, allocations=1, limit=60.0):
        basis = "MFU 0.3 measured on H200" if estimated else f"no estimate: resources.{rule}.runtime"
        return {"rule": rule, "backbone": backbone, "gpus_per_job": 1.0, "gpu_h": gpu_h, "minutes": gpu_h * 60,
                "runtime_limit_min": limit, "allocations": allocations, "estimated": estimated, "basis": basis}  # fmt: skip

    estimated = [job("train_target", "small", 0.5), job("train_target", "big", 3.0, allocations=2, limit=240.0)]
    estimated += [job("evaluate_target", "big", 5.0, allocations=3), job("evaluate_prompted", "big", 4.0, False)]
    table = plan_table(estimated).set_index("rule")
    assert table.loc["train_target", "gpu_h"] == pytest.approx(3.5)
    assert table.loc["train_target", "limit_min"] == "60-240" and table.loc["train_target", "max_allocations"] == 2
    assert table.loc["train_target", "gpu_h_basis"] == "estimate"
    assert table.loc["evaluate_prompted", "gpu_h_basis"] == "time limit, an upper bound (1 jobs)"
    assert table.loc["total", "gpu_h"] == pytest.approx(12.5)
    per_backbone = backbone_table(estimated).set_index("backbone")
    assert per_backbone.loc["big", "target"] == pytest.approx(3.0)
    assert per_backbone.loc["big", "evaluation"] == pytest.approx(9.0)
    assert per_backbone.loc["total", "total"] == pytest.approx(12.5)
    bases = bases_table(estimated).set_index("basis")["jobs"]
    assert bases["MFU 0.3 measured on H200"] == 3
    # an evaluation cannot continue in a second allocation: the plan says so
    (line,) = cut_off_jobs(estimated)
    assert line.startswith("- evaluate_target of big") and "resources.evaluate_target.runtime" in line


@pytest.mark.integration
def test_plan_reads_the_paper_preset_dag():
    jobs = dry_run_jobs("config/paper.yaml", REPO)
    rules = {j["rule"] for j in jobs}
    assert {"train_target", "train_intermediate", "evaluate_target", "translate_task_data"} <= rules
    trainings = [j for j in jobs if j["rule"] == "train_target"]
    assert trainings and all(j["gpu"] == 1 and j["runtime"] > 0 for j in trainings)
    assert all(set(j["wildcards"]) >= {"backbone", "target", "recipe", "seed"} for j in trainings)
