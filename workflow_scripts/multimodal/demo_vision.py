"""The demo's vision tower: a tiny CLIP ViT built locally and pre-trained contrastively on
the synthetic image world's (image, caption) pairs, as the demo's text encoder is
pre-trained on its corpora: an image and its caption are pulled together against the
batch's other captions (CLIP's symmetric InfoNCE). The caption side is a bag of word
embeddings, trained with it and thrown away: the tower is saved alone, with its image
processor, in the layout of a Hub CLIP vision checkpoint, so ``features.embed_images``
loads it as it loads ``openai/clip-vit-base-patch32``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.common import LOG
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import DemoVision, VisionPretraining


def build_vision_tower(settings: DemoVision, seed: int = 0):
    """(model, processor) of a CLIP vision tower sized by ``settings``, initialised from ``seed``."""
    import torch
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(seed)
    size = settings.image_size
    config = CLIPVisionConfig(
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        image_size=size,
        patch_size=settings.patch_size,
        projection_dim=settings.hidden_size,
    )
    processor = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return CLIPVisionModel(config), processor


def pretrain_vision_tower(
    model, processor, images: Sequence[np.ndarray], captions: Sequence[str], opts: VisionPretraining, seed: int
) -> dict[str, Any]:
    """Contrastive pre-training on (image, caption) pairs, seeded; returns the loss log."""
    import torch
    import torch.nn.functional as F

    if len(images) != len(captions) or len(images) < 2:
        raise InputError(
            f"vision pre-training needs matching images and captions, got {len(images)} and {len(captions)}"
        )
    torch.manual_seed(seed)
    rng = random.Random(seed)
    words = sorted({w for c in captions for w in _words(c)})
    index = {w: i for i, w in enumerate(words)}
    ids = [torch.tensor([index[w] for w in _words(c)]) for c in captions]
    caption_index = {c: k for k, c in enumerate(sorted(set(captions)))}
    caption_of = torch.tensor([caption_index[c] for c in captions])  # equal captions: equal ids
    dim = model.config.hidden_size
    text = torch.nn.EmbeddingBag(len(words), dim, mode="mean")
    scale = torch.nn.Parameter(torch.tensor(np.log(10.0), dtype=torch.float32))
    pixels = processor(images=list(images), return_tensors="pt")["pixel_values"]
    params = [*model.parameters(), *text.parameters(), scale]
    optimiser = torch.optim.AdamW(params, lr=opts.learning_rate, weight_decay=0.0)
    steps, batch_size = opts.steps, opts.batch_size
    model.train()
    losses = []
    for _ in progress(range(steps), desc="vision pre-training", unit="step"):
        chosen = rng.sample(range(len(images)), min(batch_size, len(images)))
        image_vectors = F.normalize(model(pixel_values=pixels[chosen]).pooler_output, dim=-1)
        offsets = torch.tensor([0, *np.cumsum([len(ids[i]) for i in chosen])[:-1]])
        caption_vectors = F.normalize(text(torch.cat([ids[i] for i in chosen]), offsets), dim=-1)
        logits = scale.exp() * image_vectors @ caption_vectors.T
        # Identical captions in a batch are each other's positives, not negatives.
        batch_captions = caption_of[chosen]
        same = (batch_captions[:, None] == batch_captions[None, :]).float()
        targets = same / same.sum(dim=1, keepdim=True)
        loss = (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    model.eval()
    return {"steps": steps, "first_loss": losses[0], "last_loss": float(np.mean(losses[-10:])), "pairs": len(images)}


def _words(caption: str) -> list[str]:
    return caption.lower().rstrip(".").split()


def caption_pairs(rows_file: Path, image_dir: Path) -> tuple[list[np.ndarray], list[str]]:
    """(pixels, caption) of each distinct image of an SNLI-VE split file (the Hub's schema,
    ``filename`` and ``premise``, or the release's, ``Flickr30K_ID`` and ``sentence1``); images
    that cannot be read are dropped, counted and logged (images.read_images)."""
    import json

    from workflow_scripts.multimodal.images import read_images

    captions: dict[str, str] = {}
    with rows_file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "filename" in row:
                name, caption = row["filename"], row.get("premise")
            elif "Flickr30K_ID" in row:
                name, caption = f"{row['Flickr30K_ID']}.jpg", row.get("sentence1")
            else:
                raise InputError(f"{rows_file} line {number}: no image name (filename or Flickr30K_ID)")
            if caption:
                captions.setdefault(name, caption)
    found = read_images(image_dir, captions, what=f"vision pre-training images of {image_dir}")
    names = [n for n in captions if n in found.pixels]
    return [found.pixels[n] for n in names], [captions[n] for n in names]


def build_demo_vision_tower(
    settings: DemoVision, images: Sequence[np.ndarray], captions: Sequence[str], output: Path, seed: int = 0
) -> dict[str, Any]:
    """Build, pre-train and save the demo's vision tower (and its processor) to ``output``."""
    model, processor = build_vision_tower(settings, seed)
    log = pretrain_vision_tower(model, processor, images, captions, settings.pretraining, seed)
    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output)
    processor.save_pretrained(output)
    LOG.info(
        "demo vision tower: %d parameters, contrastive loss %.3f -> %.3f -> %s",
        model.num_parameters(),
        log["first_loss"],
        log["last_loss"],
        output,
    )
    return log
