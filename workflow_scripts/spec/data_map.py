"""A training phase's data map (``training.train --data``): for each task the phase trains
on, its training and dev files and, for an image task, its images' features.

A file is given either as a path, whose rows of the phase's language are used (an
intermediate config's data; a masked-LM corpus uses every language), or as a list of
``DataRef`` (a transfer setting's recipe, ``workflow/transfer.py``): each file with the
languages used from it, what kind of data it is and, for a few-shot pool, how many shots.
The workflow builds the map (``workflow/grid.py``) and the phase parses it back
(``training/phase_data.py``) through these records.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflow_scripts.spec.basics import canonical_json
from workflow_scripts.spec.record import Record, optional


@dataclass(frozen=True)
class DataRef(Record):
    """One canonical data file and the languages whose rows are used from it; ``kind`` is
    english, human, in_language, published_mt, pipeline_mt, translate_test or few_shot
    (joined by ``+`` for a file that serves several)."""

    path: str
    languages: tuple[str, ...]
    kind: str
    shots: int | None = optional()  # a few-shot pool: the rows of at most this many shots

    def as_dict(self) -> dict[str, Any]:
        return self.to_dict()


# A split's files: one path (the phase's language), or the recipe's files.
Files = str | tuple[DataRef, ...]


@dataclass(frozen=True)
class TaskFiles(Record):
    """One task's data in a phase: its training files, its dev files (none for a masked-LM
    corpus, which selects nothing) and an image task's feature folder (``embed_images``)."""

    train: Files
    dev: Files | None = optional()
    images: str | None = optional()

    @classmethod
    def parse(cls, data: str | Mapping[str, Any], where: str | None = None) -> TaskFiles:
        """As ``Record.parse``; a recipe's file with a bad key is named with that key (not
        only as "none of" the two shapes a split may have)."""
        where = where or cls.__name__
        mapping = cls.mapping_of(data, where)
        for split in ("train", "dev"):
            if isinstance(mapping.get(split), list | tuple):
                for i, ref in enumerate(mapping[split]):
                    DataRef.parse(ref, f"{where}.{split}[{i}]")
        return super().parse(mapping, where)

    def sources(self, split: str, default_languages: list[str] | None) -> list[tuple[str, list[str] | None]]:
        """(file, languages kept) of ``split``: a path keeps ``default_languages`` (None:
        every language), a recipe's file the languages it names."""
        files = self.train if split == "train" else self.dev
        if files is None:
            return []
        if isinstance(files, str):
            return [(files, default_languages)]
        return [(ref.path, list(ref.languages)) for ref in files]

    def shots_of(self, path: str) -> int | None:
        """The shots a recipe takes from a few-shot pool's training file, else None."""
        if isinstance(self.train, str):
            return None
        return next((ref.shots for ref in self.train if ref.path == path and ref.shots is not None), None)


DataMap = dict[str, TaskFiles]


def parse_data_map(data: str | Mapping[str, Any], where: str = "--data") -> DataMap:
    """The data map of ``data`` (its JSON or a mapping); a task entry with an unknown or
    missing key is an error naming the task and the key."""
    mapping = Record.mapping_of(data, where)
    return {task: TaskFiles.parse(entry, f"{where}.{task}") for task, entry in mapping.items()}


def data_map_json(data: Mapping[str, TaskFiles]) -> str:
    """The map as the rule passes it (key-sorted, compact)."""
    return canonical_json({task: files.to_dict() for task, files in data.items()})
