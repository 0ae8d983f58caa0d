"""One ``intermediate.<name>`` entry of the config: the tasks an intermediate config trains on,
in which language, and how (the schema's ``$defs.intermediate_config`` is generated from it,
spec/schema_block.py).

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workflow_scripts.spec.record import Record, parsed_once
from workflow_scripts.spec.schema_block import LANGUAGE_CODE, key

# The language of an intermediate config that names none: the tasks' own English data.
SOURCE_LANGUAGE = "en"


@dataclass(frozen=True, kw_only=True)
class IntermediateEntry(Record):
    """An intermediate config: its tasks (catalogue names), MLM mixed in or not, the language
    of a machine-translated copy, its own learning rate and the one arm recipe it runs under."""

    key_noun = "config key"

    tasks: tuple[str, ...] = key(uniqueItems=True)
    mlm: bool = key(False, description="Mix multilingual MLM into the intermediate phase as one more sampled task.")
    language: str | None = key(
        None,
        description="Train on a machine-translated copy of the tasks' data in this language.",
        pattern=LANGUAGE_CODE,
    )
    learning_rate: float | None = key(None, exclusiveMinimum=0)
    recipe: str | None = key(
        None,
        description="""The arm recipe (arm_recipes) this image arm runs under, and no other. Absent: an arm
        runs under every recipe, each as its own config <name>@<recipe> (standard keeps the
        name). Only for configs that train an image task or a text-only control of one.""",
    )

    @property
    def data_language(self) -> str:
        """The language its tasks' training data is in."""
        return self.language or SOURCE_LANGUAGE

    @property
    def translated(self) -> bool:
        return self.data_language != SOURCE_LANGUAGE

    @property
    def trains_nothing(self) -> bool:
        """No task and no MLM: the baseline's empty phase (the target phase starts from the
        pretrained backbone)."""
        return not self.tasks and not self.mlm

    def same_data_in_english(self, other: IntermediateEntry) -> bool:
        """``other`` trains on this config's tasks and MLM choice, in English."""
        return not other.translated and sorted(other.tasks) == sorted(self.tasks) and other.mlm == self.mlm


def entry_of(config: dict[str, Any], name: str) -> IntermediateEntry:
    """The record of ``intermediate.<name>``, parsed once per entry (InputError naming the key)."""
    return parsed_once(IntermediateEntry, config["intermediate"][name], f"intermediate.{name}")


def entries(config: dict[str, Any]) -> dict[str, IntermediateEntry]:
    """Every intermediate config's record, in the config's order."""
    return {name: entry_of(config, name) for name in config["intermediate"]}
