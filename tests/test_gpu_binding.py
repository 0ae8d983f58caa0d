"""Every GPU of a workstation (workflow_scripts/workflow/gpu_binding.py, bind_gpus.sh): under
``snakemake --resources gpu=G`` each GPU job sees devices of its own, and no device serves two
jobs at once, simulated on a CPU with jobs that record what they were given."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_scripts.workflow import gpu_binding, gpu_sharing

REPO = Path(__file__).resolve().parent.parent

# Jobs that record the devices they see and when they ran; one takes two GPUs, one none.
SNAKEFILE = """
import sys
sys.path.insert(0, {repo!r})
from workflow_scripts.workflow import gpu_binding, gpu_sharing
shell.prefix("set -euo pipefail;" + gpu_binding.shell_prefix(gpu_binding.run_devices(gpu_binding.granted_gpus(workflow))))
RECORD = "python3 -c 'import os, time; s = time.time(); time.sleep(0.6); print(os.environ[\\"CUDA_VISIBLE_DEVICES\\"], s, time.time())'"
rule all:
    input: expand("one/{{i}}.txt", i=range(6)), "two.txt", "none.txt"
rule one:
    output: "one/{{i}}.txt"
    resources: gpu=1
    shell: "bind_gpus {{resources.gpu}}; " + RECORD + " > {{output}}"
use rule one as two with:
    output: "two.txt"
    resources: gpu=2
rule none:
    output: "none.txt"
    resources: gpu=0
    shell: "bind_gpus {{resources.gpu}}; echo \\"[$CUDA_VISIBLE_DEVICES] $CUBLAS_WORKSPACE_CONFIG\\" > {{output}}"
"""


def _run(workdir: Path, *extra: str, env: dict[str, str] | None = None) -> list[tuple[set[str], float, float]]:
    (workdir / "Snakefile").write_text(SNAKEFILE.format(repo=str(REPO)))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "4", "-q", *extra],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **{k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"},
            "TMPDIR": str(workdir),
            **(env or {}),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = []
    for path in sorted(workdir.glob("one/*.txt")) + [workdir / "two.txt"]:
        devices, start, end = path.read_text().split()
        runs.append((set(devices.split(",")), float(start), float(end)))
    # a job that takes no GPU sees none; every job has cuBLAS's deterministic workspace
    assert (workdir / "none.txt").read_text().split() == ["[]", gpu_binding.CUBLAS_WORKSPACE]
    return runs


def _assert_never_shared(runs: list[tuple[set[str], float, float]]) -> None:
    for k, (mine, start, end) in enumerate(runs):
        for theirs, other_start, other_end in runs[k + 1 :]:
            if start < other_end and other_start < end:  # ran at the same time
                assert not mine & theirs, (mine, theirs)


@pytest.mark.integration
def test_each_job_gets_gpus_of_its_own_under_resources_gpu_2(tmp_path):
    runs = _run(tmp_path, "--resources", "gpu=2")
    assert [len(devices) for devices, _, _ in runs] == [1] * 6 + [2]
    assert set().union(*(devices for devices, _, _ in runs)) == {"0", "1"}
    _assert_never_shared(runs)
    # the two GPUs were used side by side, not one after the other
    ones = runs[:6]
    assert any(a[1] < b[2] and b[1] < a[2] for a in ones for b in ones if a is not b)


@pytest.mark.integration
def test_a_gpu_held_by_another_run_is_left_alone_and_the_listed_devices_are_used(tmp_path):
    """CUDA_VISIBLE_DEVICES=5,7 at the start: the run's devices are 5 and 7. Another run on the
    machine holds 5: every job takes 7, one at a time (the two-GPU job waits until 5 frees)."""
    locks = gpu_binding.lock_dir_for(tmp_path)
    locks.mkdir(parents=True)
    with open(locks / "gpu-5.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        release = subprocess.Popen(["sleep", "6"])  # the other run ends while this one goes on
        try:
            (tmp_path / "Snakefile").write_text(SNAKEFILE.format(repo=str(REPO)))
            proc = subprocess.Popen(
                [sys.executable, "-m", "snakemake", "--cores", "4", "-q", "--resources", "gpu=2"],
                cwd=tmp_path,
                env={**os.environ, "TMPDIR": str(tmp_path), "CUDA_VISIBLE_DEVICES": "5,7"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            release.wait()
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert (tmp_path / "none.txt").read_text().split()[0] == "[]"
    assert "waiting for" in stderr
    ones = [set((tmp_path / f"one/{i}.txt").read_text().split()[0].split(",")) for i in range(6)]
    assert all(devices <= {"5", "7"} for devices in ones)
    assert (tmp_path / "two.txt").read_text().split()[0] == "5,7"


@pytest.mark.unit
def test_the_run_devices_come_from_the_gpu_resource_and_the_visible_devices():
    assert gpu_binding.run_devices(None, {}) == []
    assert gpu_binding.run_devices(3, {}) == ["0", "1", "2"]
    assert gpu_binding.run_devices(2, {"CUDA_VISIBLE_DEVICES": "4,6,7"}) == ["4", "6"]
    with pytest.raises(gpu_binding.GpuBindingError, match=r"--resources gpu=3, but CUDA_VISIBLE_DEVICES='1' lists 1"):
        gpu_binding.run_devices(3, {"CUDA_VISIBLE_DEVICES": "1"})


@pytest.mark.unit
def test_every_rule_with_a_gpu_resource_binds_its_gpus_first():
    """A GPU rule whose command did not start with bind_gpus would run on whatever it found."""
    found = 0
    for path in sorted((REPO / "rules").glob("*.smk")):
        blocks = re.split(r"\n(?=(?:rule|use rule|checkpoint) )", path.read_text())
        for block in blocks:
            if not re.search(r"^\s+\*\*gpu_resources\(", block, re.M) or "\n    shell:" not in block:
                continue
            command = re.search(r"\n    shell:\n(?:\s*#.*\n)*\s*f?\"(.*)", block).group(1)
            # a rule whose jobs may share a GPU passes its slots too (gpu_sharing.py)
            name = re.match(r"(?:use )?rule (\w+)", block.strip()).group(1)
            slots = r" \{\{?resources\.gpu_slots\}\}?" if name in gpu_sharing.SHAREABLE_RULES else ""
            assert re.match(r"bind_gpus \{\{?resources\.gpu\}\}?" + slots + "; ", command), (path.name, name)
            found += 1
    assert found == 10  # training (2), evaluation, translation (4), image embedding, probes, prompted
