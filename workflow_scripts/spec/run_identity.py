"""Which run a job belongs to: the identity a rule hands its job (``--run-identity``, ``--run``,
``--probe``), built from the job's wildcards in ``rules/common.smk`` and parsed back by the
job's CLI through the same record.

An identity never changes for an output (it is made of the output's wildcards), so passing it
reruns nothing; the job copies it into what it writes (a metric file's ``run``, a probe's
``probe``, a prompted record's ``run``) and names its tracker runs after it
(``training/tracking.py``).

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workflow_scripts.spec.record import Record, optional

TrainingJob = Literal["intermediate", "target", "stage", "few_shot"]
ProbeStage = Literal["before", "intermediate", "target"]


@dataclass(frozen=True)
class TrainingIdentity(Record):
    """One training job: its kind, backbone, intermediate config and seed, and where the job
    has them, its target, recipe, stage and sweep point."""

    job: TrainingJob
    backbone: str
    config: str
    seed: int
    target: str | None = optional()
    recipe: str | None = optional()
    stage: str | None = optional()
    point: str | None = optional()

    def label(self) -> str:
        """``run job=..., backbone=..., ...``: how an error names the run."""
        return "run " + ", ".join(f"{k}={v}" for k, v in self.to_dict().items())


@dataclass(frozen=True)
class EvaluationIdentity(Record):
    """One metric file's run, and the leakage reports of the checks between its stages (only
    for a target with images: the metric file records what they found)."""

    backbone: str
    setting: str
    intermediate: str
    target: str
    seed: int
    leakage_reports: tuple[str, ...] | None = optional()

    def recorded(self) -> dict:
        """What the metric file keeps as its ``run`` (the report files are summarised apart)."""
        return {key: value for key, value in self.to_dict().items() if key != "leakage_reports"}


@dataclass(frozen=True)
class PromptedIdentity(Record):
    """One prompted evaluation: the backbone, the intermediate config (or none), which model
    (``pretrained`` or ``seed<N>``) and the task."""

    backbone: str
    config: str
    run: str
    task: str


@dataclass(frozen=True)
class ProbeIdentity(Record):
    """Which model a retention probe reads: the backbone and stage, and after ``before`` the
    intermediate config and seed, and for ``target`` the target."""

    backbone: str
    stage: ProbeStage
    config: str | None = optional()
    seed: int | None = optional()
    target: str | None = optional()

    def __post_init__(self) -> None:
        from workflow_scripts.spec.basics import InputError

        needs = {"before": (), "intermediate": ("config", "seed"), "target": ("config", "seed", "target")}[self.stage]
        missing = [key for key in needs if getattr(self, key) is None]
        extra = [key for key in ("config", "seed", "target") if key not in needs and getattr(self, key) is not None]
        if missing or extra:
            raise InputError(
                f"--probe: a {self.stage} probe names {', '.join(needs) or 'no config, seed or target'}"
                f" ({'missing' if missing else 'not expected'}: {', '.join(missing or extra)})"
            )
