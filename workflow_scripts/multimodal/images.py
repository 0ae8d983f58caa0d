"""Reading a task's images: each checked against its recorded SHA-256 when there is one,
decoded to RGB, and identified by the SHA-256 of its bytes (the key of the feature cache,
so that two tasks over the same image share its features).

A missing, truncated, undecodable or wrongly checksummed image is counted by kind, named in
the log, and its rows dropped; a split never fails for it (the project's rule for repairable
bad rows: repaired or dropped, counted, logged). Only a split left with no image at all is an error.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workflow_scripts.common import LOG
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError

MISSING = "missing"
UNDECODABLE = "undecodable"  # truncated files included: PIL cannot read them to the end
CHECKSUM = "checksum_mismatch"


@dataclass
class ImageSet:
    """The decoded images of a split, by name, and what was dropped."""

    pixels: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (H, W, 3) uint8
    digests: dict[str, str] = field(default_factory=dict)  # name -> SHA-256 of the file's bytes
    dropped: Counter = field(default_factory=Counter)  # kind -> count
    dropped_names: dict[str, str] = field(default_factory=dict)  # name -> kind

    def report(self) -> dict[str, object]:
        return {
            "images": len(self.pixels),
            "images_dropped": dict(self.dropped),
            "images_dropped_examples": dict(list(self.dropped_names.items())[:20]),
        }


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode(data: bytes) -> np.ndarray:
    """RGB pixels of an encoded image; raises ValueError when the bytes are not a whole image."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                image.load()  # decodes to the end: a truncated file raises here (LOAD_TRUNCATED_IMAGES stays off)
                return np.asarray(image.convert("RGB"), dtype=np.uint8).copy()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as err:
        raise ValueError(str(err) or type(err).__name__) from None


def read_images(
    root: str | Path, names: Iterable[str], checksums: Mapping[str, str] | None = None, what: str = "images"
) -> ImageSet:
    """Every named image under ``root``; the ones that cannot be used are dropped, counted
    and logged by name and reason."""
    root = Path(root)
    checksums = checksums or {}
    out = ImageSet()
    distinct = list(dict.fromkeys(names))  # each image once, in first-seen order
    for name in progress(distinct, desc=f"reading {what}", unit="image"):
        path = root / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            _drop(out, name, MISSING, f"{what}: {path} does not exist")
            continue
        sha = digest(data)
        expected = checksums.get(name)
        if expected is not None and expected != sha:
            _drop(out, name, CHECKSUM, f"{what}: {path} has SHA-256 {sha[:12]}…, the manifest says {expected[:12]}…")
            continue
        try:
            out.pixels[name] = decode(data)
        except ValueError as err:
            _drop(out, name, UNDECODABLE, f"{what}: {path} cannot be decoded ({err})")
            continue
        out.digests[name] = sha
    if not out.pixels and out.dropped:
        raise InputError(
            f"{what}: none of the {sum(out.dropped.values())} images under {root} can be used "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(out.dropped.items()))})"
        )
    if out.dropped:
        LOG.warning(
            "%s: %d of %d images dropped (%s)",
            what,
            sum(out.dropped.values()),
            len(out.pixels) + sum(out.dropped.values()),
            ", ".join(f"{k}: {v}" for k, v in sorted(out.dropped.items())),
        )
    return out


def _drop(out: ImageSet, name: str, kind: str, message: str) -> None:
    out.dropped[kind] += 1
    out.dropped_names[name] = kind
    LOG.warning("%s; its rows are dropped", message)
