"""Backbone families: how a backbone loads, where its transformer blocks are, how it pools.

Three families cover the backbones of docs/protocol.md §10:

- ``encoder``: bidirectional encoders with a masked-LM objective (XLM-R / XL / XXL, mBERT,
  mDeBERTa-v3, RemBERT); a sequence is read at its first token (<s> / [CLS]);
- ``seq2seq_encoder``: the encoder stack of an encoder-decoder model (mT5 / mT0, Aya-101),
  loaded without its decoder; it has no first-token summary and no MLM head, so a sequence
  is read as the mean over its tokens;
- ``decoder``: causal language models (BLOOM(Z), Llama, Qwen, Gemma, Aya-23); only the last
  real token has seen the whole input, so a sequence is read there.

Every task format runs on every family through the same heads (models/heads.py); what differs is
only what this package answers. A model directory names its family in
``xstilts_backbone.json`` when the workflow wrote one; otherwise the family follows from the
architecture in its ``config.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from workflow_scripts.models.backbones import decoder, encoder, seq2seq_encoder
from workflow_scripts.models.backbones.family import ADAPTER_DIR, MANIFEST, Family
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.suggest import did_you_mean

# The registered families (docs/guides/new_backbone_family.md adds one here), in the order
# errors list them.
REGISTERED = (encoder.FAMILY, seq2seq_encoder.FAMILY, decoder.FAMILY)
FAMILIES: dict[str, Family] = {f.name: f for f in REGISTERED}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise InputError(
            f"unknown backbone family {name!r}{did_you_mean(name, FAMILIES)}; known: {', '.join(FAMILIES)}"
        ) from None


def family_of(model_dir: str | Path) -> Family:
    """The family a model directory was written as, or the one its architecture implies."""
    model_dir = Path(model_dir)
    manifest = model_dir / MANIFEST
    if manifest.is_file():
        name = json.loads(manifest.read_text()).get("family")
        if name:
            return get_family(name)
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise InputError(f"model directory {model_dir} has no config.json (missing or incomplete)")
    return infer_family(json.loads(config_file.read_text()))


def infer_family(config: dict) -> Family:
    """encoder unless the config's model type is a seq2seq or a causal-LM architecture."""
    model_type = config.get("model_type", "")
    if model_type in seq2seq_encoder.MODEL_TYPES:
        return seq2seq_encoder.FAMILY
    architectures = config.get("architectures") or []
    if model_type in decoder.MODEL_TYPES or any(a.endswith("ForCausalLM") for a in architectures):
        return decoder.FAMILY
    return encoder.FAMILY


__all__ = ["ADAPTER_DIR", "FAMILIES", "MANIFEST", "Family", "family_of", "get_family", "infer_family"]
