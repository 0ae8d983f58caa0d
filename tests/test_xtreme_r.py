"""XTREME-R as a second benchmark: the paper-scale preset's DAG, config errors, and the
demo-scale XTREME-R grid end to end (all 10 targets, the XTREME-R table)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from conftest import copy_repo, file_digests, job_counts, planned_jobs, snakemake
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.workflow import config_layers

pytestmark = pytest.mark.integration

DEMO_CONFIG = "config/xtreme_r_demo.yaml"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


def test_the_xtreme_r_preset_builds_its_grid_offline(repo):
    config = config_layers.load([repo / "config/xtreme_r.yaml"])
    proc = snakemake(repo, "-n", "--configfile", "config/xtreme_r.yaml", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    counts = job_counts(out)
    n_inter, n_seeds = len(config["intermediate"]), len(config["seeds"])
    bench = benchmark.XTREME_R
    assert config["targets"] == list(bench.targets) and n_inter == 22 and n_seeds == 3
    # every target in its full XTREME-R language list
    assert all(config["tasks"][t]["languages"] == sorted(bench.languages[t]) for t in bench.targets)
    trained = [t for t in config["targets"] if get_task(t).trains]
    assert len(trained) == 9  # all but Tatoeba
    assert counts["evaluate_target"] == n_inter * 10 * n_seeds
    assert counts["train_target"] == n_inter * len(trained) * n_seeds
    assert counts["train_target_stage"] == n_inter * n_seeds  # XCOPA's SIQA stage
    assert counts["train_intermediate"] == (n_inter - 1) * n_seeds
    # XCOPA trains from its SIQA stage; Tatoeba embeds with the run's SQuAD-trained XQuAD model
    assert "results/xtreme_r/target/xlmr_large/mnli/xcopa/stages/siqa/seed2/model" in out
    assert "results/xtreme_r/submission/xlmr_large/xtreme_r" in out


def test_the_demo_lareqa_preparation_reads_its_release_files_and_the_squad_mirror(tmp_path):
    """LAReQA's test split comes from XQuAD-R's files (options.xquad_r_path), its training
    pairs from the SQuAD mirror: both are inputs of its preparation, so editing either reruns it."""
    repo = copy_repo(tmp_path)
    proc = snakemake(repo, "-n", "--configfile", DEMO_CONFIG, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = (proc.stdout + proc.stderr).split("rule prepare_task_data:")
    block = next(b for b in blocks if "output: results/xtreme_r_demo/data/lareqa/test.parquet" in b)
    inputs = block.split("input:", 1)[1].split("\n", 1)[0]
    assert {f"demo/xquad-r/{lang}.json" for lang in ("en", "de", "ru")} <= set(inputs.replace(",", " ").split())
    assert "demo/hub/rajpurkar/squad/plain_text/train.jsonl" in inputs


def write_config(repo: Path, name: str, edit) -> str:
    config = config_layers.load([repo / DEMO_CONFIG])
    edit(config)
    (repo / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return f"{name}.yaml"


@pytest.mark.parametrize(
    "name, edit, message",
    [
        (
            "xtreme_target",
            lambda c: c.update(targets=c["targets"] + ["pawsx"]),
            "targets[10]: 'pawsx' is not a XTREME-R target",
        ),
        (
            "tatoeba_without_xquad",
            lambda c: c.update(targets=[t for t in c["targets"] if t != "xquad"]),
            "retrieval.encoders.tatoeba: tatoeba embeds with the model of target 'xquad'",
        ),
        (
            "stage_of_another_format",
            lambda c: c["tasks"]["xcopa"].update(stages=["mnli"]),
            "tasks.xcopa.stages[0]: a stage must be a multiple_choice task",
        ),
        (
            "setting_on_a_ranking_target",
            lambda c: c.update(transfer={"settings": {"zero_shot": {}, "translate_train": {"targets": ["mewslix"]}}}),
            "translate_train does not apply to mewslix: mewslix trains on English data only",
        ),
    ],
)
def test_an_impossible_xtreme_r_config_stops_before_any_job(repo, name, edit, message):
    proc = snakemake(repo, "-n", "--configfile", write_config(repo, name, edit), timeout=300)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_switching_xcopa_stages_off_trains_it_from_the_intermediate_encoder(repo):
    proc = snakemake(
        repo,
        "-n",
        "--configfile",
        write_config(repo, "no_stages", lambda c: c["tasks"]["xcopa"].update(stages=[])),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train_target_stage" not in job_counts(proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def demo_run(demo_checkout) -> Path:
    """The XTREME-R demo, run in the checkout where the default demo already ran: an
    experiment of its own beside it."""
    # bring the default demo up to date first (workflow tests before this one may have left
    # an edit's reruns pending), so that "nothing to do" holds before the second experiment
    proc = snakemake(demo_checkout, "--cores", "2", timeout=1500)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert planned_jobs(demo_checkout) == set()
    default_before = file_digests(demo_checkout / "results/demo")
    (demo_checkout / "default_demo_before_xtreme_r.json").write_text(json.dumps(default_before))
    started = time.time()
    proc = snakemake(demo_checkout, "--cores", "2", "--configfile", DEMO_CONFIG, timeout=1500)
    print(f"\nXTREME-R demo run: {time.time() - started:.0f} s wall")
    assert proc.returncode == 0, proc.stderr[-5000:]
    (demo_checkout / "xtreme_r_demo_stdout.txt").write_text(proc.stdout + proc.stderr)
    return demo_checkout


def test_two_demos_in_one_checkout_keep_their_own_outputs_and_switching_back_plans_nothing(demo_run):
    before = json.loads((demo_run / "default_demo_before_xtreme_r.json").read_text())
    assert before and file_digests(demo_run / "results/demo") == before, "the default demo's outputs are untouched"
    for experiment in ("demo", "xtreme_r_demo"):
        assert (demo_run / f"results/{experiment}/tables/cost.md").is_file()
        assert (demo_run / f"results/{experiment}/tables/xlmr_tiny/main.md").is_file()
    assert (demo_run / "results/demo/tables/llama_tiny/main.md").is_file()
    assert not (demo_run / "results/xtreme_r_demo/tables/llama_tiny").exists(), "the XTREME-R demo has one backbone"
    summary = (
        (demo_run / "xtreme_r_demo_stdout.txt").read_text().split("xstilts: results of experiment xtreme_r_demo")[1]
    )
    assert "llama_tiny" not in summary and "results/demo/" not in summary, "the summary shows this experiment only"
    assert planned_jobs(demo_run) == set()
    assert planned_jobs(demo_run, "--configfile", DEMO_CONFIG) == set()


def chance_map_at_20(pool: int, golds: int, draws: int = 2000) -> float:
    """mAP@20 (LAReQA convention) of a random ranking of ``pool`` candidates with ``golds``
    gold ones, by simulation (seeded)."""
    import random

    rng, total = random.Random(0), 0.0
    for _ in range(draws):
        top = rng.sample(range(pool), min(20, pool))
        hits, ap = 0, 0.0
        for rank, c in enumerate(top, start=1):
            if c < golds:
                hits += 1
                ap += hits / rank
        total += ap / min(golds, 20)
    return 100 * total / draws


def test_the_xtreme_r_demo_writes_the_xtreme_r_table_with_categories_and_overall(demo_run):
    table = (demo_run / "results/xtreme_r_demo/tables/xlmr_tiny/main.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| Intermediate task"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[1:] == [
        *benchmark.XTREME_R.targets,
        "Avg",
        "Classification",
        "Struct. pred.",
        "QA",
        "Retrieval",
        "Overall",
    ]
    baseline = next(line for line in table.splitlines() if line.startswith("| none"))
    cells = [c.strip() for c in baseline.strip("|").split("|")]
    assert all(cell not in ("", "–") for cell in cells[-5:]), baseline  # every category and the overall score
    assert "QA counts (F1 + EM) / 2" in table and "Mewsli-X data version 20220518_6" in table


def test_the_xtreme_r_demo_retrieval_targets_score_above_chance(demo_run):
    import pyarrow.parquet as pq

    for target in ("mewslix", "lareqa"):
        rows = pq.read_table(demo_run / f"results/xtreme_r_demo/data/{target}/test.parquet").to_pylist()
        pool = sum(r["side"] == "candidate" for r in rows)
        golds = max(len(r["gold"]) for r in rows if r["side"] == "query")
        chance = chance_map_at_20(pool, golds)
        for config in ("none", "mnli"):
            m = json.loads(
                (
                    demo_run / f"results/xtreme_r_demo/metrics/xlmr_tiny/zero_shot/{config}/{target}/seed1.json"
                ).read_text()
            )
            assert m["metric"] == "map_at_20" and set(m["scores"]["test"]) == {"en", "de", "ru"}
            assert m["average"]["test"]["map_at_20"] > 3 * chance, (target, config, m["average"], chance)


def test_the_xtreme_r_demo_trains_xcopa_from_its_siqa_stage_and_submits_every_target(demo_run):
    for config in ("none", "mnli"):
        stage = demo_run / f"results/xtreme_r_demo/target/xlmr_tiny/{config}/xcopa/stages/siqa/seed1/model"
        assert json.loads((stage / "train_log.json").read_text())["settings"]["tasks"].keys() == {"siqa"}
        log = (demo_run / f"logs/xtreme_r_demo/train_target/xlmr_tiny/{config}/xcopa/en.dev-en/seed1.log").read_text()
        assert f"head xcopa continues from siqa's in {stage.relative_to(demo_run)}" in log
    # Tatoeba embedded with the SQuAD-trained XQuAD model (XTREME-R's protocol), said in the metric file
    m = json.loads((demo_run / "results/xtreme_r_demo/metrics/xlmr_tiny/zero_shot/mnli/tatoeba/seed1.json").read_text())
    assert m["settings"]["retrieval"]["encoder"] == "xquad"
    assert m["retrieval"]["encoder_path"] == "results/xtreme_r_demo/target/xlmr_tiny/mnli/xquad/en.dev-en/seed1/model"
    submission = demo_run / "results/xtreme_r_demo/submission/xlmr_tiny/xtreme_r"
    assert sorted(p.name for p in submission.iterdir() if p.is_dir()) == sorted(benchmark.XTREME_R.targets)
    xcopa = [json.loads(line) for line in (submission / "xcopa/test-sw.jsonl").read_text().splitlines()]
    assert len(xcopa) == 100 and all(set(r) == {"label"} and r["label"] in (0, 1) for r in xcopa)
    ranked = json.loads((submission / "mewslix/test-de.json").read_text())
    assert ranked and all(isinstance(ids, list) and len(ids) == 20 for ids in ranked.values())


def test_nothing_to_rerun_after_the_xtreme_r_demo(demo_run):
    proc = snakemake(demo_run, "-n", "--configfile", DEMO_CONFIG)
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-2000:]
