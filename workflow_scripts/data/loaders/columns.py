"""The field-mapping converter of a task kept in local files (``tasks.<name>.data.converter:
columns``): each canonical column of the task's format, and ``id`` and ``lang``, is read from
the file column ``tasks.<name>.data.columns`` maps it to (by default the one of its own name).

A value that says what it means in another spelling is repaired and counted in the load
report (``report["repairs"]``, which prepare writes into the Parquet metadata and the log):
a label name in other case or with surrounding spaces, a number given as text ("2", 2.0),
a list given as one space-separated string, a blank or repeated id, a span answer whose
offset is off but whose text occurs once in the context. Anything
else that does not fit (a missing value, a label the task does not have, an answer the
context does not contain) stops the job, naming the file and the row (1-based, blank lines
and a CSV header not counted).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from workflow_scripts.data.loaders.local_files import FileSource
from workflow_scripts.data.loaders.registry import Report, Row, choice_index, label_index, require_languages
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.local_data import LocalFiles
from workflow_scripts.spec.tasks import Task


def mapped_rows(
    task: Task, own: LocalFiles, source: FileSource, split: str, languages: list[str], report: Report
) -> Iterator[Row]:
    """The canonical rows of the file's rows in ``languages``; the others are counted, not kept."""
    repairs: Counter[str] = Counter()
    counts = dict.fromkeys(languages, 0)
    other = Counter()
    seen_ids: set[str] = set()
    for number, record in enumerate(source.records(), 1):
        where = f"{source.path}, row {number}"
        row = {col: _value(task, own, record, col, kind, where, repairs) for col, kind in _columns(task)}
        row["lang"] = _text(_get(record, own, "lang", own.language), where, "lang")
        row["id"] = _row_id(record, own, f"{task.name}-{split}-{number}", seen_ids, repairs)
        if task.format == "span":
            _check_answers(row, where, repairs)
        if row["lang"] not in counts:
            other[row["lang"]] += 1
            continue
        counts[row["lang"]] += 1
        yield row
    require_languages(task.name, split, counts)
    report.update({"file_rows": sum(counts.values()) + sum(other.values()), "repairs": dict(sorted(repairs.items()))})
    if other:
        report["other_languages"] = dict(sorted(other.items()))


def _columns(task: Task) -> list[tuple[str, str]]:
    return list(get_format(task.format).columns.items())


def _get(record: Row, own: LocalFiles, column: str, default: Any = None) -> Any:
    """The record's value for a canonical column; ``default`` when an unmapped optional
    column (id, lang) is not in the file."""
    source = own.source_column(column)
    if source not in record and column not in own.columns:
        return default
    return record.get(source)


def _value(task: Task, own: LocalFiles, record: Row, column: str, kind: str, where: str, repairs: Counter) -> Any:
    value = _get(record, own, column)
    named = f"{column} (file column {own.source_column(column)!r})"
    if value is None:
        raise InputError(f"{where}: no value for {named}; the row has {sorted(record)}")
    if column == "label" and task.labels:
        value = _label_name(task, value, repairs)
        index = value if isinstance(value, str) else _integer(value, f"{where}, {named}", repairs)
        return label_index(task, index, f"{where}, {named}")
    if kind == "int64":
        number = _integer(value, f"{where}, {named}", repairs)
        return choice_index(number, task.num_choices, f"{where}, {named}") if column == "label" else number
    if kind == "string":
        return _text(value, where, named)
    items = _listed(value, f"{where}, {named}", repairs)
    if kind == "list<int64>":
        return [_integer(v, f"{where}, {named}", repairs) for v in items]
    texts = [_text(v, where, named) for v in items]
    if column == "tags" and task.labels:
        unknown = sorted(set(texts) - set(task.labels))
        if unknown:
            raise InputError(f"{where}: tags {unknown} not in {list(task.labels)}")
    return texts


def _label_name(task: Task, value: Any, repairs: Counter) -> Any:
    """A label name as the entry spells it, when only case or surrounding spaces differ."""
    if not isinstance(value, str) or value in task.labels:
        return value
    spelt = {name.casefold(): name for name in task.labels}.get(value.strip().casefold())
    if spelt is not None:
        repairs["label_spelling"] += 1
        return spelt
    if value.strip().isdigit():
        repairs["number_as_text"] += 1
        return int(value.strip())
    return value


def _integer(value: Any, where: str, repairs: Counter) -> int:
    if isinstance(value, bool):
        raise InputError(f"{where}: {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        repairs["number_as_text"] += 1
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        repairs["number_as_text"] += 1
        return int(value.strip())
    raise InputError(f"{where}: {value!r} is not an integer")


def _text(value: Any, where: str, named: str) -> str:
    if isinstance(value, str):
        return value
    raise InputError(f"{where}: {named} is {value!r}, not text")


def _listed(value: Any, where: str, repairs: Counter) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):  # a CSV cell cannot hold a list
        repairs["list_as_text"] += 1
        return value.split()
    raise InputError(f"{where}: {value!r} is not a list")


def _row_id(record: Row, own: LocalFiles, default: str, seen: set[str], repairs: Counter) -> str:
    given = _get(record, own, "id")
    row_id = default if given is None or str(given).strip() == "" else str(given)
    if given is not None and row_id == default:
        repairs["blank_id"] += 1
    if row_id in seen:
        repairs["repeated_id"] += 1
        row_id = f"{row_id}-{default}"
    seen.add(row_id)
    return row_id


def _check_answers(row: Row, where: str, repairs: Counter) -> None:
    """Each answer at its offset; one that is not, but occurs once in the context, is moved
    there (the Hub's span tasks have their own repair, spans.py; imported by their entries only)."""
    if len(row["answer_texts"]) != len(row["answer_starts"]):
        raise InputError(f"{where}: {len(row['answer_texts'])} answer texts but {len(row['answer_starts'])} starts")
    context = row["context"]
    for i, (text, start) in enumerate(zip(row["answer_texts"], row["answer_starts"])):
        if start >= 0 and context.startswith(text, start):
            continue
        if context.count(text) != 1:
            said = "is not in the context" if text not in context else "occurs more than once elsewhere"
            raise InputError(f"{where}: answer {text!r} is not at offset {start}, and {said}")
        repairs["answer_relocated"] += 1
        row["answer_starts"][i] = context.index(text)
