"""What a training phase writes (training/recipe.py): the model directory, with its
``train_log.json`` and ``curve.csv``, and what the log says of an image task's visual branch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path
from workflow_scripts.spec.result_files import TRAIN_LOG, TrainLog
from workflow_scripts.training.curves import CURVE_FILE, Row, write_curve


def write_log(log: dict[str, Any], directory: Path) -> None:
    """The phase's train log, checked against its record first (a key it does not declare
    stops the phase before any file is written: spec/result_files.py)."""
    checked = TrainLog.parse(log, f"the train log of {directory}").to_dict()
    (directory / TRAIN_LOG).write_text(json.dumps(checked, indent=2, sort_keys=True) + "\n")


def save_model(
    model,
    tokenizer,
    phase: str,
    log: dict[str, Any],
    output: Path,
    full: dict[str, Any] | None = None,
    curve_rows: list[Row] | None = None,
) -> None:
    """The phase's output directory; ``full``: a sharded model's weights gathered whole."""
    import torch

    def part(prefix: str) -> dict[str, Any]:
        return {k[len(prefix) :]: v for k, v in full.items() if k.startswith(prefix)}

    with atomic_path(output) as tmp:
        if full is None:
            model.encoder.save_pretrained(tmp)
        else:
            model.encoder.save_pretrained(tmp, state_dict=part("encoder."))
        tokenizer.save_pretrained(tmp)
        if phase == "target":  # the intermediate phase's heads are discarded by design
            torch.save(model.heads.state_dict() if full is None else part("heads."), tmp / "heads.pt")
        write_log(log, tmp)
        write_curve(curve_rows or [], tmp / CURVE_FILE)


def visual_record(phase: str, visual: dict[str, dict[str, Any]], adapters: bool) -> dict[str, Any] | None:
    """The train log's ``visual``: the phase's image tasks and whether their visual branch
    (projector, slot vectors and classifier, not the feature bank) is saved with the model:
    in heads.pt, or with an adapter as one of its heads (modules_to_save)."""
    if not visual:
        return None
    if phase != "target":
        return {"tasks": visual, "saved": False}
    where = "the adapter's heads (modules_to_save)" if adapters else "heads.pt"
    return {"tasks": visual, "saved": True, "where": f"{where}: projector, slot vectors, classifier"}


def earlier_log(encoder_dir: Path) -> TrainLog | None:
    """The train log of the phase that left ``encoder_dir`` (None: a pretrained backbone)."""
    return TrainLog.beside(encoder_dir) if (Path(encoder_dir) / TRAIN_LOG).is_file() else None


def visual_lineage(earlier: TrainLog | None) -> dict[str, Any] | None:
    """The image tasks of the phase whose log is ``earlier`` (or of one before it), and that
    their visual branch was not carried over: the model is text-only."""
    found = earlier and (earlier.intermediate_visual or earlier.visual)
    if not found:
        return None
    return {
        "tasks": found["tasks"],
        "text_only": True,
        "how": "the intermediate phase's backbone weights; its projector and feature bank were dropped with its heads",
    }


def recipe_lineage(earlier: TrainLog | None) -> dict[str, Any] | None:
    """The arm recipe (spec/arm_recipe.py) of the intermediate phase whose log is ``earlier``
    (or of one before it), as that log records it."""
    if earlier is None:
        return None
    return earlier.intermediate_recipe or earlier.settings.get("arm_recipe")
