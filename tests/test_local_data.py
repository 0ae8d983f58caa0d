"""A task read from local files of its own (tasks.<name>.data): the readers (JSON Lines, CSV,
Parquet), the column mapping with its repairs and refusals, the provenance, and the config
check that stops a grid before any job runs. The same task in a Hub-sourced grid, through
Snakemake and a Hub server on loopback: tests/test_hub.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from workflow_scripts.spec import tasks
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings

pytestmark = pytest.mark.unit

ENTRY = {
    "name": "my_nli",
    "format": "classification",
    "metric": "accuracy",
    "splits": ["train", "dev"],
    "labels": ["entailment", "neutral", "contradiction"],
}
ROWS = [
    {"premise": "A dog runs.", "hypothesis": "An animal moves.", "gold": "entailment"},
    {"premise": "A dog runs.", "hypothesis": "The dog sleeps.", "gold": "contradiction"},
    {"premise": "A cat sits.", "hypothesis": "The cat is black.", "gold": "neutral"},
]
COLUMNS = {"text_a": "premise", "text_b": "hypothesis", "label": "gold"}


@pytest.fixture
def my_nli(tmp_path, monkeypatch):
    """The entry registered for this test only; its folder."""
    folder = tmp_path / "my_tasks"
    folder.mkdir()
    (folder / "my_nli.yaml").write_text(yaml.safe_dump(ENTRY))
    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    tasks.use_catalogues([folder])
    return folder


def write(path: Path, rows: list[dict], file_type: str) -> Path:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    if file_type == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif file_type == "csv":
        pcsv.write_csv(pa.Table.from_pylist(rows), path)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def prepared(tmp_path: Path, file: Path, split: str = "train", **data) -> tuple[list[dict], dict]:
    from workflow_scripts.data.prepare import prepare, provenance, read_table
    from workflow_scripts.workflow import local_data

    spec = local_data.from_block("my_nli", {"files": {split: str(file)}, "columns": COLUMNS, **data})
    settings = DataSettings.parse({"source": "files", "data": spec.settings(split), "options": {}, "languages": ["en"]})
    out = tmp_path / f"{split}.parquet"
    prepare("my_nli", split, settings, out)
    return read_table(out, "classification").to_pylist(), provenance(out)


@pytest.mark.parametrize("file_type", ["jsonl", "csv", "parquet"])
def test_each_file_type_gives_the_same_rows_and_records_its_sha256(my_nli, tmp_path, file_type):
    file = write(tmp_path / "data" / f"train.{file_type}", ROWS, file_type)
    rows, origin = prepared(tmp_path, file)
    assert rows == [
        {"id": "my_nli-train-1", "lang": "en", "text_a": "A dog runs.", "text_b": "An animal moves.", "label": 0},
        {"id": "my_nli-train-2", "lang": "en", "text_a": "A dog runs.", "text_b": "The dog sleeps.", "label": 2},
        {"id": "my_nli-train-3", "lang": "en", "text_a": "A cat sits.", "text_b": "The cat is black.", "label": 1},
    ]
    assert origin["source"] == "files" and origin["file_type"] == file_type and origin["file"] == str(file)
    assert origin["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert origin["resolved_sha"] is None and origin["report"] == {"file_rows": 3, "repairs": {}}


def test_repairable_rows_are_repaired_and_counted(my_nli, tmp_path):
    rows = [
        {**ROWS[0], "id": "a", "gold": " Entailment"},  # case and a space
        {**ROWS[1], "id": "a", "gold": "2"},  # an index as text; an id given twice
        {**ROWS[2], "id": "", "gold": 1.0},  # a blank id; an index as a float
    ]
    got, origin = prepared(tmp_path, write(tmp_path / "train.jsonl", rows, "jsonl"))
    assert [r["label"] for r in got] == [0, 2, 1]
    assert [r["id"] for r in got] == ["a", "a-my_nli-train-2", "my_nli-train-3"]
    assert origin["report"]["repairs"] == {"blank_id": 1, "label_spelling": 1, "number_as_text": 2, "repeated_id": 1}


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"gold": "maybe"}, "label 'maybe' not in ['entailment', 'neutral', 'contradiction']"),
        ({"gold": 7}, "label 7 outside 0..2"),
        ({"hypothesis": None}, "no value for text_b (file column 'hypothesis')"),
        ({"premise": 12}, "text_a (file column 'premise') is 12, not text"),
    ],
)
def test_an_unrepairable_row_stops_the_job_naming_file_and_row(my_nli, tmp_path, bad, message):
    file = write(tmp_path / "train.jsonl", [ROWS[0], ROWS[1], {**ROWS[2], **bad}], "jsonl")
    with pytest.raises(InputError) as err:
        prepared(tmp_path, file)
    assert f"{file}, row 3" in str(err.value) and message in str(err.value)
    assert not (tmp_path / "train.parquet").exists()


def register(folder: Path, monkeypatch, **entry) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{entry['name']}.yaml").write_text(yaml.safe_dump({"metric": "accuracy", **entry}))
    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    tasks.use_catalogues([folder])


def test_other_formats_map_their_columns_with_their_repairs(tmp_path, monkeypatch):
    """A tagging task's lists written as CSV text, a span task's answer off its offset."""
    from workflow_scripts.data.prepare import prepare, provenance, read_table

    register(tmp_path / "t", monkeypatch, name="my_pos", format="tagging", splits=["test"], labels=["NOUN", "VERB"])
    file = write(tmp_path / "pos.csv", [{"words": "dogs bark", "tags": "NOUN VERB"}], "csv")
    data = {"files": {"test": str(file)}, "file_type": "csv", "columns": {"tokens": "words"}, "language": "en"}
    prepare("my_pos", "test", DataSettings.parse({"source": "files", "data": data}), tmp_path / "pos.parquet")
    row = read_table(tmp_path / "pos.parquet", "tagging").to_pylist()[0]
    assert (row["tokens"], row["tags"]) == (["dogs", "bark"], ["NOUN", "VERB"])
    assert provenance(tmp_path / "pos.parquet")["report"]["repairs"] == {"list_as_text": 2}

    register(tmp_path / "t", monkeypatch, name="my_qa", format="span", metric="squad_v1", splits=["dev"])
    context = "The cat sat on the mat."
    qa = {"context": context, "question": "Where?", "answer_texts": ["the mat"], "answer_starts": [3]}
    file = write(tmp_path / "qa.jsonl", [qa], "jsonl")
    data = {"files": {"dev": str(file)}, "file_type": "jsonl", "columns": {}, "language": "en"}
    prepare("my_qa", "dev", DataSettings.parse({"source": "files", "data": data}), tmp_path / "qa.parquet")
    assert read_table(tmp_path / "qa.parquet").to_pylist()[0]["answer_starts"] == [context.index("the mat")]
    assert provenance(tmp_path / "qa.parquet")["report"]["repairs"] == {"answer_relocated": 1}
    write(file, [qa, {**qa, "answer_texts": ["the dog"]}], "jsonl")
    with pytest.raises(InputError, match=f"{file}, row 2: answer 'the dog' is not at offset 3, and is not in"):
        prepare("my_qa", "dev", DataSettings.parse({"source": "files", "data": data}), tmp_path / "qa.parquet")


def test_a_line_that_is_no_json_is_named(my_nli, tmp_path):
    file = tmp_path / "train.jsonl"
    file.write_text(json.dumps(ROWS[0]) + "\n\n" + '{"premise": "A dog\n')
    with pytest.raises(InputError, match=f"corrupt data file {file}, line 3: not JSON"):
        prepared(tmp_path, file)


def test_a_multilingual_file_keeps_the_languages_asked_for(my_nli, tmp_path):
    from workflow_scripts.data.prepare import prepare, provenance, read_table
    from workflow_scripts.workflow import local_data

    rows = [{**r, "language": lang} for lang in ("de", "sw", "fr") for r in ROWS]
    file = write(tmp_path / "dev.csv", rows, "csv")
    spec = local_data.from_block("my_nli", {"files": {"dev": str(file)}, "columns": {**COLUMNS, "lang": "language"}})
    settings = DataSettings.parse({"source": "files", "data": spec.settings("dev"), "languages": ["de", "sw"]})
    prepare("my_nli", "dev", settings, tmp_path / "dev.parquet")
    assert [r["lang"] for r in read_table(tmp_path / "dev.parquet").to_pylist()] == ["de"] * 3 + ["sw"] * 3
    assert provenance(tmp_path / "dev.parquet")["report"]["other_languages"] == {"fr": 3}
    settings = settings.replace(languages=["de", "ru"])
    with pytest.raises(InputError, match=r"no examples for languages \['ru'\]"):
        prepare("my_nli", "dev", settings, tmp_path / "dev.parquet")


def test_the_entrys_own_converter_reads_the_file_as_a_hub_dataset(tmp_path, monkeypatch):
    """converter: entry - the SNLI example's converter reads a JSON Lines file in the Hub's
    columns; a converter asking for a second config is refused (one file, one table)."""
    from workflow_scripts.data.loaders.local_files import FileSource
    from workflow_scripts.data.prepare import prepare, provenance, read_table

    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    tasks.use_catalogues([REPO / "examples" / "tasks"])
    rows = [{"premise": "A dog runs.", "hypothesis": "It moves.", "label": 0}, {**ROWS[1], "label": -1}]
    file = write(tmp_path / "snli.jsonl", rows, "jsonl")
    data = {"files": {"train": str(file)}, "file_type": "jsonl", "converter": "entry", "columns": {}, "language": "en"}
    prepare("snli", "train", DataSettings.parse({"source": "files", "data": data}), tmp_path / "out.parquet")
    assert [r["text_b"] for r in read_table(tmp_path / "out.parquet").to_pylist()] == ["It moves."]
    origin = provenance(tmp_path / "out.parquet")
    assert origin["report"] == {"dropped_without_consensus": 1} and origin["source"] == "files"

    source = FileSource(str(file), "jsonl")
    assert len(list(source.rows("de", "test"))) == 2
    with pytest.raises(InputError, match="holds one table.*configs \\['de', 'fr'\\]"):
        list(source.rows("fr", "test"))


# ----- the config check ----------------------------------------------------------------------


def task_config(tmp_path: Path, **data) -> dict:
    train = write(tmp_path / "data" / "train.jsonl", ROWS, "jsonl")
    dev = write(tmp_path / "data" / "dev.csv", ROWS, "csv")
    block = {"files": {"train": str(train), "dev": str(dev)}, "columns": dict(COLUMNS), **data}
    return {"tasks": {"my_nli": {"data": block}, "mnli": {"hub": {"path": "nyu-mll/glue"}}}}


def refused(config: dict) -> str:
    from workflow_scripts.workflow import local_data

    with pytest.raises(local_data.LocalDataError) as err:
        local_data.check_config(config)
    return str(err.value)


def test_a_good_config_passes_and_each_split_reads_its_own_file(my_nli, tmp_path):
    from workflow_scripts import preflight
    from workflow_scripts.workflow import grid_settings, hub_sources, local_data

    config = task_config(tmp_path)
    local_data.check_config(config)
    train = grid_settings.data_settings(config, "my_nli", "train")
    assert train.source == "files" and train.data.files == {"train": str(tmp_path / "data" / "train.jsonl")}
    assert grid_settings.data_settings(config, "my_nli", "dev").data.file_type == "csv"
    # moving the training file changes the training split's settings only
    before = grid_settings.data_settings(config, "my_nli", "dev")
    config["tasks"]["my_nli"]["data"]["files"]["train"] = str(tmp_path / "moved.jsonl")
    assert grid_settings.data_settings(config, "my_nli", "dev") == before
    assert local_data.split_file(config, "my_nli", "dev") == tmp_path / "data" / "dev.csv"
    assert local_data.split_file(config, "mnli", "dev") is None
    # in the demo grid read from the Hub, the lock and the preflight's Hub checks leave it out
    demo = yaml.safe_load((REPO / "config.yaml").read_text())
    demo["data"] = {"source": "hub"}
    demo["tasks"]["my_nli"] = config["tasks"]["my_nli"]
    demo["intermediate"]["my_nli"] = {"tasks": ["my_nli"]}
    assert "my_nli" in hub_sources.read_tasks(demo)
    keys = [repo.key for repo in hub_sources.dataset_repos(demo)]
    assert "tasks.mnli.hub" in keys and not [k for k in keys if "my_nli" in k]
    findings = {
        f.subject: f
        for f in preflight.check_local_data({**demo, "data": {"source": "local", "local_root": "demo/hub"}})
    }
    assert findings["tasks.my_nli.data.files.dev"].status == preflight.OK and "tasks.my_nli.hub.path" not in findings
    assert "tasks.mnli.hub.path" in findings


def test_config_check_refusals_name_the_key_and_the_file(my_nli, tmp_path):
    config = task_config(tmp_path)
    data = config["tasks"]["my_nli"]["data"]
    train = data["files"]["train"]

    data["columns"]["label"] = "verdict"
    said = refused(config)
    assert "config key tasks.my_nli.data.files.train:" in said and f"{train} (jsonl) has no column 'verdict'" in said
    assert "its columns: premise, hypothesis, gold" in said
    data["columns"] = dict(COLUMNS)

    data["files"]["train"] = str(tmp_path / "nowhere.jsonl")
    assert f"config key tasks.my_nli.data.files.train: file {tmp_path / 'nowhere.jsonl'} does not exist" in refused(
        config
    )
    data["files"]["train"] = str(write(tmp_path / "train.xlsx", ROWS, "jsonl"))
    assert "cannot tell the type of" in refused(config) and "set tasks.my_nli.data.file_type" in refused(config)
    data["files"]["train"] = train

    del data["files"]["dev"]
    assert "config key tasks.my_nli.data.files: no file for split 'dev'" in refused(config)
    data["files"].update(dev=train, test=train)
    assert "a file for split 'test'" in refused(config)
    del data["files"]["test"]

    data["columns"]["premise"] = "premise"
    assert "config key tasks.my_nli.data.columns: ['premise'] are not columns" in refused(config)
    del data["columns"]["premise"]

    data["language"] = "de"
    assert "config key tasks.my_nli.data.language: " in refused(config) and "'de' is not among" in refused(config)
    del data["language"]

    config["tasks"]["my_nli"]["hub"] = {"path": "me/my_nli"}
    assert "config key tasks.my_nli: give hub (a Hub dataset) or data (local files), not both" in refused(config)
    del config["tasks"]["my_nli"]["data"]
    # an entry without a converter has only its files to read
    assert "names no converter" in refused(config) and "give tasks.my_nli.data" in refused(config)


def test_the_schema_refuses_an_unknown_file_type_and_split(my_nli, tmp_path):
    from workflow_scripts.spec.schema import config_schema
    from workflow_scripts.workflow import grid, grid_checks

    config = task_config(tmp_path, file_type="xlsx")
    config["tasks"]["my_nli"]["data"]["files"]["valid"] = "x.jsonl"
    schema = {"type": "object", "properties": {"tasks": {"additionalProperties": {"$ref": "#/$defs/task"}}}}
    schema["$defs"] = config_schema()["$defs"]
    path = tmp_path / "schema.yaml"
    path.write_text(yaml.safe_dump(schema))
    with pytest.raises(grid.ConfigError) as err:
        grid_checks.check_schema(config, str(path))
    assert "config key tasks.my_nli.data.file_type: 'xlsx' is not one of ['jsonl', 'csv', 'parquet']" in str(err.value)
    assert "config key tasks.my_nli.data.files: 'valid' is not one of ['train', 'dev', 'test']" in str(err.value)
