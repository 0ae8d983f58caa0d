"""Load every task from the Hugging Face Hub (or a local mirror of it) into canonical Parquet.

One canonical schema per task format (every row also has ``id`` and ``lang``):

- classification:  text_a, text_b, label (int, index into Task.labels)
- multiple_choice: context, choices (list of str), label
- span:            context, question, answer_texts, answer_starts (empty lists: no answer)
- tagging:         tokens, tags (tag strings)
- retrieval:       source (the non-English sentence), target (its English translation)
- mining:          side ("source" or "en"), text, gold (English ids aligned to a source sentence)
- mlm:             text

``source.kind == "hub"`` reads ``datasets.load_dataset(path, name, split, revision)``;
``"local"`` reads ``<root>/<path>/<name>/<split>.jsonl`` holding the same rows, which is how
the embedded demo and the tests run the very same converters offline. Only this module
touches the network.

CLI: ``python -m workflow_scripts.data --task T --split S --settings JSON --output F``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .common import LOG, InputError, atomic_path, load_settings, setup_logging
from .tasks import CLASSIFICATION, MINING, MLM, MULTIPLE_CHOICE, RETRIEVAL, SPAN, TAGGING, Task, get_task

Row = dict[str, Any]
REPO_ROOT = Path(__file__).resolve().parent.parent

SCHEMAS: dict[str, dict[str, str]] = {
    CLASSIFICATION: {"text_a": "string", "text_b": "string", "label": "int64"},
    MULTIPLE_CHOICE: {"context": "string", "choices": "list<string>", "label": "int64"},
    SPAN: {"context": "string", "question": "string", "answer_texts": "list<string>",
           "answer_starts": "list<int64>"},
    TAGGING: {"tokens": "list<string>", "tags": "list<string>"},
    RETRIEVAL: {"source": "string", "target": "string"},
    MINING: {"side": "string", "text": "string", "gold": "list<string>"},
    MLM: {"text": "string"},
}

# XTREME names udpos configs by language name and tatoeba ones by ISO 639-3 code.
UD_LANGUAGE_NAMES = {
    "af": "Afrikaans", "ar": "Arabic", "bg": "Bulgarian", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "kk": "Kazakh", "ko": "Korean",
    "mr": "Marathi", "nl": "Dutch", "pt": "Portuguese", "ru": "Russian", "ta": "Tamil",
    "te": "Telugu", "th": "Thai", "tl": "Tagalog", "tr": "Turkish", "ur": "Urdu",
    "vi": "Vietnamese", "yo": "Yoruba", "zh": "Chinese",
}
TATOEBA_CODES = {
    "af": "afr", "ar": "ara", "bg": "bul", "bn": "ben", "de": "deu", "el": "ell", "es": "spa",
    "et": "est", "eu": "eus", "fa": "pes", "fi": "fin", "fr": "fra", "he": "heb", "hi": "hin",
    "hu": "hun", "id": "ind", "it": "ita", "ja": "jpn", "jv": "jav", "ka": "kat", "kk": "kaz",
    "ko": "kor", "ml": "mal", "mr": "mar", "nl": "nld", "pt": "por", "ru": "rus", "sw": "swh",
    "ta": "tam", "te": "tel", "th": "tha", "tl": "tgl", "tr": "tur", "ur": "urd", "vi": "vie",
    "zh": "cmn",
}


class Source:
    """Where Hub-schema rows come from: the Hub itself or a local mirror directory."""

    def __init__(self, kind: str, path: str, revision: str = "main", local_root: str | None = None):
        if kind not in ("hub", "local"):
            raise InputError(f"data.source must be 'hub' or 'local', got {kind!r}")
        self.kind, self.path, self.revision = kind, path, revision
        self.local_root = Path(local_root) if local_root else None

    def resolved_sha(self) -> str | None:
        """The commit a Hub revision resolves to (None for a local mirror)."""
        if self.kind != "hub":
            return None
        from huggingface_hub import HfApi

        return HfApi().dataset_info(self.path, revision=self.revision).sha

    def _local_file(self, name: str | None, split: str) -> Path:
        file = self.local_root / self.path / (name or "default") / f"{split}.jsonl"
        if not file.is_file():
            raise InputError(f"missing data file {file} (task source {self.path}, config {name}, split {split})")
        return file

    def num_rows(self, name: str | None, split: str) -> int:
        if self.kind == "local":
            with self._local_file(name, split).open(encoding="utf-8") as f:
                return sum(1 for line in f if line.strip())
        import datasets

        builder = datasets.load_dataset_builder(self.path, name, revision=self.revision)
        return builder.info.splits[split].num_examples

    def rows(self, name: str | None, split: str, shuffle_seed: int | None = None) -> Iterator[Row]:
        """Rows in stored order, or (``shuffle_seed``) in a seeded shuffled order; with a
        seed the Hub is streamed, so a corpus is never downloaded whole."""
        if self.kind == "local":
            file = self._local_file(name, split)
            rows = []
            with file.open(encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as err:
                        raise InputError(f"corrupt data file {file}, line {lineno}: {err}") from err
            if shuffle_seed is not None:
                random.Random(shuffle_seed).shuffle(rows)
            yield from rows
            return
        import datasets  # imported here: only download jobs need it

        if shuffle_seed is None:
            yield from datasets.load_dataset(self.path, name, split=split, revision=self.revision)
        else:
            stream = datasets.load_dataset(self.path, name, split=split, revision=self.revision, streaming=True)
            yield from stream.shuffle(seed=shuffle_seed, buffer_size=10_000)


# ---------------------------------------------------------------------------------------
# Converters: Hub rows -> canonical rows. One per task; ``languages`` applies to targets.

Converter = Callable[[Source, str, list[str], dict[str, Any]], Iterable[Row]]
CONVERTERS: dict[str, Converter] = {}


def converter(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return register


def _label_index(task: Task, value: Any, where: str) -> int:
    if isinstance(value, str):
        if value not in task.labels:
            raise InputError(f"{where}: label {value!r} not in {list(task.labels)}")
        return task.labels.index(value)
    if not 0 <= int(value) < task.num_labels:
        raise InputError(f"{where}: label {value!r} outside 0..{task.num_labels - 1}")
    return int(value)


def _choice_index(value: Any, n_choices: int, where: str) -> int:
    try:
        index = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: label {value!r} is not a choice index") from None
    if not 0 <= index < n_choices:
        raise InputError(f"{where}: label {value!r} outside 0..{n_choices - 1}")
    return index


@converter("mnli")
def _mnli(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    task = get_task("mnli")
    hub_split = {"train": "train", "dev": "validation_matched"}[split]
    for i, r in enumerate(src.rows("mnli", hub_split)):
        if r["label"] == -1:  # unlabeled (test) rows
            continue
        yield {"id": f"mnli-{split}-{r.get('idx', i)}", "lang": "en", "text_a": r["premise"],
               "text_b": r["hypothesis"], "label": _label_index(task, r["label"], f"mnli {split}")}


@converter("xnli_mt")
def _xnli_mt(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    """facebook/xnli: one config per language; train is MNLI machine-translated by the XNLI authors."""
    task = get_task("xnli_mt")
    hub_split = {"train": "train", "dev": "validation"}[split]
    for lang in langs:
        for i, r in enumerate(src.rows(lang, hub_split)):
            yield {"id": f"xnli_mt-{split}-{lang}-{i}", "lang": lang, "text_a": r["premise"],
                   "text_b": r["hypothesis"], "label": _label_index(task, r["label"], f"xnli_mt {lang} {split}")}


@converter("qqp")
def _qqp(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    task = get_task("qqp")
    hub_split = {"train": "train", "dev": "validation"}[split]
    for i, r in enumerate(src.rows("qqp", hub_split)):
        yield {"id": f"qqp-{split}-{r.get('idx', i)}", "lang": "en", "text_a": r["question1"],
               "text_b": r["question2"], "label": _label_index(task, r["label"], f"qqp {split}")}


@converter("squad", "squad_v2")
def _squad(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    name = opts.get("hub_name") or ("squad_v2" if "v2" in src.path else "plain_text")
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(name, hub_split):
        yield _span_row(r["id"], "en", r)


def _span_row(uid: str, lang: str, r: Row) -> Row:
    texts, starts = list(r["answers"]["text"]), [int(s) for s in r["answers"]["answer_start"]]
    for text, start in zip(texts, starts):
        if r["context"][start:start + len(text)] != text:
            raise InputError(f"example {uid}: answer_start {start} does not point at {text!r}")
    return {"id": uid, "lang": lang, "context": r["context"], "question": r["question"].strip(),
            "answer_texts": texts, "answer_starts": starts}


@converter("hellaswag")
def _hellaswag(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(None, hub_split):
        if r["label"] in ("", None):  # the public test split has no labels
            continue
        endings = list(r["endings"])
        if len(endings) != 4:
            raise InputError(f"hellaswag {split} row {r['ind']}: expected 4 endings, got {len(endings)}")
        # Like the reference implementations: the context is ctx_a, each choice ctx_b + ending.
        yield {"id": f"hellaswag-{split}-{r['ind']}", "lang": "en", "context": r["ctx_a"],
               "choices": [f"{r['ctx_b']} {e}".strip() for e in endings],
               "label": _choice_index(r["label"], 4, f"hellaswag {split} row {r['ind']}")}


def _nli_rows(src: Source, name: str | None, hub_split: str, prefix: str, task: Task) -> Iterator[Row]:
    for i, r in enumerate(src.rows(name, hub_split)):
        if r["label"] == -1:  # SNLI: no annotator consensus; GLUE test: unlabeled
            continue
        uid = r.get("uid") or r.get("idx", i)
        yield {"id": f"{prefix}-{uid}", "lang": "en", "text_a": r["premise"], "text_b": r["hypothesis"],
               "label": _label_index(task, r["label"], f"{prefix} {hub_split}")}


@converter("anli_plus")
def _anli_plus(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    """ANLI rounds 1-3 + MNLI + SNLI (label -1 dropped): 1,104,934 train / 22,857 dev."""
    task = get_task("anli_plus")
    glue = Source(src.kind, opts.get("mnli_path", "nyu-mll/glue"), opts.get("mnli_revision", "main"), src.local_root)
    snli = Source(src.kind, opts.get("snli_path", "stanfordnlp/snli"), opts.get("snli_revision", "main"), src.local_root)
    anli_split, glue_split, snli_split = {"train": ("train", "train", "train"),
                                          "dev": ("dev", "validation_matched", "validation")}[split]
    for rnd in (1, 2, 3):
        yield from _nli_rows(src, "plain_text", f"{anli_split}_r{rnd}", f"anli-r{rnd}-{split}", task)
    yield from _nli_rows(glue, "mnli", glue_split, f"mnli-{split}", task)
    yield from _nli_rows(snli, "plain_text", snli_split, f"snli-{split}", task)


@converter("commonsenseqa")
def _commonsenseqa(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(opts.get("hub_name"), hub_split):
        if not r["answerKey"]:  # the public test split has no answers
            continue
        labels = list(r["choices"]["label"])
        if r["answerKey"] not in labels or len(labels) != 5:
            raise InputError(f"commonsenseqa {split} {r['id']}: answerKey {r['answerKey']!r} not in {labels}")
        yield {"id": f"csqa-{r['id']}", "lang": "en", "context": r["question"],
               "choices": list(r["choices"]["text"]), "label": labels.index(r["answerKey"])}


@converter("cosmosqa")
def _cosmosqa(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(opts.get("hub_name"), hub_split):
        if int(r["label"]) == -1:  # the public test split has no labels
            continue
        # PROTOCOL.md §2: the context and the question together are the first segment.
        yield {"id": f"cosmosqa-{r['id']}", "lang": "en", "context": f"{r['context']} {r['question']}",
               "choices": [r[f"answer{k}"] for k in range(4)], "label": _choice_index(r["label"], 4, f"cosmosqa {split}")}


@converter("ccg")
def _ccg(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    """A user-provided CCGbank-derived file (CCGbank is licensed, LDC2005T13; never downloaded).

    ``options.path`` is a directory with ``train.tsv`` and ``dev.tsv``: one ``word<TAB>supertag``
    per line, a blank line between sentences (e.g. sections 02-21 and 00)."""
    root = Path(opts.get("path", ""))
    if not root.is_absolute():
        root = REPO_ROOT / root
    file = root / f"{split}.tsv"
    if not opts.get("path") or not file.is_file():
        raise InputError(f"CCG file {file} does not exist: CCGbank is licensed (LDC2005T13); put your "
                         "CCGbank-derived train.tsv/dev.tsv there or set tasks.ccg.options.path")
    tokens: list[str] = []
    tags: list[str] = []
    n = 0
    with file.open(encoding="utf-8") as f:
        for lineno, line in enumerate(list(f) + [""], 1):
            line = line.rstrip("\n")
            if not line.strip():
                if tokens:
                    yield {"id": f"ccg-{split}-{n}", "lang": "en", "tokens": tokens, "tags": tags}
                    n += 1
                    tokens, tags = [], []
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise InputError(f"CCG file {file}, line {lineno}: expected word<TAB>supertag")
            tokens.append(parts[0])
            tags.append(parts[1])


def _per_language(task: str, src: Source, config_of: Callable[[str], str], split: str, hub_split: str,
                  langs: list[str]) -> Iterator[tuple[str, int, Row]]:
    """(language, index, row) from each language's own Hub config: English only for train,
    and a language without rows fails loudly."""
    for lang in (["en"] if split == "train" else langs):
        n = 0
        for i, r in enumerate(src.rows(config_of(lang), hub_split)):
            n += 1
            yield lang, i, r
        _require_languages(task, split, {lang: n})


XTREME_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


@converter("pawsx")
def _pawsx(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    task = get_task("pawsx")
    for lang, i, r in _per_language("pawsx", src, lambda l: f"PAWS-X.{l}", split, XTREME_SPLITS[split], langs):
        label = int(r["label"])  # a string "0"/"1" in google/xtreme
        yield {"id": f"pawsx-{split}-{lang}-{i}", "lang": lang, "text_a": r["sentence1"],
               "text_b": r["sentence2"], "label": _label_index(task, label, f"pawsx {lang} {split}")}


@converter("panx")
def _panx(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    task = get_task("panx")
    for lang, i, r in _per_language("panx", src, lambda l: f"PAN-X.{l}", split, XTREME_SPLITS[split], langs):
        tags = [task.labels[_label_index(task, t, f"panx {lang} {split}")] for t in r["ner_tags"]]
        yield {"id": f"panx-{split}-{lang}-{i}", "lang": lang, "tokens": list(r["tokens"]), "tags": tags}


@converter("mlqa")
def _mlqa(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    # Same-language pairs: context and question in one language.
    for lang, _, r in _per_language("mlqa", src, lambda l: f"MLQA.{l}.{l}", split, XTREME_SPLITS[split], langs):
        yield _span_row(f"{r['id']}-{lang}", lang, r)


TYDIQA_LANGUAGES = {"arabic": "ar", "bengali": "bn", "english": "en", "finnish": "fi", "indonesian": "id",
                    "korean": "ko", "russian": "ru", "swahili": "sw", "telugu": "te"}


@converter("tydiqa")
def _tydiqa(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    """TyDiQA-GoldP: one mixed-language split; the id's prefix names the language. Train keeps
    English only (PROTOCOL.md §3); the GoldP dev set is the test set."""
    hub_split = {"train": "train", "test": "validation"}[split]
    wanted = ["en"] if split == "train" else langs
    counts = {lang: 0 for lang in wanted}
    for r in src.rows(opts.get("hub_name", "tydiqa"), hub_split):
        prefix = r["id"].split("-", 1)[0]
        if prefix not in TYDIQA_LANGUAGES:
            raise InputError(f"tydiqa {split}: id {r['id']!r} has no known language prefix")
        lang = TYDIQA_LANGUAGES[prefix]
        if lang in counts:
            counts[lang] += 1
            yield _span_row(r["id"], lang, r)
    _require_languages("tydiqa", split, counts)


@converter("bucc")
def _bucc(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    """BUCC 2018 from the original archives (the Hub copies hold only the gold pairs, not the
    corpora mining needs). As in XTREME, the "sample" set is dev and the "training" set, whose
    gold is public, is test. Files: ``{lang}-en.{set}.{lang|en}`` (``id<TAB>sentence``) and
    ``{lang}-en.{set}.gold`` (``source id<TAB>English id``)."""
    bucc_set = {"dev": "sample", "test": "training"}[split]
    for lang in langs:
        files = _bucc_files(src, opts, lang, bucc_set)
        sentences = {side: _bucc_sentences(text, name) for side, (name, text) in files.items() if side != "gold"}
        gold: dict[str, list[str]] = {}
        name, text = files["gold"]
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                parts = line.split("\t")
                if len(parts) != 2:
                    raise InputError(f"{name}, line {lineno}: expected source id<TAB>English id")
                gold.setdefault(parts[0], []).append(parts[1])
        unknown = [sid for sid in gold if sid not in sentences["source"]]
        if unknown or not gold:
            raise InputError(f"{name}: {len(unknown)} gold ids not in the {lang} corpus, or no gold at all")
        for sid, text_ in sentences["source"].items():
            yield {"id": sid, "lang": lang, "side": "source", "text": text_, "gold": gold.get(sid, [])}
        for eid, text_ in sentences["en"].items():
            yield {"id": eid, "lang": lang, "side": "en", "text": text_, "gold": []}


def _bucc_sentences(text: str, name: str) -> dict[str, str]:
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t", 1)
        if len(parts) != 2:
            raise InputError(f"{name}, line {lineno}: expected id<TAB>sentence")
        out[parts[0]] = parts[1].strip()
    return out


def _bucc_files(src: Source, opts: dict[str, Any], lang: str, bucc_set: str) -> dict[str, tuple[str, str]]:
    """{side: (file name, text)} for source, en and gold, from a local mirror or the archives."""
    stem = f"{lang}-en.{bucc_set}"
    if src.kind == "local":
        root = src.local_root / src.path
        out = {}
        for side, suffix in (("source", lang), ("en", "en"), ("gold", "gold")):
            file = root / f"{stem}.{suffix}"
            if not file.is_file():
                raise InputError(f"missing data file {file}")
            out[side] = (str(file), file.read_text(encoding="utf-8"))
        return out
    import tarfile
    import tempfile
    import urllib.request

    base = opts.get("archives")
    if not base:
        raise InputError("tasks.bucc.options.archives: the URL or directory of the BUCC 2018 archives")
    archive = f"bucc2018-{lang}-en.{bucc_set}-gold.tar.bz2"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(base) / archive
        if not local.is_file():
            local = Path(tmp) / archive
            urllib.request.urlretrieve(f"{base.rstrip('/')}/{archive}", local)
        with tarfile.open(local, "r:bz2") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            out = {}
            for side, suffix in (("source", lang), ("en", "en"), ("gold", "gold")):
                name = f"{stem}.{suffix}"
                if name not in members:
                    raise InputError(f"{archive} has no {name}")
                out[side] = (f"{archive}:{name}", tar.extractfile(members[name]).read().decode("utf-8"))
        return out


@converter("xnli")
def _xnli(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
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
               "text_b": r["sentence2"], "label": _label_index(task, gold, f"xnli {split}")}
    _require_languages("xnli", split, counts)


@converter("xquad")
def _xquad(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    for lang in langs:
        for r in src.rows(f"XQuAD.{lang}", "validation"):
            yield _span_row(f"{r['id']}-{lang}", lang, r)


@converter("udpos")
def _udpos(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    task = get_task("udpos")
    hub_split = {"train": "train", "dev": "validation", "test": "test"}[split]
    for lang in (["en"] if split == "train" else langs):
        if split == "dev" and lang in task.dev_missing:
            LOG.warning("udpos: %s has no dev split in UD v2.5 (XTREME); dev scores leave it out", lang)
            continue
        if lang not in UD_LANGUAGE_NAMES:
            raise InputError(f"udpos: no UD language name known for {lang!r}")
        for i, r in enumerate(src.rows(f"udpos.{UD_LANGUAGE_NAMES[lang]}", hub_split)):
            tags = [task.labels[_label_index(task, t, f"udpos {lang} {split}")] for t in r["pos_tags"]]
            yield {"id": f"udpos-{split}-{lang}-{i}", "lang": lang, "tokens": list(r["tokens"]), "tags": tags}


@converter("tatoeba")
def _tatoeba(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    for lang in langs:
        if lang not in TATOEBA_CODES:
            raise InputError(f"tatoeba: no Tatoeba code known for {lang!r}")
        for i, r in enumerate(src.rows(f"tatoeba.{TATOEBA_CODES[lang]}", "validation")):
            # The XTREME copy keeps the files' trailing newlines; they are not part of the text.
            yield {"id": f"tatoeba-{lang}-{i}", "lang": lang, "source": r["source_sentence"].strip(),
                   "target": r["target_sentence"].strip()}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？।])")


def split_sentences(text: str) -> list[str]:
    """Sentences of a Wikipedia article: paragraphs split after sentence-final punctuation
    (Latin, CJK and Devanagari full stops)."""
    out = []
    for paragraph in text.split("\n"):
        out += [s.strip() for s in _SENTENCE_END.split(paragraph) if len(s.strip()) > 1]
    return out


@converter("mlm")
def _mlm(src: Source, split: str, langs: list[str], opts: dict[str, Any]) -> Iterable[Row]:
    """Multilingual Wikipedia sentences for MLM, as in XLM: language i gets a share
    q_i = p_i^alpha / sum_j p_j^alpha of the `sentences` total, p_i being its share of
    articles. Articles are read in a seeded shuffled order until the quota is filled."""
    snapshot, total = opts.get("snapshot", "20231101"), int(opts.get("sentences", 2_000_000))
    alpha, seed = float(opts.get("alpha", 0.3)), int(opts.get("seed", 0))
    sizes = {lang: src.num_rows(f"{snapshot}.{lang}", "train") for lang in langs}
    empty = [lang for lang, n in sizes.items() if n == 0]
    if empty:
        raise InputError(f"mlm: no Wikipedia articles for languages {empty}")
    weights = {lang: (n / sum(sizes.values())) ** alpha for lang, n in sizes.items()}
    for lang in langs:
        quota = max(1, round(total * weights[lang] / sum(weights.values())))
        n = 0
        for article in src.rows(f"{snapshot}.{lang}", "train", shuffle_seed=seed):
            for sentence in split_sentences(article["text"]):
                yield {"id": f"mlm-{lang}-{n}", "lang": lang, "text": sentence}
                n += 1
                if n == quota:
                    break
            if n == quota:
                break
        if n < quota:
            LOG.warning("mlm: %s has %d sentences, fewer than its quota %d", lang, n, quota)


def _require_languages(task: str, split: str, counts: dict[str, int]) -> None:
    missing = [lang for lang, n in counts.items() if n == 0]
    if missing:
        raise InputError(f"{task} {split}: no examples for languages {missing}; refusing to shrink the average")


# ---------------------------------------------------------------------------------------


def to_table(task: Task, rows: Iterable[Row]):
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "list<string>": pa.list_(pa.string()),
             "list<int64>": pa.list_(pa.int64())}
    fields = [("id", pa.string()), ("lang", pa.string())] + [
        (col, types[t]) for col, t in SCHEMAS[task.format].items()]
    schema = pa.schema(fields)
    rows = list(rows)
    return pa.Table.from_pylist(rows, schema=schema)


def read_table(path: str | Path, fmt: str | None = None):
    """Read a canonical Parquet file, failing with the file name when missing or corrupt."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing data file: {path}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"corrupt data file {path}: {err}") from err
    if fmt is not None:
        missing = set(SCHEMAS[fmt]) - set(table.column_names)
        if missing:
            raise InputError(f"data file {path} lacks columns {sorted(missing)} of format {fmt}")
    return table


def prepare(task_name: str, split: str, settings: dict[str, Any], output: str | Path) -> int:
    import pyarrow.parquet as pq

    task = get_task(task_name)
    if split not in task.splits:
        raise InputError(f"task {task_name} has no split {split!r} (has {list(task.splits)})")
    if task_name not in CONVERTERS:
        raise InputError(f"task {task_name}: no loader in this version of xstilts")
    root = settings.get("local_root")
    if root and not Path(root).is_absolute():  # relative to the repository, not the working directory
        root = str(REPO_ROOT / root)
    src = Source(settings["source"], settings["hub"]["path"], settings["hub"].get("revision", "main"), root)
    table = to_table(task, CONVERTERS[task_name](src, split, list(settings.get("languages", ["en"])),
                                                 settings.get("options", {})))
    if table.num_rows == 0:
        raise InputError(f"task {task_name} split {split}: no examples loaded from {settings['hub']['path']}")
    # Provenance travels with the data: where it came from and, from the Hub, which commit.
    provenance = {"task": task_name, "split": split, "source": src.kind, "path": src.path,
                  "revision": src.revision, "resolved_sha": src.resolved_sha()}
    table = table.replace_schema_metadata({"xstilts": json.dumps(provenance, sort_keys=True)})
    with atomic_path(output) as tmp:
        pq.write_table(table, tmp)
    langs = sorted(set(table.column("lang").to_pylist()))
    LOG.info("%s/%s: %d examples, languages %s -> %s", task_name, split, table.num_rows, langs, output)
    return table.num_rows


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--split", required=True)
    ap.add_argument("--settings", required=True, help="canonical JSON of the task's data settings")
    ap.add_argument("--output", required=True)
    args = ap.parse_args(argv)
    try:
        prepare(args.task, args.split, load_settings(args.settings), args.output)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
