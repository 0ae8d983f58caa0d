"""XTREME targets read from the Hub's google/xtreme configs: XNLI, PAWS-X, PAN-X, Tatoeba.

(The span targets live in ``spans``, UD-POS in ``udpos``, BUCC in ``bucc``.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..common import InputError
from ..tasks import get_task
from .registry import XTREME_SPLITS, Report, Row, converter, label_index, per_language, require_languages
from .source import Source

TATOEBA_CODES = {
    "af": "afr", "ar": "ara", "bg": "bul", "bn": "ben", "de": "deu", "el": "ell", "es": "spa",
    "et": "est", "eu": "eus", "fa": "pes", "fi": "fin", "fr": "fra", "he": "heb", "hi": "hin",
    "hu": "hun", "id": "ind", "it": "ita", "ja": "jpn", "jv": "jav", "ka": "kat", "kk": "kaz",
    "ko": "kor", "ml": "mal", "mr": "mar", "nl": "nld", "pt": "por", "ru": "rus", "sw": "swh",
    "ta": "tam", "te": "tel", "th": "tha", "tl": "tgl", "tr": "tur", "ur": "urd", "vi": "vie",
    "zh": "cmn",
}


@converter("pawsx")
def _pawsx(src: Source, split: str, langs: list[str], opts: dict[str, Any],
           report: Report) -> Iterable[Row]:
    task = get_task("pawsx")
    for lang, i, r in per_language("pawsx", src, lambda l: f"PAWS-X.{l}", split, XTREME_SPLITS[split], langs):
        label = int(r["label"])  # a string "0"/"1" in google/xtreme
        yield {"id": f"pawsx-{split}-{lang}-{i}", "lang": lang, "text_a": r["sentence1"],
               "text_b": r["sentence2"], "label": label_index(task, label, f"pawsx {lang} {split}")}


@converter("panx")
def _panx(src: Source, split: str, langs: list[str], opts: dict[str, Any],
          report: Report) -> Iterable[Row]:
    task = get_task("panx")
    for lang, i, r in per_language("panx", src, lambda l: f"PAN-X.{l}", split, XTREME_SPLITS[split], langs):
        tags = [task.labels[label_index(task, t, f"panx {lang} {split}")] for t in r["ner_tags"]]
        yield {"id": f"panx-{split}-{lang}-{i}", "lang": lang, "tokens": list(r["tokens"]), "tags": tags}


@converter("xnli")
def _xnli(src: Source, split: str, langs: list[str], opts: dict[str, Any],
          report: Report) -> Iterable[Row]:
    task = get_task("xnli")
    hub_split = {"dev": "validation", "test": "test"}[split]
    counts = {lang: 0 for lang in langs}
    for i, r in enumerate(src.rows("XNLI", hub_split)):
        lang = r["language"]
        if lang not in counts:
            continue
        counts[lang] += 1
        # Raw XNLI spells one label "contradictory"; XTREME's preprocessing maps it.
        gold = "contradiction" if r["gold_label"] == "contradictory" else r["gold_label"]
        yield {"id": f"xnli-{split}-{lang}-{counts[lang]}", "lang": lang, "text_a": r["sentence1"],
               "text_b": r["sentence2"], "label": label_index(task, gold, f"xnli {split}")}
    require_languages("xnli", split, counts)


@converter("tatoeba")
def _tatoeba(src: Source, split: str, langs: list[str], opts: dict[str, Any],
             report: Report) -> Iterable[Row]:
    for lang in langs:
        if lang not in TATOEBA_CODES:
            raise InputError(f"tatoeba: no Tatoeba code known for {lang!r}")
        for i, r in enumerate(src.rows(f"tatoeba.{TATOEBA_CODES[lang]}", "validation")):
            # The XTREME copy keeps the files' trailing newlines; they are not part of the text.
            yield {"id": f"tatoeba-{lang}-{i}", "lang": lang, "source": r["source_sentence"].strip(),
                   "target": r["target_sentence"].strip()}


