"""The encoder family: XLM-R (large / XL / XXL), mBERT, mDeBERTa-v3, RemBERT.

Read at the first token, as in XLM-R's and BERT's classification heads and in the 2020
protocol; they keep their masked-LM head, so MLM can be an intermediate task (those facts,
and the modules LoRA adapts, are in spec/families.py)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from workflow_scripts.models.backbones.family import Family
from workflow_scripts.spec import families


def load(model_dir: Path, **kwargs):
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(model_dir))
    model_class = AutoModel._model_mapping[type(config)]
    # The pooler (BERT's next-sentence head) is never used: not loading it saves its weights
    # and the "unused weights" warning. Only some architectures have one (DeBERTa has none).
    extra = (
        {"add_pooling_layer": False}
        if "add_pooling_layer" in inspect.signature(model_class.__init__).parameters
        else {}
    )
    # SDPA: PyTorch's fused attention kernels (flash / memory-efficient on GPUs).
    return AutoModel.from_pretrained(str(model_dir), attn_implementation="sdpa", **extra, **kwargs)


def blocks(model) -> list[Any]:
    return list(model.encoder.layer)


FAMILY = Family(facts=families.ENCODER, load=load, blocks=blocks)
