"""An intermediate config: one record (spec/intermediate_entry.py) that parses the config's
entry, holds it to its keys' bounds, generates the schema's block and answers what the grid
asks of it (its data language, whether it trains at all, its English counterpart)."""

from __future__ import annotations

import pytest

from workflow_scripts.spec import schema
from workflow_scripts.spec.basics import InputError, load_yaml
from workflow_scripts.spec.intermediate_entry import IntermediateEntry, entries
from workflow_scripts.spec.schema_block import block
from workflow_scripts.workflow import grid

pytestmark = pytest.mark.unit


def test_the_schema_file_declares_no_key_and_validates_the_records_block():
    written = load_yaml(schema.SCHEMA_FILE.read_text())["$defs"]["intermediate_config"]
    assert "properties" not in written
    rendered = schema.config_schema()["$defs"]["intermediate_config"]
    assert rendered["properties"] == block(IntermediateEntry)["properties"]
    assert rendered["required"] == ["tasks"] and rendered["additionalProperties"] is False
    assert rendered["properties"]["tasks"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert rendered["properties"]["mlm"]["default"] is False
    # absent, not null: a config that names no language trains on English data
    assert "default" not in rendered["properties"]["language"]
    assert rendered["properties"]["language"]["pattern"] == "^[a-z]{2,3}$"


def test_parsing_holds_the_entry_to_its_bounds_and_names_the_key():
    with pytest.raises(InputError, match=r"intermediate\.x\.language: 'German' does not match"):
        IntermediateEntry.parse({"tasks": ["mnli"], "language": "German"}, "intermediate.x")
    with pytest.raises(InputError, match=r"intermediate\.x\.learning_rate: 0 must be greater than 0"):
        IntermediateEntry.parse({"tasks": ["mnli"], "learning_rate": 0}, "intermediate.x")
    with pytest.raises(InputError, match=r"intermediate\.x\.tasks: \['mnli', 'mnli'\] names an item twice"):
        IntermediateEntry.parse({"tasks": ["mnli", "mnli"]}, "intermediate.x")
    with pytest.raises(InputError, match=r"intermediate\.x: config key 'tasks' is missing"):
        IntermediateEntry.parse({"mlm": True}, "intermediate.x")


def test_what_the_grid_reads_of_an_entry():
    config = {
        "intermediate": {
            "none": {"tasks": []},
            "mlm_only": {"tasks": [], "mlm": True},
            "mnli": {"tasks": ["mnli"]},
            "mnli_de": {"tasks": ["mnli"], "language": "de"},
            "mnli_squad_ru": {"tasks": ["squad", "mnli"], "language": "ru"},
            "squad_mnli": {"tasks": ["mnli", "squad"]},
        }
    }
    found = entries(config)
    assert [n for n, e in found.items() if e.trains_nothing] == ["none"]
    assert grid.is_baseline(config, "none") and not grid.is_baseline(config, "mlm_only")
    assert found["mnli"].data_language == "en" and not found["mnli"].translated
    assert found["mnli_de"].data_language == "de" and found["mnli_de"].translated
    assert grid.translated_counterparts(config) == {
        "mnli_de": {"language": "de", "english": "mnli"},
        "mnli_squad_ru": {"language": "ru", "english": "squad_mnli"},  # same tasks, in any order
    }
    # an entry edited in place is parsed again
    config["intermediate"]["mnli"]["mlm"] = True
    assert entries(config)["mnli"].mlm and grid.translated_counterparts(config)["mnli_de"]["english"] is None
