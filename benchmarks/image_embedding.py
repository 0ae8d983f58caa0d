"""Images per second through the paper preset's vision tower (CLIP ViT-B/32 at 224 px, the
architecture of openai/clip-vit-base-patch32, randomly initialised: no download) with the
embed step's own code (multimodal/features.py), patch features, on this machine's CPU or GPU.
The images are made in memory at Flickr30k's typical size: reading and decoding JPEGs, which
the real step also does, is not timed.
It prints the rate and what embedding the preset's images once would take at that rate.

    .venv/bin/python benchmarks/image_embedding.py [--images 64] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's workflow_scripts

# Image counts of the paper preset's tasks (docs/protocol.md §9): Flickr30k (SNLI-VE and the
# retrieval task share them), COCO train2014 + val2014 (VQA v2).
PRESET_IMAGES = {"Flickr30k": 31_783, "COCO train2014 + val2014": 82_783 + 40_504}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    import torch
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    from workflow_scripts.multimodal.features import PATCHES, embed_images
    from workflow_scripts.multimodal.images import digest

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tower = Path(tmp) / "tower"
        CLIPVisionModel(CLIPVisionConfig()).save_pretrained(tower)  # ViT-B/32, 224 px: 50 tokens of 768
        CLIPImageProcessor().save_pretrained(tower)
        # photos of Flickr30k's typical size (500 x 375), resized and cropped by the processor
        pixels = {f"{i}.jpg": rng.integers(0, 256, (375, 500, 3), dtype=np.uint8) for i in range(args.images)}
        digests = {n: digest(p.tobytes()) for n, p in pixels.items()}
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        started = time.perf_counter()
        features, counts = embed_images(pixels, digests, tower, Path(tmp) / "cache", PATCHES, args.batch_size, device)
        seconds = time.perf_counter() - started
    rate = counts["embedded"] / seconds
    shape = next(iter(features.values())).shape
    print(
        f"{counts['embedded']} images in {seconds:.1f} s on {device.type} ({torch.get_num_threads()} threads): "
        f"{rate:.1f} images/s; features {shape} per image, {np.prod(shape) * 2 / 1e3:.1f} KB as float16"
    )
    for name, n in PRESET_IMAGES.items():
        print(
            f"  {name}: {n:,} images -> {n / rate / 60:.0f} min at this rate, "
            f"{n * np.prod(shape) * 2 / 1e9:.2f} GB of float16 patch features"
        )


if __name__ == "__main__":
    main()
