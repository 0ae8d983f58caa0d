"""What an arm recipe (spec/arm_recipe.py) changes in an intermediate phase besides its
settings: the parameters its ``trains`` choice freezes (``FREEZE``: the whole backbone under
``trains: projector``), and the merge-back of the phase's backbone weights toward the
weights it started from. (``trains: adapters`` is the phase's method, LoRA, chosen by the
workflow; the text-only share is the sampler's fixed share.)

Merge-back: each backbone weight w becomes (1 - a) w + a w_start. Under LoRA the adapter's
update s B A is all the phase changed, so scaling B by (1 - a) gives exactly that
interpolation of the merged weights; after full fine-tuning the weights are interpolated
with the starting backbone, read again from the directory the phase started from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.spec.arm_recipe import ArmRecipe

HEADS_PREFIX = "heads."


def freeze_backbone(model) -> int:
    """Leave only the task heads (an image task's projector among them) trainable; returns
    the number of parameters frozen. Runs before the optimiser is built, which takes the
    trainable parameters only."""
    frozen = 0
    for name, param in model.named_parameters():
        if not name.startswith(HEADS_PREFIX) and param.requires_grad:
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


# What each choice of ``trains`` (spec/arm_recipe.py TRAINS) freezes before the optimiser is
# built, returning the number of parameters frozen. The choices absent here freeze nothing
# themselves: ``backbone`` trains what the backbone's method trains, ``adapters`` is the LoRA
# method the workflow gives the phase (workflow/grid_settings.py).
FREEZE: dict[str, Callable[[Any], int]] = {"projector": freeze_backbone}
NOT_FROZEN_HERE = frozenset({"backbone", "adapters"})


def freeze_for(model, recipe: ArmRecipe | None) -> int:
    """Freeze what the phase's recipe leaves untrained; 0 outside an arm."""
    if recipe is None or recipe.trains not in FREEZE:
        return 0
    return FREEZE[recipe.trains](model)


def scale_adapter_updates(model, alpha: float) -> int:
    """Merge-back under LoRA: every ``lora_B`` scaled by (1 - alpha), in place; returns how
    many tensors were scaled."""
    import torch

    scaled = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(1.0 - alpha)
                scaled += 1
    return scaled


def interpolate_weights(weights: dict[str, Any], start: dict[str, Any], alpha: float) -> int:
    """Merge-back after full fine-tuning: each floating tensor of ``weights`` (in place) moved
    toward its value in ``start`` by ``alpha``; returns how many tensors moved. A tensor
    ``start`` lacks, or of another shape, stops it: the two are not the same backbone."""
    import torch

    moved, seen = 0, set()
    with torch.no_grad():
        for name, tensor in weights.items():
            # tied weights (a decoder's embeddings and output layer) are one tensor: moved once
            if not torch.is_floating_point(tensor) or tensor.data_ptr() in seen:
                continue
            seen.add(tensor.data_ptr())
            before = start.get(name)
            if before is None or before.shape != tensor.shape:
                raise ValueError(
                    f"merge-back: the starting backbone has no tensor {name!r} of shape {tuple(tensor.shape)}"
                )
            tensor.mul_(1.0 - alpha).add_(before.to(device=tensor.device, dtype=tensor.dtype), alpha=alpha)
            moved += 1
    return moved


def merge_back_full(model, full: dict[str, Any] | None, start_encoder, alpha: float) -> int:
    """Merge-back after full fine-tuning: the encoder's weights (one process) or the gathered
    ``full`` state's ``encoder.`` tensors (a sharded run, on rank 0) toward ``start_encoder``'s."""
    start = start_encoder.state_dict()
    if full is None:
        weights = model.encoder.state_dict()
    else:
        weights = {k[len("encoder.") :]: v for k, v in full.items() if k.startswith("encoder.")}
    moved = interpolate_weights(weights, start, alpha)
    LOG.info("merge-back %.3g: %d backbone tensors moved toward the starting weights", alpha, moved)
    return moved
