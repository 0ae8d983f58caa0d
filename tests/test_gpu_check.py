"""`make gpu-check`'s CPU smoke mode: every part of the GPU check runs at tiny shapes on the
CPU, so that the command cannot rot between GPU runs (benchmarks/gpu_check.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HIDDEN_GPUS

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def test_the_cpu_smoke_run_passes_every_part_and_writes_its_summary(tmp_path):
    import os

    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--cpu-smoke", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **HIDDEN_GPUS, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    results = summary["results"]
    assert {name for name in results if name.startswith("throughput")} == {
        "throughput: XLM-R large, full, seq 128",
        "throughput: XLM-R large, full, seq 384",
        "throughput: XLM-R large, full, fp16, seq 128",
        "throughput: XLM-R XL width (4 layers), LoRA",
        "throughput: decoder 7B width (4 layers), LoRA",
        "throughput: decoder 7B width (4 layers), full",
        "throughput: decoder 7B width (4 layers), QLoRA",
        "throughput: XLM-R large, evaluation, seq 128",
        "throughput: XLM-R large, evaluation, seq 384",
        "throughput: decoder 7B width (4 layers), evaluation",
        "throughput: decoder 7B width (4 layers), QLoRA evaluation",
        "throughput: XLM-R large, full, 128 x 32, eager",
        "throughput: XLM-R large, full, 128 x 32, compiled",
        "throughput: decoder 7B width (4 layers), LoRA, 128 x 32, eager",
        "throughput: decoder 7B width (4 layers), LoRA, 128 x 32, compiled",
    }
    assert all(part["ok"] for part in results.values()), {n: p.get("error") for n, p in results.items()}
    full = results["throughput: decoder 7B width (4 layers), full"]["result"]
    assert full["trained_dtypes"] == ["float32"]  # fp32 master weights of a bf16 checkpoint
    qlora = results["throughput: decoder 7B width (4 layers), QLoRA"]["result"]
    assert qlora["tokens_per_s"] > 0 and qlora["planned_gib"] > 0
    evaluation = results["throughput: XLM-R large, evaluation, seq 128"]["result"]
    assert evaluation["mode"] == "inference" and evaluation["trained_dtypes"] == ["float32"]
    assert (
        evaluation["flops_per_token"] < results["throughput: XLM-R large, full, seq 128"]["result"]["flops_per_token"]
    )
    # eager against compiled, each with the ops of one profiled step (the smoke run's compiled
    # rows are traced by aot_eager, which dispatches its decomposed ops one by one: more, not fewer)
    eager = results["throughput: XLM-R large, full, 128 x 32, eager"]["result"]
    with_compiler = results["throughput: XLM-R large, full, 128 x 32, compiled"]["result"]
    assert eager["engine"] == "eager" and with_compiler["engine"] == "compiled"
    assert eager["aten_ops"] > 0 and eager["casts"] > 0 and with_compiler["aten_ops"] > 0
    assert "| XLM-R large, full, 128 x 32, compiled | train | compiled |" in (tmp_path / "summary.md").read_text()
    # No GPU, no peak to measure MFU against: the cost model's table gets no rows from a CPU.
    measured = json.loads((tmp_path / "measured_throughput.json").read_text())
    assert measured["gpu"] is None and measured["rows"] == [] and measured["host_rows"] == []
    resumed = results["sharded resume"]["result"]
    assert resumed["resumed_at_step"] == resumed["stopped_at_step"] >= 5
    assert results["retrieval"]["result"]["same_neighbours"] == 1.0
    markdown = (tmp_path / "summary.md").read_text()
    assert "| throughput: decoder 7B width (4 layers), QLoRA | ok |" in markdown
