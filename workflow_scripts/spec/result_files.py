"""What one job writes and later jobs read: the train log a training phase leaves beside its
model (``train_log.json``) and the metric file of one run (``metrics/.../seedN.json``).

Both are written through their record (``to_dict()`` of a parsed record, so a key the record
does not declare stops the writing job, not a report hours later) and read back through it
(``read``): a file that is not one, or that lacks a key, is an error naming the file and the
key. The parts no reader takes apart (a phase's history, a metric file's provenance) are kept
as they are. The curve beside the model has its own reader (``training/curves.py``).

Standard library only, like the rest of ``spec/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.run_identity import EvaluationIdentity

TRAIN_LOG = "train_log.json"
R = TypeVar("R", bound="ResultFile")

# Per task, per metric: a dev score of the selection languages.
TaskScores = dict[str, dict[str, float]]


class ResultFile(Record):
    """A record kept as a JSON file."""

    key_noun: ClassVar[str] = "key"

    @classmethod
    def read(cls: type[R], path: str | Path) -> R:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as err:
            raise InputError(f"missing file: {path}") from err
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"corrupt JSON file {path}: {err}") from err
        return cls.parse(data, str(path))


@dataclass(frozen=True)
class Selection(Record):
    """A dev evaluation that selected a model: its step, its selection score (the mean over
    the phase's tasks of their primary dev metric; minus the loss where nothing is scored),
    each task's scores and, with several selection languages, each language's."""

    # (a field, not Record.step, the CLI a settings record is for: a class attribute that
    # dataclasses would otherwise take for the field's default)
    step: int = field()
    score: float
    scores: TaskScores
    scores_by_language: TaskScores | None = optional()


@dataclass(frozen=True)
class TrainLog(ResultFile):
    """A training phase's record (``training/recipe.py``): the best dev evaluation, the
    schedule, what ran (backbone, precision, engine), the image tasks and the arm recipe the
    model follows from, and the time it took."""

    phase: Literal["intermediate", "target"]
    seed: int
    total_steps: int
    warmup_steps: int
    best: Selection
    history: tuple[dict[str, Any], ...]
    task_probabilities: dict[str, float]
    padding_share: float
    throughput: dict[str, Any]
    backbone: dict[str, Any]
    settings: dict[str, Any]
    settings_hash: str
    resumed_at_step: int | None
    stopped_early: bool
    curve: dict[str, Any]
    visual: dict[str, Any] | None
    intermediate_visual: dict[str, Any] | None
    intermediate_recipe: dict[str, Any] | None
    wall_time_s: float
    # An adapter or a full phase merged back into the backbone (``merge_back``), and the
    # parameters a projector-only recipe froze.
    merge_back: dict[str, Any] | None = optional()
    frozen_parameters: int | None = optional()

    @classmethod
    def beside(cls, model_dir: str | Path) -> TrainLog:
        """The log a phase wrote into (or beside) its model directory."""
        return cls.read(Path(model_dir) / TRAIN_LOG)


@dataclass(frozen=True)
class MetricFile(ResultFile):
    """One run's scores on its target (``evaluation/evaluate.py``): per split, language and
    metric, their averages and the benchmark's one number per split, with what produced them
    (settings, models, data files, scorer versions) and which run it is."""

    target: str
    metric: str
    primary: str
    languages: tuple[str, ...]
    splits: tuple[str, ...]
    setting: str
    scores: dict[str, dict[str, dict[str, float]]]
    average: dict[str, dict[str, float]]
    task_score: dict[str, float]
    task_score_convention: str
    data_provenance: dict[str, Any]
    seed: int
    settings: dict[str, Any]
    settings_hash: str
    seqeval_version: str
    versions: dict[str, str | None]
    precision: dict[str, Any]
    retrieval: dict[str, Any] | None
    wall_time_s: float
    backbone: dict[str, Any]
    run: EvaluationIdentity | None = optional()
    average_weights: dict[str, Any] | None = optional()
    average_excludes: tuple[str, ...] | None = optional()
    unlabelled_rows: dict[str, Any] | None = optional()
    padding_share: float | None = optional()
    models: dict[str, Any] | None = optional()
    selection: Selection | None = optional()
    engine: dict[str, Any] | None = optional()
    sweep: dict[str, Any] | None = optional()
    intermediate_visual: dict[str, Any] | None = optional()
    arm_recipe: dict[str, Any] | None = optional()
    visual: dict[str, Any] | None = optional()
    leakage: tuple[dict[str, Any], ...] | None = optional()

    def identified(self, where: str) -> EvaluationIdentity:
        """The run this file scores; a file written outside the workflow names none."""
        if self.run is None:
            raise InputError(f"metric file {where} names no run (written without --run)")
        return self.run
