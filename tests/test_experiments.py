"""One results folder per experiment: two configs run one after the other in one checkout
keep their own models, tables and cost table; switching back plans nothing; a task added as
an entry and used in a new intermediate config runs only its own jobs and the tables."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_repo, planned_jobs, snakemake

BACKBONE = "xlmr_tiny"


def small_demo(repo: Path, name: str, seeds: list[int], **extra) -> str:
    """The demo shrunk to one backbone, one target and one seed: cheap enough to run twice."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["backbones"] = {BACKBONE: config["backbones"][BACKBONE]}
    config["backbones"][BACKBONE]["demo"]["pretraining"]["steps"] = 50
    config["models"]["demo_pretraining"]["text"] = {"mnli": ["train"], "xnli": ["dev"]}
    config.update(seeds=seeds, targets=["xnli"], intermediate={"none": {"tasks": []}, "mnli": {"tasks": ["mnli"]}},
                  transfer={"baseline": "zero_shot", "settings": {"zero_shot": {}}})
    for key, value in extra.items():
        config[key] = value if not isinstance(value, dict) else {**config.get(key, {}), **value}
    (repo / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return f"{name}.yaml"


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def two_experiments(tmp_path_factory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("repo"))
    first = small_demo(repo, "first", [1])
    proc = snakemake(repo, "--cores", "2", "--configfile", first)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "xstilts: results of experiment first" in proc.stdout + proc.stderr
    (repo / "first_after_its_run.txt").write_text("\n".join(f"{k} {v}" for k, v in digests(repo / "results/first").items()))
    second = small_demo(repo, "second", [2])
    proc = snakemake(repo, "--cores", "2", "--configfile", second)
    assert proc.returncode == 0, proc.stderr[-4000:]
    repo.joinpath("second_stdout.txt").write_text(proc.stdout + proc.stderr)
    return repo


def test_a_second_experiment_leaves_the_first_ones_outputs_intact(two_experiments):
    repo = two_experiments
    before = dict(line.split(" ") for line in (repo / "first_after_its_run.txt").read_text().splitlines())
    assert before and digests(repo / "results/first") == before
    for name in ("first", "second"):
        assert (repo / f"results/{name}/tables/{BACKBONE}/main.md").is_file()
        assert list((repo / f"logs/{name}").rglob("*.log")), "each experiment logs under logs/<experiment>/"
    assert not (repo / "results/tables").exists() and not (repo / "results/models").exists()


def test_switching_back_plans_nothing(two_experiments):
    assert planned_jobs(two_experiments, "--configfile", "first.yaml") == set()
    assert planned_jobs(two_experiments, "--configfile", "second.yaml") == set()


def test_the_summary_and_the_cost_table_speak_of_their_own_experiment(two_experiments):
    repo = two_experiments
    out = (repo / "second_stdout.txt").read_text()
    assert "results of experiment second" in out and "results/first" not in out
    for name, seed in (("first", 1), ("second", 2)):
        metrics = sorted(p.name for p in (repo / f"results/{name}/metrics").rglob("seed*.json"))
        assert metrics and set(metrics) == {f"seed{seed}.json"}, "each experiment's own runs"
        cost = (repo / f"results/{name}/tables/cost.csv").read_text()
        trainings = [line for line in cost.splitlines() if line.startswith("train_target,")]
        own = len(list((repo / f"results/{name}/benchmarks/train_target").rglob("*.tsv")))
        assert trainings and int(trainings[0].split(",")[1]) == own == 2, "two configs, one seed, one target"


def test_an_experiment_name_that_is_no_folder_name_stops_the_config_check(two_experiments):
    path = small_demo(two_experiments, "bad_name", [1], experiment="cache")
    proc = snakemake(two_experiments, "-n", "--configfile", path)
    assert proc.returncode != 0 and "experiment" in proc.stdout + proc.stderr


def test_a_task_entry_used_in_a_new_intermediate_config_runs_only_its_jobs_and_the_tables(two_experiments):
    repo = two_experiments
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
        "results/first/data/snli/train.parquet", "results/first/data/snli/dev.parquet"}
    assert {out for rule, out in jobs if rule in ("train_intermediate", "train_target", "evaluate_target")} == {
        f"results/first/intermediate/{BACKBONE}/snli/seed1/encoder",
        f"results/first/target/{BACKBONE}/snli/xnli/en.dev-en/seed1/model",
        f"results/first/metrics/{BACKBONE}/zero_shot/snli/xnli/seed1.json"}
    assert not rules & {"prepare_backbone", "prepare_translator", "prepare_translator_to_english"}, \
        "the demo models are pre-trained on declared text, not on every task of the grid"
    proc = snakemake(repo, "--cores", "2", "--configfile", "first_snli.yaml")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| snli" in (repo / f"results/first/tables/{BACKBONE}/main.md").read_text()


def test_the_workflow_runs_from_another_working_directory(two_experiments, tmp_path):
    """`snakemake --directory`: outputs under that directory, repository files found."""
    repo = two_experiments
    proc = snakemake(repo, "-n", "--directory", str(tmp_path), "--snakefile", str(repo / "Snakefile"),
                     "--configfile", str(repo / "first.yaml"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results/first/tables" in proc.stdout
