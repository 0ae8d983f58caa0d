"""Every job each preset plans, as Snakemake's dry run prints it: rule, wildcards, inputs,
outputs, log, benchmark, resources and the shell command (where the settings JSON is), one
block per job, sorted. Two checkouts whose listings are equal plan the same jobs with the
same commands: a refactor of how settings are built reruns nothing but what its code hashes
name.

    python benchmarks/job_listing.py OUT_DIR [PRESET ...]

writes OUT_DIR/<preset>.txt for config.yaml and every config/*.yaml (or the presets named);
`diff -r` two such folders.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Lines that differ between two dry runs of one DAG: the time, the job's number, why it runs.
VOLATILE = re.compile(
    r"^\s*(\[.*\d{4}\]|jobid:|reason:|Date:|Workflow ID:|Command:|Config MD5:|Would remove temporary output)"
)


def presets() -> list[str]:
    return ["config.yaml", *sorted(str(p.relative_to(REPO)) for p in (REPO / "config").glob("*.yaml"))]


def job_blocks(preset: str) -> list[str]:
    """The dry run's job blocks of ``preset``, volatile lines removed, sorted."""
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "-F", "--cores", "1", "--configfile", preset],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        raise SystemExit(f"{preset}: the dry run failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    text = run.stdout.replace(str(REPO), "<checkout>")  # absolute paths of the checkout
    blocks = text.split("\nrule ")[1:]
    cleaned = []
    for block in blocks:
        lines = [line for line in block.splitlines() if line.strip() and not VOLATILE.match(line)]
        cleaned.append("rule " + "\n".join(lines))
    return sorted(cleaned)


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for preset in argv[1:] or presets():
        blocks = job_blocks(preset)
        (out / (Path(preset).stem + ".txt")).write_text("\n\n".join(blocks) + "\n")
        print(f"{preset}: {len(blocks)} jobs")


if __name__ == "__main__":
    main(sys.argv[1:])
