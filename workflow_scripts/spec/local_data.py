"""A task whose rows come from local files of its own (``tasks.<name>.data``): the config's
block as a record (:class:`LocalData`) and the part of it one split's ``data.prepare`` job
reads (:class:`LocalFiles`, its settings' ``data``).

Both layers read them: the workflow builds the job's block and checks the files before any
job runs (``workflow/local_data.py``), the job reads the rows (``data/loaders/local_files.py``)
and maps their columns (``data/loaders/columns.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workflow_scripts.spec.basics import repo_path
from workflow_scripts.spec.record import Record, default_factory

# File types by suffix; tasks.<name>.data.file_type names one for a file with another suffix.
FILE_TYPES = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
FileType = Literal["jsonl", "csv", "parquet"]
# The data source of a job reading a task's own files (its settings' "source"), beside
# data.source's hub and local.
SOURCE = "files"
# columns: the format's columns from the files' columns; entry: the task entry's converter
# reads the files' rows as it reads a Hub dataset's.
BY_COLUMNS, BY_ENTRY = CONVERTERS = ("columns", "entry")
Converter = Literal["columns", "entry"]
# Every canonical row has them besides the format's columns; both may be left to the default
# (an id from the task, split and row; the language of tasks.<name>.data.language).
ROW_COLUMNS = ("id", "lang")


class LocalDataError(ValueError):
    """A task's local files that cannot be read as configured, named by config key and file."""


@dataclass(frozen=True)
class LocalFiles(Record):
    """What one split's ``data.prepare`` job reads of ``tasks.<task>.data`` (its settings'
    ``data``): that split's file only, its type resolved."""

    files: dict[str, str]
    file_type: FileType
    # the defaults of tasks.<name>.data (the config schema's)
    converter: Converter = BY_COLUMNS
    columns: dict[str, str] = default_factory(dict)
    language: str = "en"

    def source_column(self, column: str) -> str:
        """The file column a canonical column is read from (its own name unless mapped)."""
        return self.columns.get(column, column)


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

    def settings(self, split: str) -> LocalFiles:
        """The block one split's job reads (its params: a change reruns it), in the config's
        shape with that split's file only, its type resolved."""
        return LocalFiles.parse(
            {
                "files": {split: self.files[split]},
                "file_type": self.type_of(split),
                "converter": self.converter,
                "columns": dict(self.columns),
                "language": self.language,
            },
            self.key,
        )
