"""A task's documented split sizes (its catalogue entry's ``sizes``): what the cost model counts
before the data is prepared (planning/job_cost.py).

In the entry, each split maps to the examples of every language (an integer: English-only
tasks, or a benchmark whose languages share one size) or to a mapping of language -> examples;
``source`` names where the numbers were read::

    sizes:
      source: huggingface/datasets@d7dfbc8 datasets/xnli/dataset_infos.json
      dev: 2490
      test: 5010

The sizes are documentation of a release: no job reads them, so editing them reruns nothing
(spec/codehash.task_fingerprint leaves them out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "dev", "test")


class SizesError(ValueError):
    """A ``sizes`` block that cannot be read; the message names the entry and the key."""


@dataclass(frozen=True)
class TaskSizes:
    source: str
    # split -> examples per language (every language the same) or language -> examples
    splits: Mapping[str, int | Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any, where: str) -> TaskSizes:
        if not isinstance(raw, Mapping):
            raise SizesError(f"{where}: sizes must map splits to example counts, got {raw!r}")
        unknown = sorted(set(raw) - {"source", *SPLITS})
        if unknown:
            raise SizesError(f"{where}: sizes.{unknown[0]}: not a split ({', '.join(SPLITS)}) or source")
        if not isinstance(raw.get("source"), str) or not raw["source"].strip():
            raise SizesError(f"{where}: sizes.source: name where the sizes were read")
        splits: dict[str, int | Mapping[str, int]] = {}
        for split in SPLITS:
            if split not in raw:
                continue
            value = raw[split]
            if isinstance(value, Mapping):
                splits[split] = {str(lang): _count(n, f"{where}: sizes.{split}.{lang}") for lang, n in value.items()}
            else:
                splits[split] = _count(value, f"{where}: sizes.{split}")
        return cls(source=raw["source"], splits=splits)

    def examples(self, split: str, languages: Iterable[str] | None = None) -> int | None:
        """Examples of ``split`` in ``languages`` together (None: every language the entry
        lists, or the split's one count); None where the entry does not say."""
        value = self.splits.get(split)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            return value * (len(list(languages)) if languages is not None else 1)
        wanted = list(value) if languages is None else list(languages)
        if any(lang not in value for lang in wanted):
            return None
        return sum(value[lang] for lang in wanted)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SizesError(f"{where}: {value!r} is not a count of examples")
    return value
