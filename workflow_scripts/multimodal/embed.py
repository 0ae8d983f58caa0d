"""The embed step of a visual task: every image its splits name is read (checked against the
image directory's ``SHA256SUMS`` when there is one), embedded once by the frozen vision
encoder through the content-addressed cache (features.py), and written as the task's
feature bank (bank.py) with a report of what was dropped.

CLI: ``python -m workflow_scripts.multimodal.embed --data F [F ...] --images DIR --encoder DIR
--kind pooled|patches --cache DIR --output DIR``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, setup_logging
from workflow_scripts.data.prepare import read_table
from workflow_scripts.multimodal import bank, images
from workflow_scripts.multimodal.features import KINDS, embed_images
from workflow_scripts.spec.basics import InputError

CHECKSUMS = "SHA256SUMS"


def read_checksums(image_dir: Path) -> dict[str, str]:
    """``sha256sum``-format lines (``<hex>  <name>``) of the image directory's manifest, if any."""
    path = image_dir / CHECKSUMS
    if not path.is_file():
        return {}
    sums = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise InputError(f"{path} line {number}: not '<sha256>  <file name>': {line[:80]!r}")
        sums[parts[1].lstrip("*").strip()] = parts[0].lower()
    return sums


def _images_column(path: str | Path) -> list[list[str]]:
    """Each row's image names (any image task's format has the ``images`` column)."""
    table = read_table(path)
    if "images" not in table.column_names:
        raise InputError(f"data file {path} has no 'images' column: not an image task's data")
    return table.column("images").to_pylist()


def embed_task_images(
    data: Sequence[str | Path],
    image_dir: str | Path,
    encoder: str | Path,
    kind: str,
    cache: str | Path,
    output: str | Path,
    batch_size: int = 64,
) -> dict[str, Any]:
    if kind not in KINDS:
        raise InputError(f"image feature kind {kind!r} is not one of {', '.join(KINDS)}")
    image_dir = Path(image_dir)
    if not image_dir.is_dir():
        raise InputError(
            f"image directory {image_dir} does not exist (set the task's 'images' to where its images were downloaded)"
        )
    images_of = {str(path): _images_column(path) for path in data}
    names_by_split = {path: [n for row in rows for n in row] for path, rows in images_of.items()}
    wanted = [n for names in names_by_split.values() for n in names]
    found = images.read_images(image_dir, wanted, read_checksums(image_dir), what=f"images of {image_dir}")
    import torch

    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    features, counts = embed_images(found.pixels, found.digests, encoder, cache, kind, batch_size, dev)
    rows_dropped = {
        path: sum(any(n not in found.pixels for n in row) for row in rows) for path, rows in images_of.items()
    }
    report = {
        "encoder": str(encoder),
        "kind": kind,
        **counts,
        **found.report(),
        "rows": {path: len(rows) for path, rows in images_of.items()},
        "rows_without_image": rows_dropped,
    }
    with atomic_path(output) as tmp:
        bank.write_bank(tmp, features, report)
    LOG.info(
        "%d images embedded now, %d from the cache, %d dropped -> %s",
        counts["embedded"],
        counts["from_cache"],
        sum(found.dropped.values()),
        output,
    )
    return report


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", required=True, help="the task's canonical Parquet splits")
    ap.add_argument("--images", required=True)
    ap.add_argument("--encoder", required=True)
    ap.add_argument("--kind", required=True, choices=KINDS)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args(argv)
    try:
        report = embed_task_images(
            args.data, args.images, args.encoder, args.kind, args.cache, args.output, args.batch_size
        )
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    LOG.info("report: %s", json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
