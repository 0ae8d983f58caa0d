"""The rows of one split of a task kept in a local file (``tasks.<name>.data``): JSON Lines,
CSV or Parquet, read with pyarrow, and the file's sha256 for the Parquet metadata.

:class:`FileSource` answers a converter as :class:`~.source.Source` does, so a task entry's
own converter reads the file as it reads a Hub dataset (``converter: entry``); the field
mapping (``converter: columns``) reads :meth:`FileSource.records` directly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.data.loaders.source import file_sha256, jsonl_records
from workflow_scripts.spec.basics import InputError, repo_path
from workflow_scripts.spec.local_data import SOURCE

Row = dict[str, Any]


def read_rows(path: Path, file_type: str) -> list[Row]:
    """Every row of the file, in stored order; an unreadable file names itself and the row."""
    import pyarrow as pa

    if not path.is_file():
        raise InputError(f"missing data file {path}")
    try:
        table = _read_table(path, file_type)
    except pa.ArrowInvalid as err:
        if file_type != "jsonl":
            raise InputError(f"corrupt data file {path} ({file_type}): {err}") from None
        # Records whose values change type from row to row (a label 1, then "1") are JSON all
        # the same: read them record by record, and a line that is no JSON is named by number.
        rows = [record for _, record in jsonl_records(path)]
        bad = next((i for i, r in enumerate(rows, 1) if not isinstance(r, dict)), None)
        if bad is not None:
            raise InputError(f"corrupt data file {path}, row {bad}: not a JSON object") from None
        return rows
    return table.to_pylist()


def _read_table(path: Path, file_type: str):
    if file_type == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if file_type == "csv":
        import pyarrow.csv as pcsv

        # An empty field is an empty string, as the file says, not a missing value.
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(strings_can_be_null=False))
    if file_type == "jsonl":
        import pyarrow.json as pjson

        return pjson.read_json(path)
    raise InputError(f"data file {path}: unknown file type {file_type!r} (jsonl, csv, parquet)")


class FileSource:
    """One split's file, answering a converter as a Hub source does: whichever config and Hub
    split the converter asks for, it gets this file's rows."""

    kind = SOURCE

    def __init__(self, file: str, file_type: str):
        self.file, self.file_type = file, file_type
        self.path = repo_path(file)
        self._asked: set[str | None] = set()
        self._rows: list[Row] | None = None

    def records(self) -> list[Row]:
        if self._rows is None:
            self._rows = read_rows(self.path, self.file_type)
        return self._rows

    def _for(self, name: str | None) -> list[Row]:
        # One file holds one table: a converter reading several configs (one per language)
        # would get the same rows under each language.
        self._asked.add(name)
        if len(self._asked) > 1:
            raise InputError(
                f"data file {self.path} holds one table, and the task's converter asks for configs "
                f"{sorted(map(str, self._asked))}: map its columns instead (data.converter: columns)"
            )
        return self.records()

    def num_rows(self, name: str | None, split: str) -> int:
        return len(self._for(name))

    def rows(self, name: str | None, split: str, shuffle_seed: int | None = None) -> Iterator[Row]:
        rows = list(self._for(name))
        if shuffle_seed is not None:
            random.Random(shuffle_seed).shuffle(rows)
        yield from rows

    def resolved_sha(self) -> None:
        return None

    def provenance(self) -> dict[str, str]:
        """Where the rows came from: the file as configured, its type and its content's sha256."""
        return {"file": self.file, "file_type": self.file_type, "sha256": file_sha256(self.path)}
