"""Sentence retrieval without training data: Tatoeba 1-NN accuracy with faiss.

Sentence embedding = mean over all token positions (special tokens included, padding
excluded) of one hidden layer. ``layer`` indexes ``hidden_states`` as transformers returns
them, where index 0 is the embedding output; the paper's "13th layer" of XLM-R large is
index 13 in that convention. The convention is written into every metric file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .common import InputError, autocast

LAYER_CONVENTION = "hidden_states index; 0 = embedding output, i = output of transformer layer i"


def embed(model, tokenizer, sentences: Sequence[str], layer: int, pooling: str, batch_size: int,
          max_length: int, dev) -> np.ndarray:
    import torch
    from tqdm import tqdm

    n_layers = model.config.num_hidden_layers
    if not 0 <= layer <= n_layers:
        raise InputError(f"retrieval.layer {layer} outside 0..{n_layers} for this encoder")
    if pooling != "mean":
        raise InputError(f"retrieval.pooling {pooling!r} is not supported (supported: mean)")
    order = sorted(range(len(sentences)), key=lambda k: len(sentences[k]))
    out = np.zeros((len(sentences), model.config.hidden_size), dtype=np.float32)
    model.eval()
    with torch.inference_mode():
        for b in tqdm(range(0, len(order), batch_size), desc="embed", mininterval=5):
            idx = order[b:b + batch_size]
            enc = tokenizer([sentences[k] for k in idx], truncation=True, max_length=max_length,
                            padding=True, return_tensors="pt").to(dev)
            with autocast(dev):
                hidden = model(**enc, output_hidden_states=True).hidden_states[layer].float()
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out[idx] = pooled.cpu().numpy()
    return out


def l2_normalize(x: np.ndarray) -> np.ndarray:
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32).copy()
    faiss.normalize_L2(x)
    return x


def knn(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product search (cosine on normalised vectors)."""
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    return index.search(queries, min(k, keys.shape[0]))


def tatoeba_accuracy(foreign: np.ndarray, english: np.ndarray) -> dict[str, Any]:
    """For each English sentence, is its nearest foreign sentence (cosine) its translation?

    Row i of both matrices is one gold pair; as in the XTREME scorer, only the gold index
    counts as correct.
    """
    if foreign.shape != english.shape or len(english) == 0:
        raise InputError(f"tatoeba needs equally many non-empty pairs, got {foreign.shape} and {english.shape}")
    _, nearest = knn(l2_normalize(english), l2_normalize(foreign), 1)
    hits = nearest[:, 0] == np.arange(len(english))
    return {"accuracy": 100.0 * float(hits.mean())}
