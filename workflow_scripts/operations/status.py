"""Progress of a running (or the last) Snakemake invocation in a directory: per rule the jobs
done, running, failed and pending, each failed job's log, and an estimate of the time left.

Snakemake 9 writes a main log per invocation, ``.snakemake/log/<timestamp>.snakemake.log``.
The newest one describes the current (or last) invocation; this module reads it:

- ``Job stats:`` the jobs the invocation plans per rule (the total of each row);
- ``rule x:`` / ``localrule x:`` blocks: a job started (locally) or was submitted (Slurm),
  with its ``jobid``, outputs, logs, wildcards, threads and benchmark file;
- ``Finished jobid: N (Rule: x)``: the job is done;
- ``Error in rule x:`` blocks: the job failed, naming its log files (under Slurm also the
  job's Slurm log); ``Trying to restart job N.`` and the job's next block: a retry, so a job
  counts by its latest state;
- ``Job N has been submitted with SLURM jobid J (log: F).``: the Slurm executor's job id;
- ``Provided cores: N`` (local) or ``Provided remote nodes: N`` (the profile's ``jobs:``);
- ``Complete log(s):``: the invocation ended;
- ``Config file(s):``: the config files it was given (named in the view).

Its experiment (``paths.py``: every output under ``results/<experiment>/``, every log under
``logs/<experiment>/``) is read from the paths of its jobs: the main log names no experiment,
and the config files it names may set ``experiment:`` or have changed since. Several configs
may run at once in one checkout; ``--experiment NAME`` picks the newest invocation of NAME. An
invocation that has started no job yet belongs to no experiment until it does.

While Snakemake runs it holds lock files in ``.snakemake/locks``, each listing the outputs it
will write; a log that has not ended without a lock on its experiment's outputs is an
invocation that was killed.

The estimate of the time left: for each rule, the median wall seconds (column ``s``) of the
``benchmark:`` records of its finished jobs (this invocation's, else the newest earlier
invocation's in the same directory that finished some) times its jobs not yet done, summed over rules and divided by the
parallelism (locally cores, a job counting its threads; under Slurm the jobs allowed at
once), and never below the longest single job left. It leaves out the order the jobs must
run in, so it is a lower bound when few jobs can run at once. Rules with no record are named
and left out of it, never guessed.

Standard library only: it runs beside a grid, without the job environment's imports.

CLI: ``python -m workflow_scripts.operations.status [--directory DIR] [--experiment NAME] [--watch SECONDS]
[--json] [--log-lines N]`` (``make status``, ``make status EXPERIMENT=NAME``).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from workflow_scripts.spec import paths
from workflow_scripts.spec.suggest import did_you_mean

COUNTS = ("done", "running", "failed", "pending")
LOG_LINES = 20  # last lines shown of a failed job's log
# The Snakefile's target rule only gathers the outputs: no work, no benchmark, no ETA share.
TARGET_RULES = frozenset({"all"})

_JOB_HEADER = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
_ERROR_HEADER = re.compile(r"^Error in rule (\S+):$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\S+)\)")
_RESTART = re.compile(r"^Trying to restart job (\d+)\.")
_SUBMITTED = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\S+) \(log: (.*)\)\.$")
_TIMESTAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_FIELD = re.compile(r"^    (\w+): (.*)$")
_LOG_SUFFIX = " (check log file(s) for error details)"
_CONFIG_FILES = "  Config file(s): "


class StatusError(ValueError):
    """No run to report on, or a log that is not a Snakemake main log; the message names it."""


@dataclass
class Job:
    jobid: int
    rule: str
    state: str = "running"  # running | done | failed
    outputs: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)  # the rule's log files (and Slurm's, on failure)
    wildcards: str = ""
    benchmark: str | None = None
    threads: int = 1
    attempts: int = 1
    slurm_jobid: str | None = None
    slurm_log: str | None = None


@dataclass
class Invocation:
    """What one main log says."""

    log: Path
    started: datetime | None = None
    last_timestamp: datetime | None = None
    cores: int | None = None  # local runs
    remote_jobs: int | None = None  # cluster runs: jobs allowed at once (None: unlimited or not said)
    remote: bool = False
    planned: dict[str, int] = field(default_factory=dict)
    jobs: dict[int, Job] = field(default_factory=dict)
    ended: bool = False
    config_files: list[str] = field(default_factory=list)


def experiment_of_path(path: str) -> str | None:
    """The experiment whose folder holds ``path`` (``results/<experiment>/...`` or
    ``logs/<experiment>/...``, relative to the checkout); None for the shared cache and
    anything else."""
    parts = Path(path).parts
    if len(parts) > 2 and parts[0] in (paths.RESULTS, paths.LOGS) and f"{parts[0]}/{parts[1]}" != paths.SHARED_CACHE:
        return parts[1]
    return None


def experiment_of(run: Invocation) -> str | None:
    """The experiment most of an invocation's job outputs and logs belong to (one run writes
    one experiment's folders, and caches shared by all); None before its first job."""
    counts: dict[str, int] = {}
    for job in run.jobs.values():
        for path in (*job.outputs, *job.logs):
            name = experiment_of_path(path)
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


def main_logs(directory: Path) -> list[Path]:
    """The main logs of the directory's invocations that ran jobs, newest first."""
    log_dir = directory / ".snakemake" / "log"
    if not directory.is_dir():
        raise StatusError(f"directory {directory} does not exist")
    logs = sorted(log_dir.glob("*.snakemake.log")) if log_dir.is_dir() else []
    if not logs:
        raise StatusError(
            f"no Snakemake run found in {directory}: {log_dir} holds no *.snakemake.log (run snakemake there first)"
        )
    # Names start with the start time, ISO-like: the last sorts newest. `snakemake --report`
    # and other invocations that run no job write a main log too: only *runs* are wanted.
    runs = [log for log in reversed(logs) if parse_main_log(log).started is not None]
    if not runs:
        raise StatusError(
            f"no Snakemake run found in {directory}: the logs in {log_dir} are of invocations that ran no job"
            " (a report, an unlock); run snakemake there first"
        )
    return runs


def newest_main_log(directory: Path, experiment: str | None = None) -> Path:
    """The main log of the newest run in ``directory`` (of ``experiment`` only, if given)."""
    logs = main_logs(directory)
    if experiment is None:
        return logs[0]
    seen: list[str] = []
    for log in logs:
        name = experiment_of(parse_main_log(log))
        if name == experiment:
            return log
        if name is not None and name not in seen:
            seen.append(name)
    raise StatusError(
        f"no Snakemake run of experiment {experiment!r} in {directory}{did_you_mean(experiment, seen)}; "
        f"experiments with runs there: {', '.join(sorted(seen)) or 'none (no run has started a job yet)'}"
    )


def _fields(block: list[str]) -> dict[str, str]:
    found = {}
    for line in block:
        m = _FIELD.match(line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def _files(value: str | None) -> list[str]:
    if not value:
        return []
    return [f for f in value.removesuffix(_LOG_SUFFIX).split(", ") if f]


def _job_started(run: Invocation, rule: str, block: list[str]) -> None:
    info = _fields(block)
    if "jobid" not in info:
        return
    jobid = int(info["jobid"])
    previous = run.jobs.get(jobid)
    run.jobs[jobid] = Job(
        jobid=jobid,
        rule=rule,
        outputs=_files(info.get("output")),
        logs=_files(info.get("log")),
        wildcards=info.get("wildcards", ""),
        benchmark=info.get("benchmark"),
        threads=int(info.get("threads", 1)),
        attempts=previous.attempts + 1 if previous else 1,
    )


def _job_failed(run: Invocation, rule: str, block: list[str]) -> None:
    info = _fields(block)
    if "jobid" not in info:
        return
    jobid = int(info["jobid"])
    job = run.jobs.setdefault(jobid, Job(jobid=jobid, rule=rule, outputs=_files(info.get("output"))))
    job.state = "failed"
    logs = _files(info.get("log"))
    if logs:  # under Slurm the error names the rule's logs and the job's Slurm log
        job.logs = logs
    elif job.slurm_log and job.slurm_log not in job.logs:
        job.logs = [*job.logs, job.slurm_log]


def without_shown_logs(lines: list[str]) -> list[str]:
    """The main log without the failed jobs' logs Snakemake prints under their errors
    (show-failed-logs: ``Logfile PATH:``, then the log between two rules of "="): a Slurm
    job's log holds its own Snakemake's lines, which are not the run's."""
    kept, i = [], 0
    while i < len(lines):
        if lines[i].startswith("Logfile ") and lines[i].endswith(":") and i + 1 < len(lines) and _is_rule(lines[i + 1]):
            end = next((j for j in range(i + 2, len(lines)) if _is_rule(lines[j])), len(lines) - 1)
            kept.append(lines[i])
            i = end + 1
            continue
        kept.append(lines[i])
        i += 1
    return kept


def _is_rule(line: str) -> bool:
    return len(line) >= 20 and set(line) == {"="}


def parse_main_log(path: Path) -> Invocation:
    run = Invocation(log=path)
    lines = without_shown_logs(path.read_text(errors="replace").splitlines())
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("  Date: ") and run.started is None:
            run.started = datetime.strptime(line.split(": ", 1)[1].strip(), "%Y-%m-%d %H:%M:%S")
        # the first only: a failed job's log shown under its error (show-failed-logs) can be a
        # Slurm job's, with its own Snakemake's lines
        elif line.startswith("Provided cores: ") and run.cores is None and not run.remote:
            run.cores = int(line.split()[2])
        elif line.startswith("Provided remote nodes: ") and not run.remote and run.cores is None:
            run.remote = True
            value = line.split()[3]
            run.remote_jobs = int(value) if value.isdigit() else None
        elif line == "Job stats:" and not run.planned:
            i += 3  # the header row and its rule
            while i < len(lines) and len(lines[i].split()) == 2 and lines[i].split()[1].isdigit():
                rule, count = lines[i].split()
                if rule != "total":
                    run.planned[rule] = int(count)
                i += 1
            continue
        elif m := _TIMESTAMP.match(line):
            run.last_timestamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif (m := _JOB_HEADER.match(line)) or (e := _ERROR_HEADER.match(line)):
            block = []
            i += 1
            while i < len(lines) and lines[i].startswith("    "):
                block.append(lines[i])
                i += 1
            if m:
                _job_started(run, m.group(1), block)
            else:
                _job_failed(run, e.group(1), block)
            continue
        elif m := _FINISHED.match(line):
            jobid = int(m.group(1))
            run.jobs.setdefault(jobid, Job(jobid=jobid, rule=m.group(2))).state = "done"
        elif m := _RESTART.match(line):
            pass  # the job's next block (a new attempt) sets it running again
        elif m := _SUBMITTED.match(line):
            job = run.jobs.get(int(m.group(1)))
            if job is not None:
                job.slurm_jobid, job.slurm_log = m.group(2), m.group(3)
        elif line.startswith("Complete log(s): "):
            run.ended = True
        elif line.startswith(_CONFIG_FILES) and not run.config_files:
            run.config_files = _quoted_list(line.removeprefix(_CONFIG_FILES))
        i += 1
    return run


def _quoted_list(text: str) -> list[str]:
    """The items of a Python list literal of strings as Snakemake prints it: ['a.yaml', 'b.yaml']."""
    return re.findall(r"'((?:[^'\\]|\\.)*)'", text)


def is_running(directory: Path, run: Invocation, experiment: str | None = None) -> bool:
    """Snakemake holds its locks while it runs; a log that ended is not running. With two
    runs in one checkout each holds its own: an invocation of a known experiment runs while
    a lock lists an output of that experiment."""
    locks = directory / ".snakemake" / "locks"
    if run.ended or not locks.is_dir():
        return False
    for lock in locks.glob("*.lock"):
        if experiment is None:
            return True
        try:
            listed = lock.read_text(errors="replace").splitlines()
        except OSError:  # released while read
            continue
        if any(experiment_of_path(_relative(directory, path)) == experiment for path in listed):
            return True
    return False


def _relative(directory: Path, path: str) -> str:
    """A path Snakemake printed, relative to the checkout where it lies inside it."""
    if Path(path).is_absolute() and Path(path).is_relative_to(directory):
        return str(Path(path).relative_to(directory))
    return path


def rule_counts(run: Invocation, running: bool) -> dict[str, dict[str, int]]:
    """Per rule: total (planned), done, running, failed, pending. A job started but not
    finished in a run that no longer runs counts as pending (it runs again next time)."""
    rules = {rule: dict.fromkeys(("total", *COUNTS), 0) for rule in run.planned}
    for rule, total in run.planned.items():
        rules[rule]["total"] = total
    for job in run.jobs.values():
        counts = rules.setdefault(job.rule, dict.fromkeys(("total", *COUNTS), 0))
        state = job.state if job.state != "running" or running else "pending"
        counts[state] += 1
    for counts in rules.values():
        started = counts["done"] + counts["running"] + counts["failed"] + counts["pending"]
        counts["total"] = max(counts["total"], started)
        counts["pending"] = counts["total"] - counts["done"] - counts["running"] - counts["failed"]
    return rules


def benchmark_seconds(path: Path) -> float | None:
    """Wall seconds (column ``s``, the last repeat) of a Snakemake benchmark record; None when
    the file is missing or not a benchmark table."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        return float(rows[-1]["s"])
    except (OSError, IndexError, KeyError, ValueError, TypeError):
        return None


def finished_seconds(directory: Path, run: Invocation, rules: set[str] | None = None) -> dict[str, list[float]]:
    """Benchmark seconds of an invocation's finished jobs per rule (of ``rules`` only, if given)."""
    seconds: dict[str, list[float]] = {}
    for job in run.jobs.values():
        if job.state == "done" and job.benchmark and (rules is None or job.rule in rules):
            value = benchmark_seconds(directory / job.benchmark)
            if value is not None:
                seconds.setdefault(job.rule, []).append(value)
    return seconds


def earlier_seconds(
    directory: Path, current: Path, rules: set[str], experiment: str | None = None
) -> dict[str, list[float]]:
    """For rules whose jobs have no record in the current invocation: the benchmark seconds
    of the newest earlier invocation in the directory that finished any of their jobs (of the
    same experiment, when known: another config's jobs may be of another size)."""
    seconds: dict[str, list[float]] = {}
    for log in sorted((directory / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True):
        if not rules - seconds.keys():
            break
        if log == current:
            continue
        run = parse_main_log(log)
        if experiment is None or experiment_of(run) == experiment:
            for rule, values in finished_seconds(directory, run, rules - seconds.keys()).items():
                seconds[rule] = values
    return seconds


def estimate(
    counts: dict[str, dict[str, int]], seconds: dict[str, list[float]], run: Invocation, running: bool
) -> dict[str, Any]:
    """Seconds left (None when the run does not run, or no rule with jobs left has a record),
    the parallelism it assumes, the median seconds per rule and the rules it leaves out."""
    left = {
        rule: c["running"] + c["pending"]
        for rule, c in counts.items()
        if c["running"] + c["pending"] and rule not in TARGET_RULES
    }
    threads: dict[str, int] = {}
    for job in run.jobs.values():
        threads[job.rule] = max(threads.get(job.rule, 1), job.threads)
    medians = {rule: statistics.median(values) for rule, values in seconds.items() if values}
    without = sorted(rule for rule in left if rule not in medians)
    measured = {rule: n for rule, n in left.items() if rule in medians}
    if run.remote:
        parallelism = run.remote_jobs or max(sum(measured.values()), 1)
        work = sum(medians[rule] * n for rule, n in measured.items())
        unit = "jobs"
    else:
        parallelism = run.cores or 1
        work = sum(medians[rule] * n * min(threads.get(rule, 1), parallelism) for rule, n in measured.items())
        unit = "cores"
    seconds_left = max(work / parallelism, max((medians[r] for r in measured), default=0.0)) if measured else None
    if not left:
        seconds_left = 0.0
    if not running:
        seconds_left, without = None, []
    return {
        "seconds": None if seconds_left is None else round(seconds_left, 1),
        "parallelism": parallelism,
        "parallelism_unit": unit,
        "jobs_left": sum(left.values()),
        "jobs_estimated": sum(measured.values()),  # the jobs left whose rule has a record
        "median_s": {rule: round(medians[rule], 2) for rule in sorted(medians)},
        "rules_without_records": without,
    }


def tail(path: Path, n: int) -> list[str] | None:
    """The last n lines of a file, None when it does not exist."""
    try:
        with path.open(errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=n)]
    except OSError:
        return None


def failed_jobs(directory: Path, run: Invocation, log_lines: int) -> list[dict[str, Any]]:
    found = []
    for job in sorted(run.jobs.values(), key=lambda j: j.jobid):
        if job.state != "failed":
            continue
        logs = []
        for name in job.logs:
            path = Path(name) if Path(name).is_absolute() else directory / name
            logs.append({"path": name, "exists": path.is_file(), "last_lines": tail(path, log_lines) or []})
        found.append(
            {
                "rule": job.rule,
                "jobid": job.jobid,
                "wildcards": job.wildcards,
                "outputs": job.outputs,
                "attempts": job.attempts,
                "slurm_jobid": job.slurm_jobid,
                "logs": logs,
            }
        )
    return found


def collect(
    directory: Path, log_lines: int = LOG_LINES, now: datetime | None = None, experiment: str | None = None
) -> dict[str, Any]:
    """The progress of the newest invocation in ``directory`` (of ``experiment`` only, if
    given), as the JSON output gives it."""
    directory = directory.resolve()
    log = newest_main_log(directory, experiment)
    run = parse_main_log(log)
    if run.started is None:
        raise StatusError(f"{log} is not a Snakemake main log: it has no '  Date:' header line")
    experiment = experiment_of(run)
    running = is_running(directory, run, experiment)
    counts = rule_counts(run, running)
    seconds = finished_seconds(directory, run)
    unmeasured = {
        rule
        for rule, c in counts.items()
        if c["running"] + c["pending"] and rule not in seconds and rule not in TARGET_RULES
    }
    if running and unmeasured:
        seconds.update(earlier_seconds(directory, log, unmeasured, experiment))
    end = (now or datetime.now()) if running else (run.last_timestamp or run.started)
    totals = {key: sum(c[key] for c in counts.values()) for key in ("total", *COUNTS)}
    if not running and run.ended:
        state = "failed" if totals["failed"] else "finished"
    else:
        state = "running" if running else "stopped"
    return {
        "directory": str(directory),
        "experiment": experiment,
        "config_files": run.config_files,
        "log": str(log),
        "state": state,
        "executor": "cluster" if run.remote else "local",
        "started": run.started.isoformat(sep=" "),
        "elapsed_s": round((end - run.started).total_seconds()),
        "rules": dict(sorted(counts.items(), key=lambda item: (item[0] == "all", item[0]))),
        "totals": totals,
        "eta": estimate(counts, seconds, run, running),
        "failed_jobs": failed_jobs(directory, run, log_lines),
    }


def duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def render(status: dict[str, Any]) -> str:
    """The status as text: a table per rule, totals, elapsed, ETA, then each failed job."""
    header = ("rule", *COUNTS, "total")
    rows = [(rule, *(str(c[k]) for k in (*COUNTS, "total"))) for rule, c in status["rules"].items()]
    rows.append(("total", *(str(status["totals"][k]) for k in (*COUNTS, "total"))))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:]))]
        return "| " + " | ".join(cells) + " |"

    experiment = status["experiment"] or "not known yet (no job started)"
    out = [
        f"Snakemake run of experiment {experiment} in {status['directory']}: {status['state']} "
        f"({status['executor']}), started {status['started']}, elapsed {duration(status['elapsed_s'])}",
        f"config file(s): {', '.join(status['config_files']) or 'none named'}",
        f"log: {status['log']}",
        "",
        line(header),
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        *(line(row) for row in rows),
        "",
    ]
    eta = status["eta"]
    if status["state"] != "running":
        out.append("ETA: none, the run is not running")
    elif eta["seconds"] is None:
        out.append("ETA: unknown (no finished job of the rules left has a benchmark record yet)")
    else:
        covered = (
            "all jobs left"
            if eta["jobs_estimated"] == eta["jobs_left"]
            else f"{eta['jobs_estimated']} of {eta['jobs_left']} jobs left"
        )
        out.append(
            f"ETA: {duration(eta['seconds'])} for {covered}, at {eta['parallelism']} {eta['parallelism_unit']} "
            "(median benchmark seconds per job of each rule x its jobs left)"
        )
    if eta["rules_without_records"]:
        out.append(f"  left out (no benchmark record yet): {', '.join(eta['rules_without_records'])}")
    for job in status["failed_jobs"]:
        out += ["", f"FAILED {job['rule']} (jobid {job['jobid']}, attempts {job['attempts']})"]
        if job["wildcards"]:
            out.append(f"  wildcards: {job['wildcards']}")
        if job["outputs"]:
            out.append(f"  outputs: {', '.join(job['outputs'])}")
        if not job["logs"]:
            out.append("  no log file (the rule has no log:)")
        for log in job["logs"]:
            if not log["exists"]:
                out.append(f"  log {log['path']}: missing")
                continue
            out.append(f"  log {log['path']} (last {len(log['last_lines'])} lines):")
            out += [f"    {text}" for text in log["last_lines"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="Progress of the running (or last) Snakemake run in a directory: jobs per rule, "
        "failed jobs' logs, ETA from benchmark records."
    )
    ap.add_argument("--directory", type=Path, default=Path("."), help="the workflow's directory (default: .)")
    ap.add_argument(
        "--experiment", metavar="NAME", help="the newest run of this experiment (default: the newest run of any)"
    )
    ap.add_argument("--watch", type=float, metavar="SECONDS", help="redraw every SECONDS until the run ends")
    ap.add_argument("--json", action="store_true", help="print JSON (with --watch: one line per refresh)")
    ap.add_argument("--log-lines", type=int, default=LOG_LINES, help=f"last lines of failed logs (default {LOG_LINES})")
    args = ap.parse_args(argv)
    if args.watch is not None and args.watch <= 0:
        ap.error(f"--watch {args.watch}: give a positive number of seconds")
    while True:
        try:
            status = collect(args.directory, args.log_lines, experiment=args.experiment)
        except StatusError as err:
            raise SystemExit(f"error: {err}") from None
        if args.json:
            print(json.dumps(status, indent=None if args.watch else 2), flush=True)
        else:
            if args.watch is not None and sys.stdout.isatty():
                print("\033[H\033[J", end="")  # redraw in place
            print(render(status), flush=True)
        if args.watch is None or status["state"] != "running":
            break
        time.sleep(args.watch)


if __name__ == "__main__":
    main()
