"""XTREME-R's XCOPA recipe (docs/protocol.md §8): SIQA, then English COPA, then zero-shot XCOPA.

Sources (Hub schema; the demo and the tests read a local mirror of the same rows):

- ``xcopa``: ``cambridgeltl/xcopa``, one config per language (et ht id it qu sw ta th tr vi
  zh), splits ``validation`` (100) and ``test`` (500); columns premise, choice1, choice2,
  question ("cause"/"effect"), label (0/1), idx, changed. dev = validation.
- ``copa``: ``aps/super_glue`` config ``copa``, splits ``train`` (400) and ``validation``
  (100); the public test split is unlabeled (-1) and never read. dev = validation.
- ``siqa``: ``allenai/social_i_qa``, splits ``train`` and ``validation``; columns context,
  question, answerA, answerB, answerC, label (a string "1".."3"). dev = validation.

Input construction follows the reference, google-research/xtreme ``third_party/run_xcopa.py``
(``preprocess_function``, commit 838c13b): each choice is the second segment of a pair whose
first segment is, for COPA and XCOPA, ``f"{premise} What was the {question}?"`` with the
row's ``question`` field inserted verbatim ("cause"/"effect", English whatever the language,
one space after the premise) and, for SIQA, ``f"{context} {question}"``; the choices are the
answer fields as they are (``choice1, choice2``; ``answerA, answerB, answerC``). SIQA's
label is the answer's position (the reference's ``siqa_data.py`` maps the letter A/B/C to
0/1/2; the Hub stores the same answer as "1".."3").

Repairs, counted per language in the load report (Parquet metadata and log):

- a ``question`` spelled otherwise ("Cause", " effect", "result") is normalised to
  "cause"/"effect" (``question_normalised``); one that is neither, a label outside the
  choices, or an empty premise/choice drops its row (``dropped_*``), named in the log;
- unlabeled rows (-1 / ""; public test splits) are skipped (``unlabeled``).

XCOPA's ``question`` field is not always right: in the release (github.com/cambridgeltl/xcopa
at e2e9d7f, which the Hub copies) Thai says "effect" on every row and Turkish validation
likewise, and a few Swahili, Indonesian and Italian rows disagree with the other languages
on the same item (e.g. validation idx 10, "The bowling ball knocked down the pins": "effect"
in id and it, "cause" elsewhere). XTREME-R's code uses the field as it is, so this loader
does too by default; when three or more languages are loaded it compares each item's
question across them and reports the rows that disagree with the strict majority
(``question_disagrees``). ``options.question_repair: majority`` replaces those questions by
the majority's (a deviation from the reference: scores are then not comparable with it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import Report, Row, converter, require_languages
from workflow_scripts.data.loaders.source import Source
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions

XCOPA_LANGUAGES = ("et", "ht", "id", "it", "qu", "sw", "ta", "th", "tr", "vi", "zh")
# Other spellings of the two question words, normalised (the XCOPA README's "Result").
QUESTION_WORDS = {"cause": "cause", "effect": "effect", "result": "effect"}
SPLITS = {"train": "train", "dev": "validation", "test": "test"}
SIQA_ANSWERS = ("answerA", "answerB", "answerC")


def copa_context(premise: str, question: str) -> str:
    """The first segment of every pair, as run_xcopa.py builds it for (X)COPA."""
    return f"{premise} What was the {question}?"


def siqa_context(context: str, question: str) -> str:
    """The first segment of every pair, as run_xcopa.py builds it for SIQA."""
    return f"{context} {question}"


def _unlabeled(value: Any) -> bool:
    return value is None or value == "" or (not isinstance(value, bool) and str(value).strip() == "-1")


def _label(value: Any, n_choices: int, first: int = 0) -> int | None:
    """The choice index of a label (``first``: the label of the first choice), None if invalid."""
    if isinstance(value, bool):
        return None
    try:
        index = int(str(value).strip()) - first
    except (TypeError, ValueError):
        return None
    return index if 0 <= index < n_choices else None


def _drop(counts: Counter, reason: str, where: str, value: Any) -> None:
    counts[f"dropped_{reason}"] += 1
    LOG.warning("%s: row dropped (%s: %r)", where, reason.replace("_", " "), value)


def copa_row(r: Row, where: str, counts: Counter) -> tuple[str, str, list[str], int] | None:
    """(premise, question word, choices, label) of one COPA/XCOPA row; None when the row is
    unlabeled (counted) or broken beyond repair (dropped, counted and named in the log)."""
    try:
        premise, question, label = r["premise"], r["question"], r["label"]
        choices = [r["choice1"], r["choice2"]]
    except (KeyError, TypeError) as err:
        raise InputError(
            f"{where}: not a COPA row (columns premise, choice1, choice2, question, label): missing {err}"
        ) from None
    if _unlabeled(label):
        counts["unlabeled"] += 1
        return None
    index = _label(label, 2)
    if index is None:
        _drop(counts, "bad_label", where, label)
        return None
    word = QUESTION_WORDS.get(str(question).strip().lower()) if isinstance(question, str) else None
    if word is None:
        _drop(counts, "bad_question", where, question)
        return None
    if word != question:
        counts["question_normalised"] += 1
    if not all(isinstance(t, str) and t.strip() for t in [premise, *choices]):
        _drop(counts, "empty_text", where, [premise, *choices])
        return None
    return premise, word, choices, index


def _finish(task: str, split: str, per_lang: dict[str, Counter], report: Report) -> None:
    report["load_counts"] = {lang: dict(sorted(c.items())) for lang, c in sorted(per_lang.items())}
    for lang, c in sorted(per_lang.items()):
        dropped = sum(v for k, v in c.items() if k.startswith("dropped_"))
        if dropped or c["question_normalised"]:
            LOG.warning(
                "%s %s %s: %d of %d rows dropped, %d question words normalised",
                task,
                split,
                lang,
                dropped,
                c["rows"],
                c["question_normalised"],
            )


# ----- COPA (English) --------------------------------------------------------------------------


@converter("copa")
def _copa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    name = opts.hub_name or "copa"
    hub_split = SPLITS[split]
    counts: Counter = Counter()
    for i, r in enumerate(src.rows(name, hub_split)):
        counts["rows"] += 1
        parsed = copa_row(r, f"{src.path} {name} {hub_split} row {i}", counts)
        if parsed is None:
            continue
        premise, word, choices, label = parsed
        counts["examples"] += 1
        yield {
            "id": f"copa-{split}-{r.get('idx', i)}",
            "lang": "en",
            "context": copa_context(premise, word),
            "choices": choices,
            "label": label,
        }
    _finish("copa", split, {"en": counts}, report)


# ----- SIQA (English) --------------------------------------------------------------------------


@converter("siqa")
def _siqa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    name = opts.hub_name  # allenai/social_i_qa has one (default) config
    hub_split = SPLITS[split]
    counts: Counter = Counter()
    for i, r in enumerate(src.rows(name, hub_split)):
        counts["rows"] += 1
        where = f"{src.path} {name or 'default'} {hub_split} row {i}"
        try:
            context, question, label = r["context"], r["question"], r["label"]
            choices = [r[k] for k in SIQA_ANSWERS]
        except (KeyError, TypeError) as err:
            raise InputError(
                f"{where}: not a Social IQa row (columns context, question, answerA, answerB, "
                f"answerC, label): missing {err}"
            ) from None
        if _unlabeled(label):
            counts["unlabeled"] += 1
            continue
        index = _label(label, 3, first=1)  # "1".."3" on the Hub
        if index is None:
            _drop(counts, "bad_label", where, label)
            continue
        if not all(isinstance(t, str) and t.strip() for t in [context, question, *choices]):
            _drop(counts, "empty_text", where, [context, question, *choices])
            continue
        counts["examples"] += 1
        yield {
            "id": f"siqa-{split}-{i}",
            "lang": "en",
            "context": siqa_context(context, question),
            "choices": choices,
            "label": index,
        }
    _finish("siqa", split, {"en": counts}, report)


# ----- XCOPA -----------------------------------------------------------------------------------


def majority_questions(items: dict[str, dict[Any, tuple[str, int]]]) -> dict[Any, str]:
    """For each item (idx) present with the same label in every language, the question word
    a strict majority of the languages gives it (items without one are left out)."""
    langs = list(items)
    shared = set.intersection(*(set(v) for v in items.values())) if items else set()
    majority = {}
    for idx in shared:
        if len({items[lang][idx][1] for lang in langs}) != 1:  # labels differ: not the same item
            continue
        word, n = Counter(items[lang][idx][0] for lang in langs).most_common(1)[0]
        if 2 * n > len(langs):
            majority[idx] = word
    return majority


def _language_items(
    src: Source, lang: str, hub_split: str, counts: Counter
) -> list[tuple[Any, str, str, list[str], int]]:
    """(idx, premise, question word, choices, label) of one language's rows, each item once."""
    rows = []
    seen: set[Any] = set()
    for i, r in enumerate(src.rows(lang, hub_split)):
        counts["rows"] += 1
        where = f"{src.path} {lang} {hub_split} row {i}"
        one = copa_row(r, where, counts)
        if one is None:
            continue
        idx = r.get("idx", i)
        if idx in seen:  # the item is already there: keep the first
            _drop(counts, "duplicate_idx", where, idx)
            continue
        seen.add(idx)
        rows.append((idx, *one))
    counts["examples"] = len(rows)
    return rows


@converter("xcopa")
def _xcopa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    hub_split = SPLITS[split]
    repair = opts.question_repair  # none or majority (DataOptions)
    if src.kind == "hub":
        unknown = [lang for lang in langs if lang not in XCOPA_LANGUAGES]
        if unknown:
            raise InputError(
                f"xcopa: {src.path} has no language {unknown}; XCOPA's languages are {' '.join(XCOPA_LANGUAGES)}"
            )
    # Every language is read before any row is written: the question check compares them.
    per_lang: dict[str, Counter] = {lang: Counter() for lang in langs}
    parsed = {lang: _language_items(src, lang, hub_split, per_lang[lang]) for lang in langs}
    require_languages("xcopa", split, {lang: len(parsed[lang]) for lang in langs})
    majority: dict[Any, str] = {}
    if len(langs) >= 3:
        majority = majority_questions(
            {lang: {idx: (word, label) for idx, _, word, _, label in rows} for lang, rows in parsed.items()}
        )
        report["question_check"] = {
            "languages": sorted(langs),
            "items_with_majority": len(majority),
            "repair": repair or "none",
        }
    elif repair == "majority":
        raise InputError(
            f"xcopa: options.question_repair 'majority' compares three or more languages; this split loads {langs}"
        )
    for lang in langs:
        counts, disagree = per_lang[lang], []
        for idx, premise, word, choices, label in parsed[lang]:
            if idx in majority and majority[idx] != word:
                counts["question_disagrees"] += 1
                disagree.append(idx)
                if repair == "majority":
                    counts["question_repaired"] += 1
                    word = majority[idx]
            yield {
                "id": f"xcopa-{split}-{lang}-{idx}",
                "lang": lang,
                "context": copa_context(premise, word),
                "choices": choices,
                "label": label,
            }
        if disagree:
            LOG.warning(
                "xcopa %s %s: %d items' question disagrees with the other languages' majority (%s): idx %s",
                split,
                lang,
                len(disagree),
                "replaced" if repair == "majority" else "kept, as XTREME-R's code does",
                ", ".join(map(str, disagree[:20])) + (" ..." if len(disagree) > 20 else ""),
            )
    _finish("xcopa", split, per_lang, report)
