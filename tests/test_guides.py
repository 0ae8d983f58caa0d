"""The extension guides under docs/guides/, followed on a copy of the repository.

A guide's fenced blocks titled with a file name (```yaml title="my_tasks/snli.yaml"```, which
the docs site shows as the block's caption) are the files it asks for; these tests write
them out and run the checks the guide promises, so a guide cannot drift from the pipeline.
A title ending in " (added)" is YAML whose keys join those of the file (mappings merge,
everything else is replaced); " (end of file)" is appended to the file.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_task_catalogue import _touch_every_output

from conftest import REPO, copy_repo, planned_jobs, snakemake
from workflow_scripts.spec.tasks import get_task

GUIDES = REPO / "docs" / "guides"
DEMO_XNLI = REPO / "demo" / "hub" / "google" / "xtreme" / "XNLI"
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


# The rules that read every run of a backbone (or of all), rerun whenever the grid gains runs.
REPORTS = {
    "all",
    "aggregate_tables",
    "plot_results",
    "typeset_tables",
    "collect_submission",
    "compare_backbones",
    "tabulate_cost",
    "tabulate_modality",
    "compare_modality",
    "tabulate_translation",
    "plot_translation",
    "plot_training",
    "list_unavailable_figures",
    # the prompted arm's tables read the runs' table
    "tabulate_prompted",
    "compare_prompted",
}


@pytest.fixture(scope="module")
def finished_demo(tmp_path_factory) -> Path:
    """The demo's grid as if it had run (every output touched, every job's params recorded)."""
    repo = copy_repo(tmp_path_factory.mktemp("finished"))
    _touch_every_output(repo, "config.yaml")
    return repo


def finished_copy(finished_demo: Path, tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(finished_demo, repo, symlinks=True)
    assert planned_jobs(repo) == set()
    return repo


@pytest.mark.integration
def test_new_intermediate_task_guide(finished_demo, tmp_path):
    """docs/guides/new_intermediate_task.md: SNLI joins the demo as an intermediate config
    and only its jobs are added; its training split converts through the user's converter."""
    example = REPO / "examples" / "tasks"
    blocks = guide_blocks("new_intermediate_task.md")
    # the guide shows the repository's example, comments aside
    assert yaml.safe_load(blocks["my_tasks/snli.yaml"]) == yaml.safe_load((example / "snli.yaml").read_text())
    assert _code(blocks["my_tasks/snli.py"]) == _code((example / "snli.py").read_text())

    repo = finished_copy(finished_demo, tmp_path)
    # the entry and its folder alone rerun nothing
    for title in ("my_tasks/snli.yaml", "my_tasks/snli.py"):
        (repo / title).parent.mkdir(exist_ok=True)
        (repo / title).write_text(blocks[title])
    config = yaml.safe_load((repo / "config.yaml").read_text())
    (repo / "config.yaml").write_text(yaml.safe_dump({**config, "task_catalogues": ["my_tasks"]}, sort_keys=False))
    assert planned_jobs(repo) == set()

    follow("new_intermediate_task.md", repo)
    jobs = planned_jobs(repo)
    added = {(rule, out) for rule, out in jobs if rule not in REPORTS}
    assert all("/snli/" in out for _, out in added), sorted(o for _, o in added if "/snli/" not in o)
    config = yaml.safe_load((repo / "config.yaml").read_text())
    seeds = len(config["seeds"])
    counts = _rules(added)
    # llama_tiny's grid names its own intermediate configs: only xlmr_tiny trains on SNLI
    assert counts.pop("prepare_task_data") == 2 and counts.pop("train_intermediate") == seeds
    # every target scored per seed; the retrieval targets embed without target training
    targets = config["targets"]
    assert counts == {
        "evaluate_target": len(targets) * seeds,
        "train_target": sum(not get_task(t).is_retrieval for t in targets) * seeds,
    }

    proc = snakemake(repo, "--cores", "1", "results/demo/data/snli/train.parquet", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _run_python(
        repo,
        "from workflow_scripts.data.prepare import read_table;"
        "t = read_table('results/demo/data/snli/train.parquet', 'classification');"
        "print(t.num_rows, b'dropped_without_consensus' in t.schema.metadata[b'xstilts'])",
    )
    rows, reported = report.split()
    assert int(rows) > 0 and reported == "True"


def _mirror_from_xnli(repo: Path, path: str, languages: list[str]) -> None:
    """Local mirror rows in the layout of a per-language NLI dataset on the Hub (a config per
    language; premise, hypothesis, label id), made from the demo's German XNLI rows."""
    labels = ["entailment", "neutral", "contradiction"]
    for split in ("validation", "test"):
        rows = [json.loads(line) for line in (DEMO_XNLI / f"{split}.jsonl").read_text().splitlines() if line.strip()]
        rows = [
            {
                "premise": r["sentence1"],
                "hypothesis": r["sentence2"],
                "label": labels.index(r["gold_label"].replace("contradictory", "contradiction")),
            }
            for r in rows
            if r["language"] == "de"
        ]
        assert rows
        for lang in languages:
            out = repo / "demo" / "hub" / path / lang / f"{split}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.integration
def test_new_target_task_guide(finished_demo, tmp_path):
    """docs/guides/new_target_task.md: AmericasNLI joins the demo as a target of a benchmark
    declared beside XTREME; only its own jobs and the reports are planned, its test split
    converts in the configured languages, and XTREME itself refuses it."""
    repo = finished_copy(finished_demo, tmp_path)
    follow("new_target_task.md", repo)
    config = yaml.safe_load((repo / "config.yaml").read_text())
    languages = config["tasks"]["americas_nli"]["languages"]
    _mirror_from_xnli(repo, config["tasks"]["americas_nli"]["hub"]["path"], languages)

    jobs = planned_jobs(repo)
    added = {(rule, out) for rule, out in jobs if rule not in REPORTS}
    assert all("/americas_nli/" in out for _, out in added), sorted(o for _, o in added if "/americas_nli/" not in o)
    runs = len(config["intermediate"]) * len(config["seeds"])  # xlmr_tiny's grid: every config; llama_tiny's: not it
    assert _rules(added) == {"prepare_task_data": 2, "train_target": runs, "evaluate_target": runs}
    assert {out for rule, out in jobs if rule == "collect_submission"} == {
        f"results/demo/submission/{backbone}/xtreme_americas" for backbone in config["backbones"]
    }

    proc = snakemake(repo, "--cores", "1", "results/demo/data/americas_nli/test.parquet", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = _run_python(
        repo,
        "from workflow_scripts.data.prepare import read_table;"
        "t = read_table('results/demo/data/americas_nli/test.parquet', 'classification');"
        "print(' '.join(sorted(set(t.column('lang').to_pylist()))))",
    )
    assert found.split() == sorted(languages)

    # in-language training needs training data beyond English, which the entry does not declare
    in_language = {"targets": ["americas_nli"], "languages": ["gn"], "intermediate": ["none"], "seeds": [1]}
    edited = {
        **config,
        "transfer": {**config["transfer"], "settings": {**config["transfer"]["settings"], "in_language": in_language}},
    }
    (repo / "config.yaml").write_text(yaml.safe_dump(edited, sort_keys=False))
    proc = snakemake(repo, "-n")
    assert proc.returncode != 0 and "americas_nli has no training data outside English" in proc.stdout + proc.stderr

    # the benchmark is what admits the target: XTREME's config check names it
    config["benchmark"] = "xtreme"
    (repo / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(repo, "-n")
    assert proc.returncode != 0 and "'americas_nli' is not a XTREME target" in proc.stdout + proc.stderr


DIGESTS = (
    "data.prepare",
    "models.prepare",
    "training.train",
    "evaluation.metric_file",
    "reporting.tables",
    "reporting.submission",
)


def _digests(repo: Path) -> dict[str, str]:
    code = (
        "from workflow_scripts.spec.codehash import module_digest;"
        f"print(' '.join(module_digest(m) for m in {DIGESTS!r}))"
    )
    return dict(zip(DIGESTS, _run_python(repo, code).split()))


@pytest.mark.integration
def test_new_benchmark_guide(finished_demo, tmp_path):
    """docs/guides/new_benchmark.md: a benchmark of XTREME's fine-tuned tasks, declared in
    benchmark.py alone, reruns the reports only; the config naming it keeps to its targets,
    and its tables have category columns."""
    repo = finished_copy(finished_demo, tmp_path)
    blocks = follow("new_benchmark.md", repo)
    before, after = _digests(finished_demo), _digests(repo)
    assert {m for m in DIGESTS if before[m] != after[m]} == {"reporting.tables", "reporting.submission"}

    jobs = planned_jobs(repo)
    assert {rule for rule, _ in jobs} <= REPORTS, sorted(j for j in jobs if j[0] not in REPORTS)
    assert {out for rule, out in jobs if rule == "collect_submission"} == {
        f"results/demo/submission/{backbone}/xtreme_finetuned" for backbone in ("xlmr_tiny", "llama_tiny")
    }

    shown = _run_python(
        repo,
        "import json; from workflow_scripts.spec import benchmark;"
        "from workflow_scripts.reporting import tables;"
        "from workflow_scripts.spec.report_settings import TableSettings;"
        "s = TableSettings.parse({'benchmark': benchmark.get('xtreme_finetuned').describe(),"
        " 'targets': ['xnli', 'xquad', 'udpos'], 'baseline': 'none', 'intermediate': ['none'], 'seeds': [1]});"
        "print(json.dumps([[tables.category_header(c) for c in tables.category_columns(s)],"
        " tables.benchmark_notes(s)]))",
    )
    columns, notes = json.loads(shown)
    assert columns == ["Classification", "Struct. pred.", "QA", "Overall"]
    assert any("pawsx" in n and "panx" in n and "mlqa" in n and "tydiqa" in n for n in notes), notes

    config = yaml.safe_load((repo / "config.yaml").read_text())
    assert config["targets"] == yaml.safe_load(blocks["config.yaml (added)"])["targets"]
    config["targets"].append("bucc")
    (repo / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(repo, "-n")
    assert proc.returncode != 0 and "'bucc' is not a XTREME (fine-tuned tasks) target" in proc.stdout + proc.stderr


@pytest.mark.unit
def test_a_benchmark_record_is_checked_when_registered():
    from workflow_scripts.spec import benchmark

    xtreme = benchmark.XTREME
    with pytest.raises(ValueError, match="declared twice"):
        benchmark.register(xtreme)
    bad = {"categories": {"dialogue": ("xnli",)}, "languages": {"xnli": ("en",)}}
    with pytest.raises(ValueError, match="not among"):
        benchmark.register(benchmark.Benchmark(name="b", title="B", **bad))
    with pytest.raises(ValueError, match="exactly its targets"):
        benchmark.register(benchmark.Benchmark(name="b", title="B", categories=xtreme.categories, languages={}))
    with pytest.raises(ValueError, match="notes names"):
        benchmark.register(
            benchmark.Benchmark(
                name="b", title="B", categories=xtreme.categories, languages=xtreme.languages, notes={"xcopa": "?"}
            )
        )
    assert "b" not in benchmark.BENCHMARKS
