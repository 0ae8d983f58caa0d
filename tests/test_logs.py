"""Job logs keep the previous attempts' (workflow_scripts/operations/logs.py): a rerun writes a
new log and the interrupted or failed attempt's is kept as <log>.1, .2, ... up to 5, although
Snakemake deletes a job's log before the job starts."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from workflow_scripts.operations import logs

pytestmark = pytest.mark.unit


def attempt(log: Path, text: str, snakemake_deletes: bool = True) -> None:
    """One job attempt as Snakemake runs it: the old log removed, then the job writes its own."""
    if snakemake_deletes and log.exists():
        os.remove(log)  # Job.remove_existing_output
    with open(logs.fresh(log), "w") as out:
        out.write(text)


def test_each_attempt_keeps_the_previous_ones_newest_first_up_to_five(tmp_path):
    log = tmp_path / "logs" / "rule" / "seed1.log"
    for n in range(1, 9):
        attempt(log, f"attempt {n}\n")
    assert log.read_text() == "attempt 8\n"
    assert [logs.kept(log, k).read_text() for k in range(1, 6)] == [f"attempt {n}\n" for n in (7, 6, 5, 4, 3)]
    assert not logs.kept(log, 6).exists()
    assert sorted(p.name for p in log.parent.iterdir()) == [
        ".seed1.log.latest",
        "seed1.log",
        *(f"seed1.log.{k}" for k in range(1, 6)),
    ]


def test_the_first_attempt_keeps_nothing(tmp_path):
    log = tmp_path / "new" / "a.log"
    assert logs.fresh(log) == log
    assert log.read_text() == "" and not logs.kept(log, 1).exists()


def test_a_log_left_in_place_is_kept_and_never_truncated_through_its_second_name(tmp_path):
    """A job run without Snakemake's deletion: the log and its hidden name are one file,
    which must survive as .1 while the new attempt writes a new file."""
    log = tmp_path / "a.log"
    attempt(log, "first\n")
    attempt(log, "second\n", snakemake_deletes=False)
    assert (log.read_text(), logs.kept(log, 1).read_text()) == ("second\n", "first\n")
    attempt(log, "third\n")
    assert [logs.kept(log, k).read_text() for k in (1, 2)] == ["second\n", "first\n"]


def test_a_log_written_before_rotation_existed_is_kept_when_still_in_place(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("old run\n")  # no hidden second name
    attempt(log, "new run\n", snakemake_deletes=False)
    assert logs.kept(log, 1).read_text() == "old run\n"


def shell_job(log: Path, command: str) -> subprocess.CompletedProcess:
    """A rule's command as Snakemake runs it under bash: its prefix (rules/common.smk), then
    the command, redirected to $(fresh_log {log:q})."""
    prefix = f"set -euo pipefail; export PYTHONPATH={shlex.quote(str(REPO))}; {logs.SHELL_FUNCTION} "
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", f"{prefix}{command} > $(fresh_log {shlex.quote(str(log))}) 2>&1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )


def test_the_rules_shell_redirect_keeps_the_interrupted_attempts_log(tmp_path):
    log = tmp_path / "logs" / "train" / "seed1.log"
    log.parent.mkdir(parents=True)
    interrupted = shell_job(log, "exec sh -c 'echo step 20; echo stopped >&2; exit 130'")
    assert interrupted.returncode == 130 and interrupted.stdout == interrupted.stderr == ""
    os.remove(log)  # Snakemake, before the rerun
    assert shell_job(log, "exec sh -c 'echo resumed at step 20'").returncode == 0
    assert log.read_text() == "resumed at step 20\n"
    assert logs.kept(log, 1).read_text() == "step 20\nstopped\n"


def test_a_log_that_cannot_be_started_fails_the_job_before_its_command_runs(tmp_path):
    (tmp_path / "blocked").write_text("a file where the log's directory should be")
    proc = shell_job(tmp_path / "blocked" / "x.log", f"touch {shlex.quote(str(tmp_path / 'ran'))}")
    assert proc.returncode != 0 and not (tmp_path / "ran").exists()
    assert "error: cannot start the log" in proc.stderr


def test_every_rule_writes_its_log_through_fresh_log():
    for smk in sorted((REPO / "rules").glob("*.smk")):
        text = smk.read_text()
        assert not re.search(r">\s*\{log\}", text), f"{smk.name}: a rule redirects to {{log}} directly"
    redirects = sum(smk.read_text().count("> $(fresh_log {log:q}) 2>&1") for smk in (REPO / "rules").glob("*.smk"))
    assert redirects >= 20
