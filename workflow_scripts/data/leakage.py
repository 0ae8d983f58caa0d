"""Leakage between stages: does an intermediate task's data hold a target's test images or
texts? (docs/protocol.md §9)

IGLUE's XVNLI tests on SNLI-VE test pairs, whose premises are Flickr30k images and whose
SNLI captions and hypotheses are SNLI's; SNLI re-split by image (SNLI-VE) puts SNLI training
pairs into XVNLI's test set, and Karpathy's Flickr30k training split holds images of it too.
A model trained on such an intermediate task has seen the target's test items: its score is
not zero-shot. This module compares one intermediate task's prepared rows (train and dev)
with one target's test rows and reports what they share:

- **images**: image names reduced to the dataset's own id (``flickr30k-images/123.jpg``,
  ``123.jpg#2`` and ``123`` are one Flickr30k image; ``COCO_val2014_000000391895.jpg`` is
  COCO image 391895);
- **texts**: every text column's normalised text (case, spacing and final punctuation
  ignored) of at least ``min_words`` words, so that stock short sentences ("A man is
  sleeping.") do not count;
- **rows affected**: the target's test rows with a shared image or text, per language (a
  translated test row shares its image, not its text).

A report with anything shared is an overlap: flagged in every table cell of the runs it
affects, or, with ``leakage.on_overlap: refuse``, the check fails and no target model of
that pair is trained.

CLI: ``python -m workflow_scripts.data.leakage --task T --target X --intermediate-data F...
--target-data F... --settings JSON --output REPORT.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path, setup_logging
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import LeakageSettings

IMAGE_COLUMN = "images"
NOT_TEXT = {"id", "lang"}
EXAMPLES_SHOWN = 5
_COCO = re.compile(r"coco_[a-z]+\d{4}_0*(\d+)")


def image_key(name: str) -> str:
    """The image's id within its dataset, whatever folder, suffix or caption number names it."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].split("#", 1)[0].lower()
    stem = base.rsplit(".", 1)[0] if "." in base else base
    coco = _COCO.fullmatch(stem)
    return f"coco:{int(coco.group(1))}" if coco else stem


def text_key(text: str) -> str:
    """Text compared without case, spacing, Unicode form or final punctuation."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split()).rstrip(" .!?")


def _text_columns(table) -> list[str]:
    import pyarrow as pa

    return [
        f.name
        for f in table.schema
        if f.name not in NOT_TEXT and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
    ]


def row_keys(table, min_words: int) -> Iterable[tuple[str, set[str], set[str]]]:
    """(language, image keys, text keys) of every row of a canonical table."""
    columns = {c: table.column(c).to_pylist() for c in _text_columns(table)}
    images = table.column(IMAGE_COLUMN).to_pylist() if IMAGE_COLUMN in table.column_names else None
    langs = table.column("lang").to_pylist() if "lang" in table.column_names else ["en"] * table.num_rows
    for i in range(table.num_rows):
        texts = {text_key(v[i]) for v in columns.values() if v[i] and len(v[i].split()) >= min_words}
        names = {image_key(n) for n in images[i] or ()} if images is not None else set()
        yield langs[i], names, texts


def overlap_report(
    intermediate_tables, target_tables, settings: LeakageSettings, task: str, target: str
) -> dict[str, Any]:
    """What the target's rows share with the intermediate task's rows."""
    min_words = settings.min_words
    seen_images: set[str] = set()
    seen_texts: set[str] = set()
    intermediate_rows = 0
    for table in intermediate_tables:
        for _, names, texts in row_keys(table, min_words):
            seen_images |= names
            seen_texts |= texts
            intermediate_rows += 1
    target_images: set[str] = set()
    target_texts: set[str] = set()
    affected: Counter[str] = Counter()
    rows: Counter[str] = Counter()
    for table in target_tables:
        for lang, names, texts in row_keys(table, min_words):
            rows[lang] += 1
            target_images |= names
            target_texts |= texts
            if names & seen_images or texts & seen_texts:
                affected[lang] += 1
    shared_images = sorted(target_images & seen_images)
    shared_texts = sorted(target_texts & seen_texts)
    return {
        "task": task,
        "target": target,
        "min_words": min_words,
        "intermediate_rows": intermediate_rows,
        "target_rows": sum(rows.values()),
        "images": {"shared": len(shared_images), "of": len(target_images), "examples": shared_images[:EXAMPLES_SHOWN]},
        "texts": {"shared": len(shared_texts), "of": len(target_texts), "examples": shared_texts[:EXAMPLES_SHOWN]},
        "rows_affected": sum(affected.values()),
        "rows_affected_by_language": {lang: affected[lang] for lang in sorted(rows)},
        "overlap": bool(shared_images or shared_texts),
    }


def describe(report: dict[str, Any]) -> str:
    """One line naming the pair and what it shares."""
    parts = []
    if report["images"]["shared"]:
        parts.append(
            f"{report['images']['shared']} of the target's {report['images']['of']} test images "
            f"(e.g. {', '.join(report['images']['examples'][:3])})"
        )
    if report["texts"]["shared"]:
        parts.append(
            f"{report['texts']['shared']} of its {report['texts']['of']} test texts "
            f"(e.g. {report['texts']['examples'][0]!r})"
        )
    if not parts:
        return f"{report['task']} shares nothing with {report['target']}'s test data"
    return (
        f"intermediate task {report['task']} holds {' and '.join(parts)}: {report['rows_affected']} of "
        f"{report['target_rows']} test rows of {report['target']} affected"
    )


def summary(reports: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a metric file records: the overlapping pairs of its run, briefly."""
    return [
        {
            "task": r["task"],
            "target": r["target"],
            "images": r["images"]["shared"],
            "texts": r["texts"]["shared"],
            "rows_affected": r["rows_affected"],
            "target_rows": r["target_rows"],
        }
        for r in reports
        if r["overlap"]
    ]


def read_reports(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    reports = []
    for path in paths:
        try:
            reports.append(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise InputError(f"leakage report {path}: {err}") from err
    return reports


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--intermediate-data", nargs="+", required=True, help="the task's prepared splits")
    ap.add_argument("--target-data", nargs="+", required=True, help="the target's prepared test split(s)")
    ap.add_argument("--settings", required=True, help="JSON: min_words, on_overlap (flag | refuse)")
    ap.add_argument("--output", required=True)
    args = ap.parse_args(argv)
    from workflow_scripts.data.prepare import read_table

    try:
        settings = LeakageSettings.parse(args.settings, "--settings")
        intermediate = [read_table(p) for p in args.intermediate_data]
        report = overlap_report(
            intermediate, [read_table(p) for p in args.target_data], settings, args.task, args.target
        )
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    line = describe(report)
    print(line)
    if report["overlap"] and settings.on_overlap == "refuse":
        raise SystemExit(
            f"error: {line}. Config key leakage.on_overlap is 'refuse': no {args.target} model is trained "
            f"after {args.task}; remove the pair from the grid, or set leakage.on_overlap: flag to run it "
            "with its table cells marked"
        )
    with atomic_path(args.output) as tmp:
        tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
