"""What a training phase is told (``--settings`` of ``training.train``, built by
``workflow/grid_settings.py``'s ``intermediate_settings``, ``target_settings``, ``stage_settings`` and
``sweep_point_settings``): the phase's hyper-parameters (``training.<phase>`` of the config,
with an intermediate config's, a task's and the backbone's own overrides), how the backbone
trains (``MethodSettings``, ``workflow/backbone_grid.py``'s ``method_settings``) and each
task's options (``TaskOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workflow_scripts.spec.arm_recipe import ArmRecipe
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.method import MethodSettings
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.task_options import TaskOptions

# A phase's default selection and data language (an intermediate config names its own).
ENGLISH = "en"


@dataclass(frozen=True, kw_only=True)
class PhaseHyperparameters(Record):
    """The keys of a ``training.<phase>`` block a training job reads (grid's ``PHASE_KEYS``)."""

    learning_rate: float
    warmup_ratio: float  # of the total steps, a linear warmup
    weight_decay: float
    max_grad_norm: float
    dropout: float  # of the fresh heads
    eval_every: int  # steps between early-stopping evaluations
    patience: int  # evaluations without improvement before stopping
    dev_examples: int  # the first N dev examples of each task select the model
    eval_batch_size: int
    max_micro_batch: int  # larger batches accumulate gradients
    multitask_cap: int  # K of the capped examples-proportional sampler
    multitask_epochs: float
    max_steps: int | None = optional()  # a hard cap on the steps


@dataclass(frozen=True, kw_only=True)
class PhaseSettings(PhaseHyperparameters):
    """One training job: an intermediate phase, a target phase, a target's stage or a sweep
    point of a target phase."""

    step: ClassVar[str] = "training.train"

    method: MethodSettings
    tasks: dict[str, TaskOptions]
    # the intermediate config's language (its translated data); absent: English
    language: str | None = optional()
    # a target's stage: the head of an earlier stage ({"from": task, "to": task}) goes on training
    continue_head: dict[str, str] | None = optional()
    # an image arm's intermediate phase: what trains, its text-only share, its merge-back
    arm_recipe: ArmRecipe | None = optional()
    # few-shot training (spec/few_shot.py): the model is selected at the end of every epoch,
    # as IGLUE's protocol does, instead of every eval_every steps
    eval_each_epoch: bool | None = optional()

    def __post_init__(self) -> None:
        if self.continue_head is not None and set(self.continue_head) != {"from", "to"}:
            raise InputError(f"continue_head: expected the keys 'from' and 'to', got {sorted(self.continue_head)}")

    @property
    def train_language(self) -> str:
        """The language a task's training rows are kept in (a data map's recipe aside)."""
        return self.language or ENGLISH

    @property
    def fixed_shares(self) -> dict[str, float]:
        """Tasks drawn at a fixed share of the steps (an arm recipe's text-only task); the
        phase's other tasks share the rest as the capped sampler divides it."""
        recipe = self.arm_recipe
        if recipe is None or not recipe.text_task:
            return {}
        return {recipe.text_task: recipe.text_share}

    @property
    def carried_head(self) -> tuple[str, str] | None:
        """(the earlier stage's task whose head continues, this phase's task), or None."""
        if self.continue_head is None:
            return None
        return self.continue_head["from"], self.continue_head["to"]
