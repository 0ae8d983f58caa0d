"""Make the backbone and translator directories every later rule loads: snapshot the
Hub repositories at a pinned revision (paper preset), or build the demo's own small models
offline (``workflow_scripts.models.demo_models``).

Real mode snapshots Hub repos into local directories, so training jobs only ever load
local directories and run on offline compute nodes.

CLI: ``python -m workflow_scripts.models.prepare backbone|translator|vision --settings JSON --output DIR
[--text PARQUET ...] [--corpus JSONL ...] [--images DIR --captions JSONL] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workflow_scripts.common import LOG, atomic_path, setup_logging
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import BackbonePrepare, DemoDecoder, TranslatorPrepare, VisionPrepare

# Only what loading needs: skips TF/Flax/ONNX duplicates of multi-GB checkpoints.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.spm", "*.txt", "sentencepiece*"]


def fetch_hub_model(hub_id: str, revision: str, output: Path) -> None:
    """A snapshot of the model at the commit its revision is locked to (revisions.py)."""
    from huggingface_hub import snapshot_download

    from workflow_scripts.revisions import HubRepo, locked_commit

    sha = locked_commit(HubRepo("model", hub_id, revision))
    # The Hub client's own bars stay out of job logs (progress.quiet_library_bars): these two
    # lines say when the download started and ended.
    LOG.info("downloading %s at %s", hub_id, sha)
    with atomic_path(output) as tmp:
        snapshot_download(repo_id=hub_id, revision=sha, local_dir=tmp, allow_patterns=HUB_PATTERNS)
        LOG.info("downloaded %s", hub_id)
        source = {"hub_id": hub_id, "revision": revision, "resolved_sha": sha}
        (tmp / "xstilts_source.json").write_text(json.dumps(source) + "\n")


def prepare_backbone(
    settings: BackbonePrepare, output: Path, text: list[str], corpora: list[str], threads: int
) -> None:
    """A backbone directory: the Hub snapshot, or the demo model of its family, with the
    family recorded (backbones.MANIFEST), written in one piece."""
    from workflow_scripts.models.backbones import MANIFEST

    with atomic_path(output) as tmp:
        if settings.source == "hub":
            fetch_hub_model(settings.hub_id, settings.revision, tmp)
        elif isinstance(settings.demo, DemoDecoder):
            from workflow_scripts.models.demo_models import build_demo_decoder

            build_demo_decoder(settings.demo, text, tmp, corpora, threads)
        else:  # the record has checked that the demo block is its family's
            from workflow_scripts.models.demo_models import build_demo_encoder

            build_demo_encoder(settings.demo, text, tmp, corpora, threads)
        (tmp / MANIFEST).write_text(json.dumps({"family": settings.family}) + "\n")


def prepare_vision_encoder(settings: VisionPrepare, output: Path, images: str | None, captions: str | None) -> None:
    """The frozen vision encoder of image tasks (docs/protocol.md §9): a Hub CLIP or SigLIP
    snapshot, or the demo's tiny CLIP tower pre-trained on the demo's (image, caption) pairs."""
    if settings.source == "hub":
        fetch_hub_model(settings.hub_id, settings.revision, output)
        return
    from workflow_scripts.multimodal.demo_vision import build_demo_vision_tower, caption_pairs

    if not images or not captions:
        raise InputError(
            "the demo vision encoder is pre-trained on (image, caption) pairs: give --images and --captions"
        )
    pictures, texts = caption_pairs(Path(captions), Path(images))
    with atomic_path(output) as tmp:
        build_demo_vision_tower(settings.demo, pictures, texts, tmp, seed=settings.seed)


def prepare_translator(settings: TranslatorPrepare, args: argparse.Namespace) -> None:
    """An OPUS-MT snapshot, or the demo's MarianMT for ``--from-lang`` -> ``--lang``, trained
    on the one parallel corpus of that pair."""
    if settings.source == "hub":
        fetch_hub_model(settings.hub_id, settings.revision, args.output)
        return
    from workflow_scripts.models.demo_models import build_demo_translator

    if not args.lang:
        raise InputError("--lang is required for a translator")
    if len(args.corpus) > 1:
        raise InputError(f"a translator trains on one parallel corpus, got {args.corpus}")
    build_demo_translator(
        settings.demo,
        args.text,
        args.lang,
        args.output,
        args.from_lang,
        args.corpus[0] if args.corpus else None,
        args.threads,
    )


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Fetch (hub) or build (demo) a backbone or a translator.")
    ap.add_argument("kind", choices=["backbone", "translator", "vision"])
    ap.add_argument("--settings", required=True)
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--lang", help="target language of the translator")
    ap.add_argument("--from-lang", default="en", help="source language of the translator (default en)")
    ap.add_argument("--text", nargs="*", default=[], help="canonical data files to train demo vocabularies on")
    ap.add_argument(
        "--corpus",
        nargs="*",
        default=[],
        help="demo parallel corpora: a demo backbone's pre-training data, the translator's training data",
    )
    ap.add_argument("--images", help="the demo vision encoder's images")
    ap.add_argument("--captions", help="the demo vision encoder's captions (SNLI-VE rows naming the images)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        if args.kind == "backbone":
            backbone = BackbonePrepare.parse(args.settings, "--settings")
            prepare_backbone(backbone, args.output, args.text, args.corpus, args.threads)
        elif args.kind == "vision":
            import torch

            vision = VisionPrepare.parse(args.settings, "--settings")
            torch.set_num_threads(args.threads)
            prepare_vision_encoder(vision, args.output, args.images, args.captions)
        else:
            prepare_translator(TranslatorPrepare.parse(args.settings, "--settings"), args)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
