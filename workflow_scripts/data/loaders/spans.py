"""Span-extraction tasks (SQuAD v1.1/v2.0, XQuAD, MLQA, TyDiQA-GoldP) with answer repair.

The Hub's conversions of XQuAD, MLQA and TyDiQA-GoldP strip leading whitespace from each
context (and each answer text) without shifting ``answer_start``: in the real XQuAD 169
questions in 8 languages point a character or two past their answer. One such row must not
kill a split, so every answer is checked and, when its offset is off, re-located:

1. the offset is right: kept as it is;
2. the answer text sits up to ``MAX_STRIPPED_PREFIX`` characters *before* the given start
   (a stripped prefix shifts every offset of the paragraph left): the nearest such
   occurrence;
3. otherwise the occurrence nearest the given start (ties: the earlier one);
4. the text appears nowhere in the context: unresolvable.

Training data keeps only locatable answers and drops a question left with none (its span
cannot be taught). Evaluation data keeps every question and every answer text, because
the scorers compare texts only; an unresolvable answer's start is ``-1``. Counts per
language go into the load report (Parquet metadata and log), and every dropped or
unresolvable question is named in the log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import (
    XTREME_SPLITS,
    Report,
    Row,
    converter,
    per_language,
    require_languages,
)
from workflow_scripts.data.loaders.source import Source, extra_source
from workflow_scripts.data.loaders.xtreme import record_sources
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions

# Whitespace prefixes stripped from real XQuAD contexts are 1-2 characters; 16 leaves room
# for other releases while staying far below the distance between two mentions of a phrase.
MAX_STRIPPED_PREFIX = 16
UNRESOLVED = -1


def locate_answer(context: str, text: str, start: int) -> tuple[int, str]:
    """(start, how): how is "exact", "prefix", "nearest" or "unresolvable" (start -1)."""
    if 0 <= start <= len(context) and context.startswith(text, start):
        return start, "exact"
    occurrences = []
    k = context.find(text)
    while k != -1:
        occurrences.append(k)
        k = context.find(text, k + 1)
    if not occurrences:
        return UNRESOLVED, "unresolvable"
    before = [o for o in occurrences if start - MAX_STRIPPED_PREFIX <= o < start]
    if before:
        return max(before), "prefix"
    return min(occurrences, key=lambda o: (abs(o - start), o)), "nearest"


@dataclass
class SpanRepair:
    """Checks and repairs the answers of one split, counting per language."""

    task: str
    split: str
    counts: dict[str, Counter] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)

    @property
    def training(self) -> bool:
        return self.split == "train"

    def row(self, uid: str, lang: str, r: Row, where: str) -> Row | None:
        """The canonical row of one Hub row, or None when training data drops it."""
        c = self.counts.setdefault(lang, Counter())
        c["questions"] += 1
        try:
            context, question = r["context"], r["question"]
            texts = list(r["answers"]["text"])
            starts = [int(s) for s in r["answers"]["answer_start"]]
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{where}: question {uid} is not a span row ({type(err).__name__}: {err})") from None
        if len(texts) != len(starts):
            raise InputError(f"{where}: question {uid} has {len(texts)} answer texts but {len(starts)} starts")
        kept_texts, kept_starts, hows = [], [], []
        for text, start in zip(texts, starts):
            located, how = locate_answer(context, text, start)
            c["answers"] += 1
            c[f"answers_{how}"] += 1
            hows.append(how)
            if how == "unresolvable" and self.training:
                continue
            kept_texts.append(text)
            kept_starts.append(located)
        if any(h in ("prefix", "nearest") for h in hows):
            c["questions_relocated"] += 1
        if "unresolvable" in hows:
            c["questions_unresolvable"] += 1
            self.unresolved.append(uid)
            if self.training and not kept_texts:
                c["questions_dropped"] += 1
                return None
        return {
            "id": uid,
            "lang": lang,
            "context": context,
            "question": question.strip(),
            "answer_texts": kept_texts,
            "answer_starts": kept_starts,
        }

    def finish(self, report: Report) -> None:
        """Write the counts into the load report and name what could not be located."""
        report["answer_repair"] = {lang: dict(sorted(c.items())) for lang, c in sorted(self.counts.items())}
        for lang, c in sorted(self.counts.items()):
            moved = c["answers_prefix"] + c["answers_nearest"]
            if moved or c["answers_unresolvable"]:
                LOG.warning(
                    "%s %s %s: %d of %d questions had an answer re-located (%d after a stripped prefix, "
                    "%d nearest the given start); %d answers appear nowhere in their context%s",
                    self.task,
                    self.split,
                    lang,
                    c["questions_relocated"],
                    c["questions"],
                    c["answers_prefix"],
                    c["answers_nearest"],
                    c["answers_unresolvable"],
                    f"; {c['questions_dropped']} questions dropped from training"
                    if self.training
                    else " (kept for evaluation: only answer texts are scored)",
                )
        if self.unresolved:
            LOG.warning(
                "%s %s: questions with an answer not found in their context: %s",
                self.task,
                self.split,
                ", ".join(self.unresolved),
            )


@converter("squad", "squad_v2")
def _squad(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    name = opts.hub_name or ("squad_v2" if "v2" in src.path else "plain_text")
    hub_split = {"train": "train", "dev": "validation"}[split]
    repair = SpanRepair("squad", split)
    for i, r in enumerate(src.rows(name, hub_split)):
        row = repair.row(r["id"], "en", r, f"{src.path} {name} {hub_split} row {i}")
        if row is not None:
            yield row
    repair.finish(report)


# The languages of google/xtreme's XQuAD.<lang> configs (XTREME's 11).
XQUAD_XTREME_LANGUAGES = frozenset("ar de el en es hi ru th tr vi zh".split())


@converter("xquad")
def _xquad(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """XTREME's 11 languages from google/xtreme's XQuAD configs; the others (XTREME-R's ro)
    from ``options.xquad_path`` (default ``google/xquad``, revision ``options.xquad_revision``),
    configs ``xquad.<lang>``, split ``validation``, the same columns."""
    xquad = extra_source(src, opts, "xquad", "xquad")
    sources = {
        lang: (src, f"XQuAD.{lang}") if lang in XQUAD_XTREME_LANGUAGES else (xquad, f"xquad.{lang}") for lang in langs
    }
    repair = SpanRepair("xquad", split)
    for lang in langs:
        source, config = sources[lang]
        n = 0
        for i, r in enumerate(source.rows(config, "validation")):
            n += 1
            row = repair.row(f"{r['id']}-{lang}", lang, r, f"{source.path} {config} validation row {i}")
            if row is not None:
                yield row
        require_languages("xquad", split, {lang: n})
    repair.finish(report)
    record_sources(report, sources, [xquad])


@converter("mlqa")
def _mlqa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    # Same-language pairs: context and question in one language.
    repair = SpanRepair("mlqa", split)
    for lang, i, r in per_language("mlqa", src, lambda l: f"MLQA.{l}.{l}", split, XTREME_SPLITS[split], langs):
        row = repair.row(f"{r['id']}-{lang}", lang, r, f"{src.path} MLQA.{lang}.{lang} {XTREME_SPLITS[split]} row {i}")
        if row is not None:
            yield row
    repair.finish(report)


TYDIQA_LANGUAGES = {
    "arabic": "ar",
    "bengali": "bn",
    "english": "en",
    "finnish": "fi",
    "indonesian": "id",
    "korean": "ko",
    "russian": "ru",
    "swahili": "sw",
    "telugu": "te",
}


@converter("tydiqa")
def _tydiqa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """TyDiQA-GoldP: one mixed-language split; the id's prefix names the language. Train keeps
    the languages the grid asks for (English unless an in-language setting needs others,
    docs/protocol.md §3, §7); the GoldP dev set is the test set."""
    hub_split = {"train": "train", "test": "validation"}[split]
    name = opts.hub_name or "tydiqa"
    counts = dict.fromkeys(langs, 0)
    repair = SpanRepair("tydiqa", split)
    for i, r in enumerate(src.rows(name, hub_split)):
        prefix = r["id"].split("-", 1)[0]
        if prefix not in TYDIQA_LANGUAGES:
            raise InputError(f"tydiqa {split}: id {r['id']!r} (row {i}) has no known language prefix")
        lang = TYDIQA_LANGUAGES[prefix]
        if lang in counts:
            counts[lang] += 1
            row = repair.row(r["id"], lang, r, f"{src.path} {name} {hub_split} row {i}")
            if row is not None:
                yield row
    require_languages("tydiqa", split, counts)
    repair.finish(report)
