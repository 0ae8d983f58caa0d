"""Where a training job's hyperparameters come from, and which source wins.

A phase's settings are read from several places of the config, each setting some keys: the
phase's block, an intermediate config's or a task's own learning rate, the backbone's own
training block, and, for two kinds of target job, a sweep point or a few-shot candidate.
``SOURCES`` lists them per phase, lowest precedence first: a later source replaces what an
earlier one set. ``phase_values`` applies the config's own layers in that order; the last
two target layers replace values of the finished record and are applied by the builders of
those jobs (``grid_settings.sweep_point_settings``, ``grid_settings.few_shot_settings``).
The configuration reference prints this table (``precedence_markdown``; config_reference.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from workflow_scripts.planning import memory_plan
from workflow_scripts.spec import intermediate_entry, task_entry
from workflow_scripts.spec.backbone_entry import entry_of
from workflow_scripts.spec.phase_settings import PhaseHyperparameters, phase_of

Phase = Literal["intermediate", "target"]
PHASE_KEYS = PhaseHyperparameters.keys()


@dataclasses.dataclass(frozen=True)
class PhaseJob:
    """The job whose settings are built: its phase and backbone, the intermediate config it
    trains (intermediate phase) or the task it trains (target phase: a target or a stage)."""

    phase: Phase
    backbone: str
    intermediate: str | None = None
    trained: str | None = None

    def with_mlm(self, config: dict[str, Any]) -> bool:
        """Whether the intermediate config adds MLM (its learning rates then apply)."""
        return self.intermediate is not None and intermediate_entry.entry_of(config, self.intermediate).mlm


Reader = Callable[[dict[str, Any], PhaseJob], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Source:
    """One layer: the config key it reads, the keys it sets, when it applies, and how it is
    read (None: applied to the finished record by the builder that ``when`` names)."""

    where: str
    sets: str
    when: str = "always"
    read: Reader | None = None


def _phase_block(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    values = {k: v for k, v in phase_of(config, job.phase).to_dict().items() if k in PHASE_KEYS}
    if values.get("max_micro_batch") == memory_plan.AUTO_MICRO_BATCH:
        values["max_micro_batch"] = memory_plan.resolved_micro_batch(config, job.backbone, job.phase)
    return values


def _phase_rate_with_mlm(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    if not job.with_mlm(config):
        return {}
    return {"learning_rate": phase_of(config, "intermediate").learning_rate_with_mlm}


def _intermediate_rate(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    rate = intermediate_entry.entry_of(config, str(job.intermediate)).learning_rate
    return {"learning_rate": rate} if rate is not None else {}


def _task_rate(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    rate = task_entry.entry_of(config, str(job.trained)).learning_rate
    return {"learning_rate": rate} if rate is not None else {}


def _backbone_block(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    return {k: v for k, v in _backbone_phase(config, job).items() if k != "learning_rate_with_mlm"}


def _backbone_rate_with_mlm(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    rate = _backbone_phase(config, job).get("learning_rate_with_mlm")
    return {"learning_rate": rate} if rate is not None and job.with_mlm(config) else {}


def _backbone_phase(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    return entry_of(config, job.backbone).phase_training(job.phase)


_MLM = "the intermediate config has `mlm: true`"
SOURCES: dict[Phase, tuple[Source, ...]] = {
    "intermediate": (
        Source("training.intermediate.<key>", "every phase key (`max_micro_batch: auto`: the memory plan's)", read=_phase_block),
        Source("training.intermediate.learning_rate_with_mlm", "learning_rate", _MLM, _phase_rate_with_mlm),
        Source("intermediate.<name>.learning_rate", "learning_rate", read=_intermediate_rate),
        Source("backbones.<backbone>.training.intermediate.<key>", "the phase keys it names", read=_backbone_block),
        Source("backbones.<backbone>.training.intermediate.learning_rate_with_mlm", "learning_rate", _MLM,
               _backbone_rate_with_mlm),
    ),
    "target": (
        Source("training.target.<key>", "every phase key (`max_micro_batch: auto`: the memory plan's)", read=_phase_block),
        Source("tasks.<task>.learning_rate", "learning_rate", "the task trained (a target or one of its stages)",
               _task_rate),
        Source("backbones.<backbone>.training.target.<key>", "the phase keys it names", read=_backbone_block),
        Source("sweep.<key>", "learning_rate, warmup_ratio; the target's batch_size, epochs",
               "a sweep point's model (`grid_settings.sweep_point_settings`)"),
        Source("transfer.settings.few_shot:<N>.learning_rates, else the task's few-shot protocol",
               "learning_rate; the protocol's warmup_ratio, batch_size and epochs (each epoch selects, no early stop)",
               "a few-shot candidate's model (`grid_settings.few_shot_settings`)"),
    ),
}  # fmt: skip


def phase_values(config: dict[str, Any], job: PhaseJob) -> dict[str, Any]:
    """The phase keys the config sets for ``job``, every layer of ``SOURCES`` that the config
    itself holds applied in order (a later one replaces an earlier one's values)."""
    values: dict[str, Any] = {}
    for source in SOURCES[job.phase]:
        if source.read is not None:
            values.update(source.read(config, job))
    return values


def precedence_markdown() -> str:
    """The table of ``SOURCES``, as the configuration reference prints it."""
    lines = []
    for phase, sources in SOURCES.items():
        lines += [f"**{phase} phase**", "", "| | source | sets | applies |", "|---|---|---|---|"]
        lines += [f"| {i} | `{s.where}` | {s.sets} | {s.when} |" for i, s in enumerate(sources, 1)]
        lines.append("")
    return "\n".join(lines)
