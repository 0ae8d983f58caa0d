"""What a translation job reads (grid.translation_settings; ``translation.translate``): the
engine and its precision, the decoding settings, the answer re-alignment's cap and, for a
multi-target model, the token that picks the output language.

The config's ``translation`` block less what reruns nothing: the extra datasets (they make
jobs, not settings) and the batch size, which changes only speed (the rule passes it as
``--batch-size``, a resource, and the job sets it here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.method import PrecisionName
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema_block import LANGUAGE_CODE, filled, key, parsed_filled

# Not part of a job's settings: jobs, and speed (see the module docstring).
UNREAD_KEYS = ("datasets", "batch_size")
COMPUTE_TYPES = (
    "auto",
    "default",
    "float32",
    "int8",
    "int8_float32",
    "float16",
    "int8_float16",
    "bfloat16",
    "int8_bfloat16",
)


@dataclass(frozen=True, kw_only=True)
class _Decoding(Record):
    """The keys the config's ``translation`` block and a translation job's settings share."""

    backend: Literal["ctranslate2", "transformers"] = key(
        fill="ctranslate2",
        description="""ctranslate2 (the OPUS-MT weights converted by the convert_translator rule;
        several times faster) or transformers (MarianMTModel.generate). Part of the translation
        cache key.""",
    )
    compute_type: str = key(
        enum=list(COMPUTE_TYPES),
        fill="auto",
        description="""CTranslate2 precision chosen at load time: auto (int8 on CPU, the fastest
        supported type on a GPU), or one of CTranslate2's compute types. Part of the translation
        cache key.""",
    )
    num_beams: int = key(minimum=1, fill=4)
    max_new_tokens: int = key(minimum=1, fill=256)
    max_fuzzy_distance: int = key(
        minimum=0,
        fill=10,
        description="Cap of the answer re-alignment edit distance, min(cap, len(answer) / 2). XTREME 10.",
    )


@dataclass(frozen=True, kw_only=True)
class TranslationEntry(_Decoding):
    """The config's ``translation`` block (the schema's ``$defs.translation`` is generated from
    it): the decoding settings, the transformers engine's precision, the batch size and the
    extra datasets to translate."""

    key_noun = "config key"

    precision: PrecisionName = key(
        fill="fp32",
        description="""The transformers backend's compute dtype, by the backbones' precision
        policy (workflow_scripts/precision.py): fp32, or bf16 / fp16 autocast, on CPUs and GPUs
        alike. Part of the translation cache key; the ctranslate2 backend reads compute_type
        instead.""",
    )
    batch_size: int = key(
        minimum=1, fill=32, description="Sentences per translation batch. Speed only, so changing it reruns nothing."
    )
    datasets: dict[str, Any] = key(
        fill={},
        additionalProperties={"type": "array", "items": {"type": "string", "pattern": LANGUAGE_CODE}},
        description="Extra (task -> languages) translations to build and measure, beyond those the translated configs train on.",
    )


def translation_of(config: dict[str, Any]) -> TranslationEntry:
    """The ``translation`` block's record, parsed once."""
    return parsed_filled(TranslationEntry, config.get("translation") or {}, "translation")


@dataclass(frozen=True, kw_only=True)
class TranslationSettings(_Decoding):
    step: ClassVar[str] = "translation.translate"

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
        """The config's default translation settings, batch size included."""
        return cls.parse(
            {k: v for k, v in filled(TranslationEntry).items() if k != "datasets"}, "TranslationSettings.defaults"
        )
