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
- test: XQuAD-R as released, github.com/google-research-datasets/lareqa ``xquad-r/<lang>.json``
  (SQuAD JSON, each paragraph with its ``sentence_breaks``), read from ``options.xquad_r_path``:
  the URL of that directory (default ``XQUAD_R_URL``, pinned to commit ``XQUAD_R_COMMIT``;
  each file downloaded once into the shared cache) or a local directory of the files. Each
  paragraph's sentences are ``context[start:end]`` of its breaks; every sentence of every
  paragraph with a question is a candidate (id ``<lang>_<paragraph number>_<sentence
  position>``, paragraphs numbered across the file from 1; its paragraph as context). A
  question (id ``<question id>_<lang>``) has as gold every candidate whose paragraph holds
  the same question id, in any language, and whose text is the sentence holding that
  language's answer start (11 gold answers each in the release). The full release gives
  13,090 questions and 13,014 candidates (docs/data_sources.md).
- The Hub's ``google-research-datasets/xquad_r`` is refused: its builder keeps neither
  ``sentence_breaks`` nor the contexts' leading white space (``answer_start`` unshifted), and
  no rule re-splits Hindi (``।``) or Thai (no sentence punctuation) as the release does.
- train / dev: SQuAD v1.1 (the task's ``hub.path``, ``rajpurkar/squad``) turned into
  (question, answer sentence) pairs the same way, in English. SQuAD has no sentence breaks:
  sentences end at ``.``, ``!``, ``?`` (or CJK ``。！？``) followed by white space, a simpler
  rule than the reference's ``sb_sed`` inference; the report counts the paragraphs split so.
- Dropped and counted, as the reference skips them: a question whose answer start lies in
  no sentence (and then a paragraph left without questions, whose sentences are no
  candidates). Counted and kept as the reference keeps them: a paragraph whose breaks do not
  cut its ``sentences`` field out of its context (one Turkish paragraph of the release), an
  answer sentence whose text occurs twice in its paragraph (both are gold).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import Report, Row, converter, require_languages
from workflow_scripts.data.loaders.source import Source, fetch_archive, file_sha256
from workflow_scripts.spec.basics import InputError, is_url
from workflow_scripts.spec.data_settings import DataOptions

MEWSLIX_VERSION = "20220518_6"
# XQuAD-R as released (google-research-datasets/lareqa, CC BY-SA 4.0), pinned to a commit.
XQUAD_R_COMMIT = "9bc8c7fb6dd8d01d72a05a93c2cb96882b0d299c"
XQUAD_R_URL = f"https://raw.githubusercontent.com/google-research-datasets/lareqa/{XQUAD_R_COMMIT}/xquad-r"
HUB_XQUAD_R = "google-research-datasets/xquad_r"
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
        raise InputError(
            f"mention {mention.get('example_id')}: its context has no text (the release's "
            f"_no_text files must be restored with mewsli_x/restore_text.py first)"
        )
    if context["text"][span["start"] : span["end"]] != span["text"]:
        raise SpanMismatch(
            f"mention {mention.get('example_id')}: text[{span['start']}:{span['end']}] is "
            f"{context['text'][span['start'] : span['end']]!r}, its span says {span['text']!r}"
        )
    found = sentence_of(context, span["start"], span["end"])
    if found is None:
        return None
    text = context["text"][found[0] : found[1]]
    start, end = span["start"] - found[0], span["end"] - found[0]
    left, right = _BRACES.sub(r"(\1)", text[:start]), _BRACES.sub(r"(\1)", text[end:])
    return _normalise(f"{span['text']}: {left} {{ {span['text']} }} {right}")


def entity_text(entity: dict[str, Any]) -> str:
    description = entity["description"]
    spans = entity.get("sentence_spans") or [{"start": 0, "end": len(description)}]
    return _normalise(" ".join(description[s["start"] : s["end"]] for s in spans))


def _entity_row(entity: dict[str, Any]) -> Row:
    return _candidate(
        {"id": entity["entity_id"], "lang": entity.get("description_language") or "und", "text": entity_text(entity)}
    )


def _mewslix_train(src: Source, report: Report) -> Iterator[Row]:
    """English queries from the Wikipedia pairs, and their entities as the candidates."""
    counts: Counter = Counter()
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
        yield _query(
            {"id": cm["mention"]["example_id"], "lang": "en", "text": text, "gold": [cm["mention"]["entity_id"]]}
        )
    yield from entities.values()
    report["load_counts"] = dict(counts)


@converter("mewslix")
def _mewslix(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    report["version"] = opts.version or MEWSLIX_VERSION
    if split == "train":
        yield from _mewslix_train(src, report)
        return
    counts: Counter = Counter()
    hub_split = {"dev": "validation", "test": "test"}[split]
    pool = {}
    for e in src.rows("candidate_entities", opts.candidates_split or "test"):
        pool.setdefault(e["entity_id"], _entity_row(e))
    per_lang = dict.fromkeys(langs, 0)
    for lang in langs:
        for i, row in enumerate(src.rows(lang, hub_split)):
            mentions = row.get("mentions") or ([row["mention"]] if "mention" in row else [])
            for mention in mentions:
                if mention["entity_id"] not in pool:
                    counts["gold_not_in_pool"] += 1
                    LOG.warning(
                        "mewslix %s %s row %d: entity %s of mention %s is not a candidate; dropped",
                        lang,
                        hub_split,
                        i,
                        mention["entity_id"],
                        mention["example_id"],
                    )
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


@dataclass
class Paragraph:
    """One paragraph in one language: ``pid`` (``<lang>_<paragraph number>``), its text, its
    sentences' (start, end) offsets and its questions as (question id, question, answer start)."""

    pid: str
    lang: str
    context: str
    breaks: list[tuple[int, int]]
    questions: list[tuple[str, str, int]] = field(default_factory=list)


def sentence_breaks(context: str) -> list[tuple[int, int]]:
    """Sentence (start, end) offsets by rule, for SQuAD: after ., !, ? and white space, or
    after 。！？ (Hindi's । and Thai, which has no sentence punctuation, are not split)."""
    breaks, start = [], 0
    for m in _SENTENCE_END.finditer(context):
        if m.start() > start:
            breaks.append((start, m.start()))
        start = m.end()
    if start < len(context):
        breaks.append((start, len(context)))
    return breaks


def hub_paragraphs(rows: Iterable[dict[str, Any]], lang: str, counts: Counter) -> Iterator[Paragraph]:
    """Hub-schema SQuAD rows (one per question) grouped by context, in order of first
    appearance; sentences from a row's ``sentence_breaks`` if it has them, else by rule."""
    paragraphs: dict[str, Paragraph] = {}
    for i, r in enumerate(rows):
        try:
            context, starts = r["context"], list(r["answers"]["answer_start"])
            question = (r["id"], r["question"], int(starts[0]) if starts else -1)
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"lareqa {lang} row {i}: not a SQuAD row ({type(err).__name__}: {err})") from None
        if context not in paragraphs:
            breaks = [(int(s), int(e)) for s, e in r["sentence_breaks"]] if r.get("sentence_breaks") else None
            if breaks is None:
                counts["paragraphs_split_by_rule"] += 1
                breaks = sentence_breaks(context)
            paragraphs[context] = Paragraph(f"{lang}_{len(paragraphs) + 1}", lang, context, breaks)
        paragraphs[context].questions.append(question)
    yield from paragraphs.values()


def _release_breaks(paragraph: dict[str, Any], where: str) -> list[tuple[int, int]]:
    """A release paragraph's ``sentence_breaks``, checked to lie inside its context."""
    if not paragraph.get("sentence_breaks"):
        raise InputError(f"{where}: no sentence_breaks (not an XQuAD-R file: the candidates are its sentences)")
    breaks = []
    for k, pair in enumerate(paragraph["sentence_breaks"]):
        try:
            start, end = (int(x) for x in pair)
        except (TypeError, ValueError):
            raise InputError(f"{where}: sentence_breaks[{k}] is {pair!r}, not a [start, end] pair") from None
        if not 0 <= start <= end <= len(paragraph["context"]):
            raise InputError(
                f"{where}: sentence_breaks[{k}] {[start, end]} lies outside its context of "
                f"{len(paragraph['context'])} characters"
            )
        breaks.append((start, end))
    return breaks


def release_paragraphs(data: dict[str, Any], lang: str, name: str, counts: Counter) -> Iterator[Paragraph]:
    """The paragraphs of one XQuAD-R file (SQuAD JSON with each paragraph's
    ``sentence_breaks``), numbered across the file from 1 as the reference numbers them."""
    number = 0
    try:
        articles = data["data"]
    except (KeyError, TypeError):
        raise InputError(f"{name}: no 'data' list of articles (not a SQuAD-format file)") from None
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            number += 1
            where = f"{name} data[{a}].paragraphs[{p}]"
            try:
                context, qas = paragraph["context"], paragraph["qas"]
            except KeyError as err:
                raise InputError(f"{where}: lacks key {err}") from None
            breaks = _release_breaks(paragraph, where)
            if "sentences" in paragraph and paragraph["sentences"] != [context[s:e] for s, e in breaks]:
                # The reference reads the breaks; so do we. Counted: such candidates are cut off-sentence.
                counts["paragraphs_breaks_differ_from_sentences"] += 1
                LOG.warning(
                    "%s: its sentence_breaks do not cut its 'sentences' out of its context; the breaks "
                    "are used, as the reference uses them",
                    where,
                )
            found = Paragraph(f"{lang}_{number}", lang, context, breaks)
            found.questions = [_release_question(qa, f"{where}.qas[{q}]") for q, qa in enumerate(qas)]
            yield found


def _release_question(qa: dict[str, Any], where: str) -> tuple[str, str, int]:
    """(id, question, answer start) of one XQuAD-R question, which has exactly one answer
    (the reference asserts it)."""
    try:
        qid, question, answers = qa["id"], qa["question"], list(qa["answers"])
        starts = [int(a["answer_start"]) for a in answers]
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"{where}: not a SQuAD question ({type(err).__name__}: {err})") from None
    if len(starts) != 1:
        raise InputError(f"{where} (question {qid}): {len(starts)} answers; an XQuAD-R question has exactly one")
    return qid, question, starts[0]


def lareqa_pool(paragraphs: Iterable[Paragraph], counts: Counter) -> tuple[list[Row], list[Row]]:
    """(queries, candidates) as ``utils_lareqa.load_data`` forms them. A question's answer
    sentence is the sentence holding its answer start; its gold is every candidate, in every
    language, whose paragraph holds the same question id and whose text is that sentence's.
    Every sentence of a paragraph with a question kept is a candidate; a question whose
    answer lies in no (non-empty) sentence is dropped and counted."""
    candidates: list[Row] = []
    golds: dict[str, set[str]] = {}
    questions: dict[str, Row] = {}
    for para in paragraphs:
        sentences = [para.context[s:e] for s, e in para.breaks]
        kept = 0
        for qid, question, start in para.questions:
            k = next((k for k, (s, e) in enumerate(para.breaks) if s <= start < e), None)
            if k is None or not sentences[k]:
                counts["answer_in_no_sentence"] += 1
                LOG.warning("lareqa %s question %s: its answer lies in no single sentence; dropped", para.lang, qid)
                continue
            uid = f"{qid}_{para.lang}"
            if uid in questions:
                raise InputError(f"lareqa {para.lang}: question id {qid} appears twice")
            same = [f"{para.pid}_{j}" for j, text in enumerate(sentences) if text == sentences[k]]
            if len(same) > 1:
                counts["answer_sentence_repeated"] += 1
            golds.setdefault(qid, set()).update(same)
            questions[uid] = _query({"id": uid, "lang": para.lang, "text": question, "xling": qid})
            kept += 1
        if not kept:
            counts["paragraphs_without_questions"] += 1
            continue
        candidates += [
            _candidate({"id": f"{para.pid}_{k}", "lang": para.lang, "text": text, "context": para.context})
            for k, text in enumerate(sentences)
        ]
    queries = [
        {k: v for k, v in q.items() if k != "xling"} | {"gold": sorted(golds[q["xling"]])} for q in questions.values()
    ]
    return queries, candidates


def lareqa_rows(by_lang: dict[str, Iterable[dict[str, Any]]], counts: Counter) -> Iterator[Row]:
    """Queries, then the pooled candidates, of Hub-schema SQuAD rows per language."""
    queries, candidates = lareqa_pool(
        (p for lang, rows in by_lang.items() for p in hub_paragraphs(rows, lang, counts)), counts
    )
    yield from queries
    yield from candidates


def xquad_r_file(location: str, lang: str) -> Path:
    """A language's XQuAD-R file ``<lang>.json``: from the release's URL (downloaded once
    into the shared cache) or a local directory holding the release's ``xquad-r/`` files."""
    if is_url(location):
        base = location.rstrip("/")
        tag = hashlib.sha256(base.encode("utf-8")).hexdigest()[:12]
        try:
            return fetch_archive(f"{base}/{lang}.json", name=f"xquad-r-{tag}-{lang}.json")
        except OSError as err:  # urllib's errors (HTTP 404, no network) are OSErrors
            raise InputError(
                f"lareqa: cannot download {base}/{lang}.json ({err}); options.xquad_r_path names the "
                f"URL or directory of the release's xquad-r/ files"
            ) from None
    file = fetch_archive(location) / f"{lang}.json"
    if not file.is_file():
        raise InputError(
            f"lareqa: {file} does not exist (options.xquad_r_path names the directory of XQuAD-R's <lang>.json files)"
        )
    return file


def read_release(file: Path, name: str) -> dict[str, Any]:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"corrupt XQuAD-R file {name}: {err}") from err


def _refuse_hub_xquad_r(src: Source) -> None:
    if src.path == HUB_XQUAD_R:
        raise InputError(
            f"tasks.lareqa.hub.path {HUB_XQUAD_R}: the Hub's XQuAD-R has no sentence_breaks (and strips each "
            f"context without shifting answer_start), so LAReQA's candidate sentences and golds cannot be rebuilt "
            f"from it. Read the release github.com/google-research-datasets/lareqa instead: set hub.path to the "
            f"SQuAD v1.1 the training pairs come from (rajpurkar/squad) and options.xquad_r_path to the release's "
            f"xquad-r/ URL or directory (default {XQUAD_R_URL})"
        )


def release_pool(location: str, langs: list[str], counts: Counter, report: Report) -> tuple[list[Row], list[Row]]:
    """(queries, candidates) of XQuAD-R's release files in ``langs``; the files' sha256 go
    into the report's ``release``."""
    files = {lang: xquad_r_file(location, lang) for lang in langs}
    report["release"] = {
        "name": "XQuAD-R",
        "location": location,
        "sha256": {lang: file_sha256(f) for lang, f in files.items()},
    }
    names = {lang: f"{location.rstrip('/')}/{lang}.json" if is_url(location) else str(f) for lang, f in files.items()}
    return lareqa_pool(
        (
            p
            for lang, f in files.items()
            for p in release_paragraphs(read_release(f, names[lang]), lang, names[lang], counts)
        ),
        counts,
    )


@converter("lareqa")
def _lareqa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    _refuse_hub_xquad_r(src)
    counts: Counter = Counter()
    if split in ("train", "dev"):
        name, hub_split = opts.squad_name or "plain_text", {"train": "train", "dev": "validation"}[split]
        queries, candidates = lareqa_pool(hub_paragraphs(src.rows(name, hub_split), "en", counts), counts)
    else:
        queries, candidates = release_pool(opts.xquad_r_path or XQUAD_R_URL, langs, counts, report)
        require_languages("lareqa", split, {lang: sum(q["lang"] == lang for q in queries) for lang in langs})
    report["load_counts"] = dict(counts) | {
        "queries": dict(Counter(q["lang"] for q in queries)),
        "candidates": dict(Counter(c["lang"] for c in candidates)),
    }
    yield from queries
    yield from candidates
