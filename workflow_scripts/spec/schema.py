"""The config schema (schemas/config.schema.yaml) as code reads it: the values a setting
allows and the default of each setting a config may leave out.

The schema is the one declaration, except where a record declares the values: the backbone
families' names (spec/families.py) and an arm recipe's ``trains`` choices
(spec/arm_recipe.py), filled into the schema when it is read (``config_schema``). Snakemake fills its defaults into the config it validates;
the code that also meets config parts nobody validated (the memory planner's CLI, a method
given to train.py by hand) takes them from here, so the rules, the planner and training agree.

Standard library and PyYAML (Snakemake's dependency) only: the Snakefile imports this.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from typing import Any, Literal

from workflow_scripts.spec import arm_recipe, families
from workflow_scripts.spec.basics import REPO_ROOT, load_yaml
from workflow_scripts.spec.suggest import did_you_mean

SCHEMA_FILE = REPO_ROOT / "schemas" / "config.schema.yaml"


@functools.cache
def config_schema() -> dict[str, Any]:
    """The schema file with the values that records declare filled in: what the config
    check validates against and the configuration reference prints."""
    return with_records(load_yaml(SCHEMA_FILE.read_text(encoding="utf-8")))


def record_choices() -> dict[str, Any]:
    """The values records declare for the schema, in their order: what ``with_records``
    fills in, and what names the rendered schema in the user's cache (config_check)."""
    return {"family": [facts.name for facts in families.REGISTERED], "trains": dict(arm_recipe.TRAINS)}


def with_records(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the choices that records declare: a backbone entry's ``family`` is one
    of the registered families, an arm recipe's ``trains`` one of the recipe's choices (each
    described), in their order."""
    choices = record_choices()
    schema["$defs"]["backbone"]["properties"]["family"]["enum"] = choices["family"]
    trains = schema["properties"]["arm_recipes"]["additionalProperties"]["properties"]["trains"]
    trains["enum"] = list(choices["trains"])
    described = "; ".join(f"{name} ({what})" for name, what in choices["trains"].items())
    trains["description"] = f"{trains['description']} {described}."
    return schema


def _name(keys: tuple[str, ...], definition: str | None) -> str:
    return ".".join(((f"$defs.{definition}",) if definition else ()) + keys)


def setting(*keys: str, definition: str | None = None) -> dict[str, Any]:
    """The schema of a setting: ``keys`` followed through ``properties`` from the top level,
    or from ``$defs.<definition>`` (a backbone entry, a task entry, a training phase)."""
    node = config_schema()["$defs"][definition] if definition else config_schema()
    for i, key in enumerate(keys):
        try:
            node = node["properties"][key]
        except KeyError:
            raise KeyError(f"{SCHEMA_FILE.name} declares no setting {_name(keys[: i + 1], definition)}") from None
    return node


def default(*keys: str, definition: str | None = None) -> Any:
    """A setting's default in the schema (KeyError naming the setting if it has none)."""
    node = setting(*keys, definition=definition)
    if "default" not in node:
        raise KeyError(f"{SCHEMA_FILE.name}: setting {_name(keys, definition)} has no default")
    return node["default"]


# ----- a backbone entry (backbones.<name>) -----------------------------------------------

FAMILIES: tuple[str, ...] = tuple(setting("family", definition="backbone")["enum"])
# A backbone's training method and precision policy, as the typed records declare them
# (spec/phase_settings.py): the schema's enums of the two settings, in the schema's order
# (tests/test_spec_training.py holds them equal).
MethodName = Literal["full", "lora", "qlora"]
PrecisionName = Literal["bf16", "fp16", "fp32"]
METHODS: tuple[str, ...] = typing.get_args(MethodName)
PRECISIONS: tuple[str, ...] = typing.get_args(PrecisionName)
DEFAULT_METHOD: str = default("method", definition="backbone")
DEFAULT_PRECISION: str = default("precision", definition="backbone")
DEFAULT_ACTIVATION_CHECKPOINTING: bool = default("activation_checkpointing", definition="backbone")
# The keys of a backbone's `lora` block, and the defaults of those that have one (rank, alpha,
# dropout; without target_modules LoRA adapts the family's attention projections).
LORA_KEYS: tuple[str, ...] = tuple(setting("lora", definition="backbone")["properties"])
LORA_DEFAULTS: dict[str, Any] = {
    key: spec["default"]
    for key, spec in setting("lora", definition="backbone")["properties"].items()
    if "default" in spec
}


def lora_settings(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A backbone entry's ``lora`` block with the defaults of what it leaves out."""
    return {**LORA_DEFAULTS, **(entry.get("lora") or {})}


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
