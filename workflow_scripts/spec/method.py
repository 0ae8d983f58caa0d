"""How a backbone trains, as one record: the training method, the precision policy and, for an
adapter method, the LoRA settings (the config's ``lora`` block: ``LoraEntry``). The config declares it on the backbone entry
(spec/backbone_entry.py, which builds this record); a training job reads it from its
``--settings`` (``PhaseSettings.method``) and ``models/adapters.Method`` fills in the defaults
of what is absent; metric files record it (``BackboneProvenance``).

Standard library only.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema_block import key

MethodName = Literal["full", "lora", "qlora"]
PrecisionName = Literal["bf16", "fp16", "fp32"]
METHODS: tuple[str, ...] = typing.get_args(MethodName)
PRECISIONS: tuple[str, ...] = typing.get_args(PrecisionName)
# The 2020 protocol: every weight trains, in bf16 autocast over fp32 master weights.
DEFAULT_METHOD: MethodName = "full"
DEFAULT_PRECISION: PrecisionName = "bf16"
DEFAULT_ACTIVATION_CHECKPOINTING = False


@dataclass(frozen=True, kw_only=True)
class LoraEntry(Record):
    key_noun = "config key"

    rank: int = key(16, minimum=1)
    alpha: int = key(32, minimum=1, description="LoRA's scaling is alpha / rank")
    dropout: float = key(0.05, minimum=0, exclusiveMaximum=1)
    target_modules: tuple[str, ...] | None = key(
        None,
        items={"minLength": 1},
        description="""Module names LoRA adapts, matched by peft as suffixes of the backbone's layer
        names (e.g. q_proj, up_proj). Absent: the family's attention projections
        (workflow_scripts/spec/families.py). With `parameters` set, the memory planner sizes each
        name it knows (memory_model.MODULE_SHAPES) and stops at one it does not.""",
    )


# The LoRA settings that have a default (rank, alpha, dropout; without target_modules LoRA
# adapts the family's attention projections).
LORA_DEFAULTS: dict[str, Any] = LoraEntry().to_dict()


@dataclass(frozen=True, kw_only=True)
class MethodSettings(Record):
    """The method, the precision policy and, for an adapter method, the LoRA settings (absent
    for ``full``, so that a full fine-tuning's settings stay those of a config without them).
    Activation checkpointing is named only when on."""

    name: MethodName = DEFAULT_METHOD
    precision: PrecisionName = DEFAULT_PRECISION
    rank: int | None = optional()
    alpha: int | None = optional()
    dropout: float | None = optional()
    target_modules: tuple[str, ...] | None = optional()  # absent: the family's attention projections
    activation_checkpointing: bool | None = optional()
