"""How a backbone trains, as one record: the training method, the precision policy and, for an
adapter method, the LoRA settings. The config declares it on the backbone entry
(spec/backbone_entry.py, which builds this record); a training job reads it from its
``--settings`` (``PhaseSettings.method``) and ``models/adapters.Method`` fills in the defaults
of what is absent; metric files record it (``BackboneProvenance``).

Standard library only.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from workflow_scripts.spec.record import Record, optional

MethodName = Literal["full", "lora", "qlora"]
PrecisionName = Literal["bf16", "fp16", "fp32"]
METHODS: tuple[str, ...] = typing.get_args(MethodName)
PRECISIONS: tuple[str, ...] = typing.get_args(PrecisionName)
# The 2020 protocol: every weight trains, in bf16 autocast over fp32 master weights.
DEFAULT_METHOD: MethodName = "full"
DEFAULT_PRECISION: PrecisionName = "bf16"


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
