"""Where a grid's data and models come from: the ``data`` and ``models`` blocks, each one
record (spec/source_entries.py) that generates its schema block and that the grid reads."""

from __future__ import annotations

import pytest

from workflow_scripts.spec import schema
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.source_entries import DataEntry, ModelsEntry, TranslatorEntry, data_of, models_of
from workflow_scripts.workflow import grid_settings

pytestmark = pytest.mark.unit


def test_the_blocks_are_generated_with_a_record_per_translator():
    rendered = schema.config_schema()
    assert rendered["properties"]["models"] == {"$ref": "#/$defs/models"}
    translators = rendered["$defs"]["models"]["properties"]["translators"]
    assert translators["propertyNames"] == {"pattern": "^[a-z]{2,3}$"} and translators["default"] == {}
    one = translators["additionalProperties"]
    assert one["required"] == ["hub_id"] and one["properties"]["revision"]["default"] == "main"
    assert "target_token" not in rendered["$defs"]["models"]["properties"]["translators_to_en"]["additionalProperties"]
    assert rendered["$defs"]["models"]["properties"]["translator_demo"] == {
        "$ref": "#/$defs/demo_translator",
        "default": {},
    }
    assert rendered["$defs"]["data"]["required"] == ["source"]


def test_parsing_names_a_bad_key_and_demo_mode_needs_what_it_pretrains_on():
    with pytest.raises(InputError, match=r"models\.translators\.de\.target_token: 'ara' does not match"):
        ModelsEntry.parse({"source": "hub", "translators": {"de": {"hub_id": "x", "target_token": "ara"}}}, "models")
    with pytest.raises(InputError, match=r"data\.source: 'ftp' is not one of"):
        DataEntry.parse({"source": "ftp"}, "data")
    demo = ModelsEntry.parse({"source": "demo"}, "models")
    assert demo.demo and demo.translator_demo == {}  # the translator's job settings fill in its defaults
    with pytest.raises(InputError, match=r"models\.demo_pretraining: required with models\.source demo"):
        demo.pretraining  # noqa: B018


def test_a_translators_record_reaches_its_jobs_settings():
    config = {
        "data": {"source": "local", "local_root": "mirror"},
        "models": {
            "source": "hub",
            "translators": {"ar": {"hub_id": "Helsinki-NLP/opus-mt-en-ar", "target_token": ">>ara<<"}},
            "translators_to_en": {"ar": {"hub_id": "Helsinki-NLP/opus-mt-ar-en", "revision": "abc"}},
        },
        "translation": {"backend": "ctranslate2"},
    }
    assert data_of(config).mirror == "mirror" and DataEntry(source="hub").mirror is None
    assert models_of(config).translators["ar"] == TranslatorEntry(
        hub_id="Helsinki-NLP/opus-mt-en-ar", target_token=">>ara<<"
    )
    into = grid_settings.translator_settings(config, "ar")
    assert (into.hub_id, into.revision) == ("Helsinki-NLP/opus-mt-en-ar", "main")
    assert grid_settings.translator_settings(config, "ar", to_english=True).revision == "abc"


def test_the_vision_block_gives_the_memory_plan_its_tokens_and_names_a_bad_key():
    from workflow_scripts.planning import memory_plan

    hub = {"models": {"source": "hub"}}
    assert memory_plan.visual_tokens({**hub, "vision": {"hub_id": "google/siglip-base-patch16-224"}}) == 196
    assert memory_plan.visual_tokens(hub) == (224 // 32) ** 2 + 1  # the default tower: CLIP ViT-B/32
    assert memory_plan.visual_tokens({**hub, "vision": {"features": "pooled"}}) == 1
    with pytest.raises(memory_plan.PlanError, match=r"vision\.visual_tokens: 0 must be at least 1"):
        memory_plan.visual_tokens({**hub, "vision": {"visual_tokens": 0}})
