"""The config's ``sweep`` block: the target-phase hyperparameters a grid selects per target on
dev data, each a list of values (the schema's ``$defs.sweep`` is generated from this record;
workflow/sweep.py makes the points).

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workflow_scripts.spec.record import Record, parsed_once
from workflow_scripts.spec.schema_block import key

_LIST = {"minItems": 1, "uniqueItems": True}


@dataclass(frozen=True, kw_only=True)
class SweepEntry(Record):
    """The swept keys, in the order a point's name lists them (the first varies slowest)."""

    key_noun = "config key"

    learning_rate: tuple[float, ...] | None = key(None, items={"exclusiveMinimum": 0}, **_LIST)
    batch_size: tuple[int, ...] | None = key(None, items={"minimum": 1}, **_LIST)
    epochs: tuple[float, ...] | None = key(None, items={"exclusiveMinimum": 0}, **_LIST)
    warmup_ratio: tuple[float, ...] | None = key(None, items={"minimum": 0, "maximum": 1}, **_LIST)

    def swept(self) -> dict[str, tuple[Any, ...]]:
        """Each swept key's values, in declaration order; {} without a sweep."""
        return {f.name: values for f in dataclasses.fields(self) if (values := getattr(self, f.name))}


def sweep_of(config: dict[str, Any]) -> SweepEntry:
    """The ``sweep`` block's record, parsed once."""
    return parsed_once(SweepEntry, config.get("sweep") or {}, "sweep")
