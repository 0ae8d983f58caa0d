"""Measure the README demo from scratch: wall time and peak memory of the whole process tree.

Runs `snakemake --cores 2` on the default config in a scratch copy of the repository and
samples the resident memory of snakemake and all its jobs together. Prints the figures and
their ratios to the targets (10 minutes wall, 4 GiB peak).

    .venv/bin/python benchmarks/demo_footprint.py [--keep-tables DIR]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import copy_repo

TARGET_WALL_S, TARGET_PEAK_BYTES = 600, 4 * 2**30
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text().split()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = int(statm[1]) * PAGE
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def main() -> None:
    import argparse
    import shutil

    ap = argparse.ArgumentParser()
    ap.add_argument("--keep-tables", type=Path, help="copy the run's results/demo/tables/ here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = copy_repo(Path(tmp))
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        started = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--cores", "2"],
            cwd=repo,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.5)
        wall = time.time() - started
        if args.keep_tables and proc.returncode == 0:
            shutil.copytree(repo / "results" / "demo" / "tables", args.keep_tables, dirs_exist_ok=True)
    if proc.returncode:
        raise SystemExit(f"demo failed with exit code {proc.returncode}")
    print(f"demo wall time      {wall:8.1f} s    ratio to 10 min target  {wall / TARGET_WALL_S:.2f}")
    print(f"demo peak memory    {peak / 2**30:8.2f} GiB  ratio to 4 GiB target   {peak / TARGET_PEAK_BYTES:.2f}")


if __name__ == "__main__":
    main()
