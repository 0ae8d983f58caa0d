"""Tasks declared as data: the entries are checked, and a job's rerun trigger covers only the
entries and converters of its own tasks (adding or editing another task reruns nothing)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_repo, planned_jobs
from workflow_scripts.data.loaders import load_converter
from workflow_scripts.data.prepare import prepare, read_table
from workflow_scripts.spec import tasks
from workflow_scripts.spec.codehash import task_fingerprint
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.workflow import config_layers

EXAMPLE = REPO / "examples" / "tasks"


@pytest.mark.unit
def test_every_built_in_task_is_an_entry_of_the_catalogue_folder():
    files = sorted(p.stem for p in tasks.BUILTIN_CATALOGUE.glob("*.yaml"))
    assert files == sorted(n for n, t in tasks.TASKS.items() if Path(t.entry_file).parent == tasks.BUILTIN_CATALOGUE)
    assert tasks.CONTROLS["snli_ve"] == ("snli_caption", "hypothesis_only")
    assert tasks.PROVIDED_TRANSLATIONS == {"mnli": "xnli_mt"}


@pytest.mark.unit
@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda e: e.update(colour="red"), "unknown keys ['colour']"),
        (lambda e: e.update(format="regression"), "format 'regression' is not one of"),
        (lambda e: e.update(metric="bleu"), "metric 'bleu' is not one of"),
        (lambda e: e.update(name="snli2"), "name 'snli2' differs from the file name 'snli'"),
        (lambda e: e.update(splits=["train", "validation"]), "splits ['validation'] are not splits"),
        (lambda e: e.pop("splits"), "key 'splits' is required"),
        (lambda e: e.update(map_convention="mrr"), "map_convention 'mrr' is not one of lareqa, mewslix"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_file_and_key(tmp_path, edit, message):
    entry = yaml.safe_load((EXAMPLE / "snli.yaml").read_text())
    edit(entry)
    (tmp_path / "snli.yaml").write_text(yaml.safe_dump(entry))
    with pytest.raises(tasks.CatalogueError) as err:
        tasks.read_catalogue(tmp_path)
    assert str(tmp_path / "snli.yaml") in str(err.value) and message in str(err.value)


@pytest.mark.unit
def test_a_task_declared_twice_is_refused(tmp_path):
    shutil.copy(REPO / "tasks" / "mnli.yaml", tmp_path / "mnli.yaml")
    with pytest.raises(tasks.CatalogueError, match="declared twice"):
        tasks.use_catalogues([tmp_path])


@pytest.mark.unit
def test_a_user_task_loads_through_its_own_converter_and_reports_what_it_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    tasks.use_catalogues([EXAMPLE])
    snli = tasks.get_task("snli")
    assert snli.format == tasks.CLASSIFICATION and callable(load_converter(snli))
    out = tmp_path / "train.parquet"
    settings = DataSettings.parse(
        {"source": "local", "local_root": str(REPO / "demo" / "hub"), "hub": {"path": "stanfordnlp/snli"}}
    )
    prepare("snli", "train", settings, out)
    table = read_table(out, snli.format)
    raw = (REPO / "demo/hub/stanfordnlp/snli/plain_text/train.jsonl").read_text().splitlines()
    unlabelled = sum(1 for line in raw if yaml.safe_load(line)["label"] == -1)
    assert unlabelled > 0 and table.num_rows == len(raw) - unlabelled
    assert b"dropped_without_consensus" in table.schema.metadata[b"xstilts"]
    # the user's converter is part of its task's fingerprint, the built-in ones are not affected
    fingerprint = task_fingerprint(["snli", "xnli"])
    assert fingerprint["snli"]["converter"] != fingerprint["xnli"]["converter"]
    assert "description" not in fingerprint["snli"]


def _touch_every_output(repo: Path, configfile: str) -> None:
    """A finished grid without running it: every output of the grid exists and Snakemake
    records every job's params as if it had run (`--touch --forceall`; the touch executor's
    0.1 s pause per job is dropped, the outputs are made in the DAG's order)."""
    summary = subprocess.run(
        [sys.executable, "-m", "snakemake", "--configfile", configfile, "--summary"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[1:]
    directory_rules = {
        "prepare_backbone",
        "prepare_translator",
        "prepare_translator_to_english",
        "convert_translator",
        "prepare_vision_encoder",
        "embed_images",
        "train_intermediate",
        "train_target",
        "train_target_stage",
        "train_target_sweep_point",
        "select_target_hyperparameters",
        "train_few_shot_candidate",
        "select_few_shot_learning_rate",
        "keep_best_target_model",
        "collect_submission",
    }
    # a trained model's record beside it (curve.csv, train_log.json) is a file
    record = (".csv", ".json")
    for line in summary:
        path, _, rule, *_ = line.split("\t")
        target = repo / path
        # a run's predictions and a prompted job's lm-eval folder are directories beside a file
        if (rule in directory_rules and not path.endswith(record)) or path.endswith((".predictions", ".lm_eval")):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
    code = (
        "import sys, snakemake.executors.touch as touch; touch.Executor.SLEEPING_TIME = 0;"
        " from snakemake.cli import main; sys.argv[0] = 'snakemake'; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "--touch", "--forceall", "--cores", "1", "--configfile", configfile],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert planned_jobs(repo, "--configfile", configfile) == set()


@pytest.fixture(scope="module")
def finished_paper_grid(tmp_path_factory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("paper"))
    _touch_every_output(repo, "config/paper.yaml")
    return repo


def _paper_with(repo: Path, **changes) -> str:
    config = config_layers.load([repo / "config/paper.yaml"])
    config.update(experiment="paper", **changes)
    (repo / "paper_edited.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return "paper_edited.yaml"


@pytest.mark.integration
def test_adding_a_task_to_the_paper_grids_catalogue_reruns_nothing(finished_paper_grid):
    repo = finished_paper_grid
    shutil.copytree(EXAMPLE, repo / "my_tasks", dirs_exist_ok=True)
    assert planned_jobs(repo, "--configfile", _paper_with(repo, task_catalogues=["my_tasks"])) == set()


@pytest.mark.integration
def test_editing_a_tasks_prose_reruns_nothing_editing_its_facts_reruns_its_jobs(finished_paper_grid):
    repo = finished_paper_grid
    entry = repo / "tasks" / "pawsx.yaml"
    original = entry.read_text()
    try:
        entry.write_text(original.replace('description: "', 'description: "Reworded. '))
        assert planned_jobs(repo, "--configfile", "config/paper.yaml") == set()
        # the documented sizes (the cost model's) are no fact a job reads
        assert "\n  test: 2000\n" in original
        entry.write_text(original.replace("\n  test: 2000\n", "\n  test: 1999\n"))
        assert planned_jobs(repo, "--configfile", "config/paper.yaml") == set()
        entry.write_text(original.replace('labels: ["different", "paraphrase"]', 'labels: ["paraphrase", "different"]'))
        jobs = planned_jobs(repo, "--configfile", "config/paper.yaml")
    finally:
        entry.write_text(original)
    config = config_layers.load([repo / "config/paper.yaml"])
    runs = len(config["intermediate"]) * len(config["seeds"])
    work = {(rule, out) for rule, out in jobs if rule in ("prepare_task_data", "train_target", "evaluate_target")}
    assert all("/pawsx/" in out for _, out in work), "only PAWS-X's own jobs"
    assert sum(rule == "train_target" for rule, _ in work) == sum(rule == "evaluate_target" for rule, _ in work) == runs
    assert sum(rule == "prepare_task_data" for rule, _ in work) == 3
    assert not {rule for rule, _ in jobs} & {"train_intermediate", "translate_task_data", "prepare_backbone"}


@pytest.mark.unit
def test_further_hub_sources_declare_the_languages_their_converters_read_from_them():
    """The languages an entry says a further source is read for (which the lock and the
    preflight go by) are those its converter sends there: the benchmark's languages its
    task's own Hub configs lack."""
    from workflow_scripts.data.loaders import spans, xtreme
    from workflow_scripts.spec.tasks import get_task
    from workflow_scripts.workflow import grid_checks

    declared = {
        (t, s): set(get_task(t).hub_source(s).languages)
        for t, s in (("panx", "wikiann"), ("xquad", "xquad"), ("tatoeba", "tatoeba"))
    }
    assert declared[("panx", "wikiann")] == set(grid_checks.target_languages("panx")) - xtreme.PANX_XTREME_LANGUAGES
    assert declared[("xquad", "xquad")] == set(grid_checks.target_languages("xquad")) - spans.XQUAD_XTREME_LANGUAGES
    assert declared[("tatoeba", "tatoeba")] == set(xtreme.TATOEBA_EXTRA_CODES)
    assert get_task("pawsx").hub_source("pawsx").is_read(["en"], {"pawsx_path": "x/y"})
    assert not get_task("pawsx").hub_source("pawsx").is_read(["en"], {})
