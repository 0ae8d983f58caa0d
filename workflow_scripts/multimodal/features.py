"""Image features from a frozen vision encoder, computed once per image and cached by the
SHA-256 of the image's bytes: a second task over the same images (SNLI-VE and its captions'
Flickr30k images, VQA and COCO captions) reads them back instead of embedding them again.

The encoder is a Hub vision tower (CLIP or SigLIP ViT; ``transformers.AutoModel`` of a
vision config, or the vision half of a two-tower checkpoint) with its image processor. It
stays frozen and in eval mode; ``pooled`` keeps one vector per image (the tower's pooled
output), ``patches`` every token of its last hidden state. A cache entry is written to a
temporary name and renamed, so an interrupted job never leaves a half-written entry that a
later run would read as complete. The cache key also names the encoder (a hash of its
config, processor and weights, and the feature kind), so features of two encoders never mix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.common import settings_hash
from workflow_scripts.data.loaders.source import file_sha256
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError

POOLED = "pooled"
PATCHES = "patches"
KINDS = (POOLED, PATCHES)


def encoder_key(encoder_dir: str | Path, kind: str) -> str:
    """A short id of (the encoder's config, image processor and weights, the feature kind):
    the cache's namespace. The weights are hashed by content, so two towers of one
    architecture (a trained one and its untrained twin) never share entries."""
    if kind not in KINDS:
        raise InputError(f"image feature kind {kind!r} is not one of {', '.join(KINDS)}")
    root = Path(encoder_dir)
    if not (root / "config.json").is_file():
        raise InputError(f"vision encoder {encoder_dir}: no config.json (a Hub snapshot of a CLIP or SigLIP model)")
    files = sorted([*root.glob("*.json"), *root.glob("*.safetensors"), *root.glob("*.bin")])
    return settings_hash({"kind": kind, "files": {path.name: file_sha256(path) for path in files}})


def load_vision_tower(encoder_dir: str | Path, dev: Any = None):
    """(vision model, image processor), frozen, in eval mode."""
    import torch
    from transformers import AutoConfig, AutoImageProcessor, AutoModel

    config = AutoConfig.from_pretrained(encoder_dir)
    model = AutoModel.from_pretrained(encoder_dir)
    vision = getattr(model, "vision_model", None) if getattr(config, "vision_config", None) is not None else model
    if vision is None:
        raise InputError(f"vision encoder {encoder_dir}: {type(model).__name__} has no vision tower")
    vision.requires_grad_(False).eval().to(dev or torch.device("cpu"))
    return vision, AutoImageProcessor.from_pretrained(encoder_dir)


class FeatureCache:
    """Features by image digest under ``root/<encoder key>/<2 hex>/<digest>.npy``."""

    def __init__(self, root: str | Path, key: str) -> None:
        self.dir = Path(root) / key

    def path(self, sha: str) -> Path:
        return self.dir / sha[:2] / f"{sha}.npy"

    def get(self, sha: str) -> np.ndarray | None:
        path = self.path(sha)
        return np.load(path) if path.is_file() else None

    def put(self, sha: str, features: np.ndarray) -> None:
        path = self.path(sha)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        with partial.open("wb") as f:
            np.save(f, features)
        partial.replace(path)


def embed_images(
    pixels: Mapping[str, np.ndarray],
    digests: Mapping[str, str],
    encoder_dir: str | Path,
    cache_root: str | Path,
    kind: str = POOLED,
    batch_size: int = 64,
    dev: Any = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Features of every named image (name -> array) and counts of what was embedded now and
    what came from the cache. Images with the same bytes are embedded once."""
    import torch

    cache = FeatureCache(cache_root, encoder_key(encoder_dir, kind))
    by_digest: dict[str, np.ndarray] = {}
    todo: dict[str, str] = {}  # digest -> a name carrying it
    for name, sha in digests.items():
        if sha in by_digest or sha in todo:
            continue
        cached = cache.get(sha)
        if cached is None:
            todo[sha] = name
        else:
            by_digest[sha] = cached
    reused = len(by_digest)
    if todo:
        vision, processor = load_vision_tower(encoder_dir, dev)
        pending = list(todo.items())
        with progress(total=len(pending), desc="embedding images", unit="image") as bar:
            for start in range(0, len(pending), batch_size):
                batch = pending[start : start + batch_size]
                inputs = processor(images=[pixels[name] for _, name in batch], return_tensors="pt")
                with torch.inference_mode():
                    out = vision(pixel_values=inputs["pixel_values"].to(next(vision.parameters()).device))
                values = out.pooler_output if kind == POOLED else out.last_hidden_state
                for (sha, _), value in zip(batch, values.float().cpu().numpy()):
                    cache.put(sha, value)
                    by_digest[sha] = value
                bar.update(len(batch))
    features = {name: by_digest[sha] for name, sha in digests.items()}
    return features, {"embedded": len(todo), "from_cache": reused, "images": len(features)}
