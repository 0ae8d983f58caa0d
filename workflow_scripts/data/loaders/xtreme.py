"""XTREME targets read from the Hub's google/xtreme configs: XNLI, PAWS-X, PAN-X, Tatoeba.

(The span targets live in ``spans``, UD-POS in ``udpos``, BUCC in ``bucc``.)

XTREME-R (docs/protocol.md §8) widens PAN-X to 48 languages and Tatoeba to 41; google/xtreme has
configs for XTREME's languages only, so the others come from a second Hub dataset in the
same schema family (``extra_source``), named by an option, and the load report says which
source gave each language (``sources``) and, for the Hub, which commit (``extra_sources``):

- PAN-X: ``options.wikiann_path`` (default ``unimelb-nlp/wikiann``, revision
  ``options.wikiann_revision``), one config per language code, the same Rahimi et al.
  train/dev/test splits and the same ``ner_tags`` ids (0 O, 1 B-PER, 2 I-PER, 3 B-ORG,
  4 I-ORG, 5 B-LOC, 6 I-LOC; the dataset card's class labels) as google/xtreme's PAN-X;
- Tatoeba: ``options.tatoeba_path`` (default ``mteb/tatoeba-bitext-mining``, revision
  ``options.tatoeba_revision``), configs ``{code}-eng`` (``aze-eng`` ...), split ``test``,
  ``sentence1`` the non-English sentence and ``sentence2`` its English translation. These
  column names come from code that reads that dataset, not from its card, which we could
  not read offline: a row without them fails naming the columns it has.

PAWS-X reads every language from ``options.pawsx_path`` when it is set
(``google-research-datasets/paws-x``): google/xtreme's PAWS-X configs lose rows of the
release (``_pawsx``; docs/data_sources.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from workflow_scripts.data.loaders.registry import (
    XTREME_SPLITS,
    Report,
    Row,
    converter,
    label_index,
    require_languages,
)
from workflow_scripts.data.loaders.source import Source, extra_source
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions
from workflow_scripts.spec.tasks import get_task

# The languages of google/xtreme's PAN-X.<lang> configs (XTREME's 40).
PANX_XTREME_LANGUAGES = frozenset(
    "af ar bg bn de el en es et eu fa fi fr he hi hu id it ja jv ka kk ko ml mr ms my nl pt ru sw ta te th "
    "tl tr ur vi yo zh".split()
)

TATOEBA_CODES = {
    "af": "afr",
    "ar": "ara",
    "bg": "bul",
    "bn": "ben",
    "de": "deu",
    "el": "ell",
    "es": "spa",
    "et": "est",
    "eu": "eus",
    "fa": "pes",
    "fi": "fin",
    "fr": "fra",
    "he": "heb",
    "hi": "hin",
    "hu": "hun",
    "id": "ind",
    "it": "ita",
    "ja": "jpn",
    "jv": "jav",
    "ka": "kat",
    "kk": "kaz",
    "ko": "kor",
    "ml": "mal",
    "mr": "mar",
    "nl": "nld",
    "pt": "por",
    "ru": "rus",
    "sw": "swh",
    "ta": "tam",
    "te": "tel",
    "th": "tha",
    "tl": "tgl",
    "tr": "tur",
    "ur": "urd",
    "vi": "vie",
    "zh": "cmn",
}
# XTREME-R's five more (the codes of LASER's file names, as XTREME-R's utils_preprocess.py
# reads them): not in google/xtreme, read from ``options.tatoeba_path``.
TATOEBA_EXTRA_CODES = {"az": "aze", "lt": "lit", "pl": "pol", "uk": "ukr", "ro": "ron"}


def record_sources(report: Report, sources: dict[str, tuple[Source, str]], extras: list[Source]) -> None:
    """Which dataset and config each language came from; for a Hub dataset other than the
    task's own, its revision and the commit it resolved to."""
    report["sources"] = {lang: f"{s.path} {config}" for lang, (s, config) in sorted(sources.items())}
    used = {s.path for s, _ in sources.values()}
    report["extra_sources"] = {
        s.path: {"revision": s.revision, "resolved_sha": s.resolved_sha()} for s in extras if s.path in used
    }


@converter("pawsx")
def _pawsx(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """PAWS-X from ``options.pawsx_path`` when given (``google-research-datasets/paws-x``:
    config = language, the release's TSV rows read without CSV quoting, all 2,000 dev and test
    rows of every language), else from google/xtreme's ``PAWS-X.<lang>`` configs, whose
    builder parses the same files with CSV quoting and keeps only rows of four fields: it
    loses rows (es dev 1,961, fr dev 1,988, ko test 1,999; en train 49,175 of 49,401).
    Sentences are stripped, as XTREME's ``utils_preprocess.py`` strips them."""
    task = get_task("pawsx")
    pawsx = extra_source(src, opts, "pawsx", "pawsx")
    sources = {lang: (pawsx, lang) if opts.pawsx_path else (src, f"PAWS-X.{lang}") for lang in langs}
    for lang in langs:
        source, config = sources[lang]
        n = 0
        for i, r in enumerate(source.rows(config, XTREME_SPLITS[split])):
            n += 1
            label = int(r["label"])  # a string "0"/"1" in google/xtreme, an int in paws-x
            yield {
                "id": f"pawsx-{split}-{lang}-{i}",
                "lang": lang,
                "text_a": r["sentence1"].strip(),
                "text_b": r["sentence2"].strip(),
                "label": label_index(task, label, f"pawsx {lang} {split}"),
            }
        require_languages("pawsx", split, {lang: n})
    record_sources(report, sources, [pawsx])


@converter("panx")
def _panx(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """XTREME's 40 languages from google/xtreme's PAN-X configs, the others (XTREME-R's
    qu pl uk az lt pa gu ro) from WikiANN's per-language configs (module docstring)."""
    task = get_task("panx")
    wikiann = extra_source(src, opts, "panx", "wikiann")
    sources = {lang: (src, f"PAN-X.{lang}") if lang in PANX_XTREME_LANGUAGES else (wikiann, lang) for lang in langs}
    hub_split = XTREME_SPLITS[split]
    for lang in langs:
        source, config = sources[lang]
        n = 0
        for i, r in enumerate(source.rows(config, hub_split)):
            n += 1
            where = f"panx {lang} {split} ({source.path} {config} row {i})"
            tags = [task.labels[label_index(task, t, where)] for t in r["ner_tags"]]
            yield {"id": f"panx-{split}-{lang}-{i}", "lang": lang, "tokens": list(r["tokens"]), "tags": tags}
        require_languages("panx", split, {lang: n})
    record_sources(report, sources, [wikiann])


@converter("xnli")
def _xnli(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    task = get_task("xnli")
    hub_split = {"dev": "validation", "test": "test"}[split]
    counts = dict.fromkeys(langs, 0)
    for r in src.rows("XNLI", hub_split):
        lang = r["language"]
        if lang not in counts:
            continue
        counts[lang] += 1
        # Raw XNLI spells one label "contradictory"; XTREME's preprocessing maps it.
        gold = "contradiction" if r["gold_label"] == "contradictory" else r["gold_label"]
        yield {
            "id": f"xnli-{split}-{lang}-{counts[lang]}",
            "lang": lang,
            "text_a": r["sentence1"],
            "text_b": r["sentence2"],
            "label": label_index(task, gold, f"xnli {split}"),
        }
    require_languages("xnli", split, counts)


@converter("tatoeba")
def _tatoeba(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """XTREME's 36 languages from google/xtreme (split ``validation``), XTREME-R's five more
    (az lt pl uk ro) from ``options.tatoeba_path`` (split ``test``; module docstring)."""
    extra = extra_source(src, opts, "tatoeba", "tatoeba")
    sources: dict[str, tuple[Source, str]] = {}
    for lang in langs:
        if lang in TATOEBA_CODES:
            sources[lang] = (src, f"tatoeba.{TATOEBA_CODES[lang]}")
        elif lang in TATOEBA_EXTRA_CODES:
            sources[lang] = (extra, f"{TATOEBA_EXTRA_CODES[lang]}-eng")
        else:
            raise InputError(
                f"tatoeba: no Tatoeba code known for {lang!r} (known: "
                f"{' '.join(sorted({**TATOEBA_CODES, **TATOEBA_EXTRA_CODES}))})"
            )
    for lang in langs:
        source, config = sources[lang]
        columns = ("source_sentence", "target_sentence") if source is src else ("sentence1", "sentence2")
        n = 0
        for i, r in enumerate(source.rows(config, "validation" if source is src else "test")):
            if not all(c in r for c in columns):
                raise InputError(
                    f"tatoeba {lang}: {source.path} {config} row {i} lacks columns {list(columns)} (has {sorted(r)})"
                )
            n += 1
            # The XTREME copy keeps the files' trailing newlines; they are not part of the text.
            yield {
                "id": f"tatoeba-{lang}-{i}",
                "lang": lang,
                "source": r[columns[0]].strip(),
                "target": r[columns[1]].strip(),
            }
        require_languages("tatoeba", split, {lang: n})
    record_sources(report, sources, [extra])
