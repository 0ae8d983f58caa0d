"""The decoder family: BLOOM(Z), Llama, Qwen, Gemma, Aya-23 (Cohere) style causal LMs.

Attention is causal, so only the last real token has seen the whole sequence:
classification, multiple choice and retrieval read it. Tagging and span heads sit on every
position's hidden state, which sees its left context only. There is no masked-LM head
(those facts, and the modules LoRA adapts, are in spec/families.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.models.backbones.family import Family
from workflow_scripts.spec import families

MODEL_TYPES = frozenset(
    {
        "bloom",
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "cohere",
        "cohere2",
        "gpt2",
        "gpt_neox",
        "olmo",
        "olmo2",
        "phi3",
    }
)


def load(model_dir: Path, **kwargs):
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(model_dir), attn_implementation="sdpa", **kwargs)


def blocks(model) -> list[Any]:
    for name in ("layers", "h"):  # Llama, Qwen, Gemma, Cohere: layers; BLOOM, GPT-2: h
        found = getattr(model, name, None)
        if found is not None:
            return list(found)
    raise ValueError(f"{type(model).__name__}: no transformer blocks under .layers or .h")


def prepare_tokenizer(tokenizer):
    """Llama-type tokenizers ship without a pad token: padding reuses the end-of-sequence
    token (no new embedding row, so a frozen base stays as it was; attention masks come from
    sequence lengths, so an eos in the text is never masked). Padding on the right keeps
    every real token's position what it is unpadded; pooling finds the last real token on
    either side (family.last_token)."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("decoder tokenizer has neither a pad nor an end-of-sequence token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


FAMILY = Family(facts=families.DECODER, load=load, blocks=blocks, prepare_tokenizer=prepare_tokenizer)
