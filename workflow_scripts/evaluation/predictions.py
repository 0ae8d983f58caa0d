"""Test predictions in the layout the XTREME and XTREME-R leaderboards take (their
``evaluate.py`` reads a folder ``<task>/test-<lang>.<ext>``; google-research/xtreme, commit
838c13b):

- classification (XNLI, PAWS-X): ``.tsv``, one label per line, in the test set's order,
  spelled as in XTREME's label files (XNLI label names, PAWS-X ``0``/``1``);
- multiple choice (XCOPA, XTREME-R's ``multi_choice`` group): ``.jsonl``, one
  ``{"label": <choice index>}`` per line in the test set's order, as the reference's
  ``third_party/run_xcopa.py`` writes it; ``read_xcopa`` reads the ``label`` field of each
  line and ``accuracy`` compares it with ``==`` to the gold file's (XCOPA's jsonl, integer
  labels), so the index is a JSON integer (a string "0" would score 0);
- tagging (UD-POS, PAN-X): ``.tsv``, one tag per word per line, a blank line after each
  sentence;
- QA (XQuAD, MLQA, TyDiQA-GoldP): ``.json``, ``{question id: answer text}``;
- ranking (Mewsli-X, LAReQA): ``.json``, ``{query id: [candidate ids, best first]}`` (the
  top 20). This is what the reference's ``evaluate_retrieval.py`` writes and
  ``evaluate.py`` reads for Mewsli-X (``read_squad``: a JSON object keyed by the mentions'
  ``example_id``; ``mewslix_map20`` truncates each list to 20 and looks the gold entity id
  up in it; a query it lacks scores 0). The official ``evaluate.py`` has no
  reader for LAReQA (its language list is empty); its file takes the same layout, one per
  question language, with the ids our data carries (``utils_lareqa`` names a question
  ``<xling id>_<lang>`` and a candidate sentence ``<context id>_<sentence position>``).
  A query may not be called ``data``: ``read_squad`` would read that key's value instead;
- BUCC: ``.tsv``, one mined pair ``<source id>\\t<English id>`` per line;
- Tatoeba: ``.tsv``, per English sentence the index of the retrieved sentence, one per line;
- image-caption retrieval (IGLUE's xFlickr&CO, which has no leaderboard files): ``.tsv``, per
  caption the name of the image ranked first, one per line.

Evaluation writes one such folder per run next to its metric file (``seed<N>.predictions/``);
``submission.collect`` copies the best models' folders into one submission. This module
knows no benchmark, so that declaring one (spec/benchmark.py) reruns no evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.tasks import (
    CLASSIFICATION,
    MINING,
    MULTIPLE_CHOICE,
    RANKING,
    RETRIEVAL,
    SPAN,
    TAGGING,
    VISUAL_CLASSIFICATION,
    VISUAL_RETRIEVAL,
    Task,
    get_task,
)

# Where a target's files differ from its canonical rows is on its task entry
# (Task.submission_label_ids: PAWS-X's label files hold class indices; Task.language_suffixed_ids:
# XQuAD's and MLQA's converters add "-<lang>" to question ids, the leaderboard keys answers
# by the dataset's own).


def _choice_lines(task: Task, predicted: Any, lang: str) -> str:
    """``{"label": <choice index>}`` per line, the index a JSON integer."""
    choices = range(task.num_choices) if task.num_choices else None
    out = []
    for i in predicted:
        if choices is not None and int(i) not in choices:
            raise InputError(f"{task.name} {lang}: choice index {i!r} outside 0..{task.num_choices - 1}")
        out.append(json.dumps({"label": int(i)}) + "\n")
    return "".join(out)


def _label_lines(task: Task, predicted: Any, lang: str) -> str:
    """One label per line, spelled as the leaderboard's label files (class indices where
    the task says so). IGLUE has no leaderboard files: an image target's predictions are
    written as a text classification target's, one label name per line in row order."""
    names = (
        [str(i) for i in range(task.num_labels)] if task.submission_label_ids or not task.labels else list(task.labels)
    )
    return "".join(f"{names[int(i)]}\n" for i in predicted)


def _tag_lines(task: Task, predicted: Any, lang: str) -> str:
    return "".join("".join(f"{tag}\n" for tag in sentence) + "\n" for sentence in predicted)


def _answers_json(task: Task, predicted: Any, lang: str) -> str:
    """``{question id: answer text}``, ids without the "-<lang>" the converter added."""
    answers = {
        qid.removesuffix(f"-{lang}") if task.language_suffixed_ids else qid: text for qid, text in predicted.items()
    }
    return json.dumps(answers, ensure_ascii=False, indent=1) + "\n"


def _ranking_json(task: Task, predicted: Any, lang: str) -> str:
    """``{query id: [candidate ids]}``, one query per line (a valid JSON object)."""
    if not isinstance(predicted, dict):
        raise InputError(
            f"{task.name} {lang}: ranking predictions must map query ids to ranked candidate ids, "
            f"got {type(predicted).__name__}"
        )
    lines = []
    for query, ranked in predicted.items():
        if query == "data":  # read_squad would return this key's value instead of the object
            raise InputError(
                f"{task.name} {lang}: a query id 'data' cannot be written (the official reader takes the "
                "'data' key of the file as the whole dataset)"
            )
        if isinstance(ranked, (str, bytes)) or not all(isinstance(c, str) for c in ranked):
            raise InputError(
                f"{task.name} {lang}: query {query!r}: expected a list of candidate ids (strings), got {ranked!r}"[:300]
            )
        lines.append(f"{json.dumps(str(query), ensure_ascii=False)}: {json.dumps(list(ranked), ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"


def _pair_lines(task: Task, predicted: Any, lang: str) -> str:
    return "".join(f"{src}\t{eng}\n" for src, eng in predicted)


def _index_lines(task: Task, predicted: Any, lang: str) -> str:
    return "".join(f"{int(i)}\n" for i in predicted)


def _name_lines(task: Task, predicted: Any, lang: str) -> str:
    """Per caption, in the release's order, the image ranked first."""
    return "".join(f"{name}\n" for name in predicted)


@dataclass(frozen=True)
class LeaderboardFile:
    """How one task format's test predictions are written: the extension ``evaluate.py``'s
    ``get_suffix`` expects, and the file's text from one language's predictions."""

    suffix: str
    render: Callable[[Task, Any, str], str]


# One entry per task format that writes leaderboard files (a new format adds its own).
LEADERBOARD_FILES: dict[str, LeaderboardFile] = {
    CLASSIFICATION: LeaderboardFile("tsv", _label_lines),
    VISUAL_CLASSIFICATION: LeaderboardFile("tsv", _label_lines),
    MULTIPLE_CHOICE: LeaderboardFile("jsonl", _choice_lines),
    TAGGING: LeaderboardFile("tsv", _tag_lines),
    SPAN: LeaderboardFile("json", _answers_json),
    RANKING: LeaderboardFile("json", _ranking_json),
    MINING: LeaderboardFile("tsv", _pair_lines),
    RETRIEVAL: LeaderboardFile("tsv", _index_lines),
    VISUAL_RETRIEVAL: LeaderboardFile("tsv", _name_lines),
}


def leaderboard_file(target: str) -> LeaderboardFile:
    fmt = get_task(target).format
    if fmt not in LEADERBOARD_FILES:
        raise InputError(
            f"task {target}: no leaderboard format for {fmt} (evaluation/predictions.py LEADERBOARD_FILES)"
        )
    return LEADERBOARD_FILES[fmt]


def suffix(target: str) -> str:
    """The extension ``evaluate.py``'s ``get_suffix`` expects: json for QA and Mewsli-X (and
    LAReQA, same layout), jsonl for the multiple-choice group (XCOPA), tsv otherwise."""
    return leaderboard_file(target).suffix


def render(target: str, predicted: Any, lang: str) -> str:
    """One language's predictions as the leaderboard file's text."""
    return leaderboard_file(target).render(get_task(target), predicted, lang)


def write_predictions(target: str, by_language: dict[str, Any], directory: Path) -> None:
    """``directory/test-<lang>.<ext>`` per language, the whole folder replaced atomically."""
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        for lang, predicted in by_language.items():
            (tmp / f"test-{lang}.{suffix(target)}").write_text(render(target, predicted, lang), encoding="utf-8")
