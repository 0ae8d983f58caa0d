"""A task whose rows come from local files (``tasks.<name>.data``), in a grid whose other
tasks read the Hub or its local mirror (``data.source``): which file each split reads, how
the file's columns map to the task format's, and the config check that stops a grid before
any job runs when a file is missing, of an unknown type, or lacks a column the mapping needs.

The records of the block and of a job's part of it are ``spec/local_data.py``'s; the job
reads the rows (``data/loaders/local_files.py``) and maps their columns
(``data/loaders/columns.py``). Standard library only (the Snakefile imports this): a JSON
Lines file's columns are the keys of its first records, a CSV file's its header; a Parquet
file's schema is read with pyarrow where it is installed, else by the job.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from workflow_scripts.spec import task_entry
from workflow_scripts.spec import tasks as task_catalogue
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.local_data import BY_COLUMNS, ROW_COLUMNS, LocalData, LocalDataError
from workflow_scripts.spec.tasks import get_task

# How many records of a JSON Lines file the config check reads for its columns: the job
# checks every row.
PEEK_RECORDS = 50


def from_block(task: str, data: dict[str, Any]) -> LocalData:
    """A ``tasks.<task>.data`` block of the config as a record."""
    return LocalData.of(task, data)


def spec(config: dict[str, Any], task: str) -> LocalData | None:
    """The task's local files, or None when it reads the Hub (or its mirror)."""
    return task_entry.entry_of(config, task).local_data(task)


def split_file(config: dict[str, Any], task: str, split: str) -> Path | None:
    """The file one split of a task reads (None: the task reads the Hub)."""
    found = spec(config, task)
    return found.path(split) if found and split in found.files else None


def format_columns(task: str) -> tuple[str, ...]:
    """The canonical columns of a task's rows: its format's, then id and lang."""
    return (*get_format(get_task(task).format).columns, *ROW_COLUMNS)


def file_columns(path: Path, file_type: str) -> list[str]:
    """The columns a file has, as far as a look at its start tells."""
    if file_type == "csv":
        with path.open(encoding="utf-8", newline="") as f:
            return next(csv.reader(f), [])
    if file_type == "parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:  # the Snakefile's environment may lack it: the job checks instead
            return []
        return list(pq.read_schema(path).names)
    found: dict[str, None] = {}
    with path.open(encoding="utf-8") as f:
        lines = (line for line in f if line.strip())
        for number, line in zip(range(1, PEEK_RECORDS + 1), lines):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise LocalDataError(f"{path}, record {number}: not JSON ({err})") from None
            if not isinstance(record, dict):
                raise LocalDataError(f"{path}, record {number}: not a JSON object")
            found.update(dict.fromkeys(record))
    return list(found)


def check_config(config: dict[str, Any]) -> None:
    """Every task's local files, before any job runs: each error names the key and the file."""
    for task, entry in task_entry.entries(config).items():
        if task not in task_catalogue.TASKS:  # read at call time: catalogues register tasks late
            continue  # grid_checks.check_config names it
        if (entry.hub is None) == (entry.data is None):
            raise LocalDataError(
                f"config key tasks.{task}: give hub (a Hub dataset) or data (local files), "
                f"{'not both' if entry.hub else 'neither is given'}"
            )
        found = entry.local_data(task)
        if not get_task(task).converter and (found is None or found.converter != BY_COLUMNS):
            raise LocalDataError(
                f"config key tasks.{task}: task {task}'s entry {get_task(task).entry_file} names no converter, "
                f"so its rows come from local files mapped by their columns: give tasks.{task}.data "
                f"(with converter: columns)"
            )
        if found is not None:
            _check_splits(found)
            for split in found.files:
                _check_file(found, split, list(entry.languages_or(("en",))))


def _check_splits(found: LocalData) -> None:
    splits = get_task(found.task).splits
    extra = [s for s in found.files if s not in splits]
    missing = [s for s in splits if s not in found.files]
    if extra or missing:
        said = [f"no file for split {s!r}" for s in missing] + [f"a file for split {s!r}" for s in extra]
        raise LocalDataError(
            f"config key {found.key}.files: {'; '.join(said)} (task {found.task}'s entry "
            f"{get_task(found.task).entry_file} lists splits {', '.join(splits)})"
        )
    if found.converter == BY_COLUMNS:
        known = format_columns(found.task)
        unknown = sorted(set(found.columns) - set(known))
        if unknown:
            raise LocalDataError(
                f"config key {found.key}.columns: {unknown} are not columns of task {found.task}'s rows "
                f"(format {get_task(found.task).format}: {', '.join(known)})"
            )


def _check_file(found: LocalData, split: str, languages: list[str]) -> None:
    key, path = f"{found.key}.files.{split}", found.path(split)
    if not path.is_file():
        raise LocalDataError(f"config key {key}: file {path} does not exist")
    file_type = found.type_of(split)
    if found.converter != BY_COLUMNS:
        return  # the entry's converter names the columns it needs
    try:
        columns = file_columns(path, file_type)
    except LocalDataError as err:
        raise LocalDataError(f"config key {key}: {err}") from None
    if not columns:
        return  # a Parquet schema without pyarrow here: the job checks it
    missing = [
        f"{found.source_column(c)!r} (for {c})"
        for c in format_columns(found.task)
        if found.source_column(c) not in columns and (c not in ROW_COLUMNS or c in found.columns)
    ]
    if missing:
        raise LocalDataError(
            f"config key {key}: {path} ({file_type}) has no column {', '.join(missing)}; its columns: "
            f"{', '.join(columns)} (map them with {found.key}.columns)"
        )
    if found.source_column("lang") not in columns and found.language not in languages:
        raise LocalDataError(
            f"config key {found.key}.language: {path} has no lang column, and its rows' language "
            f"{found.language!r} is not among tasks.{found.task}.languages {languages}"
        )
