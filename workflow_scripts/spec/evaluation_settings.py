"""What an evaluation job is told (``--settings`` of ``evaluation.metric_file``, built by
``workflow/grid_settings.py``'s ``eval_settings``): the languages, how rows are encoded and scored,
the transfer setting's plan (which model scores each language, which files each split
reads) and, for a retrieval target, how sentences are embedded and searched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from workflow_scripts.spec.families import POOLINGS
from workflow_scripts.spec.method import PrecisionName
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema_block import key
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


# How a sentence embedding reads a layer: the families' own poolings, or ``family`` (the
# backbone family's retrieval pooling, spec/families.py).
RETRIEVAL_POOLINGS = [*POOLINGS, "family"]


@dataclass(frozen=True, kw_only=True)
class _Search(Record):
    """How a retrieval target embeds sentences (layer, pooling) and searches them: the keys the
    config's ``retrieval`` block and an evaluation's settings share."""

    layer: int = key(
        minimum=0,
        fill=13,
        description="""hidden_states index (0 = embedding output); the paper's "13th layer" of XLM-R
        large.""",
    )
    pooling: str = key(
        enum=RETRIEVAL_POOLINGS,
        fill="mean",
        description="""How a sentence embedding reads the layer: mean over the tokens (XTREME's
        XLM-R convention), first or last token, or family (the backbone family's own: a decoder's
        last token).""",
    )
    index: str = key(
        minLength=1,
        fill="exact",
        description="""exact (blocked matrix products on the evaluation device, the paper's
        search), or a faiss index_factory string for approximate search at larger scale, e.g.
        "IVF4096,Flat".""",
    )


@dataclass(frozen=True, kw_only=True)
class RetrievalOptions(_Search):
    """The config's ``retrieval`` block (the schema's ``$defs.retrieval`` is generated from it)."""

    key_noun = "config key"

    encoders: dict[str, Any] = key(
        fill={},
        additionalProperties={"type": "string"},
        description="""Which encoder a retrieval target (Tatoeba, BUCC) embeds with: intermediate
        (the backbone the intermediate phase left, XTREME's protocol) or a trained target whose
        model's encoder is used (XTREME-R's code retrieves Tatoeba with the model fine-tuned on
        SQuAD: xquad). Default: the benchmark's (benchmark.py), recorded in every metric file.""",
    )
    bucc_k: int = key(minimum=1, fill=4, description="Neighbours of the BUCC ratio margin")
    bucc_duplicates: str = key(
        enum=["drop", "all_ids"],
        fill="drop",
        description="""drop (the official XTREME scorer) ignores every sentence text that occurs
        more than once on a side; all_ids credits a repeated text to each of its sentence ids.
        Written into every BUCC metric file.""",
    )
    max_length: int = key(minimum=8, fill=512)
    batch_size: int = key(minimum=1, fill=64)
    nprobe: int = key(minimum=1, fill=32, description="Clusters probed by an approximate faiss index")


@dataclass(frozen=True, kw_only=True)
class RetrievalSettings(_Search):
    """What an evaluation's retrieval reads: the search, the encoder, and the options of the
    index and the task that apply."""

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
