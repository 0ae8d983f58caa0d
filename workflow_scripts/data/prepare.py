"""Load every task (from the Hub, a local mirror of it, or an original release) into canonical Parquet.

One canonical schema per task format, declared by the format's module in workflow_scripts/spec/formats/
(every row also has ``id`` and ``lang``):

- classification:  text_a, text_b, label (int, index into Task.labels)
- multiple_choice: context, choices (list of str), label
- span:            context, question, answer_texts, answer_starts (empty lists: no answer)
- tagging:         tokens, tags (tag strings)
- retrieval:       source (the non-English sentence), target (its English translation)
- mining:          side ("source" or "en"), text, gold (English ids aligned to a source sentence)
- ranking:         side ("query" or "candidate"), text, context (a candidate's surrounding text
                   or ""), gold (a query's gold candidate ids; [] on candidates). A query's
                   ``lang`` is the language it is scored in; candidates of every language
                   form one pool (Mewsli-X, LAReQA)
- mlm:             text
- visual_classification: text_a (the text beside the images), images (their file names under
                   the task's image directory: one for SNLI-VE, left and right for NLVR2), label
- visual_answer:   text_a (the question), images, answers (the annotators' answers, normalised)
- visual_retrieval: text_a (a caption), images (the image it describes)

An unresolvable span answer (evaluation splits only) has start ``-1``: scorers compare texts.

``source.kind == "hub"`` reads ``datasets.load_dataset(path, name, split, revision)``;
``"local"`` reads ``<root>/<path>/<name>/<split>.jsonl`` holding the same rows, which is how
the embedded demo and the tests run the very same converters offline. ``"files"`` is a task
kept in local files of its own (``tasks.<name>.data``: JSON Lines, CSV or Parquet, one file
per split), whatever the grid's other tasks read; its provenance is the file's sha256. The converters live
in ``workflow_scripts.data.loaders``, the only package that touches the network; each file's
Parquet metadata holds its provenance and the loader's report of what it repaired.

CLI: ``python -m workflow_scripts.data.prepare --task T --split S --settings JSON --output F``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, setup_logging
from workflow_scripts.data.loaders import Report, Row, Source, load_converter, repo_path
from workflow_scripts.data.loaders.columns import mapped_rows
from workflow_scripts.data.loaders.local_files import FileSource
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.local_data import BY_COLUMNS
from workflow_scripts.spec.tasks import FORMATS, Task, get_task

# Each format's columns, declared by its module (workflow_scripts/spec/formats/).
SCHEMAS: dict[str, dict[str, str]] = {name: dict(get_format(name).columns) for name in FORMATS}


def to_table(task: Task, rows: Iterable[Row]):
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "list<string>": pa.list_(pa.string()),
        "list<int64>": pa.list_(pa.int64()),
    }
    fields = [("id", pa.string()), ("lang", pa.string())] + [(col, types[t]) for col, t in SCHEMAS[task.format].items()]
    if task.shot_pool:  # the fewest shots whose file holds the row (spec/few_shot.py)
        fields.append(("shots", pa.int64()))
    schema = pa.schema(fields)
    rows = list(rows)
    return pa.Table.from_pylist(rows, schema=schema)


def read_table(path: str | Path, fmt: str | None = None):
    """Read a canonical Parquet file, failing with the file name when missing or corrupt."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing data file: {path}")
    try:
        # One file, read whole: ParquetFile spares each job pq.read_table's import of
        # pyarrow.dataset (0.4-0.6 s), which only globs and filters need.
        table = pq.ParquetFile(path).read()
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"corrupt data file {path}: {err}") from err
    if fmt is not None:
        missing = set(SCHEMAS[fmt]) - set(table.column_names)
        if missing:
            raise InputError(f"data file {path} lacks columns {sorted(missing)} of format {fmt}")
    return table


def prepare(task_name: str, split: str, settings: DataSettings, output: str | Path) -> int:
    import pyarrow.parquet as pq

    task = get_task(task_name)
    if split not in task.splits:
        raise InputError(f"task {task_name} has no split {split!r} (has {list(task.splits)})")
    report: Report = {}
    src, rows = _source_rows(task, split, settings, report)
    table = to_table(task, rows)
    if table.num_rows == 0:
        raise InputError(f"task {task_name} split {split}: no examples loaded from {src.path}")
    # Provenance travels with the data: where it came from (from the Hub which commit, from
    # a local file its sha256), and what the loader repaired or dropped on the way (the load report).
    provenance = {
        "task": task_name,
        "split": split,
        "source": src.kind,
        **_origin_record(src, report),
        "report": report,
    }
    table = table.replace_schema_metadata({"xstilts": json.dumps(provenance, sort_keys=True)})
    with atomic_path(output) as tmp:
        pq.write_table(table, tmp)
    langs = sorted(set(table.column("lang").to_pylist()))
    LOG.info("%s/%s: %d examples, languages %s -> %s", task_name, split, table.num_rows, langs, output)
    if report:
        LOG.info("load report: %s", json.dumps(report, sort_keys=True))
    return table.num_rows


def _source_rows(
    task: Task, split: str, settings: DataSettings, report: Report
) -> tuple[Source | FileSource, Iterable[Row]]:
    """Where the rows come from, and the converter's canonical rows: a task's own local file
    (``tasks.<name>.data``, mapped by its columns or read by the entry's converter), else the
    Hub, its local mirror or a release through the entry's converter."""
    languages = list(settings.languages)
    if settings.data is not None:  # source "files"
        own = settings.data
        if split not in own.files:
            raise InputError(f"task {task.name} split {split}: its data settings name files for {sorted(own.files)}")
        src = FileSource(own.files[split], own.file_type)
        if own.converter == BY_COLUMNS:
            return src, mapped_rows(task, own, src, split, languages, report)
    else:
        root = settings.local_root
        hub = settings.hub
        src = Source(settings.source, hub.path, hub.revision, str(repo_path(root)) if root else None)
    return src, load_converter(task)(src, split, languages, settings.options, report)


def _origin_record(src: Source | FileSource, report: Report) -> dict[str, Any]:
    if isinstance(src, FileSource):
        return {"path": None, "revision": None, "resolved_sha": None, **src.provenance()}
    # A converter that reads an original release (UD, BUCC, CCGbank files) names it in
    # report["release"]; the Hub is asked for a commit only when its data was read.
    reads_hub = "release" not in report
    return {
        "path": src.path if reads_hub else None,
        "revision": src.revision if reads_hub else None,
        "resolved_sha": src.resolved_sha() if reads_hub else None,
    }


def provenance(path: str | Path) -> dict[str, Any]:
    """The provenance ``prepare`` wrote into a canonical Parquet file ({} if none)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"xstilts")
    return json.loads(raw) if raw else {}


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--split", required=True)
    ap.add_argument("--settings", required=True, help="canonical JSON of the task's data settings")
    ap.add_argument("--output", required=True)
    args = ap.parse_args(argv)
    try:
        prepare(args.task, args.split, DataSettings.parse(args.settings, "--settings"), args.output)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
