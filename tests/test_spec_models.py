"""The records of preparing models and translating (spec/model_settings.py,
spec/translation_settings.py) and the families' facts (spec/families.py): what the builders
hand the jobs parses back to the same JSON, and a key too many, missing or of the wrong
family is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workflow_scripts.spec import families
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import (
    DEMO_BACKBONES,
    BackbonePrepare,
    BackboneProvenance,
    DemoDecoder,
    DemoEncoder,
    DemoTranslator,
    DemoVision,
    TranslatorPrepare,
    VisionPrepare,
)
from workflow_scripts.spec.translation_settings import TranslationSettings

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
HUB = {"source": "hub", "family": "encoder", "hub_id": "FacebookAI/xlm-roberta-large", "revision": "main"}


@pytest.fixture(scope="module")
def config() -> dict:
    from snakemake.utils import validate

    from workflow_scripts.workflow.config_check import schema_for_validation

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(schema_for_validation()))  # fills in the defaults, those of the records' blocks too
    return config


def test_an_unknown_or_a_missing_key_is_named():
    with pytest.raises(InputError, match=r"--settings: unknown settings key 'hub_idd'.*did you mean 'hub_id'"):
        BackbonePrepare.parse({**HUB, "hub_idd": "x"}, "--settings")
    with pytest.raises(InputError, match=r"settings key 'family' is missing \(BackbonePrepare needs it\)"):
        BackbonePrepare.parse({k: v for k, v in HUB.items() if k != "family"}, "--settings")
    decoding = TranslationSettings.defaults().to_dict()
    del decoding["num_beams"]
    with pytest.raises(InputError, match="settings key 'num_beams' is missing"):
        TranslationSettings.parse(decoding)
    with pytest.raises(InputError, match=r"vision\.demo\.pretraining: unknown settings key 'stepz'"):
        demo = DemoVision.defaults().to_dict()
        demo["pretraining"]["stepz"] = 1
        VisionPrepare.parse({"source": "demo", "demo": demo, "seed": 0}, "vision")


def test_the_builders_records_are_the_json_their_jobs_parse(config):
    from workflow_scripts.workflow import backbone_grid, grid_settings

    built = [
        *(backbone_grid.prepare_settings(config, b) for b in backbone_grid.names(config)),
        *(backbone_grid.provenance(config, b) for b in backbone_grid.names(config)),
        grid_settings.translator_settings(config, "de"),
        grid_settings.translator_settings(config, "de", to_english=True),
        grid_settings.vision_settings(config),
        grid_settings.translation_settings(config, "squad", "de"),
        grid_settings.translation_settings(config),
    ]
    for record in built:
        assert type(record).parse(record.to_json(), "--settings") == record
    # each demo backbone's block is its family's record
    encoder, decoder = (backbone_grid.prepare_settings(config, b) for b in ("xlmr_tiny", "llama_tiny"))
    assert type(encoder.demo) is DemoEncoder and type(decoder.demo) is DemoDecoder
    assert grid_settings.translator_settings(config, "de", to_english=True).direction == "de-en"
    assert grid_settings.translation_settings(config).batch_size is None  # a resource of the rule, not a setting


def test_a_demo_block_must_be_its_familys():
    decoder_block = DemoDecoder.defaults().to_dict()
    with pytest.raises(InputError, match="builds family encoder from DemoEncoder settings, not from DemoDecoder"):
        BackbonePrepare.parse({"source": "demo", "family": "encoder", "demo": decoder_block})
    with pytest.raises(InputError, match="the demo builds encoder and decoder backbones, not seq2seq_encoder"):
        BackbonePrepare.parse({"source": "demo", "family": "seq2seq_encoder", "demo": DemoEncoder.defaults().to_dict()})
    with pytest.raises(InputError, match="unknown backbone family 'encodr'.*did you mean 'encoder'"):
        BackbonePrepare.parse({**HUB, "family": "encodr"})
    with pytest.raises(InputError, match="a Hub model needs hub_id and revision"):
        TranslatorPrepare.parse({"source": "hub", "hub_id": "Helsinki-NLP/opus-mt-en-de"})
    with pytest.raises(InputError, match="a demo model needs its demo settings"):
        TranslatorPrepare.parse({"source": "demo"})
    with pytest.raises(InputError, match="a demo vision tower needs its seed"):
        VisionPrepare.parse({"source": "demo", "demo": DemoVision.defaults().to_dict()})


def test_translation_settings_hold_what_their_engine_reads():
    defaults = TranslationSettings.defaults()
    assert defaults.backend == "ctranslate2" and defaults.batch_size == 32 and defaults.task is None
    ctranslate2 = defaults.to_dict()
    del ctranslate2["precision"]  # the workflow names it only for the transformers engine
    with pytest.raises(InputError, match="the transformers backend needs its precision"):
        TranslationSettings.parse({**ctranslate2, "backend": "transformers"})
    with pytest.raises(InputError, match="a batch size of at least 1, got 0"):
        defaults.replace(batch_size=0)


def test_the_demo_defaults_are_the_schemas():
    assert DemoEncoder.defaults().pretraining.mlm_probability == 0.15
    assert DemoDecoder.defaults().num_key_value_heads is None  # the schema gives none
    assert DemoTranslator.defaults().training.steps == 800
    assert DemoVision.defaults().captions.rows.endswith("SNLI-VE/default/train.jsonl")


def test_a_lora_backbones_provenance_keeps_its_settings():
    provenance = BackboneProvenance.parse(
        {
            "name": "llama",
            "family": "decoder",
            "source": "demo",
            "method": "lora",
            "precision": "bf16",
            "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj"]},
            "activation_checkpointing": True,
        }
    )
    assert provenance.lora is not None and provenance.lora.target_modules == ("q_proj",)
    assert "hub_id" not in provenance.to_dict() and provenance.to_dict()["lora"]["target_modules"] == ["q_proj"]


def test_the_families_facts_are_declared_once_and_read_by_both_layers():
    from workflow_scripts.models.backbones import get_family

    assert set(DEMO_BACKBONES) == set(families.DEMO_FAMILIES) == {"encoder", "decoder"}
    for name, facts in families.FAMILIES.items():
        family = get_family(name)
        assert (family.name, family.pooling, family.has_mlm) == (facts.name, facts.pooling, facts.has_mlm)
        assert family.lora_targets(None) == list(facts.lora_targets)
    assert families.facts("encoder").lora_targets_of("deberta-v2")[0] == "query_proj"
    assert families.facts("decoder").lora_targets_of("bloom") == ("query_key_value", "self_attention.dense")
    assert families.facts("decoder").lora_targets_of("llama") == families.DECODER.lora_targets
    with pytest.raises(InputError, match="unknown backbone family 'decodr'"):
        families.facts("decodr")
