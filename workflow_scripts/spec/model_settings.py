"""What the workflow hands the jobs that prepare models, and the evaluation's record of its
backbone.

- ``BackbonePrepare``: a backbone to fetch from the Hub or to build as the demo's
  (backbone_grid.prepare_settings; ``models.prepare backbone``), with the demo's build
  settings of its family (``DemoEncoder``, ``DemoDecoder``: models/demo_models.py);
- ``TranslatorPrepare``: an OPUS-MT translator, or the demo's MarianMT (grid.translator_settings;
  ``models.prepare translator``, ``DemoTranslator``);
- ``VisionPrepare``: the frozen vision encoder of image tasks, or the demo's CLIP tower
  (grid.vision_settings; ``models.prepare vision``, ``DemoVision``: multimodal/demo_vision.py);
- ``BackboneProvenance``: what a metric file records of its backbone (backbone_grid.provenance;
  ``evaluation.metric_file --backbone-settings``).

A demo record requires every key of the JSON it parses, and declares the default each key
has in the config (``key(fill=...)``): the config schema's ``$defs.demo_encoder``,
``demo_decoder`` and ``demo_translator`` are generated from these records, and Snakemake fills
the defaults into the config the builders read. A record's ``defaults()`` is those defaults,
for code that builds a demo model without a config (tests, benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.families import DEMO_FAMILIES
from workflow_scripts.spec.families import facts as family_facts
from workflow_scripts.spec.method import MethodName, MethodSettings, PrecisionName
from workflow_scripts.spec.record import Record, optional
from workflow_scripts.spec.schema_block import filled, key

R = TypeVar("R", bound=Record)
Source = Literal["hub", "demo"]


@dataclass(frozen=True, kw_only=True)
class _PreparedModel(Record):
    """A model a prepare step fetches (a Hub snapshot at a pinned revision) or builds (the
    demo's, from its ``demo`` settings, which each kind of model declares)."""

    source: Source
    hub_id: str | None = optional()
    revision: str | None = optional()

    def __post_init__(self) -> None:
        what = type(self).__name__
        if self.source == "hub" and (self.hub_id is None or self.revision is None):
            raise InputError(f"{what}: a Hub model needs hub_id and revision")
        if self.source == "demo" and self.demo is None:  # type: ignore[attr-defined]
            raise InputError(f"{what}: a demo model needs its demo settings")


# ----- the demo backbones (models/demo_models.py) --------------------------------------------


class _FilledDefaults:
    """``defaults()``: the record as the defaults its keys declare give it."""

    @classmethod
    def defaults(cls: type[R]) -> R:
        return cls.parse(filled(cls), f"{cls.__name__}.defaults")


@dataclass(frozen=True, kw_only=True)
class _Pretraining(Record):
    """What both demo backbones' pre-training reads: sentences and translation pairs, with a
    cross-lingual contrastive loss beside the language-model loss."""

    steps: int = key(minimum=0)  # each backbone's own default (0 leaves it random)
    batch_size: int = key(minimum=2, fill=32)
    learning_rate: float = key(exclusiveMinimum=0, fill=5.0e-3)
    max_length: int = key(minimum=8, fill=64)
    contrastive_weight: float = key(minimum=0, fill=1.0)
    temperature: float = key(exclusiveMinimum=0, fill=0.05)


@dataclass(frozen=True, kw_only=True)
class EncoderPretraining(_Pretraining):
    """MLM (its masking rate) plus the contrastive loss."""

    steps: int = key(minimum=0, fill=200)
    mlm_probability: float = key(exclusiveMinimum=0, exclusiveMaximum=1, fill=0.15)


@dataclass(frozen=True, kw_only=True)
class DecoderPretraining(_Pretraining):
    """Causal LM plus the contrastive loss (no MLM: a decoder block naming mlm_probability is
    refused, which is how a backbone's demo block is told apart)."""

    steps: int = key(minimum=0, fill=300)
    contrastive_weight: float = key(
        minimum=0,
        fill=1.0,
        description="""Weight of the cross-lingual contrastive loss on the last-token states of a
        sentence and its translation (without it causal LM leaves the languages unaligned).""",
    )


@dataclass(frozen=True, kw_only=True)
class _DemoShape(Record):
    """A tiny demo backbone's shape and initialisation."""

    vocab_size: int = key(minimum=10, fill=2000)
    hidden_size: int = key(minimum=4, fill=64)
    num_hidden_layers: int = key(minimum=1, fill=2)
    num_attention_heads: int = key(minimum=1, fill=4)
    intermediate_size: int = key(minimum=4, fill=128)
    max_position_embeddings: int = key(minimum=16)  # each backbone's own default
    seed: int = key(fill=0)


@dataclass(frozen=True, kw_only=True)
class DemoEncoder(_FilledDefaults, _DemoShape):
    """A tiny XLM-R (backbones.<name>.demo of an encoder)."""

    max_position_embeddings: int = key(minimum=16, fill=258)  # XLM-R's 2 + 256 positions
    pretraining: EncoderPretraining = key(
        fill={},
        description="""Pre-training on the demo corpora: masked LM on single sentences and
        translation pairs plus a cross-lingual contrastive loss (InfoXLM-style). steps 0 leaves
        the encoder random.""",
    )


@dataclass(frozen=True, kw_only=True)
class DemoDecoder(_FilledDefaults, _DemoShape):
    """A tiny Llama (backbones.<name>.demo of a decoder)."""

    max_position_embeddings: int = key(minimum=16, fill=256)
    pretraining: DecoderPretraining = key(
        fill={},
        description="""Causal-LM pre-training on the demo corpora (single sentences and translation
        pairs joined by </s>) plus a cross-lingual contrastive loss. steps 0 leaves the decoder
        random.""",
    )
    # grouped-query attention; absent: one key/value head per attention head
    num_key_value_heads: int | None = key(None, minimum=1)


# The demo's build settings by family (the families spec/families.py says the demo builds).
DEMO_BACKBONES: dict[str, type[DemoEncoder | DemoDecoder]] = {"encoder": DemoEncoder, "decoder": DemoDecoder}


@dataclass(frozen=True)
class BackbonePrepare(_PreparedModel):
    """A backbone: a Hub snapshot at a pinned revision, or the demo's model of its family."""

    step: ClassVar[str] = "models.prepare"

    family: str
    # An encoder's block parses as DemoEncoder (its pretraining has mlm_probability, which
    # DemoDecoder's has not), a decoder's as DemoDecoder; the family must agree.
    demo: DemoEncoder | DemoDecoder | None = optional()

    def __post_init__(self) -> None:
        family_facts(self.family)  # a known family
        super().__post_init__()
        if self.demo is None:
            return
        if self.family not in DEMO_BACKBONES:
            raise InputError(f"the demo builds {' and '.join(DEMO_FAMILIES)} backbones, not {self.family}")
        if type(self.demo) is not DEMO_BACKBONES[self.family]:
            raise InputError(
                f"BackbonePrepare: the demo builds family {self.family} from {DEMO_BACKBONES[self.family].__name__} "
                f"settings, not from {type(self.demo).__name__} settings"
            )


# ----- the translators -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TranslatorTraining(Record):
    """Teacher-forced training on the parallel corpus of the translator's pair."""

    steps: int = key(minimum=0, fill=800)
    batch_size: int = key(minimum=1, fill=32)
    learning_rate: float = key(exclusiveMinimum=0, fill=5.0e-3)
    max_length: int = key(minimum=8, fill=96)


@dataclass(frozen=True, kw_only=True)
class DemoTranslator(_FilledDefaults, Record):
    """A tiny MarianMT (models.translator_demo)."""

    vocab_size: int = key(minimum=10, fill=1000)
    d_model: int = key(minimum=4, fill=32)
    layers: int = key(minimum=1, fill=1)
    heads: int = key(minimum=1, fill=2)
    ffn_dim: int = key(minimum=4, fill=64)
    max_position_embeddings: int = key(minimum=16, fill=128)
    seed: int = key(fill=0)
    training: TranslatorTraining = key(
        fill={}, description="Training on the demo parallel corpus of the translator's pair; steps 0 leaves it random."
    )


@dataclass(frozen=True)
class TranslatorPrepare(_PreparedModel):
    """A translator: an OPUS-MT snapshot, or the demo's MarianMT trained on its pair."""

    step: ClassVar[str] = "models.prepare"

    demo: DemoTranslator | None = optional()
    # a demo translator into English (translate-test): "<lang>-en"; named so that the two
    # directions of one language are different jobs' settings
    direction: str | None = optional()


# ----- the vision encoder (multimodal/demo_vision.py) ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class VisionPretraining(Record):
    """Contrastive (CLIP) pre-training on the demo's image and caption pairs."""

    steps: int = key(minimum=1, fill=300)
    batch_size: int = key(minimum=2, fill=64)
    learning_rate: float = key(exclusiveMinimum=0, fill=1.0e-3)


@dataclass(frozen=True, kw_only=True)
class VisionCaptions(Record):
    """The (image, caption) pairs the demo tower learns from: SNLI-VE rows and their images
    (the rule reads them from the config; here they make the tower rebuild when they change)."""

    rows: str = key(fill="demo/hub/HuggingFaceM4/SNLI-VE/default/train.jsonl")
    images: str = key(fill="demo/hub/HuggingFaceM4/SNLI-VE/images")


@dataclass(frozen=True, kw_only=True)
class DemoVision(_FilledDefaults, Record):
    """A tiny CLIP ViT (vision.demo)."""

    hidden_size: int = key(minimum=8, fill=64)
    intermediate_size: int = key(minimum=8, fill=128)
    num_hidden_layers: int = key(minimum=1, fill=2)
    num_attention_heads: int = key(minimum=1, fill=4)
    image_size: int = key(minimum=8, fill=32)
    patch_size: int = key(minimum=1, fill=8)
    seed: int = key(minimum=0, fill=0)
    captions: VisionCaptions = key(
        fill={},
        description="""The (image, caption) pairs the demo tower is pre-trained on, as CLIP on its
        web pairs: SNLI-VE rows naming images (filename, premise), and their image folder.""",
    )
    pretraining: VisionPretraining = key(fill={})


@dataclass(frozen=True)
class VisionPrepare(_PreparedModel):
    """The vision encoder: a Hub CLIP or SigLIP snapshot, or the demo's tower."""

    step: ClassVar[str] = "models.prepare"

    demo: DemoVision | None = optional()
    # the demo tower's initialisation and batch order (vision.demo.seed)
    seed: int | None = optional()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source == "demo" and self.seed is None:
            raise InputError("VisionPrepare: a demo vision tower needs its seed")


# ----- what a metric file records of its backbone ----------------------------------------------


@dataclass(frozen=True)
class LoraSettings(Record):
    """An adapter method's LoRA settings (backbones.<name>.lora, with the schema's defaults)."""

    rank: int
    alpha: int
    dropout: float
    # absent: the family's defaults for the model's architecture (spec/families.py)
    target_modules: tuple[str, ...] | None = optional()


@dataclass(frozen=True)
class BackboneProvenance(Record):
    """Where a backbone comes from, its family, and how it trains (the training method's
    settings: backbone_grid.method_settings). The evaluation completes it from the prepared
    directory (evaluation/metric_file.py)."""

    step: ClassVar[str] = "evaluation.metric_file"

    name: str
    family: str
    source: Source
    method: MethodName
    precision: PrecisionName
    hub_id: str | None = optional()
    revision: str | None = optional()
    lora: LoraSettings | None = optional()
    # named only when on (method_settings)
    activation_checkpointing: bool | None = optional()

    @classmethod
    def of_method(cls, method: MethodSettings, **where_from: Any) -> BackboneProvenance:
        """The provenance of a backbone that trains by ``method``, from ``where_from`` (name,
        family, source, and a Hub backbone's hub_id and revision): the LoRA settings grouped
        under ``lora``, activation checkpointing named only when on."""
        settings = method.to_dict()
        lora = {key: settings.pop(key) for key in LoraSettings.keys() if key in settings}
        name, precision = settings.pop("name"), settings.pop("precision")
        return cls.parse(
            {**where_from, "method": name, "precision": precision, **({"lora": lora} if lora else {}), **settings},
            f"backbones.{where_from['name']}",
        )
