"""The encoder stack of an encoder-decoder model: mT5 / mT0 (small ... XXL), Aya-101.

Loaded without its decoder (half the parameters of the checkpoint). T5 has no summary
token and no masked-LM head (it was pre-trained on span corruption), so sequences are read
as the mean over their tokens and MLM is refused (spec/families.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.models.backbones.family import Family
from workflow_scripts.spec import families

# model_type -> the encoder-only class of transformers for it.
MODEL_TYPES = {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel", "umt5": "UMT5EncoderModel"}


def load(model_dir: Path, **kwargs):
    import transformers
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_dir))
    model_class = getattr(transformers, MODEL_TYPES[config.model_type])
    return model_class.from_pretrained(str(model_dir), attn_implementation="sdpa", **kwargs)


def blocks(model) -> list[Any]:
    return list(model.encoder.block)


FAMILY = Family(facts=families.SEQ2SEQ_ENCODER, load=load, blocks=blocks)
