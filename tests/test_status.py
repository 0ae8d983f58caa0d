"""The progress view (workflow_scripts/workflow/status.py) on real Snakemake main logs: a tiny
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

from conftest import REPO, snakemake
from workflow_scripts.workflow import status

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
        [sys.executable, "-m", "workflow_scripts.workflow.status", "--directory", str(finished_run)],
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
        [sys.executable, "-m", "workflow_scripts.workflow.status", "--json", "--directory", str(finished_run)],
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
