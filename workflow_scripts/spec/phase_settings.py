"""What a training phase is told (``--settings`` of ``training.train``, built by
``workflow/grid_settings.py``'s ``intermediate_settings``, ``target_settings``, ``stage_settings`` and
``sweep_point_settings``): the phase's hyper-parameters (``training.<phase>`` of the config,
with an intermediate config's, a task's and the backbone's own overrides), how the backbone
trains (``MethodSettings``, ``workflow/backbone_grid.py``'s ``method_settings``) and each
task's options (``TaskOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from workflow_scripts.spec.arm_recipe import ArmRecipe
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.method import MethodSettings
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema_block import key, parsed_filled
from workflow_scripts.spec.task_options import TaskOptions

# A phase's default selection and data language (an intermediate config names its own).
ENGLISH = "en"


@dataclass(frozen=True, kw_only=True)
class PhaseHyperparameters(Record):
    """The keys of a ``training.<phase>`` block a training job reads (grid's ``PHASE_KEYS``),
    each with the default the config schema fills in (``fill``; the learning rate's is each
    phase's own: ``training.<phase>.learning_rate`` in schemas/config.schema.yaml)."""

    learning_rate: float = key(exclusiveMinimum=0)
    warmup_ratio: float = key(minimum=0, maximum=1, fill=0.1)  # of the total steps, a linear warmup
    weight_decay: float = key(minimum=0, fill=0.0)
    max_grad_norm: float = key(exclusiveMinimum=0, fill=1.0)
    dropout: float = key(minimum=0, maximum=1, fill=0.1)  # of the fresh heads
    eval_every: int = key(minimum=1, fill=1000, description="Steps between early-stopping evaluations")
    patience: int = key(minimum=1, fill=30, description="Evaluations without improvement before stopping")
    dev_examples: int = key(minimum=1, fill=500, description="First N dev examples per task used for selection")
    eval_batch_size: int = key(minimum=1, fill=64)
    max_micro_batch: int = key(minimum=1, fill=32)  # larger batches accumulate gradients
    multitask_cap: int = key(minimum=1, fill=131072, description="K of the capped sampler")
    multitask_epochs: float = key(exclusiveMinimum=0, fill=3)
    max_steps: int | None = key(None, minimum=1, description="Optional hard cap on steps")


@dataclass(frozen=True, kw_only=True)
class PhaseEntry(PhaseHyperparameters):
    """A ``training.<phase>`` block of the config (the schema's ``$defs.phase`` is generated
    from it): the job's hyperparameters, a micro-batch the memory plan may choose, and the
    learning rate of configs that mix in MLM."""

    key_noun = "config key"

    # each phase's own default (training.<phase>.learning_rate in schemas/config.schema.yaml)
    learning_rate: float | None = key(None, exclusiveMinimum=0)
    max_micro_batch: int | Literal["auto"] = key(
        minimum=1,
        fill=32,
        description="""Examples per forward and backward on a device; a larger batch accumulates
        gradients over several. auto: for each backbone, the largest micro-batch the memory
        planner fits on its GPUs (at most the batch: one micro-step per step wherever the card
        holds it); a backbone without a size takes 32.""",
    )
    learning_rate_with_mlm: float | None = key(
        None,
        exclusiveMinimum=0,
        description="Learning rate of intermediate configs that mix in MLM (paper, 5e-6); read in the intermediate phase only.",
    )


def phase_of(config: dict[str, Any], phase: str) -> PhaseEntry:
    """The ``training.<phase>`` block's record, parsed once (the schema's defaults fill the keys
    a config nobody validated leaves out)."""
    block = (config.get("training") or {}).get(phase) or {}
    return parsed_filled(PhaseEntry, block, f"training.{phase}")


# A backbone's own settings of a phase (backbones.<name>.training.<phase>): these keys of the
# phase's block, each optional.
BACKBONE_PHASE_KEYS = (
    "learning_rate",
    "learning_rate_with_mlm",
    "warmup_ratio",
    "weight_decay",
    "max_grad_norm",
    "dropout",
    "eval_every",
    "patience",
    "max_steps",
)


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
