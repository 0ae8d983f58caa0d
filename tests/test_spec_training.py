"""The training phases' typed settings (spec/phase_settings.py): MethodSettings and
PhaseSettings, and the one declaration of the methods and precisions."""

from __future__ import annotations

import json
import typing

import pytest

from conftest import REPO, phase_settings
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.method import MethodName, PrecisionName
from workflow_scripts.spec.phase_settings import MethodSettings, PhaseHyperparameters, PhaseSettings
from workflow_scripts.spec.schema import setting
from workflow_scripts.workflow import config_check, grid_settings

pytestmark = pytest.mark.unit

XNLI = {"xnli": {"batch_size": 32, "epochs": 2, "max_length": 128}}


def test_the_records_methods_and_precisions_are_the_schemas():
    """One fact, two declarations held equal here: the schema's enums validate the config,
    the Literals type the records (and so the settings a training job parses)."""
    assert typing.get_args(MethodName) == tuple(setting("method", definition="backbone")["enum"])
    assert typing.get_args(PrecisionName) == tuple(setting("precision", definition="backbone")["enum"])
    hints = typing.get_type_hints(MethodSettings)
    assert hints["name"] is MethodName and hints["precision"] is PrecisionName


def test_the_phase_keys_are_the_schemas_phase_block():
    """Every key of a training.<phase> block that a job reads is a field, typed as the schema
    types it (a learning rate a number, a patience an integer)."""
    phase = setting(definition="phase")["properties"]
    hints = typing.get_type_hints(PhaseHyperparameters)
    assert set(PhaseHyperparameters.keys()) == set(phase) - {"learning_rate_with_mlm"}
    types = {"number": float, "integer": int}
    for key in PhaseHyperparameters.keys():
        # max_micro_batch: an integer or auto, which the grid resolves to one before any job
        kinds = (
            [phase[key]["type"]] if "type" in phase[key] else [o["type"] for o in phase[key]["oneOf"] if "type" in o]
        )
        assert len(kinds) == 1, key
        expected = types[kinds[0]]
        assert hints[key] in (expected, expected | None), key


def test_an_unknown_or_missing_key_is_named():
    good = phase_settings(XNLI).to_dict()
    with pytest.raises(InputError, match=r"--settings: unknown settings key 'learning_rat' \(did you mean"):
        PhaseSettings.parse({**good, "learning_rat": 1e-5}, "--settings")
    without = {k: v for k, v in good.items() if k != "patience"}
    with pytest.raises(InputError, match="settings key 'patience' is missing"):
        PhaseSettings.parse(without, "--settings")
    with pytest.raises(InputError, match=r"--settings\.tasks\.xnli: settings key 'batch_size' is missing"):
        PhaseSettings.parse({**good, "tasks": {"xnli": {"epochs": 2, "max_length": 128}}}, "--settings")
    with pytest.raises(InputError, match=r"--settings\.method: unknown settings key 'targets'"):
        PhaseSettings.parse({**good, "method": {"name": "lora", "targets": ["q"]}}, "--settings")


def test_a_mistyped_value_or_an_unknown_method_is_named():
    good = phase_settings(XNLI).to_dict()
    with pytest.raises(InputError, match=r"--settings\.eval_every: expected int, got 10\.5"):
        PhaseSettings.parse({**good, "eval_every": 10.5}, "--settings")
    with pytest.raises(InputError, match=r"--settings\.method\.name: 'dora' is not one of 'full', 'lora', 'qlora'"):
        PhaseSettings.parse({**good, "method": {"name": "dora"}}, "--settings")
    with pytest.raises(InputError, match=r"--settings\.method\.precision: 'fp8' is not one of 'bf16', 'fp16', 'fp32'"):
        PhaseSettings.parse({**good, "method": {"name": "full", "precision": "fp8"}}, "--settings")
    with pytest.raises(InputError, match="continue_head: expected the keys 'from' and 'to'"):
        PhaseSettings.parse({**good, "continue_head": {"from": "siqa"}}, "--settings")


def test_settings_read_back_are_the_json_they_were_read_from():
    """Integers stay integers (epochs 2, not 2.0), absent keys stay absent (max_steps,
    language, continue_head, a full fine-tuning's LoRA settings): the job's params and the
    checkpoint's settings hash are those of the JSON the workflow wrote."""
    text = phase_settings(XNLI, learning_rate=3e-6, continue_head={"from": "siqa", "to": "xnli"}).to_json()
    parsed = PhaseSettings.parse(text)
    assert parsed.to_json() == text
    data = json.loads(text)
    assert data["tasks"]["xnli"]["epochs"] == 2 and isinstance(data["tasks"]["xnli"]["epochs"], int)
    assert "max_steps" not in data and "language" not in data
    assert data["method"] == {"name": "full", "precision": "bf16"}
    assert parsed.carried_head == ("siqa", "xnli") and parsed.train_language == "en"


def test_the_builders_return_the_record(demo_config):
    settings = grid_settings.target_settings(demo_config, "xlmr_tiny", "xnli")
    assert isinstance(settings, PhaseSettings) and set(settings.tasks) == {"xnli"}
    inter = grid_settings.intermediate_settings(demo_config, "xlmr_tiny", "mnli")
    assert inter.language == "en" and inter.tasks["mnli"].select_language == "en"


@pytest.fixture
def demo_config():
    import yaml
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(config_check.schema_for_validation()))  # fills in the defaults (the records' blocks too)
    return config
