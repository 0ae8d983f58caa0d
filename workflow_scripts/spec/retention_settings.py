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

# The task formats whose prepared rows give a parallel sample: a Tatoeba-style file (each row a
# sentence and its English translation) or a classification file whose languages hold the same
# rows in the same order (the demo's XNLI).
TEXT_FORMATS = ("retrieval", "classification")
TextFormat = Literal["retrieval", "classification"]
# What the probe's loss is, by backbone family; a family without an LM head gets alignment only.
OBJECTIVES = {"encoder": "masked-LM", "decoder": "next-token"}


@dataclass(frozen=True)
class ProbeText(Record):
    """The held-out text: a prepared split of a task (``results/<experiment>/data/<task>/<split>.parquet``),
    the languages read from it (English always among them) and how many sentences each gives."""

    task: str
    split: str
    format: TextFormat
    languages: tuple[str, ...]
    sentences: int  # per language, drawn with the probe's seed (all of them when fewer)


@dataclass(frozen=True)
class AlignmentSettings(Record):
    """Which sentence vectors Tatoeba-style alignment compares: the backbone's retrieval layer
    and pooling (``family``: its family's), as its Tatoeba evaluation reads them."""

    layer: int
    pooling: str


@dataclass(frozen=True)
class RetentionProbeSettings(Record):
    """One backbone's probe, the same at every stage it is run at."""

    step: ClassVar[str] = "evaluation.retention"

    family: str
    # The backbone's method and precision: every stage loads its weights in the same dtype.
    method: MethodSettings
    text: ProbeText
    alignment: AlignmentSettings
    mask_probability: float  # of each sentence's non-special tokens (encoders)
    seed: int  # draws the sentences and the masked positions
    batch_size: int
    max_length: int


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
