"""The converter registry and the helpers every loader shares.

A converter turns one task's source rows (Hub schema, or an original release) into
canonical rows. It receives the data source, the split, the languages to load, the task's
``options`` (``spec/data_settings.py``'s ``DataOptions``) and a ``report`` dict it fills with
what it repaired or dropped; ``prepare`` writes that report into the Parquet metadata and the log.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from workflow_scripts.data.loaders.source import Source
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions
from workflow_scripts.spec.tasks import Task

Row = dict[str, Any]
Report = dict[str, Any]
Converter = Callable[[Source, str, list[str], DataOptions, Report], Iterable[Row]]
CONVERTERS: dict[str, Converter] = {}

XTREME_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def converter(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
        return fn

    return register


def load_converter(task: Task) -> Converter:
    """The converter a task's entry names: its module is imported on demand (a dotted
    module name, or a .py file beside the entry), so a job imports its own task's converter
    and no other, and registers it under the task's name."""
    if not task.converter:
        raise InputError(
            f"task entry {task.entry_file} names no converter: {task.name}'s rows come from local files "
            f"mapped by their columns (tasks.{task.name}.data with converter: columns)"
        )
    if task.name not in CONVERTERS:
        path = task.converter_file
        if path is not None:
            if not path.is_file():
                raise InputError(f"task entry {task.entry_file}: converter file {path} does not exist")
            module_name = f"xstilts_converter_{task.name}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        else:
            try:
                importlib.import_module(task.converter)
            except ModuleNotFoundError as err:
                raise InputError(
                    f"task entry {task.entry_file}: converter module {task.converter!r} not found ({err})"
                ) from None
    if task.name not in CONVERTERS:
        raise InputError(
            f"task entry {task.entry_file}: converter {task.converter!r} registers no converter for"
            f" {task.name!r} (decorate a function with @converter({task.name!r}))"
        )
    return CONVERTERS[task.name]


def label_index(task: Task, value: Any, where: str) -> int:
    if isinstance(value, str):
        if value not in task.labels:
            raise InputError(f"{where}: label {value!r} not in {list(task.labels)}")
        return task.labels.index(value)
    if not 0 <= int(value) < task.num_labels:
        raise InputError(f"{where}: label {value!r} outside 0..{task.num_labels - 1}")
    return int(value)


def choice_index(value: Any, n_choices: int, where: str) -> int:
    try:
        index = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: label {value!r} is not a choice index") from None
    if not 0 <= index < n_choices:
        raise InputError(f"{where}: label {value!r} outside 0..{n_choices - 1}")
    return index


def require_languages(task: str, split: str, counts: dict[str, int]) -> None:
    missing = [lang for lang, n in counts.items() if n == 0]
    if missing:
        raise InputError(f"{task} {split}: no examples for languages {missing}; refusing to shrink the average")


def per_language(
    task: str, src: Source, config_of: Callable[[str], str], split: str, hub_split: str, langs: list[str]
) -> Iterator[tuple[str, int, Row]]:
    """(language, index, row) from each language's own Hub config (train: the languages the
    grid asks for, English unless a transfer setting trains on others); a language without
    rows fails loudly."""
    for lang in langs:
        n = 0
        for i, r in enumerate(src.rows(config_of(lang), hub_split)):
            n += 1
            yield lang, i, r
        require_languages(task, split, {lang: n})
