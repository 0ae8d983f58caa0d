"""What a training phase or an evaluation reads of one task's config entry
(``tasks.<name>``): the batch, the epochs, the sequence length, and the options its format
declares (``TaskFormat.options``: span and ranking tasks)."""

from __future__ import annotations

from dataclasses import dataclass

from workflow_scripts.spec.record import Record, optional


@dataclass(frozen=True)
class TaskOptions(Record):
    batch_size: int
    epochs: float
    max_length: int
    # span formats (span.py: TaskFormat.options)
    doc_stride: int | None = optional()
    max_query_length: int | None = optional()
    n_best: int | None = optional()
    max_answer_length: int | None = optional()
    # ranking formats (ranking.py)
    lowercase: bool | None = optional()
    pooling: str | None = optional()
    # an intermediate task's dev language for model selection (translated configs: theirs)
    select_language: str | None = optional()
