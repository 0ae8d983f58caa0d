"""A backbone entry: one record (spec/backbone_entry.py) that parses the config's entry, holds
it to the bounds its keys declare, generates the schema's block and says how the backbone
trains."""

from __future__ import annotations

import copy

import pytest

from workflow_scripts.spec import schema
from workflow_scripts.spec.backbone_entry import BackboneEntry, entry_of
from workflow_scripts.spec.basics import InputError, load_yaml
from workflow_scripts.spec.model_settings import BackboneProvenance
from workflow_scripts.spec.schema_block import block
from workflow_scripts.workflow import backbone_grid

pytestmark = pytest.mark.unit

LLAMA = {
    "family": "decoder",
    "hub_id": "meta-llama/Llama-3.1-8B",
    "revision": "0e9e39f",
    "method": "lora",
    "lora": {"rank": 8, "target_modules": ["q_proj", "v_proj"]},
    "activation_checkpointing": True,
    "gpus": {"per_node": 4, "nodes": 2},
}


def test_the_schema_file_declares_no_key_of_the_entry_and_validates_the_records_block():
    written = load_yaml(schema.SCHEMA_FILE.read_text())["$defs"]["backbone"]
    assert "properties" not in written and "allOf" in written  # only the rule across keys is written
    rendered = schema.config_schema()["$defs"]["backbone"]
    assert rendered["properties"] == block(BackboneEntry)["properties"]
    assert rendered["required"] == ["family"] and rendered["additionalProperties"] is False
    method = rendered["properties"]["method"]
    assert method["enum"] == ["full", "lora", "qlora"] and method["default"] == "full" and method["description"]
    assert rendered["properties"]["lora"]["properties"]["rank"] == {"type": "integer", "minimum": 1, "default": 16}
    assert rendered["properties"]["training"]["properties"]["target"] == {"$ref": "#/$defs/backbone_phase"}


def test_parsing_holds_the_entry_to_the_bounds_its_keys_declare():
    with pytest.raises(InputError, match=r"backbones\.x\.lora\.rank: 0 must be at least 1"):
        BackboneEntry.parse({**LLAMA, "lora": {"rank": 0}}, "backbones.x")
    with pytest.raises(InputError, match=r"backbones\.x\.parameters: -5 must be greater than 0"):
        BackboneEntry.parse({**LLAMA, "parameters": -5}, "backbones.x")
    with pytest.raises(InputError, match=r"backbones\.x\.lora\.target_modules\[1\]: '' is shorter than 1"):
        BackboneEntry.parse({**LLAMA, "lora": {"target_modules": ["q_proj", ""]}}, "backbones.x")
    with pytest.raises(InputError, match=r"backbones\.x\.retrieval\.pooling: 'cls' is not one of"):
        BackboneEntry.parse({**LLAMA, "retrieval": {"pooling": "cls"}}, "backbones.x")
    with pytest.raises(InputError, match=r"backbones\.x\.grid\.arm_recipes: \['a', 'a'\] names an item twice"):
        BackboneEntry.parse({**LLAMA, "grid": {"arm_recipes": ["a", "a"]}}, "backbones.x")
    with pytest.raises(InputError, match=r"backbones\.x: unknown config key 'lora_rank'"):
        BackboneEntry.parse({**LLAMA, "lora_rank": 8}, "backbones.x")


def test_one_method_shape_from_the_entry_to_the_job_and_the_metric_file():
    config = {"models": {"source": "hub"}, "backbones": {"llama": copy.deepcopy(LLAMA)}}
    method = backbone_grid.method_settings(config, "llama")
    assert method.to_dict() == {
        "name": "lora",
        "precision": "bf16",
        "rank": 8,
        "alpha": 32,
        "dropout": 0.05,
        "target_modules": ["q_proj", "v_proj"],
        "activation_checkpointing": True,
    }
    provenance = backbone_grid.provenance(config, "llama")
    assert provenance.lora is not None and provenance.lora.rank == 8 and provenance.activation_checkpointing
    assert BackboneProvenance.parse(provenance.to_json()) == provenance
    full = BackboneEntry.parse({"family": "encoder"})
    assert full.method_settings().to_dict() == {"name": "full", "precision": "bf16"}  # nothing of LoRA, nothing off
    assert full.method_settings(adapters=True).name == "lora"  # an arm recipe that trains adapters


def test_an_entry_is_parsed_once_and_again_when_the_config_is_edited():
    config = {"backbones": {"llama": copy.deepcopy(LLAMA)}}
    first = entry_of(config, "llama")
    assert entry_of(config, "llama") is first
    config["backbones"]["llama"]["lora"]["rank"] = 4  # edited in place (a config layer, a test)
    assert entry_of(config, "llama").lora.rank == 4
    assert entry_of(config, "llama").gpu_request.count == 8


def test_every_block_a_record_declares_is_generated_and_written_nowhere_else():
    written = load_yaml(schema.SCHEMA_FILE.read_text())["$defs"]
    rendered = schema.config_schema()["$defs"]
    for name, record in schema.RECORD_BLOCKS.items():
        assert "properties" not in written[name], f"$defs.{name} declares keys its record {record.__name__} declares"
        assert rendered[name]["properties"] == block(record)["properties"], name


def test_a_demo_record_requires_every_key_and_its_defaults_are_the_configs():
    from workflow_scripts.spec.model_settings import DemoDecoder, DemoEncoder
    from workflow_scripts.spec.schema_block import filled

    encoder = DemoEncoder.defaults()
    assert encoder.max_position_embeddings == 258 and encoder.pretraining.steps == 200
    assert DemoDecoder.defaults().max_position_embeddings == 256 and DemoDecoder.defaults().pretraining.steps == 300
    assert filled(DemoEncoder) == encoder.to_dict()
    block_of_settings = encoder.to_dict()
    del block_of_settings["pretraining"]["mlm_probability"]
    with pytest.raises(InputError, match=r"key 'mlm_probability' is missing"):  # a job's settings name every key
        DemoEncoder.parse(block_of_settings)
    assert "required" not in block(DemoEncoder)  # ... and the config may leave every key out
