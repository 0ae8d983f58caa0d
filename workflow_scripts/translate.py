"""Machine translation of English intermediate-task data with MarianMT (PROTOCOL.md §4).

Every text field is translated and labels carry over. Strings are deduplicated (SQuAD
contexts repeat across questions) and translated in length-sorted batches; long texts are
split into sentences so no input exceeds the model's limit, then rejoined.

Span tasks re-align the answer in the translated context:
1. the answer is wrapped in markers in the English context, the context translated, and
   the answer read back between the markers;
2. if a marker is lost or broken, the answer is translated alone and fuzzy-matched in the
   plain translated context; the closest substring is kept when its edit distance is at
   most min(max_fuzzy_distance, len(answer) / 2);
3. otherwise the example is dropped. A statistics file counts each outcome.
Every kept example's answer_start points at its answer text exactly.

CLI: ``python -m workflow_scripts.translate --task T --lang L --model DIR --input FILE
--settings JSON --output FILE --stats FILE``.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .common import LOG, InputError, atomic_path, autocast, configure_torch, device, load_settings, setup_logging, write_json
from .data import read_table, to_table
from .tasks import CLASSIFICATION, MULTIPLE_CHOICE, SPAN, get_task

OPEN, CLOSE = "<b>", "</b>"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
Translator = Callable[[Sequence[str]], list[str]]


class MarianTranslator:
    """Batched, deduplicated MarianMT translation of arbitrary-length strings."""

    def __init__(self, model_dir: Path, settings: dict[str, Any], dev) -> None:
        from transformers import MarianMTModel, MarianTokenizer

        if not (model_dir / "config.json").is_file():
            raise InputError(f"translator directory {model_dir} has no config.json")
        self.tokenizer = MarianTokenizer.from_pretrained(str(model_dir))
        self.model = MarianMTModel.from_pretrained(str(model_dir)).to(dev).eval()
        self.dev, self.settings = dev, settings
        self.limit = min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings) - 1
        self.cache: dict[str, str] = {}

    def _segments(self, text: str) -> list[str]:
        """Sentences, further cut at word boundaries when one alone exceeds the model limit."""
        out = []
        for sentence in _SENTENCE_END.split(text.strip()):
            words, piece = sentence.split(), []
            for word in words:
                candidate = " ".join(piece + [word])
                if piece and len(self.tokenizer(candidate)["input_ids"]) > self.limit:
                    out.append(" ".join(piece))
                    piece = [word]
                else:
                    piece.append(word)
            if piece:
                out.append(" ".join(piece))
        return out

    def __call__(self, texts: Sequence[str]) -> list[str]:
        import torch
        from tqdm import tqdm

        segmented = {t: self._segments(t) for t in set(texts) if t.strip()}
        todo = sorted({s for segs in segmented.values() for s in segs if s not in self.cache}, key=len)
        batch_size = int(self.settings["batch_size"])
        for b in tqdm(range(0, len(todo), batch_size), desc="translate", mininterval=10):
            chunk = todo[b:b + batch_size]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.limit).to(self.dev)
            with torch.inference_mode(), autocast(self.dev):
                out = self.model.generate(**enc, num_beams=int(self.settings["num_beams"]),
                                          max_new_tokens=int(self.settings["max_new_tokens"]))
            for src, hyp in zip(chunk, self.tokenizer.batch_decode(out, skip_special_tokens=True)):
                self.cache[src] = hyp.strip()
        return [" ".join(self.cache[s] for s in segmented[t]) if t.strip() else "" for t in texts]


# ----- span re-alignment --------------------------------------------------------------------


def mark_answer(context: str, start: int, text: str) -> str:
    return f"{context[:start]}{OPEN}{text}{CLOSE}{context[start + len(text):]}"


def read_marked(translated: str) -> tuple[str, int, str] | None:
    """(clean context, answer start, answer) when exactly one well-formed marker pair survived."""
    if translated.count(OPEN) != 1 or translated.count(CLOSE) != 1:
        return None
    before, rest = translated.split(OPEN)
    if CLOSE not in rest:
        return None
    answer, after = rest.split(CLOSE)
    answer = answer.strip()
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
            cand = context[words[i][0]:words[j][1]]
            for trimmed in {cand, cand.strip(".,;:!?\"'()[]«»„“”")}:
                if not trimmed:
                    continue
                dist = Levenshtein.distance(answer, trimmed, score_cutoff=int(limit))
                if dist <= limit and (best is None or dist < best[0]):
                    best = (dist, context.index(trimmed, words[i][0]), trimmed)
    return None if best is None else (best[1], best[2])


def translate_spans(rows: list[dict[str, Any]], translate: Translator, max_distance: int
                    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    stats = {"examples": len(rows), "recovered_by_markers": 0, "recovered_by_fuzzy_match": 0,
             "dropped_no_answer_in_source": 0, "dropped_unaligned": 0}
    usable = []
    for r in rows:
        if not r["answer_texts"] or r["context"][r["answer_starts"][0]:][:len(r["answer_texts"][0])] != r["answer_texts"][0]:
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
        for (r, q), ctx, ans in zip(pending, plain, answers):
            hit = fuzzy_find(ans, ctx, max_distance)
            if hit:
                start, text = hit
                out.append({**r, "context": ctx, "question": q, "answer_texts": [text], "answer_starts": [start]})
                stats["recovered_by_fuzzy_match"] += 1
            else:
                stats["dropped_unaligned"] += 1
    for r in out:  # the invariant every consumer relies on
        s, t = r["answer_starts"][0], r["answer_texts"][0]
        assert r["context"][s:s + len(t)] == t, (r["id"], s, t)
    stats["kept"] = len(out)
    return out, stats


def translate_rows(fmt: str, rows: list[dict[str, Any]], translate: Translator, lang: str, max_distance: int
                   ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    if fmt == CLASSIFICATION:
        a, b = translate([r["text_a"] for r in rows]), translate([r["text_b"] or "" for r in rows])
        out = [{**r, "text_a": x, "text_b": y} for r, x, y in zip(rows, a, b)]
        stats = {"examples": len(rows), "kept": len(out)}
    elif fmt == MULTIPLE_CHOICE:
        contexts = translate([r["context"] for r in rows])
        flat = translate([c for r in rows for c in r["choices"]])
        out, k = [], 0
        for r, ctx in zip(rows, contexts):
            n = len(r["choices"])
            out.append({**r, "context": ctx, "choices": flat[k:k + n]})
            k += n
        stats = {"examples": len(rows), "kept": len(out)}
    elif fmt == SPAN:
        out, stats = translate_spans(rows, translate, max_distance)
    else:
        raise InputError(f"format {fmt!r} cannot be machine-translated")
    return [{**r, "lang": lang} for r in out], stats


def main(argv: list[str] | None = None) -> None:
    import pyarrow.parquet as pq

    setup_logging()
    ap = argparse.ArgumentParser(description="Translate one split of an English task with MarianMT.")
    ap.add_argument("--task", required=True)
    ap.add_argument("--lang", required=True)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--input", required=True)
    ap.add_argument("--settings", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--output", required=True)
    ap.add_argument("--stats", required=True)
    args = ap.parse_args(argv)
    started = time.time()
    try:
        settings = load_settings(args.settings)
        configure_torch(args.threads)
        task = get_task(args.task)
        rows = read_table(args.input, task.format).to_pylist()
        translator = MarianTranslator(args.model, settings, device())
        out, stats = translate_rows(task.format, rows, translator, args.lang, int(settings["max_fuzzy_distance"]))
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    if not out:
        raise SystemExit(f"error: no {args.task} example survived translation into {args.lang}: {stats}")
    with atomic_path(args.output) as tmp:
        pq.write_table(to_table(task, out), tmp)
    stats.update({"task": args.task, "language": args.lang, "wall_time_s": round(time.time() - started, 3),
                  "unique_segments_translated": len(translator.cache)})
    write_json(args.stats, stats)
    LOG.info("%s -> %s: %s", args.input, args.output, stats)


if __name__ == "__main__":
    main()
