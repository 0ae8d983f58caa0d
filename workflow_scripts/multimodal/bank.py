"""A visual task's image features as training reads them: one array of every usable image's
features (``features.npy``, float16, images x tokens x width) and the image names in its row
order (``images.json``), written by the embed step (embed.py) from the shared per-image
cache, with the step's report (``report.json``: images dropped and why, rows that lost their
image, the encoder and feature kind).

Rows whose image is not in the bank (missing, truncated, undecodable, wrong checksum) are
dropped when the rows are matched to it, counted and logged: never a failed split.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.common import LOG
from workflow_scripts.spec.basics import InputError

FEATURES = "features.npy"
NAMES = "images.json"
REPORT = "report.json"


@dataclass
class FeatureBank:
    features: np.ndarray  # (images, tokens, width), float16
    index: dict[str, int]  # image name -> row of ``features``
    report: dict[str, Any]

    @classmethod
    def load(cls, directory: str | Path) -> FeatureBank:
        directory = Path(directory)
        missing = [n for n in (FEATURES, NAMES, REPORT) if not (directory / n).is_file()]
        if missing:
            raise InputError(f"image features {directory}: missing {', '.join(missing)} (run the embed_images step)")
        features = np.load(directory / FEATURES, mmap_mode="r")
        names = json.loads((directory / NAMES).read_text())
        if len(names) != features.shape[0]:
            raise InputError(f"image features {directory}: {len(names)} names for {features.shape[0]} feature rows")
        return cls(features, {n: i for i, n in enumerate(names)}, json.loads((directory / REPORT).read_text()))

    def tensor(self):
        """All features as one torch tensor (float16: half the memory of float32)."""
        import torch

        # a writable copy in memory: the bank is memory-mapped read-only, which torch cannot wrap safely
        return torch.from_numpy(np.array(self.features, order="C"))

    def attach(self, table, where: str):
        """``table`` (Arrow) with an ``image_index`` column (each row's images' rows of the
        bank), without the rows one of whose images is not in the bank (counted and logged).
        Every row of a task has the same number of images."""
        import pyarrow as pa

        names = table.column("images").to_pylist()
        counts = {len(n) for n in names}
        if len(counts) > 1:
            raise InputError(f"{where}: rows with {sorted(counts)} images; a task's rows all have the same number")
        index = [[self.index.get(n, -1) for n in row] for row in names]
        found = [min(i) >= 0 for i in index]
        keep = pa.array(found)
        dropped = len(index) - sum(found)
        if dropped:
            lost = sorted({n for row, i in zip(names, index) for n, k in zip(row, i) if k < 0})
            LOG.warning(
                "%s: %d of %d rows dropped: their image has no features (%d images, e.g. %s; "
                "the embed step's report says why)",
                where,
                dropped,
                len(index),
                len(lost),
                ", ".join(lost[:5]),
            )
        if dropped == len(index):
            raise InputError(f"{where}: none of the {len(index)} rows has its images' features")
        with_index = table.append_column("image_index", pa.array(index, type=pa.list_(pa.int64())))
        return with_index.filter(keep) if dropped else with_index


def write_bank(directory: str | Path, features: Mapping[str, np.ndarray], report: dict[str, Any]) -> None:
    """Write a bank (into a directory the caller makes atomic)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = sorted(features)
    shapes = {features[n].shape for n in names}
    if len(shapes) != 1:
        raise InputError(f"image features of different shapes {sorted(shapes)}: one encoder and kind per bank")
    stacked = np.stack([features[n] for n in names]).astype(np.float16)
    if stacked.ndim == 2:  # pooled: one token per image
        stacked = stacked[:, None, :]
    np.save(directory / FEATURES, stacked)
    (directory / NAMES).write_text(json.dumps(names) + "\n")
    (directory / REPORT).write_text(
        json.dumps({**report, "shape": list(stacked.shape)}, indent=2, sort_keys=True) + "\n"
    )


def bank_bytes(directory: str | Path) -> int:
    return os.path.getsize(Path(directory) / FEATURES)
