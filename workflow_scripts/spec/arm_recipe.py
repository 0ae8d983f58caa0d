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

from workflow_scripts.spec.record import Record
from workflow_scripts.spec.schema_block import key
from workflow_scripts.spec.tasks import CONTROLS, TASKS

# What each choice of ``trains`` leaves trainable besides the phase's heads (the visual
# projector is part of an image task's head), in the words the configuration reference
# prints; training/arm_phase.py FREEZE freezes the rest.
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
class ArmRecipeEntry(Record):
    """One ``arm_recipes.<name>`` entry of the config (the schema's ``$defs.arm_recipe`` is
    generated from it, spec/schema_block.py)."""

    key_noun = "config key"

    trains: str = key(
        "backbone",
        enum=list(TRAINS),
        description="What trains besides the task heads (an image task's projector is part of its head): "
        + "; ".join(f"{name} ({what})" for name, what in TRAINS.items())
        + ".",
    )
    text_task: str | None = key(
        None,
        description="""A text-only intermediate task (in tasks; English) mixed into the phase; each step
        draws it with probability text_share, the arm's own tasks share the rest.""",
    )
    text_share: float = key(0, minimum=0, exclusiveMaximum=1)
    merge_back: float = key(
        0,
        minimum=0,
        exclusiveMaximum=1,
        description="""After the phase, each backbone weight w becomes (1 - merge_back) w + merge_back
        w_start, w_start its value before the phase (0: no merge-back).""",
    )


@dataclass(frozen=True, kw_only=True)
class ArmRecipe(ArmRecipeEntry):
    """One recipe, named, as the intermediate phase reads it (``PhaseSettings.arm_recipe``)."""

    key_noun = "settings key"

    name: str

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
