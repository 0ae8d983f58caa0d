"""One results folder per experiment, `snakemake --directory`, and a task added as an entry
and used in a new intermediate config: only its own jobs and the tables run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_repo, planned_jobs, snakemake

pytestmark = pytest.mark.integration

BACKBONE = "xlmr_tiny"


def small_demo(repo: Path, name: str, seeds: list[int], **extra) -> str:
    """The demo shrunk to one backbone, one target and one seed: cheap to run."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["backbones"] = {BACKBONE: config["backbones"][BACKBONE]}
    config["backbones"][BACKBONE]["demo"]["pretraining"]["steps"] = 50
    config["models"]["demo_pretraining"]["text"] = {"mnli": ["train"], "xnli": ["dev"]}
    config.update(
        seeds=seeds,
        targets=["xnli"],
        intermediate={"none": {"tasks": []}, "mnli": {"tasks": ["mnli"]}},
        transfer={"baseline": "zero_shot", "settings": {"zero_shot": {}}},
    )
    for key, value in extra.items():
        config[key] = value if not isinstance(value, dict) else {**config.get(key, {}), **value}
    (repo / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return f"{name}.yaml"


@pytest.fixture(scope="module")
def small_experiment(tmp_path_factory) -> Path:
    """A checkout where a small demo ran as experiment `first` (the default demo and the
    XTREME-R demo side by side are tested in test_xtreme_r.py)."""
    repo = copy_repo(tmp_path_factory.mktemp("repo"))
    proc = snakemake(repo, "--cores", "2", "--configfile", small_demo(repo, "first", [1]))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "xstilts: results of experiment first" in proc.stdout + proc.stderr
    return repo


def test_an_experiment_writes_only_under_its_own_folders(small_experiment):
    repo = small_experiment
    assert {p.name for p in (repo / "results").iterdir()} <= {"first", "cache", "README.md"}
    assert {p.name for p in (repo / "logs").iterdir()} == {"first"}
    metrics = sorted(p.name for p in (repo / "results/first/metrics").rglob("seed*.json"))
    assert metrics == ["seed1.json", "seed1.json"], "none and mnli, one seed, one target"
    cost = (repo / "results/first/tables/cost.csv").read_text()
    trainings = [line for line in cost.splitlines() if line.startswith("train_target,")]
    own = len(list((repo / "results/first/benchmarks/train_target").rglob("*.tsv")))
    assert trainings and int(trainings[0].split(",")[1]) == own == 2


def test_an_experiment_name_that_is_no_folder_name_stops_the_config_check(small_experiment):
    path = small_demo(small_experiment, "bad_name", [1], experiment="cache")
    proc = snakemake(small_experiment, "-n", "--configfile", path)
    assert proc.returncode != 0 and "experiment" in proc.stdout + proc.stderr


def test_a_task_entry_used_in_a_new_intermediate_config_runs_only_its_jobs_and_the_tables(small_experiment):
    repo = small_experiment
    shutil.copytree(REPO / "examples" / "tasks", repo / "my_tasks")
    config = yaml.safe_load((repo / "first.yaml").read_text())
    config.update(experiment="first", task_catalogues=["my_tasks"])
    config["tasks"]["snli"] = {"hub": {"path": "stanfordnlp/snli"}, "batch_size": 16, "epochs": 2, "max_length": 64}
    (repo / "first_catalogue.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert planned_jobs(repo, "--configfile", "first_catalogue.yaml") == set(), "a catalogue alone reruns nothing"
    config["intermediate"]["snli"] = {"tasks": ["snli"]}
    (repo / "first_snli.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = planned_jobs(repo, "--configfile", "first_snli.yaml")
    rules = {rule for rule, _ in jobs}
    assert {out for rule, out in jobs if rule == "prepare_task_data"} == {
        "results/first/data/snli/train.parquet",
        "results/first/data/snli/dev.parquet",
    }
    assert {out for rule, out in jobs if rule in ("train_intermediate", "train_target", "evaluate_target")} == {
        f"results/first/intermediate/{BACKBONE}/snli/seed1/encoder",
        f"results/first/target/{BACKBONE}/snli/xnli/en.dev-en/seed1/model",
        f"results/first/metrics/{BACKBONE}/zero_shot/snli/xnli/seed1.json",
    }
    assert not rules & {"prepare_backbone", "prepare_translator", "prepare_translator_to_english"}, (
        "the demo models are pre-trained on declared text, not on every task of the grid"
    )
    proc = snakemake(repo, "--cores", "2", "--configfile", "first_snli.yaml")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| snli" in (repo / f"results/first/tables/{BACKBONE}/main.md").read_text()


def test_the_workflow_runs_from_another_working_directory(small_experiment, tmp_path):
    """`snakemake --directory`: outputs under that directory, repository files found."""
    repo = small_experiment
    proc = snakemake(
        repo,
        "-n",
        "--directory",
        str(tmp_path),
        "--snakefile",
        str(repo / "Snakefile"),
        "--configfile",
        str(repo / "first.yaml"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results/first/tables" in proc.stdout


def test_a_sweep_selects_each_seeds_point_on_english_dev_and_discards_what_it_does_not_keep(small_experiment):
    """Two learning rates, two seeds, the default disk policy: the metric files and the sweep
    table name the point selected on dev; every target model is gone once evaluated, its
    record stays; a rerun plans nothing."""
    repo = small_experiment
    config = yaml.safe_load((repo / "first.yaml").read_text())
    config.update(
        experiment="swept",
        seeds=[1, 2],
        intermediate={"none": {"tasks": []}},
        sweep={"learning_rate": [2.0e-3, 1.0e-7]},
        disk={"keep_target_models": "none", "keep_intermediate_models": "while_needed"},
    )
    config["tasks"]["xnli"]["epochs"] = 1  # four trainings: short ones
    (repo / "swept.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(repo, "--cores", "2", "--configfile", "swept.yaml")
    assert proc.returncode == 0, proc.stderr[-4000:]
    root = repo / "results/swept"
    table = (root / f"tables/{BACKBONE}/sweep.md").read_text()
    for seed in (1, 2):
        (metric_file,) = root.glob(f"metrics/{BACKBONE}/*/none/xnli/seed{seed}.json")
        (record,) = json.loads(metric_file.read_text())["sweep"].values()
        run = root / f"target/{BACKBONE}/none/xnli/en.dev-en/seed{seed}"
        for point in ("lr0.002", "lr1e-07"):  # each point's English dev score, as its training kept it
            kept = json.loads((run / "sweep" / point / "train_log.json").read_text())["best"]["score"]
            assert record["scores"][point] == kept
        assert record["selected"] == max(record["scores"], key=record["scores"].get)
        assert record["selected_on"] == "dev-en", "English dev: the zero-shot rule"
        assert f"| {seed} | **{record['selected']}** |" in table
        assert json.loads((run / "train_log.json").read_text())["settings"]["learning_rate"] == float(
            record["selected"].removeprefix("lr")
        )
        assert not (run / "model").exists() and not list(run.glob("sweep/*/model")), "discarded once evaluated"
        assert (run / "curve.csv").is_file() and metric_file.with_suffix(".predictions").is_dir()
    assert planned_jobs(repo, "--configfile", "swept.yaml") == set(), "discarded models are not retrained"


def test_keep_best_links_each_configs_best_seed_under_kept(small_experiment):
    """`disk.keep_target_models: best` on a finished grid: only the `kept/` links run, each
    the model of the seed with the best dev score, linked, not copied."""
    repo = small_experiment
    config = yaml.safe_load((repo / "first.yaml").read_text())
    config.update(experiment="first", disk={"keep_target_models": "best", "keep_intermediate_models": "all"})
    (repo / "first_best.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    kept = {f"results/first/kept/{BACKBONE}/{name}/xnli/en.dev-en/model" for name in ("none", "mnli")}
    planned = planned_jobs(repo, "--configfile", "first_best.yaml")
    assert {out for rule, out in planned if rule == "keep_best_target_model"} == kept
    assert not {rule for rule, _ in planned if rule.startswith(("train_", "evaluate_", "prepare_"))}, (
        "the models are there: nothing is retrained (the tables may be redone for this config)"
    )
    proc = snakemake(repo, "--cores", "2", "--configfile", "first_best.yaml")
    assert proc.returncode == 0, proc.stderr[-4000:]
    for path in kept:
        record = json.loads((repo / path / "sweep_selection.json").read_text())
        assert record["selected"] == "seed1" and record["selected_on"] == "dev-en"
        weights = next((repo / path).glob("*.safetensors"))
        source = repo / path.replace("kept/", "target/").replace("/model", "/seed1/train_log.json")
        assert json.loads(source.read_text())["best"]["score"] == record["scores"]["seed1"]
        assert weights.stat().st_nlink >= 1 and (repo / path / "heads.pt").is_file()
    assert planned_jobs(repo, "--configfile", "first_best.yaml") == set()
