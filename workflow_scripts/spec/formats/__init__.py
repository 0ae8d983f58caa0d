"""Task formats: what a task's ``format`` decides, one module per format (``spec/formats/<name>.py``).

Each module declares ``FORMAT = TaskFormat(...)``: the canonical columns a converter yields,
the head the format trains, the scorer that reads its outputs, and the facts the grid asks
(is it retrieval, does it read images, which columns the translation step translates). The code
paths that are long (span decoding, ranking pools, visual prefixes) stay in their modules;
a kind named here routes to them, so a new format that reads like an existing one names
that one's kinds and adds only what differs (``encode_chunk``). docs/guides/new_task_format.md
shows how.

Format modules are imported by name (:func:`get_format`), never by an ``import`` statement:
``spec/codehash.py`` follows import statements only, so no job's code hash covers every
format, and ``codehash.task_fingerprint`` adds the module of each of the job's own tasks'
formats. Editing ``spec/formats/span.py`` reruns the jobs of span tasks and no other.

Standard library only: the Snakefile reads these facts at parse time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

# The built-in formats, in the order the catalogue's messages and docs list them; a format
# module added beside them follows, by name.
BUILTIN = (
    "classification",
    "multiple_choice",
    "span",
    "tagging",
    "retrieval",
    "mining",
    "ranking",
    "mlm",
    "visual_classification",
    "visual_answer",
    "visual_retrieval",
)
# Arrow types a canonical column may have (data/prepare.py builds the schema from them).
COLUMN_TYPES = ("string", "int64", "list<string>", "list<int64>")


@dataclass(frozen=True)
class TaskFormat:
    name: str
    # The canonical columns beside ``id`` and ``lang``, with their types (COLUMN_TYPES).
    columns: Mapping[str, str]
    # The head models/heads.py builds, features.collate pads for and heads.task_logits reads,
    # named by the built-in format that has it; None: no head is trained (scored on the encoder).
    head: str | None
    # The path of evaluation/evaluate.predict_and_score that turns outputs into scores, named by
    # the built-in format that has it ("classification": the argmax's accuracy); None: not
    # scored there (MLM is never scored, retrieval is scored on the encoder's embeddings).
    scorer: str | None
    # Scored without target training, on the encoder the intermediate phase left.
    retrieval: bool = False
    # Reads images (through the cached features of a frozen vision encoder).
    visual: bool = False
    # The text columns the translation step translates (string or list<string>; a null stays
    # null). Every other column (labels, image names, answer lists, ids) carries over unchanged,
    # so translated rows keep their labels and images. Empty: not translatable.
    translated_columns: tuple[str, ...] = ()
    # Its test data can be machine-translated into English and scored by the English model
    # (the translate_test setting, workflow/transfer.py).
    translate_test: bool = False
    # The task-config keys its training and scoring settings carry beside batch_size, epochs
    # and max_length (workflow/grid.py).
    options: tuple[str, ...] = ()
    # One output per token: predictions keep each sequence's own length.
    per_token: bool = False
    # Rows -> features, for a format data/features.py has no path of its own for: called
    # as ``encode_chunk(task, tokenizer, rows, opts, train)``, returns one dict per feature
    # (``input_ids``, ``labels`` as the head's kind expects, ``example``: the row's index).
    encode_chunk: Callable[..., list[dict[str, Any]]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        bad = {c: t for c, t in self.columns.items() if t not in COLUMN_TYPES}
        if bad:
            raise ValueError(f"format {self.name}: column types {bad} are not among {', '.join(COLUMN_TYPES)}")
        if {"id", "lang"} & set(self.columns):
            raise ValueError(f"format {self.name}: every row has id and lang; columns lists the others")
        text = ("string", "list<string>")
        wrong = [c for c in self.translated_columns if self.columns.get(c) not in text]
        if wrong:
            raise ValueError(
                f"format {self.name}: translated_columns {wrong} are not among its {' or '.join(text)} columns"
            )
        # A kind is a built-in format's, or the format's own (code added for it beside the built-in kinds).
        kinds = (*BUILTIN, self.name)
        for key in ("head", "scorer"):
            if getattr(self, key) not in (*kinds, None):
                raise ValueError(
                    f"format {self.name}: {key} {getattr(self, key)!r} is none of {', '.join(BUILTIN)} "
                    f"(or {self.name!r}, or None)"
                )

    @property
    def translatable(self) -> bool:
        """The translation step can translate its rows (translation/translate.py)."""
        return bool(self.translated_columns)


@cache
def names() -> tuple[str, ...]:
    """Every format: the built-in ones, then the other modules of this folder by name."""
    here = Path(__file__).resolve().parent
    found = sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))
    return BUILTIN + tuple(n for n in found if n not in BUILTIN)


@cache
def get_format(name: str) -> TaskFormat:
    if name not in names():
        raise KeyError(f"unknown task format {name!r}; known formats: {', '.join(names())}")
    declared = importlib.import_module(f"{__name__}.{name}").FORMAT
    if declared.name != name:
        raise ValueError(f"spec/formats/{name}.py declares a format named {declared.name!r}")
    return declared


def head_kind(name: str) -> str:
    """The head a format trains (TaskFormat.head); a name that is no format stays as it is,
    so the callers' own errors name it."""
    return (get_format(name).head or name) if name in names() else name


def module_name(name: str) -> str:
    """The module declaring format ``name`` (what codehash.task_fingerprint hashes)."""
    return f"{__name__}.{name}"
