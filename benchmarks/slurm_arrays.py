"""Slurm job arrays against one sbatch per job, on the throwaway single-node test cluster
(tests/slurm_cluster.py): the demo's evaluations (and what follows them) rerun under
`snakemake --profile slurm`, once as the profile submits them and once with the executor
plugin's arrays for evaluate_target (`--slurm-array-jobs evaluate_target`), interleaved.

It prints, per mode: the wall time of the run, the sbatch submissions (Slurm job ids, an
array counting once) and the Slurm jobs they ran, and the time limits the evaluation jobs
asked for (an array asks for its first job's).

    sudo .venv/bin/python benchmarks/slurm_arrays.py [--repeats 1]

Needs root and the Debian packages the Slurm test needs (tests/slurm_cluster.py); it first
runs the demo locally (about five minutes on two cores) so that only the evaluations run
under Slurm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import copy_repo, workflow_env  # noqa: E402 (the tests' helpers, after the path)
from slurm_cluster import Cluster, unavailable_reason  # noqa: E402

MODES = {"one sbatch per job": [], "arrays for evaluate_target": ["--slurm-array-jobs", "evaluate_target"]}


def snakemake(workdir: Path, env: dict[str, str], *args: str) -> float:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=workdir, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return time.monotonic() - started


def slurm_jobs(cluster: Cluster, since: str) -> list[tuple[str, str, str]]:
    """(job id, job name, time limit) of every job submitted since ``since``."""
    out = cluster.run("sacct", "-X", "-n", "-P", "-S", since, "--format=JobID,JobName%60,Timelimit", check=True).stdout
    return [tuple(line.split("|")) for line in out.splitlines() if line.strip()]  # type: ignore[misc]


def run_mode(cluster: Cluster, workdir: Path, mode: str) -> dict[str, object]:
    env = {**workflow_env(cluster.env)}
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    time.sleep(1.1)
    seconds = snakemake(
        workdir,
        env,
        "--profile",
        "slurm",
        "--forcerun",
        "evaluate_target",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--seconds-between-status-checks",
        "2",
        *MODES[mode],
    )
    jobs = slurm_jobs(cluster, since)
    submissions = {job_id.split("_")[0] for job_id, _, _ in jobs}
    limits = sorted({limit for _, _, limit in jobs})
    return {"seconds": seconds, "submissions": len(submissions), "slurm_jobs": len(jobs), "limits": limits}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"slurm_arrays: {reason}")
    with tempfile.TemporaryDirectory(prefix="xstilts-arrays-") as tmp:
        workdir = copy_repo(Path(tmp) / "repo")
        print("slurm_arrays: the demo, locally, once ...", flush=True)
        local = snakemake(workdir, workflow_env(), "--cores", str(os.cpu_count() or 2))
        print(f"slurm_arrays: local demo {local:.0f} s", flush=True)
        cluster = Cluster(Path(tmp) / "cluster").start()
        results: dict[str, list[dict[str, object]]] = {mode: [] for mode in MODES}
        try:
            for repeat in range(args.repeats):
                for mode in MODES if repeat % 2 == 0 else reversed(list(MODES)):
                    found = run_mode(cluster, workdir, mode)
                    results[mode].append(found)
                    print(f"slurm_arrays: {mode}, run {repeat + 1}: {found}", flush=True)
        finally:
            cluster.stop()
    cpus = os.cpu_count()
    print(f"\nsingle-node test cluster, {cpus} CPUs; the demo's evaluations under --profile slurm")
    print(f"{'mode':<28} {'wall s (median)':>16} {'submissions':>12} {'Slurm jobs':>11}  time limits asked")
    base = statistics.median(r["seconds"] for r in results["one sbatch per job"])  # type: ignore[misc]
    for mode, runs in results.items():
        wall = statistics.median(r["seconds"] for r in runs)  # type: ignore[misc]
        print(
            f"{mode:<28} {wall:>16.1f} {runs[-1]['submissions']:>12} {runs[-1]['slurm_jobs']:>11}  "
            f"{', '.join(runs[-1]['limits'])}  ({wall / base:.2f}x the wall time)"  # type: ignore[arg-type]
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
