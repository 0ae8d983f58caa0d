"""The backbone families' facts, which the workflow reads when it checks and plans a config
and the jobs read when they load a model: the family's name, how it reads one vector per
sequence, whether it has a masked-LM head, and the modules LoRA adapts by default.

How a family loads, where its blocks are and how its tokenizer is set up is job-time code
(``models/backbones/``), which takes these facts from here: each is declared once, and the
Snakefile checks a config without importing torch or transformers.

Standard library only.
"""

from __future__ import annotations

import dataclasses

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.suggest import did_you_mean

# How one vector per sequence is read (models/backbones/family.py: pool).
POOLINGS = ("first", "mean", "last")


@dataclasses.dataclass(frozen=True)
class FamilyFacts:
    name: str
    # How classification and multiple choice read one vector per sequence (POOLINGS).
    pooling: str
    # Retrieval's default pooling (retrieval.pooling: family); the layer is configured.
    retrieval_pooling: str
    # Whether MLM can be an intermediate task (the config check refuses it otherwise).
    has_mlm: bool
    # The linear layers LoRA adapts when the config names none: those of the family's usual
    # architecture (what the memory planner sizes, having no model config) ...
    lora_targets: tuple[str, ...]
    # ... and of the architectures that name them otherwise, by the config's model_type.
    lora_targets_by_model_type: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict, hash=False)
    # Whether the embedded demo can build one (models/demo_models.py); others come from the Hub.
    demo_builds: bool = False

    def __post_init__(self) -> None:
        for pooling in (self.pooling, self.retrieval_pooling):
            if pooling not in POOLINGS:
                raise ValueError(f"family {self.name}: pooling {pooling!r} is none of {', '.join(POOLINGS)}")

    def lora_targets_of(self, model_type: str | None) -> tuple[str, ...]:
        """The modules LoRA adapts by default on a model of ``model_type`` (None: the usual one)."""
        return self.lora_targets_by_model_type.get(model_type or "", self.lora_targets)


# Bidirectional encoders with a masked-LM head (XLM-R, mBERT, mDeBERTa-v3, RemBERT), read at
# their first token. LoRA on the attention projections: BERT-style names; DeBERTa-v2/v3 calls
# q, k, v *_proj, which the BERT names would not match (peft matches name suffixes), leaving
# LoRA on the output projection alone.
ENCODER = FamilyFacts(
    name="encoder",
    pooling="first",
    retrieval_pooling="mean",
    has_mlm=True,
    lora_targets=("query", "key", "value", "attention.output.dense"),
    lora_targets_by_model_type={"deberta-v2": ("query_proj", "key_proj", "value_proj", "attention.output.dense")},
    demo_builds=True,
)
# The encoder stack of an encoder-decoder model (mT5 / mT0, Aya-101): no summary token and no
# MLM head (pre-trained on span corruption), so read at the mean of its tokens.
SEQ2SEQ_ENCODER = FamilyFacts(
    name="seq2seq_encoder",
    pooling="mean",
    retrieval_pooling="mean",
    has_mlm=False,
    lora_targets=("q", "k", "v", "o"),
)
# Causal LMs (BLOOM(Z), Llama, Qwen, Gemma, Aya-23): only the last real token has seen the
# whole input. LoRA on q/k/v/o; BLOOM fuses q, k and v into one layer.
DECODER = FamilyFacts(
    name="decoder",
    pooling="last",
    retrieval_pooling="last",
    has_mlm=False,
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
    lora_targets_by_model_type={"bloom": ("query_key_value", "self_attention.dense")},
    demo_builds=True,
)

# The registered families (docs/guides/new_backbone_family.md adds one here), in the order
# errors list them; models/backbones/ gives each its code.
REGISTERED = (ENCODER, SEQ2SEQ_ENCODER, DECODER)
FAMILIES: dict[str, FamilyFacts] = {f.name: f for f in REGISTERED}
DEMO_FAMILIES: tuple[str, ...] = tuple(f.name for f in REGISTERED if f.demo_builds)


def facts(name: str) -> FamilyFacts:
    try:
        return FAMILIES[name]
    except KeyError:
        raise InputError(
            f"unknown backbone family {name!r}{did_you_mean(name, FAMILIES)}; known: {', '.join(FAMILIES)}"
        ) from None
