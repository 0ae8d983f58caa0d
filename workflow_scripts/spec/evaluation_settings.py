"""What an evaluation job is told (``--settings`` of ``evaluation.metric_file``, built by
``workflow/grid_settings.py``'s ``eval_settings``): the languages, how rows are encoded and scored,
the transfer setting's plan (which model scores each language, which files each split
reads) and, for a retrieval target, how sentences are embedded and searched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema import PrecisionName
from workflow_scripts.spec.task_options import FormatOptions, ScoringOptions
from workflow_scripts.spec.transfer_names import ZERO_SHOT


@dataclass(frozen=True, kw_only=True)
class DataFile(Record):
    """One canonical data file and the languages whose rows are used from it."""

    path: str
    languages: tuple[str, ...]
    kind: str  # english | human | in_language | published_mt | pipeline_mt | translate_test | few_shot
    shots: int | None = optional()  # a few-shot pool: the rows of at most this many shots


@dataclass(frozen=True, kw_only=True)
class ModelRecipe(Record):
    """One target model: what trains it and what selects it."""

    recipe: str
    train: tuple[DataFile, ...]
    dev: tuple[DataFile, ...]


@dataclass(frozen=True, kw_only=True)
class TransferPlan(Record):
    """One (setting, target) of workflow/transfer.py: the model of each language and the
    data of each split."""

    setting: str
    text_language: str | None  # translate_test: rows are English, whatever their label
    notes: tuple[str, ...]
    models: dict[str, ModelRecipe]  # evaluation language -> recipe (empty for retrieval targets)
    data: dict[str, tuple[DataFile, ...]]  # split -> files


@dataclass(frozen=True, kw_only=True)
class RetrievalSettings(Record):
    """How a retrieval target embeds sentences (layer, pooling) and searches them."""

    layer: int
    pooling: str
    index: str
    encoder: str  # which model embeds: the intermediate phase's, or a target model
    nprobe: int | None = optional()  # an IVF index only
    bucc_k: int | None = optional()  # mining (BUCC) only
    bucc_duplicates: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class EvaluationSettings(FormatOptions):
    step: ClassVar[str] = "evaluation.metric_file"

    languages: tuple[str, ...]
    eval_batch_size: int
    precision: PrecisionName  # the backbone's precision policy decides the compute dtype (precision.py)
    retrieval: RetrievalSettings | None = optional()
    transfer: TransferPlan | None = optional()
    average_excludes: tuple[str, ...] | None = optional()  # IGLUE's averages leave English out

    @property
    def setting(self) -> str:
        return self.transfer.setting if self.transfer is not None else ZERO_SHOT

    def scoring(self, unlabelled: int = 0) -> ScoringOptions:
        """The options one language's rows are scored with."""
        text_language = self.transfer.text_language if self.transfer is not None else None
        fields = {k: v for k, v in self.to_dict().items() if k in ScoringOptions.keys()}
        return ScoringOptions.parse({**fields, "text_language": text_language, "unlabelled": unlabelled})
