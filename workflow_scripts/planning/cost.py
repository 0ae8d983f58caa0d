"""What a run cost, per rule family, from Snakemake's ``benchmark:`` records.

Every rule that does real work writes ``results/<experiment>/benchmarks/<rule>/....tsv`` (wall seconds,
peak memory, CPU time of its last attempt). This module sums them per rule: jobs, wall
hours, mean minutes per job, peak resident memory, and the GPU-hours and CPU-hours the jobs
held (wall time x the GPUs and threads the config requests for that rule).

``plan`` answers the question before a run: from a Snakemake dry run of a config, every job
that requests a GPU with its estimated GPU-hours (job_estimates.py: the FLOPs of its work at
a measured MFU, or the rule's ``expected_runtime``), the time limit it asks Slurm for and the
allocations it needs; per rule and per backbone, each figure with its basis. A job the cost
model cannot estimate is counted at its time limit, an upper bound, and says so.

CLI: ``python -m workflow_scripts.planning.cost measured --benchmarks DIR --resources JSON --md F --csv F``
and ``python -m workflow_scripts.planning.cost plan --configfile FILE``.
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


def dry_run_jobs(configfiles: str | Sequence[str], workdir: Path, profile: str | None = None) -> list[dict[str, Any]]:
    """Every job of the whole DAG of a config (``snakemake --dry-run --forceall``, under
    ``profile`` if given): its rule, threads, resources as Snakemake resolved them, and
    wildcards."""
    files = [configfiles] if isinstance(configfiles, str) else list(configfiles)
    cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--forceall", "--cores", "1"]
    if profile:
        cmd += ["--profile", profile]
    for file in files:
        cmd += ["--configfile", file]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InputError(f"dry run of {' '.join(files) or 'config.yaml'} failed:\n{proc.stderr[-2000:]}")
    jobs = parse_dry_run(proc.stdout + proc.stderr)
    if not jobs:
        raise InputError(f"no jobs in the dry run of {' '.join(files) or 'config.yaml'}")
    return jobs


def parse_dry_run(text: str) -> list[dict[str, Any]]:
    """The jobs a dry run's output lists (all but ``all``): rule, threads, the numeric
    resources (GPUs counted over a job's nodes), wildcards."""
    jobs: list[dict[str, Any]] = []
    for line in text.splitlines():
        if m := re.fullmatch(r"(?:local)?rule (\w+):", line.strip()):
            jobs.append({"rule": m.group(1), "threads": 1, "wildcards": {}})
        elif jobs and (m := re.fullmatch(r"threads: (\d+)", line.strip())):
            jobs[-1]["threads"] = int(m.group(1))
        elif jobs and line.strip().startswith("resources: "):
            pairs = dict(item.split("=", 1) for item in line.strip()[len("resources: ") :].split(", ") if "=" in item)
            jobs[-1].update({k: float(v) for k, v in pairs.items() if re.fullmatch(r"[\d.]+", v)})
            if m := re.fullmatch(r"gpu:(\d+)", pairs.get("gres", "")):  # a job of several nodes asks per node
                jobs[-1]["gpu"] = float(m.group(1)) * float(pairs.get("nodes", 1))
        elif jobs and line.strip().startswith("wildcards: "):
            pairs = (item.split("=", 1) for item in line.strip()[len("wildcards: ") :].split(", ") if "=" in item)
            jobs[-1]["wildcards"] = dict(pairs)
    return [j for j in jobs if j["rule"] != "all"]


def estimate_jobs(config: dict[str, Any], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU jobs of a dry run, each with its estimate (job_estimates.job_time): GPU-hours,
    wall minutes, the time limit asked, allocations, and the basis of the figure."""
    from workflow_scripts.planning import job_estimates
    from workflow_scripts.workflow import gpu_sharing

    out = []
    for job in jobs:
        resources_rule = job_estimates.resources_rule(job["rule"])
        wildcards = job.get("wildcards", {})
        # a job the dry run shares k ways (gpu_sharing.py: its `gpu` is then 0) is charged
        # 1/k of a GPU's time
        shared = int(job.get("gpu_share", 1) or 1)
        share = gpu_sharing.job_share(config, resources_rule, wildcards) if shared > 1 else None
        gpus = float(job.get("gpu", 0) or 0) or (1.0 if shared > 1 else 0.0)
        if gpus <= 0:
            continue  # CPU-only jobs cost no GPU time
        time = job_estimates.job_time(config, job["rule"], wildcards, resources_rule)
        limit = float(job.get("runtime", time.runtime))
        minutes = time.minutes if time.minutes is not None else limit  # no estimate: an upper bound
        basis = time.basis + (f"; shared {shared} to a GPU ({share.reason})" if shared > 1 else "")
        out.append(
            {
                "rule": job["rule"],
                "backbone": wildcards.get("backbone", ""),
                "gpus_per_job": gpus / shared,
                "gpu_h": minutes * gpus / shared / 60,
                "minutes": minutes,
                "runtime_limit_min": limit,
                "allocations": time.allocations,
                "estimated": time.minutes is not None,
                "basis": basis,
            }
        )
    return out


def plan_table(estimated: list[dict[str, Any]]):
    """Per rule: jobs, GPUs per job, estimated GPU-hours, mean minutes per job, the time limits
    asked, the most allocations of a job, and the basis: the cost model's, or the time limit
    (an upper bound) where jobs have no estimate."""
    import pandas as pd

    if not estimated:
        raise InputError("no job of this config requests a GPU")
    frame = pd.DataFrame(estimated)
    rows = []
    for rule, group in frame.groupby("rule", sort=True):
        unestimated = int((~group["estimated"]).sum())
        rows.append(
            {
                "rule": rule,
                "jobs": len(group),
                "gpus_per_job": _range(group["gpus_per_job"]),
                "gpu_h": float(group["gpu_h"].sum()),
                "mean_min_per_job": float(group["minutes"].mean()),
                "limit_min": _range(group["runtime_limit_min"]),
                "max_allocations": int(group["allocations"].max()),
                "gpu_h_basis": "estimate" if not unestimated else f"time limit, an upper bound ({unestimated} jobs)",
            }
        )
    table = pd.DataFrame(rows)
    total = {"rule": "total", "jobs": table["jobs"].sum(), "gpu_h": table["gpu_h"].sum(), "gpu_h_basis": ""}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


# The stage of the grid each GPU rule belongs to, for the per-backbone view.
STAGES = {
    "train_intermediate": "intermediate",
    "train_target": "target",
    "train_target_stage": "target",
    "train_target_sweep_point": "target",
    "train_few_shot_candidate": "target",
    "translate_task_data": "translation",
    "translate_test_data": "translation",
    "score_translation_quality": "translation",
    "score_translation_quality_to_english": "translation",
    "evaluate_target": "evaluation",
    "evaluate_prompted": "evaluation",
    "probe_retention": "retention probes",
    "probe_retention_before": "retention probes",
    "probe_retention_target": "retention probes",
}


def backbone_table(estimated: list[dict[str, Any]]):
    """GPU-hours per backbone and stage of the grid (jobs without a backbone: their rule)."""
    import pandas as pd

    frame = pd.DataFrame(estimated)
    frame["backbone"] = frame["backbone"].where(frame["backbone"] != "", "(no backbone)")
    frame["stage"] = frame["rule"].map(STAGES).fillna(frame["rule"])
    table = frame.pivot_table(index="backbone", columns="stage", values="gpu_h", aggfunc="sum", fill_value=0.0)
    table["total"] = table.sum(axis=1)
    table.loc["total"] = table.sum(axis=0)
    return table.reset_index().rename_axis(columns=None)


def _range(values) -> str:
    """min-max of a column, whole numbers as such (a shared job's GPUs: 0.25)."""
    low, high = (f"{float(v):g}" for v in (values.min(), values.max()))
    return low if low == high else f"{low}-{high}"


def bases_table(estimated: list[dict[str, Any]]):
    """Each throughput figure the estimates used (a measured MFU row on a GPU kind's peak, the
    config's MFU, the default) or the other basis of a job (expected_runtime, no estimate),
    with the jobs that used it."""
    import pandas as pd

    counts: dict[str, int] = {}
    for job in estimated:
        for basis in job["basis"].split("; "):
            counts[basis] = counts.get(basis, 0) + 1
    rows = [{"basis": basis, "jobs": jobs} for basis, jobs in counts.items()]
    return pd.DataFrame(rows).sort_values(["jobs", "basis"], ascending=[False, True], ignore_index=True)


def cut_off_jobs(estimated: list[dict[str, Any]]) -> list[str]:
    """Rules whose jobs need more than one allocation but cannot continue in another (all but
    training): they would hit their time limit. One line per rule and backbone."""
    from workflow_scripts.planning import job_estimates

    found = {}
    for job in estimated:
        if job["allocations"] > 1 and job["rule"] not in job_estimates.TRAINING_RULES:
            key = (job["rule"], job["backbone"])
            found[key] = max(found.get(key, 0.0), job["minutes"])
    return [
        f"- {rule} of {backbone or 'its task'}: up to {minutes:.0f} min estimated, over its time limit "
        f"(resources.{job_estimates.resources_rule(rule)}.runtime); give it more time or GPUs"
        for (rule, backbone), minutes in sorted(found.items())
    ]


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


def _write(table, md: Path | None, csv: Path | None, document: str) -> None:
    if csv is not None:
        with atomic_path(csv) as tmp:
            table.to_csv(tmp, index=False)
    if md is not None:
        with atomic_path(md) as tmp:
            tmp.write_text(document + "\n")


def plan_report(configfile: str) -> tuple[Any, str]:
    """The plan of a config as one markdown document: per rule, per backbone, the bases, and
    the cost settings and measured tables behind them."""
    from workflow_scripts.planning import job_cost, job_estimates
    from workflow_scripts.spec.basics import repo_path
    from workflow_scripts.workflow import config_check, config_layers

    config = config_layers.load([configfile])
    config_check.check(config, [configfile], [str(repo_path(d)) for d in config.get("task_catalogues", [])])
    estimated = estimate_jobs(config, dry_run_jobs(configfile, Path.cwd()))
    by_rule = plan_table(estimated)
    cost = job_estimates.cost_settings(config)
    sections = [
        f"GPU-hours per backbone and stage\n\n{to_markdown(backbone_table(estimated))}",
        f"Where the figures come from\n\n{to_markdown(bases_table(estimated))}",
        "Cost settings: GPU "
        + f"{cost['gpu']}, time limit = estimate x {cost['safety_factor']} + {cost['floor_minutes']} min, "
        + "at most resources.<rule>.runtime. Measured MFU tables: "
        + ("; ".join(job_cost.table_sources()) or "none"),
    ]
    if cut := cut_off_jobs(estimated):
        sections.append(
            "Jobs that would not finish in one allocation and cannot continue in another\n\n" + "\n".join(cut)
        )
    title = (
        f"Planned GPU cost of {configfile}: estimated GPU-hours per rule (job_estimates.py), the time limits "
        "the jobs ask for and the allocations a training job needs"
    )
    return by_rule, title + "\n\n" + to_markdown(by_rule) + "\n\n" + "\n\n".join(sections)


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
            document = f"{title}\n\n{to_markdown(table)}"
        else:
            table, document = plan_report(args.configfile)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    _write(table, args.md, args.csv, document)
    if args.md is None and args.csv is None:
        print(document)


if __name__ == "__main__":
    main()
