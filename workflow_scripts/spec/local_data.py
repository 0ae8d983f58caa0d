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
from typing import Any, Literal

from workflow_scripts.spec.basics import repo_path
from workflow_scripts.spec.record import Record
from workflow_scripts.spec.schema_block import LANGUAGE_CODE, key

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


@dataclass(frozen=True, kw_only=True)
class RowMapping(Record):
    """How a file's rows become canonical rows: the part of ``tasks.<task>.data`` that the
    config's block and one split's job share."""

    converter: Converter = key(
        BY_COLUMNS,
        description="""columns reads each canonical column of the task's format (and id, lang) from a file
        column (columns); entry hands the file's rows to the converter the task's entry
        names, as if they were a Hub dataset's.""",
    )
    columns: dict[str, str] = key(
        factory=dict,
        description="""converter columns - canonical column -> the file's column it is read from; a column
        not named here is read from the file column of its own name. id and lang are optional:
        without them a row's id is <task>-<split>-<row> and its language is language.""",
        additionalProperties={"type": "string", "minLength": 1},
    )
    language: str = key(
        "en", description="The language of every row of files without a lang column.", pattern=LANGUAGE_CODE
    )

    def source_column(self, column: str) -> str:
        """The file column a canonical column is read from (its own name unless mapped)."""
        return self.columns.get(column, column)


@dataclass(frozen=True, kw_only=True)
class LocalFiles(RowMapping):
    """What one split's ``data.prepare`` job reads of ``tasks.<task>.data`` (its settings'
    ``data``): that split's file only, its type resolved."""

    files: dict[str, str]
    file_type: FileType


@dataclass(frozen=True, kw_only=True)
class LocalDataEntry(RowMapping):
    """``tasks.<task>.data`` as the config gives it (the schema's block is generated from it)."""

    key_noun = "config key"

    files: dict[str, str] = key(
        description="""One file per split the task's entry lists (train, dev, test): JSON Lines, CSV (with a
        header) or Parquet, relative to the repository or absolute. Each is an input of its
        split's prepare_task_data job, and its sha256 goes into the prepared file's metadata.""",
        minProperties=1,
        propertyNames={"enum": ["train", "dev", "test"]},
        additionalProperties={"type": "string", "minLength": 1},
    )
    file_type: FileType | None = key(
        None, description="The files' type; default from each file's suffix (.jsonl, .csv, .parquet)."
    )


@dataclass(frozen=True, kw_only=True)
class LocalData(LocalDataEntry):
    """``tasks.<task>.data`` of one task: its files per split and how their rows become
    canonical rows."""

    task: str

    @classmethod
    def of(cls, task: str, block: Mapping[str, Any]) -> LocalData:
        """``tasks.<task>.data`` of the config as a record (InputError naming its key)."""
        return cls.parse({**block, "task": task}, f"tasks.{task}.data")

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

    def settings(self, split: str) -> LocalFiles:
        """The block one split's job reads (its params: a change reruns it), in the config's
        shape with that split's file only, its type resolved."""
        mapping = {k: v for k, v in self.to_dict().items() if k in RowMapping.keys()}
        return LocalFiles.parse(
            {**mapping, "files": {split: self.files[split]}, "file_type": self.type_of(split)}, self.key
        )
