"""The extension guides under docs/guides/, followed on a copy of the repository.

A guide's fenced blocks titled with a file name (```yaml title="my_tasks/snli.yaml"```, which
the docs site shows as the block's caption) are the files it asks for; these tests write
them out and run the checks the guide promises, so a guide cannot drift from the pipeline.
A title ending in " (added)" is YAML whose keys join those of the file (mappings merge,
everything else is replaced); " (end of file)" is appended to the file.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_repo, planned_jobs, snakemake
from workflow_scripts.data.tasks import get_task

GUIDES = REPO / "docs" / "guides"
BLOCK = re.compile(r'^```\w+ title="(?P<title>[^"]+)"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL)
ADDED, APPENDED = " (added)", " (end of file)"


def guide_blocks(guide: str) -> dict[str, str]:
    """The titled blocks of a guide, by title, in the guide's order."""
    blocks = {}
    for m in BLOCK.finditer((GUIDES / guide).read_text(encoding="utf-8")):
        assert m["title"] not in blocks, f"{guide}: two blocks titled {m['title']!r}"
        blocks[m["title"]] = m["body"]
    assert blocks, f"{guide} has no titled blocks"
    return blocks


def _merge(base: dict, added: dict) -> dict:
    for key, value in added.items():
        base[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def follow(guide: str, repo: Path) -> dict[str, str]:
    """Do what the guide's titled blocks say in ``repo``; returns the blocks."""
    blocks = guide_blocks(guide)
    for title, body in blocks.items():
        if title.endswith(ADDED):
            path = repo / title.removesuffix(ADDED)
            config = _merge(yaml.safe_load(path.read_text()), yaml.safe_load(body))
            path.write_text(yaml.safe_dump(config, sort_keys=False))
        elif title.endswith(APPENDED):
            path = repo / title.removesuffix(APPENDED)
            path.write_text(path.read_text() + "\n\n" + body)
        else:
            (repo / title).parent.mkdir(parents=True, exist_ok=True)
            (repo / title).write_text(body)
    return blocks


def _code(source: str) -> str:
    """A module's code without its docstring (the example file documents itself)."""
    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    return ast.dump(tree)


def _rules(jobs: set[tuple[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rule, _ in jobs:
        counts[rule] = counts.get(rule, 0) + 1
    return counts


def _run_python(repo: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_new_intermediate_task_guide(tmp_path):
    """docs/guides/new_intermediate_task.md: SNLI joins the demo as an intermediate config
    and only its jobs are added; its training split converts through the user's converter."""
    example = REPO / "examples" / "tasks"
    blocks = guide_blocks("new_intermediate_task.md")
    # the guide shows the repository's example, comments aside
    assert yaml.safe_load(blocks["my_tasks/snli.yaml"]) == yaml.safe_load((example / "snli.yaml").read_text())
    assert _code(blocks["my_tasks/snli.py"]) == _code((example / "snli.py").read_text())

    repo = copy_repo(tmp_path)
    before = planned_jobs(repo)
    follow("new_intermediate_task.md", repo)
    after = planned_jobs(repo)
    assert before <= after
    added = after - before
    assert all("/snli/" in out for _, out in added), sorted(added)
    config = yaml.safe_load((repo / "config.yaml").read_text())
    seeds = len(config["seeds"])
    counts = _rules(added)
    # llama_tiny's grid names its own intermediate configs: only xlmr_tiny trains on SNLI
    assert counts.pop("prepare_task_data") == 2 and counts.pop("train_intermediate") == seeds
    # every target scored per seed; the retrieval targets embed without target training
    targets = config["targets"]
    assert counts == {"evaluate_target": len(targets) * seeds,
                      "train_target": sum(not get_task(t).is_retrieval for t in targets) * seeds}

    proc = snakemake(repo, "--cores", "1", "results/demo/data/snli/train.parquet", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _run_python(repo, "from workflow_scripts.data.prepare import read_table;"
                               "t = read_table('results/demo/data/snli/train.parquet', 'classification');"
                               "print(t.num_rows, b'dropped_without_consensus' in t.schema.metadata[b'xstilts'])")
    rows, reported = report.split()
    assert int(rows) > 0 and reported == "True"
