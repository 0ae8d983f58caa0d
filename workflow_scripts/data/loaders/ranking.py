"""XTREME-R's retrieval targets in the ranking schema (queries and one candidate pool a file):
Mewsli-X entity linking and LAReQA answer-sentence retrieval on XQuAD-R.

Mewsli-X (Hub ``izhx/mewsli-x``; rows in the release's JSON schema, google-research/xtreme
``third_party/utils_mewslix.py``):
- train: config ``wikipedia_pairs`` split ``train``: ``{"contextual_mention": {"context",
  "mention"}, "entity"}`` pairs; queries in English, each with its entity, the pool the
  pairs' entities (deduplicated by ``entity_id``);
- dev / test: each language's config (``validation`` / ``test``) of WikiNews mentions,
  ``{"context", "mentions": [...]}`` or ``{"context", "mention"}``, against every entity of
  config ``candidate_entities`` (``options.candidates_split``, default ``test``).
- A query is built as the reference's ``preprocess_mention``: one sentence of context, the
  mention marked ``{ mention }`` (existing braces escaped to parentheses) and prepended:
  ``"{mention}: {left} { {mention} } {right}"``, newlines and double spaces normalised. A
  candidate is the entity's description sentences joined by spaces
  (``preprocess_entity_description``). Query ids are the mentions' ``example_id`` (the
  leaderboard's keys), candidate ids the entities' ``entity_id``.
- ``options.version`` (default 20220518_6, the released data) is recorded: that release
  was re-sampled after the XTREME-R paper, whose numbers are not comparable with it.

LAReQA (``utils_lareqa.load_data``):
- test: XQuAD-R (Hub ``google-research-datasets/xquad_r``, one config per language, split
  ``validation``; SQuAD rows with the paragraph's ``sentence_breaks`` when present). Every
  sentence of every paragraph of every language is a candidate (id ``<lang>_<paragraph
  number>_<sentence position>``, its paragraph as context); a question (id
  ``<question id>_<lang>``) has as gold the answer sentence of the same question id in every
  language (11 gold answers in the real data).
- train / dev: SQuAD v1.1 (``options.squad_path``, default ``rajpurkar/squad``) turned into
  (question, answer sentence) pairs the same way, in English.
- Without ``sentence_breaks`` (SQuAD), sentences end at ``.``, ``!``, ``?`` (or CJK ``。！？``)
  followed by white space: a simpler rule than the reference's ``sb_sed`` sentence-break
  inference; the report counts the paragraphs split this way.
- A question whose answer falls in no single sentence is dropped and counted, as the
  reference skips it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from workflow_scripts.common import LOG, InputError
from workflow_scripts.data.loaders.registry import Report, Row, converter, require_languages
from workflow_scripts.data.loaders.source import Source

MEWSLIX_VERSION = "20220518_6"
_BRACES = re.compile(r"\{(.*?)\}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


class SpanMismatch(InputError):
    """A mention span whose text is not the context's text at its offsets."""


def _normalise(text: str) -> str:
    return " ".join(text.splitlines()).replace("  ", " ").strip()


def _query(row: Row) -> Row:
    return {"side": "query", "context": ""} | row


def _candidate(row: Row) -> Row:
    return {"side": "candidate", "gold": []} | row


# ----- Mewsli-X ------------------------------------------------------------------------------


def sentence_of(context: dict[str, Any], start: int, end: int) -> tuple[int, int] | None:
    """The (start, end) of the context sentence holding the span [start, end), else None."""
    for span in context.get("sentence_spans") or [{"start": 0, "end": len(context["text"])}]:
        if span["start"] <= start and end <= span["end"]:
            return span["start"], span["end"]
    return None


def mention_query(context: dict[str, Any], mention: dict[str, Any]) -> str | None:
    """The reference's query string of one mention (None: the mention crosses sentences).

    The span's text must be the context's text at its offsets (code points), as the
    release's schema checks on load; the released ``wikinews_mentions_no_text`` files carry
    an empty text that Google's ``restore_text.py`` fills from WikiNews first."""
    span = mention["mention_span"]
    if not context["text"]:
        raise InputError(f"mention {mention.get('example_id')}: its context has no text (the release's "
                         f"_no_text files must be restored with mewsli_x/restore_text.py first)")
    if context["text"][span["start"]:span["end"]] != span["text"]:
        raise SpanMismatch(f"mention {mention.get('example_id')}: text[{span['start']}:{span['end']}] is "
                           f"{context['text'][span['start']:span['end']]!r}, its span says {span['text']!r}")
    found = sentence_of(context, span["start"], span["end"])
    if found is None:
        return None
    text = context["text"][found[0]:found[1]]
    start, end = span["start"] - found[0], span["end"] - found[0]
    left, right = _BRACES.sub(r"(\1)", text[:start]), _BRACES.sub(r"(\1)", text[end:])
    return _normalise(f"{span['text']}: {left} {{ {span['text']} }} {right}")


def entity_text(entity: dict[str, Any]) -> str:
    description = entity["description"]
    spans = entity.get("sentence_spans") or [{"start": 0, "end": len(description)}]
    return _normalise(" ".join(description[s["start"]:s["end"]] for s in spans))


def _entity_row(entity: dict[str, Any]) -> Row:
    return _candidate({"id": entity["entity_id"], "lang": entity.get("description_language") or "und",
                       "text": entity_text(entity)})


@converter("mewslix")
def _mewslix(src: Source, split: str, langs: list[str], opts: dict[str, Any], report: Report) -> Iterable[Row]:
    counts: Counter = Counter()
    report["version"] = opts.get("version", MEWSLIX_VERSION)
    if split == "train":
        entities: dict[str, Row] = {}
        for i, pair in enumerate(src.rows("wikipedia_pairs", "train")):
            where = f"mewslix wikipedia_pairs train row {i}"
            try:
                cm, entity = pair["contextual_mention"], pair["entity"]
                text = mention_query(cm["context"], cm["mention"])
            except (KeyError, TypeError) as err:
                raise InputError(f"{where}: lacks field {err}") from None
            except SpanMismatch as err:
                counts["span_text_mismatch"] += 1
                LOG.warning("%s: %s; dropped", where, err)
                continue
            if text is None:
                counts["mention_across_sentences"] += 1
                LOG.warning("%s: mention %s crosses sentences; dropped", where, cm["mention"].get("example_id"))
                continue
            entities.setdefault(entity["entity_id"], _entity_row(entity))
            counts["queries"] += 1
            yield _query({"id": cm["mention"]["example_id"], "lang": "en", "text": text,
                          "gold": [cm["mention"]["entity_id"]]})
        yield from entities.values()
        report["load_counts"] = dict(counts)
        return
    hub_split = {"dev": "validation", "test": "test"}[split]
    pool = {}
    for e in src.rows("candidate_entities", opts.get("candidates_split", "test")):
        pool.setdefault(e["entity_id"], _entity_row(e))
    per_lang = {lang: 0 for lang in langs}
    for lang in langs:
        for i, row in enumerate(src.rows(lang, hub_split)):
            mentions = row.get("mentions") or ([row["mention"]] if "mention" in row else [])
            for mention in mentions:
                if mention["entity_id"] not in pool:
                    counts["gold_not_in_pool"] += 1
                    LOG.warning("mewslix %s %s row %d: entity %s of mention %s is not a candidate; dropped",
                                lang, hub_split, i, mention["entity_id"], mention["example_id"])
                    continue
                try:
                    text = mention_query(row["context"], mention)
                except SpanMismatch as err:
                    counts["span_text_mismatch"] += 1
                    LOG.warning("mewslix %s %s row %d: %s; dropped", lang, hub_split, i, err)
                    continue
                if text is None:
                    counts["mention_across_sentences"] += 1
                    continue
                per_lang[lang] += 1
                yield _query({"id": mention["example_id"], "lang": lang, "text": text, "gold": [mention["entity_id"]]})
    require_languages("mewslix", split, per_lang)
    yield from pool.values()
    report["load_counts"] = dict(counts) | {"candidates": len(pool), "queries": per_lang}


# ----- LAReQA ------------------------------------------------------------------------------


def sentence_breaks(context: str) -> list[tuple[int, int]]:
    """Sentence (start, end) offsets: after ., !, ? and white space, or after 。！？."""
    breaks, start = [], 0
    for m in _SENTENCE_END.finditer(context):
        if m.start() > start:
            breaks.append((start, m.start()))
        start = m.end()
    if start < len(context):
        breaks.append((start, len(context)))
    return breaks


def _paragraph_rows(rows: Iterable[dict[str, Any]], lang: str, counts: Counter
                    ) -> Iterator[tuple[str, list[str], str, list[tuple[str, str | None]]]]:
    """Per paragraph (in order of first appearance): its id, sentences, text and its
    questions as (question id, question, index of the answer sentence or None)."""
    paragraphs: dict[str, dict[str, Any]] = {}
    for r in rows:
        p = paragraphs.setdefault(r["context"], {"breaks": r.get("sentence_breaks"), "questions": []})
        p["questions"].append(r)
    for number, (context, p) in enumerate(paragraphs.items(), start=1):
        breaks = [tuple(b) for b in p["breaks"]] if p["breaks"] else None
        if breaks is None:
            counts["paragraphs_split_by_rule"] += 1
            breaks = sentence_breaks(context)
        questions = []
        for q in p["questions"]:
            starts = list(q["answers"]["answer_start"])
            start = starts[0] if starts else -1
            position = next((k for k, (s, e) in enumerate(breaks) if s <= start < e), None)
            questions.append((q["id"], q["question"], position))
        yield f"{lang}_{number}", [context[s:e] for s, e in breaks], context, questions


def lareqa_rows(by_lang: dict[str, Iterable[dict[str, Any]]], counts: Counter) -> Iterator[Row]:
    """Queries (each language's questions, gold: the answer sentences of the same question
    id in every language), then the pooled candidates."""
    candidates: list[Row] = []
    answers: dict[str, list[str]] = {}
    questions: list[tuple[str, str, str]] = []
    for lang, rows in by_lang.items():
        for pid, sentences, context, qs in _paragraph_rows(rows, lang, counts):
            for k, sentence in enumerate(sentences):
                candidates.append(_candidate({"id": f"{pid}_{k}", "lang": lang, "text": sentence,
                                              "context": context}))
            for qid, question, position in qs:
                if position is None:
                    counts["answer_in_no_sentence"] += 1
                    LOG.warning("lareqa %s question %s: its answer lies in no single sentence; dropped", lang, qid)
                    continue
                answers.setdefault(qid, []).append(f"{pid}_{position}")
                questions.append((qid, lang, question))
    for qid, lang, question in questions:
        yield _query({"id": f"{qid}_{lang}", "lang": lang, "text": question, "gold": sorted(set(answers[qid]))})
    yield from candidates


@converter("lareqa")
def _lareqa(src: Source, split: str, langs: list[str], opts: dict[str, Any], report: Report) -> Iterable[Row]:
    counts: Counter = Counter()
    if split in ("train", "dev"):
        squad = Source(src.kind, opts.get("squad_path", "rajpurkar/squad"), opts.get("squad_revision", "main"),
                       src.local_root)
        hub_split = {"train": "train", "dev": "validation"}[split]
        yield from lareqa_rows({"en": squad.rows(opts.get("squad_name", "plain_text"), hub_split)}, counts)
    else:
        by_lang = {lang: list(src.rows(lang, "validation")) for lang in langs}
        require_languages("lareqa", split, {lang: len(rows) for lang, rows in by_lang.items()})
        yield from lareqa_rows(by_lang, counts)
    report["load_counts"] = dict(counts)
