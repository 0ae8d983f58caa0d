"""How an image arm's intermediate phase trains (docs/multimodal.md, "Arm recipes"): what
trains, the text-only share of its mix, and an optional merge-back toward the weights the
phase started from. Published vision-language models differ in exactly these choices, and
how much multilingual text ability the stage erodes follows them.

A recipe is a grid axis, like the seeds: every intermediate config that trains an image task
or one of its text-only controls (an *arm*) runs under every recipe of ``arm_recipes``, as
its own config ``<config>@<recipe>`` (the recipe named ``standard`` keeps the config's own
name), so an image arm and its text twin are always compared at equal recipe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.tasks import CONTROLS, TASKS

Trains = Literal["backbone", "adapters", "projector"]
# What each choice of ``trains`` leaves trainable besides the phase's heads (the visual
# projector is part of an image task's head), in the words the configuration reference
# prints (spec/schema.py); training/arm_phase.py FREEZE freezes the rest.
TRAINS = {
    "backbone": "what the backbone's method trains, the whole backbone or its LoRA/QLoRA adapters",
    "adapters": (
        "LoRA adapters with the backbone's lora settings, the backbone frozen, and on a fully "
        "fine-tuned backbone merged into it for the target phase"
    ),
    "projector": "nothing of the backbone, only the projector and the task heads",
}
# The recipe whose configs keep their own names (absent from arm_recipes: every arm is named
# <config>@<recipe>).
STANDARD = "standard"
SEPARATOR = "@"


@dataclass(frozen=True, kw_only=True)
class ArmRecipe(Record):
    """One recipe, as the intermediate phase reads it (``PhaseSettings.arm_recipe``)."""

    name: str
    trains: Trains = "backbone"
    # a text-only task mixed in: each step draws it with probability ``text_share``
    text_task: str | None = optional()
    text_share: float = 0.0
    # after the phase, each backbone weight w becomes (1 - merge_back) w + merge_back w_start
    merge_back: float = 0.0

    def describe(self) -> str:
        """One line naming the recipe's choices (tables and figures)."""
        parts = [f"trains {self.trains}"]
        if self.text_task:
            parts.append(f"{self.text_share:g} {self.text_task}")
        if self.merge_back:
            parts.append(f"merge-back {self.merge_back:g}")
        return f"{self.name} ({', '.join(parts)})"


def config_name(config: str, recipe: str) -> str:
    """The name an arm config runs under with ``recipe``."""
    return config if recipe == STANDARD else f"{config}{SEPARATOR}{recipe}"


def is_arm_task(task: str) -> bool:
    """An image task, or a text-only control of one (they take the recipe alike)."""
    found = TASKS.get(task)
    if found is None:
        return False
    return found.visual or any(task in controls for controls in CONTROLS.values())


def is_arm(tasks: list[str] | tuple[str, ...]) -> bool:
    return any(is_arm_task(t) for t in tasks)
