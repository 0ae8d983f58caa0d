"""What the retention probe and its table read (docs/multimodal.md, "Forgetting"): the probe's
settings for one backbone (``workflow/retention.py`` builds them, ``evaluation/retention.py``
parses them) and the table's (``reporting/retention.py``).

A probe measures how well a backbone still models held-out multilingual text, and how well
its sentence vectors still align languages, at three stages: ``before`` (the pretrained
backbone), ``intermediate`` (the model an intermediate config left) and ``target`` (the
zero-shot target model trained from it). Every stage of one backbone is probed with the same
settings, so the stages differ by the weights only.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workflow_scripts.spec.method import MethodSettings
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.report_settings import ArmPair
from workflow_scripts.spec.schema_block import key

# The task formats whose prepared rows give a parallel sample: a Tatoeba-style file (each row a
# sentence and its English translation) or a classification file whose languages hold the same
# rows in the same order (the demo's XNLI).
TEXT_FORMATS = ("retrieval", "classification")
TextFormat = Literal["retrieval", "classification"]
# What the probe's loss is, by backbone family; a family without an LM head gets alignment only.
OBJECTIVES = {"encoder": "masked-LM", "decoder": "next-token"}


# Sentences per language: the config's key, which the probe's text carries.
SENTENCES = {
    "minimum": 2,
    "fill": 500,
    "description": "Sentences per language, drawn with `seed` (all of them when the split has fewer)",
}


@dataclass(frozen=True, kw_only=True)
class TextEntry(Record):
    """``retention.text`` of the config: the task and split whose prepared rows are the text."""

    key_noun = "config key"

    task: str = key(fill="tatoeba", description="The task whose prepared rows are the text")
    split: str = key(enum=["dev", "test"], fill="test", description="Its split")


@dataclass(frozen=True, kw_only=True)
class ProbeText(Record):
    """The held-out text: a prepared split of a task (``results/<experiment>/data/<task>/<split>.parquet``),
    the languages read from it (English always among them) and how many sentences each gives."""

    task: str
    split: str
    format: TextFormat
    languages: tuple[str, ...]
    sentences: int = key(**SENTENCES)


@dataclass(frozen=True, kw_only=True)
class AlignmentSettings(Record):
    """Which sentence vectors Tatoeba-style alignment compares: the backbone's retrieval layer
    and pooling (``family``: its family's), as its Tatoeba evaluation reads them."""

    layer: int
    pooling: str


@dataclass(frozen=True, kw_only=True)
class ProbeRun(Record):
    """How every stage of a probe runs: the keys the config's ``retention`` block and a probe's
    settings share."""

    mask_probability: float = key(
        exclusiveMinimum=0,
        maximum=1,
        fill=0.15,
        description="Share of each sentence's non-special tokens masked for the masked-LM loss (at least one)",
    )
    seed: int = key(minimum=0, fill=0, description="Draws the sentences and the masked positions")
    batch_size: int = key(minimum=1, fill=32, description="Sentences per forward pass")
    max_length: int = key(minimum=8, fill=128, description="Tokens per sentence (longer ones are truncated)")


@dataclass(frozen=True, kw_only=True)
class RetentionEntry(ProbeRun):
    """The config's ``retention`` block (the schema's ``$defs.retention`` is generated from it)."""

    key_noun = "config key"

    probe: bool = key(
        fill=False, description="Run the probe and write its table for every backbone (off by default, it adds jobs)"
    )
    text: TextEntry = key(
        fill={},
        description="""The held-out text: a prepared split of a task in `tasks`, of format retrieval
        (Tatoeba: each row a sentence and its English translation; Hub id and revision are the
        task's) or classification whose languages hold the same rows in the same order (the demo's
        XNLI, whose sentences the demo backbones were not pre-trained on). Its first text column is
        read.""",
    )
    languages: tuple[str, ...] | None = key(
        None,
        nullable=True,
        description="""The languages probed (English is always added); null: every language the text
        task is configured with""",
    )
    sentences: int = key(**SENTENCES)
    targets: tuple[str, ...] | None = key(
        None,
        nullable=True,
        description="""The targets whose zero-shot target models are probed (stage `target`); null:
        the first target of each backbone that trains a target model (not a retrieval target)""",
    )


@dataclass(frozen=True, kw_only=True)
class RetentionProbeSettings(ProbeRun):
    """One backbone's probe, the same at every stage it is run at."""

    step: ClassVar[str] = "evaluation.retention"

    family: str
    # The backbone's method and precision: every stage loads its weights in the same dtype.
    method: MethodSettings
    text: ProbeText
    alignment: AlignmentSettings


@dataclass(frozen=True)
class RetentionTableSettings(Record):
    """A backbone's retention table: the configs, seeds and targets probed, the arms' pairs."""

    step: ClassVar[str] = "reporting.retention"

    backbone: str
    family: str
    intermediate: tuple[str, ...]  # the backbone's configs, in the config's order
    targets: tuple[str, ...]  # the targets whose zero-shot models are probed (may be none)
    seeds: tuple[int, ...]
    languages: tuple[str, ...]
    pairs: tuple[ArmPair, ...]
    decimals: int = 2
    # What the loss is (OBJECTIVES); None: a family without an LM head, alignment only.
    objective: str | None = optional()
