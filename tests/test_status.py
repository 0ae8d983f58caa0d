"""The progress view (workflow_scripts/operations/status.py) on real Snakemake main logs: a tiny
throwaway workflow in tmp_path, run to its end (a job failing after a retry) and watched while
it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, copy_repo, snakemake
from workflow_scripts.operations import status

# Three benchmarked jobs, one that depends on one of them, and one that fails on both of its
# attempts after writing its log.
TINY_WORKFLOW = """
rule all:
    input:
        expand("out/a{i}.txt", i=range(3)),
        "out/b.txt",
        "out/c.txt",


rule a:
    output:
        "out/a{i}.txt",
    benchmark:
        "benchmarks/a/{i}.tsv"
    shell:
        "sleep 1; touch {output}"


rule b:
    output:
        "out/b.txt",
    log:
        "logs/b.log",
    retries: 1
    shell:
        "echo preparing > {log}; echo 'b broke on purpose' >> {log}; exit 1"


rule c:
    input:
        "out/a0.txt",
    output:
        "out/c.txt",
    benchmark:
        "benchmarks/c.tsv"
    shell:
        "sleep 1; touch {output}"
"""

# Jobs long enough to be seen running: four 1.5-second jobs on one core, then the target.
SLOW_WORKFLOW = """
rule all:
    input:
        expand("out/s{i}.txt", i=range(4)),


rule slow:
    output:
        "out/s{i}.txt",
    benchmark:
        "benchmarks/slow/{i}.tsv"
    shell:
        "sleep 1.5; touch {output}"
"""


def workflow(directory: Path, snakefile: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Snakefile").write_text(snakefile)
    return directory


def adds_up(found: dict) -> None:
    for rule, counts in found["rules"].items():
        assert sum(counts[k] for k in status.COUNTS) == counts["total"], (rule, counts)
    assert found["totals"]["total"] == sum(c["total"] for c in found["rules"].values())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    directory = workflow(tmp_path_factory.mktemp("tiny"), TINY_WORKFLOW)
    proc = snakemake(directory, "--cores", "2", "--keep-going", timeout=120)
    assert proc.returncode != 0, "rule b fails on purpose"
    return directory


@pytest.mark.integration
def test_finished_run_counts_each_rule_and_names_the_failed_job_with_its_log(finished_run):
    found = status.collect(finished_run, log_lines=1)
    assert found["state"] == "failed" and found["executor"] == "local"
    assert {rule: (c["done"], c["running"], c["failed"], c["pending"]) for rule, c in found["rules"].items()} == {
        "a": (3, 0, 0, 0),
        "b": (0, 0, 1, 0),
        "c": (1, 0, 0, 0),
        "all": (0, 0, 0, 1),  # never ran: its input b failed
    }
    adds_up(found)
    [failed] = found["failed_jobs"]
    assert failed["rule"] == "b" and failed["outputs"] == ["out/b.txt"]
    assert failed["attempts"] == 2, "the retry is the same job: counted once, by its latest state"
    assert failed["logs"] == [{"path": "logs/b.log", "exists": True, "last_lines": ["b broke on purpose"]}]
    assert found["eta"]["seconds"] is None, "no ETA for a run that ended"
    assert 1 <= found["eta"]["median_s"]["a"] < 5


@pytest.mark.integration
def test_text_view_shows_the_table_and_the_failed_log(finished_run):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.operations.status", "--directory", str(finished_run)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert [cell.strip() for cell in rows["b"].strip("|").split("|")] == ["b", "0", "0", "1", "0", "1"]
    assert [cell.strip() for cell in rows["total"].strip("|").split("|")] == ["total", "4", "0", "1", "1", "6"]
    assert "FAILED b (jobid" in proc.stdout
    assert "log logs/b.log (last 2 lines):\n    preparing\n    b broke on purpose" in proc.stdout


@pytest.mark.integration
def test_running_workflow_shows_running_jobs_and_an_eta(tmp_path):
    directory = workflow(tmp_path / "slow", SLOW_WORKFLOW)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1"],
        cwd=directory,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seen_running, seen_eta = None, None
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                found = status.collect(directory)
            except status.StatusError:  # before Snakemake wrote its log
                time.sleep(0.2)
                continue
            if found["state"] == "running":
                adds_up(found)
                if found["totals"]["running"] and seen_running is None:
                    seen_running = found
                if found["eta"]["seconds"] is not None and seen_eta is None:
                    seen_eta = found
            time.sleep(0.3)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen_running is not None, "never saw a job running"
    assert seen_running["rules"]["slow"]["running"] == 1 and seen_running["rules"]["slow"]["total"] == 4
    # After the first job: about 1.5 s a job for the jobs left, on 1 core.
    assert seen_eta is not None, "never saw an ETA"
    left = seen_eta["rules"]["slow"]["running"] + seen_eta["rules"]["slow"]["pending"]
    assert seen_eta["eta"]["parallelism"] == 1
    assert 1.2 * left <= seen_eta["eta"]["seconds"] <= 4 * left, seen_eta["eta"]
    final = status.collect(directory)
    assert final["state"] == "finished" and final["totals"]["done"] == final["totals"]["total"] == 5
    assert final["failed_jobs"] == []


@pytest.mark.unit
def test_directory_without_a_run_is_named(tmp_path):
    with pytest.raises(status.StatusError, match=f"no Snakemake run found in {tmp_path}: .*run snakemake"):
        status.collect(tmp_path)
    with pytest.raises(status.StatusError, match="does not exist"):
        status.collect(tmp_path / "missing")


@pytest.mark.unit
def test_benchmark_record_reads_the_last_repeat_and_missing_files_give_none(tmp_path):
    record = tmp_path / "r.tsv"
    record.write_text("s\th:m:s\tmax_rss\n3.5\t0:00:03\t1.0\n4.5\t0:00:04\t1.0\n")
    assert status.benchmark_seconds(record) == 4.5
    assert status.benchmark_seconds(tmp_path / "none.tsv") is None
    (tmp_path / "bad.tsv").write_text("wall\n1\n")
    assert status.benchmark_seconds(tmp_path / "bad.tsv") is None


@pytest.mark.integration
def test_cli_json_matches_collect(finished_run):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.operations.status", "--json", "--directory", str(finished_run)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rules"] == status.collect(finished_run)["rules"]


@pytest.mark.integration
def test_watch_on_an_ended_run_prints_once_and_returns(finished_run, capsys):
    status.main(["--directory", str(finished_run), "--watch", "0.1", "--json"])
    [line] = capsys.readouterr().out.splitlines()  # one JSON line a refresh
    assert json.loads(line)["state"] == "failed"


@pytest.mark.integration
def test_a_report_written_after_the_run_does_not_hide_it(finished_run):
    """`snakemake --report` (or --unlock) writes a main log of its own that ran no job: the
    view reads the newest log of a run instead."""
    run_log = status.newest_main_log(finished_run)
    proc = snakemake(finished_run, "--unlock", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    logs = sorted((finished_run / ".snakemake" / "log").glob("*.snakemake.log"))
    if logs[-1] == run_log:
        pytest.skip("this Snakemake wrote no main log for --unlock")
    assert status.newest_main_log(finished_run) == run_log
    assert status.collect(finished_run)["state"] == "failed"


# ----- experiments: several configs' runs in one checkout --------------------------------------

MAIN_LOG = """Assuming unrestricted shared filesystem usage.

SNAKEMAKE
=========
  Date: {date}
  Config file(s): {config_files}

Building DAG of jobs...
Provided cores: 2
Job stats:
job                  count
-----------------  -------
prepare_task_data        1
total                    1

[Fri Nov 27 02:23:14 2026]
localrule prepare_task_data:
    output: results/{experiment}/data/mnli/train.parquet
    log: logs/{experiment}/prepare_task_data/mnli/train.log
    jobid: 1
    wildcards: task=mnli, split=train
"""


def main_log(directory: Path, name: str, experiment: str, config_files: list[str], ended: bool) -> None:
    logs = directory / ".snakemake" / "log"
    logs.mkdir(parents=True, exist_ok=True)
    date = f"2026-11-27 {name[11:13]}:{name[13:15]}:{name[15:17]}"
    text = MAIN_LOG.format(date=date, config_files=config_files, experiment=experiment)
    (logs / f"{name}.snakemake.log").write_text(text + ("Complete log(s): x\n" if ended else ""))


@pytest.fixture
def two_experiments(tmp_path) -> Path:
    """An older run of `paper` that still runs (its lock names its outputs) beside a newer run
    of `demo` that was killed (not ended, no lock of its own)."""
    main_log(tmp_path, "2026-11-27T010000.000001", "paper", ["config.yaml", "config/paper.yaml"], ended=False)
    main_log(tmp_path, "2026-11-27T020000.000001", "demo", ["config.yaml"], ended=False)
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir()
    (locks / "0.output.lock").write_text("results/paper/data/mnli/train.parquet\nresults/cache/downloads/x\n")
    return tmp_path


@pytest.mark.unit
def test_the_view_names_the_experiment_and_picks_the_newest_run_of_one(two_experiments):
    newest = status.collect(two_experiments)
    assert newest["experiment"] == "demo" and newest["config_files"] == ["config.yaml"]
    assert newest["state"] == "stopped", "the other experiment's lock does not make a killed run look running"
    paper = status.collect(two_experiments, experiment="paper")
    assert paper["experiment"] == "paper" and paper["config_files"] == ["config.yaml", "config/paper.yaml"]
    assert paper["state"] == "running" and paper["rules"]["prepare_task_data"]["running"] == 1
    assert paper["log"].endswith("2026-11-27T010000.000001.snakemake.log")
    assert status.render(paper).startswith(f"Snakemake run of experiment paper in {two_experiments}: running")


@pytest.mark.unit
def test_an_unknown_experiment_lists_those_with_runs_and_the_closest(two_experiments, capsys):
    with pytest.raises(status.StatusError, match=r"experiment 'papr' .*\(did you mean 'paper'\?\); .*: demo, paper$"):
        status.collect(two_experiments, experiment="papr")
    with pytest.raises(SystemExit, match="no Snakemake run of experiment 'xtreme'"):
        status.main(["--directory", str(two_experiments), "--experiment", "xtreme"])


@pytest.mark.unit
def test_paths_outside_an_experiment_name_none():
    assert status.experiment_of_path("results/paper/tables/main.md") == "paper"
    assert status.experiment_of_path("logs/demo/x/y.log") == "demo"
    assert status.experiment_of_path("results/cache/downloads/ud.tgz") is None
    assert status.experiment_of_path("out/b.txt") is None


@pytest.mark.integration
def test_a_bad_data_row_is_named_on_the_console_and_each_experiments_run_can_be_watched(tmp_path):
    """A job that fails on a corrupt row of the local mirror: Snakemake's console output (the
    workflow profile's show-failed-logs) carries the job's log, which names the file and the
    line. Two experiments fail on it in turn; the view picks either."""
    repo = copy_repo(tmp_path / "repo")
    mirror = repo / "demo/hub/nyu-mll/glue/mnli/train.jsonl"
    lines = mirror.read_text().splitlines()
    lines[2] = '{"premise": "a", "hyp'  # the third line: not JSON
    mirror.write_text("\n".join(lines) + "\n")
    (repo / "rival.yaml").write_text((repo / "config.yaml").read_text() + "\nexperiment: rival\n")
    for experiment, extra in (("demo", ()), ("rival", ("--configfile", "rival.yaml"))):
        proc = snakemake(repo, f"results/{experiment}/data/mnli/train.parquet", "--cores", "1", *extra, timeout=300)
        assert proc.returncode != 0
        console = proc.stdout + proc.stderr
        assert f"Logfile logs/{experiment}/prepare_task_data/mnli/train.log:" in console, console[-3000:]
        assert f"corrupt data file {mirror}, line 3: not JSON" in console, console[-3000:]
    assert status.collect(repo)["experiment"] == "rival"
    demo = status.collect(repo, experiment="demo")
    assert demo["experiment"] == "demo" and demo["state"] == "failed"
    [failed] = demo["failed_jobs"]
    assert failed["outputs"] == ["results/demo/data/mnli/train.parquet"]
    assert any(f"{mirror}, line 3" in line for line in failed["logs"][0]["last_lines"])


@pytest.mark.unit
def test_a_failed_jobs_shown_log_is_not_read_as_the_runs_own_lines(tmp_path):
    """show-failed-logs prints a Slurm job's log, with its own Snakemake's header and
    "Provided remote nodes: 1", under the job's error: the run's parallelism stays its own."""
    shown = ["Logfile .snakemake/slurm_logs/rule_x/5.log:", "=" * 80]
    shown += ["  Date: 2026-01-02 00:00:00", "Provided remote nodes: 1", "Provided cores: 2", "=" * 80]
    log = tmp_path / "run.snakemake.log"
    log.write_text("\n".join(["  Date: 2026-01-01 10:00:00", "Provided remote nodes: 100", *shown, "Done"]) + "\n")
    run = status.parse_main_log(log)
    assert run.remote and run.remote_jobs == 100 and run.cores is None
    assert run.started.day == 1
    assert status.without_shown_logs(log.read_text().splitlines()) == [
        "  Date: 2026-01-01 10:00:00",
        "Provided remote nodes: 100",
        "Logfile .snakemake/slurm_logs/rule_x/5.log:",
        "Done",
    ]
