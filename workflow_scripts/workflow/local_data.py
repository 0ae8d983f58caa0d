"""A task whose rows come from local files (``tasks.<name>.data``), in a grid whose other
tasks read the Hub or its local mirror (``data.source``): which file each split reads, how
the file's columns map to the task format's, and the config check that stops a grid before
any job runs when a file is missing, of an unknown type, or lacks a column the mapping needs.

The job reads the rows (``data/loaders/local_files.py``) and maps them with the mapping
declared here (``data/loaders/columns.py``). Standard library only (the Snakefile imports
this): a JSON Lines file's columns are the keys of its first records, a CSV file's its
header; a Parquet file's schema is read with pyarrow where it is installed, else by the job.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.spec import tasks as task_catalogue
from workflow_scripts.spec.basics import repo_path
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.tasks import get_task

# File types by suffix; tasks.<name>.data.file_type names one for a file with another suffix.
FILE_TYPES = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
# The data source of a job reading a task's own files (its settings' "source"), beside
# data.source's hub and local.
SOURCE = "files"
# columns: the format's columns from the files' columns; entry: the task entry's converter
# reads the files' rows as it reads a Hub dataset's.
BY_COLUMNS, BY_ENTRY = CONVERTERS = ("columns", "entry")
# Every canonical row has them besides the format's columns; both may be left to the default
# (an id from the task, split and row; the language of tasks.<name>.data.language).
ROW_COLUMNS = ("id", "lang")
# How many records of a JSON Lines file the config check reads for its columns: the job
# checks every row.
PEEK_RECORDS = 50


class LocalDataError(ValueError):
    """A task's local files that cannot be read as configured, named by config key and file."""


@dataclass(frozen=True)
class LocalData:
    """``tasks.<task>.data``: one file per split and how its rows become canonical rows."""

    task: str
    files: Mapping[str, str]
    file_type: str | None
    converter: str
    columns: Mapping[str, str]
    language: str

    @property
    def key(self) -> str:
        return f"tasks.{self.task}.data"

    def path(self, split: str) -> Path:
        return repo_path(self.files[split])

    def type_of(self, split: str) -> str:
        """The file's type: file_type, else its suffix's."""
        if self.file_type:
            return self.file_type
        suffix = Path(self.files[split]).suffix.lower()
        if suffix not in FILE_TYPES:
            raise LocalDataError(
                f"config key {self.key}.files.{split}: cannot tell the type of {self.files[split]!r} from its "
                f"suffix (known: {', '.join(FILE_TYPES)}); set {self.key}.file_type to one of "
                f"{', '.join(FILE_TYPES.values())}"
            )
        return FILE_TYPES[suffix]

    def source_column(self, column: str) -> str:
        """The file column a canonical column is read from (its own name unless mapped)."""
        return self.columns.get(column, column)

    def settings(self, split: str) -> dict[str, Any]:
        """The block one split's job reads (its params: a change reruns it), in the config's
        shape with that split's file only, its type resolved."""
        return {
            "files": {split: self.files[split]},
            "file_type": self.type_of(split),
            "converter": self.converter,
            "columns": dict(self.columns),
            "language": self.language,
        }


def from_block(task: str, data: dict[str, Any]) -> LocalData:
    """A ``tasks.<task>.data`` block (or a job's part of it) as a record."""
    return LocalData(
        task=task,
        files=dict(data["files"]),
        file_type=data.get("file_type"),
        converter=data.get("converter", BY_COLUMNS),
        columns=dict(data.get("columns") or {}),
        language=data.get("language", "en"),
    )


def spec(config: dict[str, Any], task: str) -> LocalData | None:
    """The task's local files, or None when it reads the Hub (or its mirror)."""
    data = config["tasks"][task].get("data")
    return from_block(task, data) if data else None


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
    for task, cfg in config["tasks"].items():
        if task not in task_catalogue.TASKS:  # read at call time: catalogues register tasks late
            continue  # grid.check_config names it
        if ("hub" in cfg) == ("data" in cfg):
            raise LocalDataError(
                f"config key tasks.{task}: give hub (a Hub dataset) or data (local files), "
                f"{'not both' if 'hub' in cfg else 'neither is given'}"
            )
        found = spec(config, task)
        if not get_task(task).converter and (found is None or found.converter != BY_COLUMNS):
            raise LocalDataError(
                f"config key tasks.{task}: task {task}'s entry {get_task(task).entry_file} names no converter, "
                f"so its rows come from local files mapped by their columns: give tasks.{task}.data "
                f"(with converter: columns)"
            )
        if found is not None:
            _check_splits(found)
            for split in found.files:
                _check_file(found, split, list(cfg.get("languages", ["en"])))


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
