"""The config schema (schemas/config.schema.yaml) as code reads it: the values a setting
allows and the default of each setting a config may leave out.

The schema is the one declaration, except where a record declares it: a block that a record
parses is generated from the record when the schema is read (``RECORD_BLOCKS``: a backbone
entry, spec/backbone_entry.py, an arm recipe, spec/arm_recipe.py, and the demo's models,
spec/model_settings.py, and the others RECORD_BLOCKS lists; spec/schema_block.py says how).
Snakemake fills its defaults into the config it validates. Jobs read the defaults from the
records themselves, not from here: a job's code hash then holds no record it does not read.

Standard library and PyYAML (Snakemake's dependency) only: the Snakefile imports this.
"""

from __future__ import annotations

import functools
from typing import Any

from workflow_scripts.spec.arm_recipe import ArmRecipeEntry
from workflow_scripts.spec.backbone_entry import BackboneEntry
from workflow_scripts.spec.basics import REPO_ROOT, load_yaml
from workflow_scripts.spec.data_settings import LeakageSettings
from workflow_scripts.spec.disk_entry import DiskEntry
from workflow_scripts.spec.evaluation_settings import RetrievalOptions
from workflow_scripts.spec.intermediate_entry import IntermediateEntry
from workflow_scripts.spec.model_settings import DemoDecoder, DemoEncoder, DemoTranslator, DemoVision
from workflow_scripts.spec.phase_settings import BACKBONE_PHASE_KEYS, PhaseEntry
from workflow_scripts.spec.prompted import PromptedEntry
from workflow_scripts.spec.record import Record
from workflow_scripts.spec.report_settings import TablesEntry
from workflow_scripts.spec.retention_settings import RetentionEntry
from workflow_scripts.spec.schema_block import Part, block
from workflow_scripts.spec.source_entries import DataEntry, ModelsEntry, VisionEntry
from workflow_scripts.spec.suggest import did_you_mean
from workflow_scripts.spec.sweep_entry import SweepEntry
from workflow_scripts.spec.task_entry import TaskEntry
from workflow_scripts.spec.translation_settings import TranslationEntry

SCHEMA_FILE = REPO_ROOT / "schemas" / "config.schema.yaml"
# The schema's $defs generated from the record that parses them; the YAML keeps only the
# rules across their keys (e.g. a backbone's demo settings by family).
RECORD_BLOCKS: dict[str, type[Record] | Part] = {
    "data": DataEntry,
    "models": ModelsEntry,
    "vision": VisionEntry,
    "phase": PhaseEntry,
    "backbone_phase": Part(PhaseEntry, BACKBONE_PHASE_KEYS),
    "backbone": BackboneEntry,
    "task": TaskEntry,
    "intermediate_config": IntermediateEntry,
    "arm_recipe": ArmRecipeEntry,
    "demo_encoder": DemoEncoder,
    "demo_decoder": DemoDecoder,
    "demo_translator": DemoTranslator,
    "demo_vision": DemoVision,
    "translation": TranslationEntry,
    "leakage": LeakageSettings,
    "sweep": SweepEntry,
    "disk": DiskEntry,
    "retrieval": RetrievalOptions,
    "retention": RetentionEntry,
    "prompted": PromptedEntry,
    "tables": TablesEntry,
}


@functools.cache
def config_schema() -> dict[str, Any]:
    """The schema file with what records declare filled in: what the config check validates
    against and the configuration reference prints."""
    return with_records(load_yaml(SCHEMA_FILE.read_text(encoding="utf-8")))


def record_declarations() -> dict[str, Any]:
    """The blocks records generate, by their name in ``$defs``: what ``with_records`` fills in,
    and what names the rendered schema in the user's cache (config_check)."""
    return {name: block(record) for name, record in RECORD_BLOCKS.items()}


def with_records(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the blocks records generate, each before the YAML's own rules across
    its keys."""
    for name, generated in record_declarations().items():
        schema["$defs"][name] = {**generated, **(schema["$defs"].get(name) or {})}
    return schema


def _name(keys: tuple[str, ...], definition: str | None) -> str:
    return ".".join(((f"$defs.{definition}",) if definition else ()) + keys)


def setting(*keys: str, definition: str | None = None) -> dict[str, Any]:
    """The schema of a setting: ``keys`` followed through ``properties`` from the top level,
    or from ``$defs.<definition>`` (a backbone entry, a task entry, a training phase)."""
    node = config_schema()["$defs"][definition] if definition else config_schema()
    for i, key in enumerate(keys):
        try:
            node = _resolved(node)["properties"][key]
        except KeyError:
            raise KeyError(f"{SCHEMA_FILE.name} declares no setting {_name(keys[: i + 1], definition)}") from None
    return _resolved(node)


def _resolved(node: dict[str, Any]) -> dict[str, Any]:
    """A block given as a reference to one of ``$defs`` (``{$ref: "#/$defs/<name>"}``)."""
    ref = node.get("$ref", "")
    return {**config_schema()["$defs"][ref.rsplit("/", 1)[-1]], **node} if ref.startswith("#/$defs/") else node


def default(*keys: str, definition: str | None = None) -> Any:
    """A setting's default in the schema (KeyError naming the setting if it has none)."""
    node = setting(*keys, definition=definition)
    if "default" not in node:
        raise KeyError(f"{SCHEMA_FILE.name}: setting {_name(keys, definition)} has no default")
    return node["default"]


# ----- errors -------------------------------------------------------------------------------


def error_hint(err: Any) -> str:
    """The 'did you mean' of a JSON-schema error (a ``jsonschema.ValidationError``): for a key
    the schema does not declare, the declared keys closest to it; for a value outside an enum,
    the closest allowed values. Empty for any other error, or when nothing is close."""
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        declared = err.schema.get("properties", {})
        extra = [key for key in err.instance if key not in declared]
        return "".join(did_you_mean(key, declared) for key in extra)
    if err.validator == "enum" and isinstance(err.instance, str):
        return did_you_mean(err.instance, err.validator_value)
    return ""
