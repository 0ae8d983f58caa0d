"""What a run cost, per rule family, from Snakemake's ``benchmark:`` records.

Every rule that does real work writes ``results/<experiment>/benchmarks/<rule>/....tsv`` (wall seconds,
peak memory, CPU time of its last attempt). This module sums them per rule: jobs, wall
hours, mean minutes per job, peak resident memory, and the GPU-hours and CPU-hours the jobs
held (wall time x the GPUs and threads the config requests for that rule).

``plan`` answers the question before a run: from a Snakemake dry run of a config, the jobs
per rule that requests a GPU and their GPU-hours at the config's ``expected_runtime`` where
it gives one (an estimate), else at the rule's time limit (an upper bound).

CLI: ``python -m workflow_scripts.workflow.cost measured --benchmarks DIR --resources JSON --md F --csv F``
and ``python -m workflow_scripts.workflow.cost plan --configfile FILE``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path, setup_logging
from workflow_scripts.spec.basics import InputError

COLUMNS = ["rule", "jobs", "wall_h", "mean_min_per_job", "max_rss_gb", "gpus_per_job", "gpu_h", "cpu_h"]


def read_records(root: Path) -> list[dict[str, Any]]:
    """One record per benchmark file: its rule (first directory under root, or the file
    name for rules without wildcards), wall seconds and peak RSS (MB; NaN when Snakemake
    could not sample a very short job)."""
    import pandas as pd

    records = []
    for path in sorted(root.rglob("*.tsv")):
        rel = path.relative_to(root)
        rule = rel.parts[0] if len(rel.parts) > 1 else path.stem
        try:
            table = pd.read_csv(path, sep="\t", na_values=["NA", "-"])
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise InputError(f"benchmark record {path} is not a Snakemake benchmark table: {err}") from None
        if "s" not in table.columns or table.empty:
            raise InputError(f"benchmark record {path} has no 's' column (wall seconds)")
        row = table.iloc[-1]  # repeated benchmarks: the last repeat
        records.append({"rule": rule, "s": float(row["s"]), "max_rss": float(row.get("max_rss", math.nan))})
    return records


def measured_table(records: list[dict[str, Any]], resources: dict[str, dict[str, Any]]):
    import pandas as pd

    if not records:
        raise InputError("no benchmark records to summarise")
    frame = pd.DataFrame(records)
    rows = []
    for rule, group in frame.groupby("rule", sort=True):
        res = resources.get(rule, {})
        gpus, threads = float(res.get("gpu", 0) or 0), float(res.get("threads", 1) or 1)
        wall_h = group["s"].sum() / 3600
        rows.append(
            {
                "rule": rule,
                "jobs": len(group),
                "wall_h": wall_h,
                "mean_min_per_job": group["s"].mean() / 60,
                "max_rss_gb": group["max_rss"].max() / 1024 if group["max_rss"].notna().any() else math.nan,
                "gpus_per_job": gpus,
                "gpu_h": wall_h * gpus,
                "cpu_h": wall_h * threads,
            }
        )
    table = pd.DataFrame(rows, columns=COLUMNS)
    total = {
        "rule": "total",
        "jobs": table["jobs"].sum(),
        "wall_h": table["wall_h"].sum(),
        "mean_min_per_job": math.nan,
        "max_rss_gb": table["max_rss_gb"].max(),
        "gpus_per_job": math.nan,
        "gpu_h": table["gpu_h"].sum(),
        "cpu_h": table["cpu_h"].sum(),
    }
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


def dry_run_jobs(configfiles: str | Sequence[str], workdir: Path) -> list[dict[str, Any]]:
    """Every job of the whole DAG of a config (``snakemake --dry-run --forceall``): its rule,
    threads and resources as Snakemake resolved them."""
    files = [configfiles] if isinstance(configfiles, str) else list(configfiles)
    cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--forceall", "--cores", "1"]
    for file in files:
        cmd += ["--configfile", file]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InputError(f"dry run of {' '.join(files) or 'config.yaml'} failed:\n{proc.stderr[-2000:]}")
    jobs: list[dict[str, Any]] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        if m := re.fullmatch(r"(?:local)?rule (\w+):", line.strip()):
            jobs.append({"rule": m.group(1), "threads": 1})
        elif jobs and (m := re.fullmatch(r"threads: (\d+)", line.strip())):
            jobs[-1]["threads"] = int(m.group(1))
        elif jobs and line.strip().startswith("resources: "):
            pairs = (item.split("=", 1) for item in line.strip()[len("resources: ") :].split(", ") if "=" in item)
            jobs[-1].update({k: float(v) for k, v in pairs if re.fullmatch(r"[\d.]+", v)})
    jobs = [j for j in jobs if j["rule"] != "all"]
    if not jobs:
        raise InputError(f"no jobs in the dry run of {' '.join(files) or 'config.yaml'}")
    return jobs


def plan_table(jobs: list[dict[str, Any]], expected: dict[str, float]):
    """Per rule: jobs, GPUs per job, the time limit, the config's expected_runtime, and the
    GPU-hours at expected_runtime where the config gives one, else at the time limit (an
    upper bound for that rule)."""
    import pandas as pd

    frame = pd.DataFrame(jobs)
    for column in ("gpu", "runtime"):
        if column not in frame:
            frame[column] = 0.0
    frame = frame.fillna({"gpu": 0.0, "runtime": 0.0})
    rows = []
    for rule, group in frame.groupby("rule", sort=True):
        minutes = expected.get(rule)
        per_job = minutes if minutes else group["runtime"]
        rows.append(
            {
                "rule": rule,
                "jobs": len(group),
                "gpus_per_job": group["gpu"].max(),
                "runtime_limit_min": group["runtime"].max(),
                "expected_runtime_min": minutes or math.nan,
                "gpu_h": float((group["gpu"] * per_job).sum() / 60),
                "gpu_h_basis": "expected_runtime" if minutes else "time limit (upper bound)",
            }
        )
    table = pd.DataFrame(rows)
    table = table[(table["gpu_h"] > 0)]  # CPU-only rules cost no GPU time
    total = {"rule": "total", "jobs": table["jobs"].sum(), "gpu_h": table["gpu_h"].sum(), "gpu_h_basis": ""}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if float(value).is_integer():
        return str(int(value))
    return f"{float(value):.3g}"  # a demo's jobs take hundredths of an hour


def to_markdown(table) -> str:
    """Whole numbers as integers, others to three significant digits, missing values blank."""
    return table.map(_cell).to_markdown(index=False)


def _write(table, md: Path | None, csv: Path | None, title: str) -> None:
    if csv is not None:
        with atomic_path(csv) as tmp:
            table.to_csv(tmp, index=False)
    if md is not None:
        with atomic_path(md) as tmp:
            tmp.write_text(f"{title}\n\n{to_markdown(table)}\n")


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Cost per rule family: measured from benchmark records, or planned.")
    sub = ap.add_subparsers(dest="command", required=True)
    measured = sub.add_parser("measured", help="summarise results/<experiment>/benchmarks/ of a run")
    measured.add_argument("--benchmarks", required=True, type=Path)
    measured.add_argument("--resources", required=True, help="JSON: rule -> its resources (gpu, threads)")
    plan = sub.add_parser("plan", help="jobs and requested GPU-hours of a config's DAG (dry run)")
    plan.add_argument("--configfile", required=True)
    for p in (measured, plan):
        p.add_argument("--md", type=Path)
        p.add_argument("--csv", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.command == "measured":
            table = measured_table(read_records(args.benchmarks), json.loads(args.resources))
            title = (
                "Cost per rule family, measured (Snakemake benchmark records; GPU-hours = wall time x GPUs "
                "requested; a retried job counts its last attempt)"
            )
        else:
            from workflow_scripts.workflow import config_layers

            config = config_layers.load([args.configfile])
            expected = {
                rule: float(res["expected_runtime"])
                for rule, res in config.get("resources", {}).items()
                if isinstance(res, dict) and res.get("expected_runtime")
            }
            table = plan_table(dry_run_jobs(args.configfile, Path.cwd()), expected)
            title = (
                f"Planned GPU cost of {args.configfile} (rules that request a GPU): GPU-hours at the config's "
                "expected_runtime where it gives one (an estimate), else at the time limit (an upper bound)"
            )
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    _write(table, args.md, args.csv, title)
    if args.md is None and args.csv is None:
        print(f"{title}\n\n{to_markdown(table)}")


if __name__ == "__main__":
    main()
