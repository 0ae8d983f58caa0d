"""The cost tables: measured from Snakemake benchmark records, planned from a dry run."""

import math
from pathlib import Path

import pytest

from workflow_scripts.spec.basics import InputError
from workflow_scripts.workflow.cost import dry_run_jobs, measured_table, plan_table, read_records

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
def test_plan_uses_expected_runtime_where_given_else_the_time_limit():
    jobs = [{"rule": "train_target", "gpu": 1.0, "runtime": 240.0}] * 3 + [
        {"rule": "evaluate_target", "gpu": 1.0, "runtime": 60.0},
        {"rule": "prepare_task_data", "threads": 1},
    ]
    table = plan_table(jobs, {"train_target": 360.0}).set_index("rule")
    assert table.loc["train_target", "gpu_h"] == pytest.approx(18.0)
    assert table.loc["evaluate_target", "gpu_h"] == pytest.approx(1.0)
    assert "prepare_task_data" not in table.index  # no GPU requested
    assert table.loc["total", "gpu_h"] == pytest.approx(19.0)


@pytest.mark.integration
def test_plan_reads_the_paper_preset_dag():
    jobs = dry_run_jobs("config/paper.yaml", REPO)
    rules = {j["rule"] for j in jobs}
    assert {"train_target", "train_intermediate", "evaluate_target", "translate_task_data"} <= rules
    trainings = [j for j in jobs if j["rule"] == "train_target"]
    assert trainings and all(j["gpu"] == 1 and j["runtime"] > 0 for j in trainings)
    assert not math.isnan(plan_table(jobs, {}).set_index("rule").loc["total", "gpu_h"])
