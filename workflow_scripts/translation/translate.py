"""Machine translation of task data with MarianMT (docs/protocol.md §4, §7).

English training and dev data is translated into other languages (translated intermediate
configs, translate-train); a target's test data is translated into English (translate-test:
rows keep their language label, since they still stand for that language's test set).

The columns a format declares text (``TaskFormat.translated_columns``, spec/formats/) are
translated; every other column carries over unchanged: labels, and for image tasks the image
names, so translated rows point at the same images and feature bank (VQA's answers stay
English: they are the label vocabulary). ``translators.MarianTranslator``
deduplicates strings (SQuAD contexts repeat across questions), splits long texts into
sentences that fit the model, caches, and runs the configured engine (CTranslate2 or
transformers).

Span tasks re-align the answer in the translated context:
1. the answer is wrapped in markers in the English context, the context translated, and
   the answer read back between the markers;
2. if a marker is lost or broken, the answer is translated alone and fuzzy-matched in the
   plain translated context; the closest substring is kept when its edit distance is at
   most min(max_fuzzy_distance, len(answer) / 2);
3. otherwise the example is dropped. A statistics file counts each outcome.
Every kept example's answer_start points at its answer text exactly.

Quality: BLEU and chrF (sacrebleu) of XNLI's dev/test sentences translated, against XNLI's
references: English into the language against its human translations, or (translate-test)
the language into English against the English originals.

CLI: ``python -m workflow_scripts.translation.translate data --task T --lang L --model DIR [--converted DIR] --input FILE
--settings JSON --cache DB --output FILE --stats FILE`` and
``python -m workflow_scripts.translation.translate quality --lang L --model DIR --data SPLIT=FILE ...
--settings JSON --cache DB --output FILE``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.common import (
    LOG,
    atomic_path,
    configure_torch,
    device,
    setup_logging,
    write_json,
)
from workflow_scripts.data.prepare import read_table, to_table
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.formats import names as format_names
from workflow_scripts.spec.tasks import SPAN, get_task
from workflow_scripts.spec.translation_settings import TranslationSettings
from workflow_scripts.translation.translators import MarianTranslator

OPEN, CLOSE = "<b>", "</b>"
Translator = Callable[[Sequence[str]], list[str]]


def translation_quality(translate: Translator, sources: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU and chrF (sacrebleu defaults) of the translations against human references."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(sources) != len(references) or not sources:
        raise InputError(f"quality needs as many references as sources, got {len(sources)} and {len(references)}")
    hypotheses = translate(sources)
    bleu, chrf = BLEU(), CHRF()
    out = {
        "bleu": bleu.corpus_score(hypotheses, [list(references)]).score,
        "chrf": chrf.corpus_score(hypotheses, [list(references)]).score,
    }
    out.update(
        {
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
            "sentences": len(sources),
        }
    )
    return out


# ----- span re-alignment --------------------------------------------------------------------


def mark_answer(context: str, start: int, text: str) -> str:
    return f"{context[:start]}{OPEN}{text}{CLOSE}{context[start + len(text) :]}"


# MT re-cases and re-spaces tags ("<B>", "< b >", "</ b>"): such markers still count.
_OPEN_RE = re.compile(r"<\s*b\s*>", re.IGNORECASE)
_CLOSE_RE = re.compile(r"<\s*/\s*b\s*>", re.IGNORECASE)


def read_marked(translated: str) -> tuple[str, int, str] | None:
    """(clean context, answer start, answer) when exactly one well-formed marker pair survived."""
    opens, closes = list(_OPEN_RE.finditer(translated)), list(_CLOSE_RE.finditer(translated))
    if len(opens) != 1 or len(closes) != 1 or closes[0].start() < opens[0].end():
        return None
    before = translated[: opens[0].start()]
    answer = translated[opens[0].end() : closes[0].start()].strip()
    after = translated[closes[0].end() :]
    if not answer:
        return None
    before = before.rstrip() + " " if before.strip() else ""
    after = after.lstrip()
    sep = " " if after and after[0].isalnum() else ""
    context = before + answer + sep + after
    return context, len(before), answer


def fuzzy_find(answer: str, context: str, max_distance: int) -> tuple[int, str] | None:
    """The word-aligned substring of ``context`` closest to ``answer`` by edit distance,
    if its distance is at most min(max_distance, len(answer) / 2)."""
    from rapidfuzz.distance import Levenshtein

    answer = answer.strip()
    if not answer:
        return None
    limit = min(max_distance, len(answer) / 2)
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", context)]
    n = len(answer.split())
    best: tuple[float, int, str] | None = None
    for i in range(len(words)):
        for j in range(i, min(len(words), i + n + 2)):
            cand = context[words[i][0] : words[j][1]]
            for trimmed in {cand, cand.strip(".,;:!?\"'()[]«»„“”")}:
                if not trimmed:
                    continue
                dist = Levenshtein.distance(answer, trimmed, score_cutoff=int(limit))
                if dist <= limit and (best is None or dist < best[0]):
                    best = (dist, context.index(trimmed, words[i][0]), trimmed)
    return None if best is None else (best[1], best[2])


def translate_spans(
    rows: list[dict[str, Any]], translate: Translator, max_distance: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    stats: dict[str, Any] = {
        "examples": len(rows),
        "recovered_by_markers": 0,
        "recovered_by_fuzzy_match": 0,
        "dropped_no_answer_in_source": 0,
        "dropped_unaligned": 0,
    }
    usable = []
    for r in rows:
        # Evaluation splits keep answers their loader could not locate, with start -1.
        if (
            not r["answer_texts"]
            or r["answer_starts"][0] < 0
            or r["context"][r["answer_starts"][0] :][: len(r["answer_texts"][0])] != r["answer_texts"][0]
        ):
            stats["dropped_no_answer_in_source"] += 1
        else:
            usable.append(r)
    marked = translate([mark_answer(r["context"], r["answer_starts"][0], r["answer_texts"][0]) for r in usable])
    questions = translate([r["question"] for r in usable])
    pending, out = [], []
    for r, m, q in zip(usable, marked, questions):
        found = read_marked(m)
        if found:
            ctx, start, ans = found
            out.append({**r, "context": ctx, "question": q, "answer_texts": [ans], "answer_starts": [start]})
            stats["recovered_by_markers"] += 1
        else:
            pending.append((r, q))
    if pending:
        plain = translate([r["context"] for r, _ in pending])
        answers = translate([r["answer_texts"][0] for r, _ in pending])
        aligning = progress(zip(pending, plain, answers), total=len(pending), desc="aligning answers", unit="example")
        for (r, q), ctx, ans in aligning:
            hit = fuzzy_find(ans, ctx, max_distance)
            if hit:
                start, text = hit
                out.append({**r, "context": ctx, "question": q, "answer_texts": [text], "answer_starts": [start]})
                stats["recovered_by_fuzzy_match"] += 1
            else:
                stats["dropped_unaligned"] += 1
    for r in out:  # the invariant every consumer relies on
        s, t = r["answer_starts"][0], r["answer_texts"][0]
        assert r["context"][s : s + len(t)] == t, (r["id"], s, t)
    stats["kept"] = len(out)
    return out, stats


def translate_columns(
    rows: list[dict[str, Any]], columns: Sequence[str], translate: Translator
) -> list[dict[str, Any]]:
    """Each row with its ``columns`` translated (a string, or every string of a list; a null
    stays null) and every other column as it was: labels, image names, answer lists, ids.
    All the rows' texts go to the translator in one call, so text repeated across columns
    and rows is translated once."""
    sources: list[str] = []
    for r in rows:
        for c in columns:
            value = r[c]
            if isinstance(value, list):
                sources.extend(value)
            elif value is not None:
                sources.append(value)
    translations = translate(sources)
    if len(translations) != len(sources):
        raise InputError(f"the translator returned {len(translations)} texts for {len(sources)}")
    done = iter(translations)
    out = []
    for r in rows:
        translated = {}
        for c in columns:
            value = r[c]
            if isinstance(value, list):
                translated[c] = [next(done) for _ in value]
            else:
                translated[c] = None if value is None else next(done)
        out.append({**r, **translated})
    return out


def translate_rows(
    fmt: str, rows: list[dict[str, Any]], translate: Translator, lang: str | None, max_distance: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Translated rows, labelled ``lang`` (None: each row keeps its own label). The format's
    ``translated_columns`` (spec/formats/) are translated; span answers are re-aligned."""
    columns = get_format(fmt).translated_columns if fmt in format_names() else ()
    if not columns:
        raise InputError(f"format {fmt!r} cannot be machine-translated")
    if fmt == SPAN:
        out, stats = translate_spans(rows, translate, max_distance)
    else:
        out = translate_columns(rows, columns, translate)
        stats = {"examples": len(rows), "kept": len(out)}
    stats["translated_columns"] = list(columns)
    return [{**r, "lang": lang or r["lang"]} for r in out], stats


def translation_run_settings(args) -> TranslationSettings:
    """--settings with the job's --batch-size (a resource of the rule: speed only)."""
    settings = TranslationSettings.parse(args.settings, "--settings")
    if args.batch_size is not None:
        settings = settings.replace(batch_size=args.batch_size)
    if settings.batch_size is None:
        raise InputError("translation needs a batch size of at least 1 (--batch-size or the settings' batch_size)")
    return settings


def translate_task(args) -> None:
    import pyarrow.parquet as pq

    started = time.time()
    settings = translation_run_settings(args)
    configure_torch(args.threads)
    task = get_task(args.task)
    rows = [r for r in read_table(args.input, task.format).to_pylist() if r["lang"] == args.from_lang]
    if not rows:
        raise InputError(f"{args.input}: no {args.from_lang} rows to translate into {args.lang}")
    translator = MarianTranslator(args.model, settings, device(), args.cache, args.converted, args.threads)
    # Into English (translate-test) the rows still stand for their language's test set.
    label = None if args.lang == "en" else args.lang
    out, stats = translate_rows(task.format, rows, translator, label, settings.max_fuzzy_distance)
    if not out:  # counted, not fatal: a job that needs this data says so itself
        LOG.warning("no %s example survived translation %s -> %s: %s", args.task, args.from_lang, args.lang, stats)
    with atomic_path(args.output) as tmp:
        pq.write_table(to_table(task, out), tmp)
    stats.update(
        {
            "task": args.task,
            "language": args.lang,
            "source_language": args.from_lang,
            "direction": f"{args.from_lang}-{args.lang}",
            "wall_time_s": round(time.time() - started, 3),
            "engine": translator.describe(),
            **translator.counts,
        }
    )
    write_json(args.stats, stats)
    LOG.info("%s -> %s: %s", args.input, args.output, stats)


def score_quality(args) -> None:
    """Translate XNLI sentences and score them against XNLI's references: en -> X against the
    human translations into X, X -> en (translate-test) against the English originals."""
    settings = translation_run_settings(args)
    configure_torch(args.threads)
    translator = MarianTranslator(args.model, settings, device(), args.cache, args.converted, args.threads)
    source, target = args.from_lang, args.lang
    reference = "XNLI human translations" if source == "en" else "XNLI English originals"
    result: dict[str, Any] = {
        "language": target,
        "source_language": source,
        "direction": f"{source}-{target}",
        "reference": reference,
        "splits": {},
    }
    for item in args.data:
        split, path = item.split("=", 1)
        rows = read_table(path, "classification").to_pylist()
        # XNLI ids differ only by their language part: xnli-dev-de-17 <-> xnli-dev-en-17.
        by_lang = {
            lang: {r["id"].replace(f"-{lang}-", "-"): r for r in rows if r["lang"] == lang} for lang in (source, target)
        }
        ids = [k for k in by_lang[source] if k in by_lang[target]]
        if not ids:
            raise InputError(f"{path}: no parallel {source}/{target} XNLI pairs to score translation quality")
        sources = [by_lang[source][k][f] for k in ids for f in ("text_a", "text_b")]
        references = [by_lang[target][k][f] for k in ids for f in ("text_a", "text_b")]
        result["splits"][split] = translation_quality(translator, sources, references)
    result.update({"engine": translator.describe(), **translator.counts})
    write_json(args.output, result)
    LOG.info("translation quality %s-%s: %s", source, target, json.dumps(result["splits"]))


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Translate English task data with MarianMT; score MT quality.")
    sub = ap.add_subparsers(dest="command", required=True)
    data = sub.add_parser("data", help="translate one language of one split of a task")
    data.add_argument("--task", required=True)
    data.add_argument("--input", required=True)
    data.add_argument("--output", required=True)
    data.add_argument("--stats", required=True)
    quality = sub.add_parser("quality", help="BLEU and chrF against XNLI's human translations")
    quality.add_argument("--data", nargs="+", required=True, help="SPLIT=FILE of canonical XNLI data")
    quality.add_argument("--output", required=True)
    for p in (data, quality):
        p.add_argument("--lang", required=True, help="the language translated into")
        p.add_argument("--from-lang", default="en", help="the language translated from (default en)")
        p.add_argument("--model", required=True, type=Path)
        p.add_argument("--converted", type=Path, help="its CTranslate2 conversion (backend ctranslate2)")
        p.add_argument("--settings", required=True)
        p.add_argument("--batch-size", type=int, help="sentences per batch (speed only); default: the settings'")
        p.add_argument("--cache", type=Path, help="persistent translation cache (SQLite)")
        p.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        (translate_task if args.command == "data" else score_quality)(args)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
