"""The config's ``disk`` block: what stays on disk once a run is evaluated (the schema's
``$defs.disk`` is generated from this record; planning/disk.py plans with it).

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workflow_scripts.spec.record import Record, parsed_once
from workflow_scripts.spec.schema_block import key


@dataclass(frozen=True, kw_only=True)
class DiskEntry(Record):
    """Which trained models a grid keeps."""

    key_noun = "config key"

    keep_target_models: Literal["none", "best", "all"] = key(
        "none",
        description="""none deletes each target model (and stage model, and unselected sweep point) once
        every job that reads it has run; its metric file, predictions and training record
        (curve.csv, train_log.json beside it) stay. best also keeps, per backbone,
        intermediate config, target and recipe, the model of the seed with the best dev
        score, linked under results/<experiment>/kept/. all keeps every model. A discarded
        model is retrained only if a job reading it must rerun (with best, adding a seed
        retrains the configs' discarded models).""",
    )
    keep_intermediate_models: Literal["all", "while_needed"] = key(
        "all",
        description="""all keeps every intermediate model. while_needed deletes one once every job that
        reads it has run (its targets' training and its retrieval evaluations), keeping its
        training record; but any later job that needs it (a new target or seed, an edited
        target task) retrains it, and Snakemake then reruns every target trained from it:
        for a grid run once on a small disk, not for one that is edited.""",
    )


def disk_of(config: dict[str, Any]) -> DiskEntry:
    """The ``disk`` block's record, parsed once."""
    return parsed_once(DiskEntry, config.get("disk") or {}, "disk")
