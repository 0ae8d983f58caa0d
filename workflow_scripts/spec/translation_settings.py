"""What a translation job reads (grid.translation_settings; ``translation.translate``): the
engine and its precision, the decoding settings, the answer re-alignment's cap and, for a
multi-target model, the token that picks the output language.

The config's ``translation`` block less what reruns nothing: the extra datasets (they make
jobs, not settings) and the batch size, which changes only speed (the rule passes it as
``--batch-size``, a resource, and the job sets it here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import schema_defaults
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema import PrecisionName

# Not part of a job's settings: jobs, and speed (see the module docstring).
UNREAD_KEYS = ("datasets", "batch_size")


@dataclass(frozen=True)
class TranslationSettings(Record):
    step: ClassVar[str] = "translation.translate"

    # ctranslate2: the converted model (convert_translator); transformers: MarianMTModel.generate
    backend: Literal["ctranslate2", "transformers"]
    # CTranslate2's precision, chosen when the model loads (auto: int8 on CPU)
    compute_type: str
    num_beams: int
    max_new_tokens: int
    # the cap of the span answers' fuzzy re-alignment, min(cap, len(answer) / 2)
    max_fuzzy_distance: int
    # the transformers engine's precision policy (precision.py); named only for that engine,
    # so that changing it reruns nothing that runs CTranslate2
    precision: PrecisionName | None = optional()
    # the sentence-initial token that picks a multi-target model's output language (>>ara<<)
    target_token: str | None = optional()
    # the task a job translates (absent for the quality scores, which read XNLI)
    task: str | None = optional()
    # sentences per batch: given by the job (--batch-size), never by the workflow's JSON
    batch_size: int | None = optional()

    def __post_init__(self) -> None:
        if self.backend == "transformers" and self.precision is None:
            raise InputError("TranslationSettings: the transformers backend needs its precision")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputError(f"translation needs a batch size of at least 1, got {self.batch_size}")

    @classmethod
    def defaults(cls) -> TranslationSettings:
        """The schema's translation settings (``translation``), batch size included."""
        return cls.parse(
            {k: v for k, v in schema_defaults("translation").items() if k != "datasets"}, "TranslationSettings.defaults"
        )
