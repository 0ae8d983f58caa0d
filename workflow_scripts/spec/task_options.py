"""What a training phase or an evaluation reads of one task's config entry
(``tasks.<name>``): the sequence length and the options its format declares
(``TaskFormat.options``: span and ranking tasks) — ``FormatOptions``, what the feature
builders read — and, for training, the batch and the epochs (``TaskOptions``)."""

from __future__ import annotations

from dataclasses import dataclass

from workflow_scripts.spec.method import PrecisionName
from workflow_scripts.spec.record import Record, optional


@dataclass(frozen=True, kw_only=True)
class FormatOptions(Record):
    """How a task's rows become model inputs and its outputs predictions. Every option a
    format declares (``TaskFormat.options``) is a field here (tests/test_spec.py)."""

    max_length: int
    # span (formats/span.py)
    doc_stride: int | None = optional()
    max_query_length: int | None = optional()
    n_best: int | None = optional()
    max_answer_length: int | None = optional()
    # ranking (formats/ranking.py): lower-cased text, and how the dual encoder pools
    lowercase: bool | None = optional()
    pooling: str | None = optional()
    # visual answers (formats/visual_answer.py): the answers given this often form the vocabulary
    min_answer_count: int | None = optional()


@dataclass(frozen=True, kw_only=True)
class TaskOptions(FormatOptions):
    """One task of a training phase."""

    batch_size: int
    epochs: float
    # an intermediate task's dev language for model selection (translated configs: theirs)
    select_language: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class ScoringOptions(FormatOptions):
    """How one task's rows are scored, in a training phase's model selection and in the
    evaluation: the batch, the compute dtype (the backbone's precision policy) and, for the
    cases a metric needs them, the language answers are normalised in and the count of
    unlabelled rows (IGLUE's MaRVL accuracy counts them wrong)."""

    eval_batch_size: int
    precision: PrecisionName
    text_language: str | None = None
    unlabelled: int = 0
