"""A task entry: one record (spec/task_entry.py, with its local-files block from
spec/local_data.py) that parses ``tasks.<name>``, holds it to its keys' bounds, generates the
schema's ``$defs.task`` and is what the grid, its checks, the planners and the rules read."""

from __future__ import annotations

import copy

import pytest

from workflow_scripts.planning import memory_plan
from workflow_scripts.spec import formats, schema
from workflow_scripts.spec.basics import InputError, load_yaml
from workflow_scripts.spec.local_data import LocalData, LocalDataEntry, LocalFiles
from workflow_scripts.spec.schema_block import block
from workflow_scripts.spec.task_entry import TaskEntry, entries, entry_of, find
from workflow_scripts.workflow import grid

pytestmark = pytest.mark.unit

XNLI = {"hub": {"path": "facebook/xnli"}, "languages": ["en", "de"], "batch_size": 16}
OWN = {"data": {"files": {"train": "my/train.jsonl", "dev": "my/dev.csv"}, "columns": {"premise": "p"}}}


def test_the_schema_file_declares_no_key_of_a_task_and_validates_the_records_block():
    written = load_yaml(schema.SCHEMA_FILE.read_text())["$defs"]["task"]
    assert "properties" not in written
    rendered = schema.config_schema()["$defs"]["task"]
    assert rendered["properties"] == block(TaskEntry)["properties"] and "required" not in rendered
    hub = rendered["properties"]["hub"]
    assert hub["required"] == ["path"] and hub["properties"]["revision"]["default"] == "main"
    files = rendered["properties"]["data"]["properties"]["files"]
    assert files["propertyNames"] == {"enum": ["train", "dev", "test"]} and files["minProperties"] == 1
    languages = rendered["properties"]["languages"]
    assert languages["items"] == {"type": "string", "pattern": "^[a-z]{2,3}$"} and "default" not in languages
    assert rendered["properties"]["pooling"]["enum"] == ["family", "first", "mean", "last"]


def test_every_option_a_format_declares_is_a_key_of_a_task_entry():
    for name in formats.names():
        declared = set(formats.get_format(name).options)
        assert declared <= set(TaskEntry.keys()), f"formats/{name}.py declares {declared - set(TaskEntry.keys())}"


def test_parsing_holds_an_entry_to_its_bounds_and_names_the_key():
    with pytest.raises(InputError, match=r"tasks\.xnli\.languages\[1\]: 'German' does not match"):
        TaskEntry.parse({**XNLI, "languages": ["en", "German"]}, "tasks.xnli")
    with pytest.raises(InputError, match=r"tasks\.xnli\.max_length: 4 must be at least 8"):
        TaskEntry.parse({**XNLI, "max_length": 4}, "tasks.xnli")
    with pytest.raises(InputError, match=r"tasks\.xnli\.hub: config key 'path' is missing"):
        TaskEntry.parse({"hub": {"revision": "abc"}}, "tasks.xnli")
    with pytest.raises(InputError, match=r"tasks\.x\.data\.file_type: 'tsv' is not one of"):
        TaskEntry.parse({"data": {**OWN["data"], "file_type": "tsv"}}, "tasks.x")


def test_what_the_grid_reads_of_an_entry():
    config = {"data": {"source": "hub"}, "tasks": {"xnli": copy.deepcopy(XNLI), "my_nli": copy.deepcopy(OWN)}}
    xnli, own = entry_of(config, "xnli"), entry_of(config, "my_nli")
    assert xnli.languages_or(("en",)) == ("en", "de") and own.languages_or(("en",)) == ("en",)
    assert xnli.hub.revision == "main" and xnli.batch_size == 16 and xnli.max_length == 128
    assert xnli.local_data("xnli") is None
    found = own.local_data("my_nli")
    assert isinstance(found, LocalData) and found.key == "tasks.my_nli.data" and found.source_column("premise") == "p"
    # one split's job reads that split's file, its type told from the suffix
    assert found.settings("dev") == LocalFiles.parse(
        {"files": {"dev": "my/dev.csv"}, "file_type": "csv", "columns": {"premise": "p"}}
    )
    assert isinstance(own.data, LocalDataEntry) and own.data.file_type is None
    assert find(config, "paws_x") is None and list(entries(config)) == ["xnli", "my_nli"]
    # an entry edited in place is read again
    config["tasks"]["xnli"]["stages"] = []
    assert grid.target_stages(config, "xnli") == []


def test_the_memory_planner_reads_a_task_entry_the_schema_has_not_checked_and_names_a_bad_key():
    config = {"tasks": {"mnli": {"max_length": 256, "batch_size": 8}}}
    assert memory_plan.planned_task(config, "mnli").max_length == 256
    assert memory_plan.planned_task(config, "squad").max_length == TaskEntry().max_length  # no entry: defaults
    config["tasks"]["mnli"]["max_len"] = 64
    with pytest.raises(memory_plan.PlanError, match=r"tasks\.mnli: unknown config key 'max_len'"):
        memory_plan.planned_task(config, "mnli")
