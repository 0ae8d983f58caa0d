"""The multimodal comparison's grid (config/multimodal_demo.yaml): SNLI-VE's text-only
controls as intermediate configs beside the baseline and MNLI."""

from __future__ import annotations

from pathlib import Path

from conftest import copy_repo, planned_jobs


def test_the_multimodal_demo_config_plans_both_controls_from_the_same_snli_ve_rows(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    jobs = planned_jobs(repo, "--configfile", "config/multimodal_demo.yaml")
    trained = {Path(out).parts[3] for rule, out in jobs if rule == "train_intermediate"}
    assert trained == {"mnli", "snli_caption", "hypothesis_only"}
    prepared = {out for rule, out in jobs if rule == "prepare_task_data"}
    assert {"results/data/snli_caption/train.parquet", "results/data/hypothesis_only/train.parquet",
            "results/data/snli_caption/dev.parquet", "results/data/hypothesis_only/dev.parquet"} <= prepared
