"""The documentation: the configuration reference is what the schema generates, the mkdocs
site builds with --strict (broken links, missing and unlisted pages fail), and the tutorial's
commands run as written and show what the tutorial says they show."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, copy_repo, planned_jobs
from workflow_scripts.spec.schema import config_schema
from workflow_scripts.workflow import config_reference

TUTORIAL = REPO / "docs" / "tutorial.md"


@pytest.mark.unit
def test_configuration_reference_is_what_the_schema_generates():
    generated = config_reference.render(config_schema())
    committed = config_reference.PAGE.read_text() if config_reference.PAGE.is_file() else ""
    assert committed == generated, (
        f"{config_reference.PAGE.relative_to(REPO)} differs from what schemas/config.schema.yaml generates;"
        f" regenerate it with `{config_reference.COMMAND}` and commit it"
    )


def _schema_paths(node: dict, root: dict, prefix: str, seen: tuple[str, ...] = ()) -> set[str]:
    """Every property path of the schema, independently of the renderer: $ref and allOf
    followed, maps as <name>."""
    paths: set[str] = set()
    ref = node.get("$ref")
    if ref:
        if ref in seen:
            return paths
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        paths |= _schema_paths(target, root, prefix, (*seen, ref))
    for member in node.get("allOf", []):
        paths |= _schema_paths(member, root, prefix, seen)
        for branch in ("then", "else"):
            if branch in member:
                paths |= _schema_paths(member[branch], root, prefix, seen)
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        paths.add(path)
        paths |= _schema_paths(sub, root, path, seen)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and prefix:
        paths |= _schema_paths(extra, root, f"{prefix}.<name>", seen)
    return paths


@pytest.mark.unit
def test_configuration_reference_lists_every_key_of_the_schema():
    schema = copy.deepcopy(config_schema())
    page = config_reference.render(schema)
    listed = set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.M))
    missing = {p for p in _schema_paths(schema, schema, "") if p not in listed}
    assert not missing, f"keys of the schema missing from the reference: {sorted(missing)}"


@pytest.mark.unit
def test_a_new_schema_key_appears_in_the_reference():
    schema = copy.deepcopy(config_schema())
    schema["properties"]["extends"] = {
        "description": "A config this one builds on.",
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    }
    page = config_reference.render(schema)
    assert "| `extends` | string or list of string |  | A config this one builds on. |" in page


@pytest.mark.unit
def test_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (requirements-test.txt pins it)")
    pytest.importorskip("material", reason="mkdocs-material is not installed (requirements-test.txt pins it)")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "configuration" / "reference" / "index.html").is_file()


# ----- the tutorial, executed -----------------------------------------------------------------


def tutorial_blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, info after it, body) of every fenced block, in order."""
    return [
        (m.group(1), m.group(2).strip(), m.group(3))
        for m in re.finditer(r"^```(\w*)([^\n]*)\n(.*?)^```$", text, flags=re.M | re.S)
    ]


def job_stats(out: str) -> dict[str, int]:
    """The "Job stats" table of a dry run, up to its total."""
    counts = {}
    for line in out.split("Job stats:")[1].splitlines()[3:]:
        rule, count = line.split()
        counts[rule] = int(count)
        if rule == "total":
            return counts
    raise AssertionError(f"no total in the job stats: {out[:2000]}")


def markdown_table_after(text: str, marker: str) -> list[list[str]]:
    """The cells of the first Markdown table after ``marker`` (outside fenced blocks)."""
    rows = []
    for line in text[text.index(marker) :].splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return [r for r in rows if not set("".join(r)) <= set("-:")]


@pytest.mark.integration
def test_tutorial_runs_as_written(tmp_path):
    text = TUTORIAL.read_text()
    repo = copy_repo(tmp_path / "repo")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    started = time.time()
    outputs: list[tuple[str, str]] = []  # (command, its stdout + stderr)
    checked_stats = 0
    for language, info, body in tutorial_blocks(text):
        if language == "yaml" and (m := re.match(r'title="([^"]+)"', info)):
            (repo / m.group(1)).write_text(body)
        elif language == "bash":
            for command in filter(None, (line.strip() for line in body.splitlines())):
                if command.startswith("#"):
                    continue
                proc = subprocess.run(
                    command,
                    shell=True,
                    cwd=repo,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                    executable="/bin/bash",
                )
                assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
                outputs.append((command, proc.stdout + proc.stderr))
        elif language == "text" and body.startswith("Job stats:"):
            command, out = outputs[-1]
            assert command.startswith("snakemake -n"), f"a job table the tutorial shows after {command!r}"
            assert job_stats(out) == job_stats(body), f"{command}: the tutorial's job table differs from the run's"
            checked_stats += 1
    print(f"\ntutorial: {time.time() - started:.0f} s wall")
    assert checked_stats == 2, "the tutorial shows the job table of both dry runs"

    run = next(out for command, out in outputs if command.startswith("snakemake --cores"))
    assert "xstilts: results of experiment my_grid" in run
    assert "results/my_grid/tables/xlmr_tiny/" in run

    shown = markdown_table_after(text, "## 4. Read the table")
    cat = next(out for command, out in outputs if command.startswith("cat results/my_grid/tables/xlmr_tiny/main.md"))
    written = markdown_table_after(cat, "| Intermediate task")
    assert [r[0] for r in shown] == [r[0] for r in written], "the table's rows"
    assert shown[0] == written[0], "the table's columns"
    for row in written[1:3]:
        assert all(re.fullmatch(r"[+-]?\d+\.\d", cell) for cell in row[1:]), row
    assert re.fullmatch(r"\d+\.\d \(\w+, seed 1\)", written[3][1]), written[3]

    # the dry run after adding a target plans PAN-X's jobs and the tables, nothing already built
    jobs = planned_jobs(repo, "--configfile", "my_grid.yaml")
    rules = {rule for rule, _ in jobs}
    assert not rules & {"prepare_backbone", "train_intermediate"}
    assert all(
        "/panx/" in out for rule, out in jobs if rule in ("prepare_task_data", "train_target", "evaluate_target")
    )
