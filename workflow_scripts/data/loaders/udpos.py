"""UD-POS as XTREME built it from the UD v2.5 release, or (an option) from the Hub.

XTREME's preprocessing (``scripts/download_data.sh`` -> ud-conversion-tools
``conllu_to_conll.py --replace_subtokens_with_fused_forms`` -> ``utils_preprocess.py``),
reproduced here on the ``.conllu`` files:

- files are chosen by the language code before the first ``_`` of their name (``el_gdt-…``
  is Greek, ``grc_perseus-…`` is Ancient Greek and never Greek; ``lzh_*`` is never ``zh``);
  all treebanks of a language are concatenated per split in sorted file-name order, so
  each language's split is every treebank file of that language and split (train: English,
  plus the others when an in-language setting trains on them);
- a multiword token (``3-4 zum``) replaces its syntactic words by one word, the fused form,
  carrying the UPOS of the span's head: the one word of the span with the fewest ancestors
  in the sentence graph (basic heads plus the enhanced ``DEPS`` edges, as the converter
  builds it), or, on a tie, the best of the tied words by the converter's per-language POS
  precedence list; empty nodes (``8.1``) are skipped;
- a sentence whose words are all, or all but one, ``_`` (treebanks distributed without
  their text) is dropped;
- U+200C and spaces inside a word are removed.

The converter crashes where a tie involves a UPOS missing from its precedence list (which
loses the file in XTREME); here the first tied word is taken instead, and counted.

``options.ud_release`` names the release: the LINDAT URL of ``ud-treebanks-v2.5.tgz``
(downloaded once into the cache), a local copy of that archive, or its unpacked directory.
``options.ud_release_extra`` ({release, languages, name}) reads some languages from a second
release instead, converted the same way: XTREME-R's lt pl uk wo ro from UD v2.7
(``UD_V27_URL``); the load report names each language's source (``sources``).
Without it, the Hub's ``udpos.<Language>`` configs are read; they select treebanks by
language *name* (Greek takes Ancient Greek, Chinese takes Classical Chinese) and keep split
syntactic words, so their scores are not comparable with XTREME's.
"""

from __future__ import annotations

import io
import itertools
import tarfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import Report, Row, converter, label_index, require_languages
from workflow_scripts.data.loaders.source import Source, fetch_archive, file_sha256, is_url
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions, UdReleaseExtra
from workflow_scripts.spec.tasks import get_task

UD_V25_URL = "https://lindat.mff.cuni.cz/repository/xmlui/bitstream/handle/11234/1-3105/ud-treebanks-v2.5.tgz"
# XTREME-R's five more languages come from UD v2.7 (google-research/xtreme
# scripts/download_data.sh, download_treebank xtreme-r), converted the same way.
UD_V27_URL = "https://lindat.mff.cuni.cz/repository/xmlui/bitstream/handle/11234/1-3424/ud-treebanks-v2.7.tgz"
XTREME_R_UD27_LANGUAGES = ("lt", "pl", "uk", "wo", "ro")
# XTREME names udpos configs on the Hub by language name.
UD_LANGUAGE_NAMES = {
    "af": "Afrikaans",
    "ar": "Arabic",
    "bg": "Bulgarian",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "et": "Estonian",
    "eu": "Basque",
    "fa": "Persian",
    "fi": "Finnish",
    "fr": "French",
    "he": "Hebrew",
    "hi": "Hindi",
    "hu": "Hungarian",
    "id": "Indonesian",
    "it": "Italian",
    "ja": "Japanese",
    "kk": "Kazakh",
    "ko": "Korean",
    "mr": "Marathi",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ru": "Russian",
    "ta": "Tamil",
    "te": "Telugu",
    "th": "Thai",
    "tl": "Tagalog",
    "tr": "Turkish",
    "ur": "Urdu",
    "vi": "Vietnamese",
    "yo": "Yoruba",
    "zh": "Chinese",
}
# ud-conversion-tools' head precedence among tied words of a multiword token, per language.
_DEFAULT_PRECEDENCE = (
    "VERB",
    "NOUN",
    "PROPN",
    "PRON",
    "ADJ",
    "NUM",
    "ADV",
    "INTJ",
    "AUX",
    "ADP",
    "DET",
    "PART",
    "CCONJ",
    "SCONJ",
    "X",
    "PUNCT",
)
POS_PRECEDENCE = {
    "es": ("VERB", "AUX", "PRON", "ADP", "DET"),
    "fr": ("VERB", "AUX", "PRON", "NOUN", "ADJ", "ADV", "ADP", "DET", "PART", "SCONJ", "CONJ"),
    "it": ("VERB", "AUX", "ADV", "PRON", "ADP", "DET", "INTJ"),
}


@dataclass
class Sentence:
    words: list[str]
    tags: list[str]
    where: str  # file and line of the sentence's first token


# ----- one sentence: fused forms and the head of each span -----------------------------------


def _ancestors(parents: dict[Any, set[Any]], node: Any) -> int:
    seen: set[Any] = set()
    stack = list(parents.get(node, ()))
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(parents.get(n, ()))
    return len(seen)


def _span_head(span: list[int], upos: dict[int, str], parents: dict[Any, set[Any]], lang: str, counts: Counter) -> int:
    depth = [_ancestors(parents, w) for w in span]
    highest = [w for w, d in zip(span, depth) if d == min(depth)]
    if len(highest) == 1:
        return highest[0]
    precedence = POS_PRECEDENCE.get(lang, _DEFAULT_PRECEDENCE)
    ranked = [w for w in highest if upos[w] in precedence]
    if len(ranked) < len(highest):
        counts["fused_head_fallback"] += 1
        if not ranked:
            return highest[0]
    return min(ranked, key=lambda w: (precedence.index(upos[w]), span.index(w)))


def _parse_head(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def convert_sentence(lines: list[tuple[int, str]], lang: str, where: str, counts: Counter) -> Sentence:
    """Token lines (line number, text) of one sentence -> XTREME's words and UPOS tags."""
    forms: dict[int, str] = {}
    upos: dict[int, str] = {}
    parents: dict[Any, set[Any]] = {}
    spans: list[tuple[int, int, str]] = []
    for lineno, line in lines:
        cols = line.split("\t")
        if len(cols) != 10:
            raise InputError(f"{where}, line {lineno}: expected 10 tab-separated CoNLL-U columns, got {len(cols)}")
        tid = cols[0]
        if "." in tid:  # an empty node of the enhanced graph: not a word
            continue
        if not tid.replace("-", "", 1).isdigit():
            raise InputError(f"{where}, line {lineno}: token id {tid!r} is not a number or a range")
        if "-" in tid:
            a, b = tid.split("-", 1)
            spans.append((int(a), int(b), cols[1]))
            continue
        k = int(tid)
        forms[k], upos[k] = cols[1], cols[3]
        parents.setdefault(k, set()).add(_parse_head(cols[6]))
        if cols[8] != "_":
            for dep in cols[8].split("|"):
                head = dep.split(":", 1)[0]
                if head.isdigit():
                    parents[k].add(int(head))
    heads = {}
    for a, b, fused in spans:
        span = [w for w in range(a, b + 1) if w in forms]
        if not span:
            raise InputError(f"{where}: multiword token {a}-{b} covers no words")
        heads[_span_head(span, upos, parents, lang, counts)] = (span, fused)
        counts["multiword_tokens"] += 1
    dropped = {w for span, _ in heads.values() for w in span} - set(heads)
    words, tags = [], []
    for k in sorted(forms):
        if k in dropped:
            continue
        form = heads[k][1] if k in heads else forms[k]
        words.append(form.strip())
        tags.append(upos[k].strip())
    return Sentence(words, tags, where)


def read_conllu(stream: TextIO, name: str, lang: str, counts: Counter) -> Iterator[Sentence]:
    """Sentences of one CoNLL-U file, converted; text-less sentences dropped and counted."""
    block: list[tuple[int, str]] = []
    for lineno, raw in enumerate(itertools.chain(stream, [""]), 1):
        line = raw.rstrip("\n")
        if line.strip():
            if not line.startswith("#"):
                block.append((lineno, line))
            continue
        if not block:
            continue
        try:
            sentence = convert_sentence(block, lang, f"{name}, line {block[0][0]}", counts)
        except InputError as err:  # one broken sentence must not cost the whole split
            counts["sentences_unreadable"] += 1
            LOG.warning("udpos: sentence dropped: %s", err)
            continue
        finally:
            block = []
        empty = sum(w == "_" for w in sentence.words)
        if empty and empty >= len(sentence.words) - 1:
            counts["sentences_without_text"] += 1
            continue
        sentence.words = ["".join(w.replace("\u200c", "").split(" ")) for w in sentence.words]
        yield sentence


# ----- the release: files per language and split -------------------------------------------------


def release_files(root: Path, lang: str, split: str) -> Iterator[tuple[str, TextIO]]:
    """(name, text stream) of each ``{lang}_*-ud-{split}.conllu`` in the release, sorted by
    file name; ``root`` is the ``.tgz`` or the unpacked directory."""
    if root.is_dir():
        files = sorted((p for p in root.glob("*/*.conllu") if _matches(p.name, lang, split)), key=lambda p: p.name)
        for path in files:
            with path.open(encoding="utf-8") as f:
                yield f"{path.parent.name}/{path.name}", f
        return
    try:
        with tarfile.open(root, "r:*") as tar:
            members = sorted(
                (m for m in tar if m.isfile() and _matches(Path(m.name).name, lang, split)),
                key=lambda m: Path(m.name).name,
            )
            for m in members:
                with io.TextIOWrapper(tar.extractfile(m), encoding="utf-8") as f:
                    yield f"{root.name}:{m.name}", f
    except tarfile.TarError as err:
        raise InputError(f"UD release {root} is not a readable tar archive: {err}") from err


def file_split(name: str) -> str | None:
    """A release file's split, decided as XTREME does (the first of train/dev/test in its name)."""
    return next((split for split in ("train", "dev", "test") if split in name), None)


def _matches(name: str, lang: str, split: str) -> bool:
    # The language is the code before the first "_": el_gdt is Greek, grc_perseus never is.
    return name.endswith(".conllu") and name.split("_", 1)[0] == lang and file_split(name) == split


@converter("udpos")
def _udpos(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    task = get_task("udpos")
    wanted = [lang for lang in langs if not (split == "dev" and lang in task.dev_missing)]
    if split == "dev" and set(langs) & task.dev_missing:
        LOG.warning(
            "udpos: %s have no dev split in UD v2.5 (XTREME); dev scores leave them out",
            sorted(set(langs) & task.dev_missing),
        )
    extra = extra_release(opts)
    extra_langs = [lang for lang in wanted if extra is not None and lang in extra.languages]
    main_langs = [lang for lang in wanted if lang not in extra_langs]
    files: dict[str, list[str]] = {}
    per_lang: dict[str, dict[str, int]] = {}
    sources: dict[str, str] = {}
    if main_langs and not opts.ud_release:
        report["udpos_source"] = "hub"
        yield from _udpos_hub(src, split, main_langs)
        sources.update({lang: f"{src.path} udpos.{UD_LANGUAGE_NAMES[lang]}" for lang in main_langs})
    elif main_langs:
        location = opts.ud_release
        root = fetch_archive(location)
        report["udpos_source"] = "ud_release"
        report["release"] = {
            "name": "UD v2.5",
            "location": location,
            "sha256": file_sha256(root) if root.is_file() else None,
        }
        yield from _release_rows(root, split, main_langs, files, per_lang)
        sources.update(dict.fromkeys(main_langs, f"UD v2.5 release {location}"))
        if is_url(location):
            LOG.info("UD release %s cached at %s", location, root)
    if extra_langs:
        root = fetch_archive(extra.release)
        report["release_extra"] = {
            "name": extra.name,
            "location": extra.release,
            "languages": extra_langs,
            "sha256": file_sha256(root) if root.is_file() else None,
        }
        if not main_langs:  # no Hub data read: the provenance is the release's
            report["release"] = report["release_extra"]
            report["udpos_source"] = "ud_release_extra"
        yield from _release_rows(root, split, extra_langs, files, per_lang)
        sources.update(dict.fromkeys(extra_langs, f"{extra.name} release {extra.release}"))
    if files:
        report["udpos_files"] = files
        report["udpos_counts"] = per_lang
    report["sources"] = dict(sorted(sources.items()))
    require_languages("udpos", split, {lang: per_lang[lang].get("sentences", 0) for lang in per_lang})


def extra_release(opts: DataOptions) -> UdReleaseExtra | None:
    """``options.ud_release_extra``: {release: URL, archive or directory of a second UD
    release, languages: [codes read from it instead], name: its name for the report}, its
    languages and name defaulted. XTREME-R reads lt pl uk wo ro from UD v2.7
    (``UD_V27_URL``) and the rest from v2.5."""
    extra = opts.ud_release_extra
    if extra is None:
        return None
    if not extra.release:
        raise InputError("udpos: options.ud_release_extra.release is empty (the URL, archive or directory)")
    return extra.replace(
        languages=XTREME_R_UD27_LANGUAGES if extra.languages is None else extra.languages,
        name=extra.name or "UD v2.7",
    )


def _release_rows(
    root: Path, split: str, langs: list[str], files: dict[str, list[str]], per_lang: dict[str, dict[str, int]]
) -> Iterator[Row]:
    """Canonical rows of ``langs`` from one UD release (archive or directory), every file of
    each language converted as XTREME's preprocessing does; files and counts per language
    go into ``files`` and ``per_lang``."""
    task = get_task("udpos")
    for lang in langs:
        counts: Counter = Counter()
        files[lang] = []
        for name, stream in release_files(root, lang, split):
            files[lang].append(name)
            for sentence in read_conllu(stream, name, lang, counts):
                try:
                    tags = [task.labels[label_index(task, t, sentence.where)] for t in sentence.tags]
                except InputError as err:
                    counts["sentences_bad_tag"] += 1
                    LOG.warning("udpos %s: sentence dropped: %s", split, err)
                    continue
                yield {
                    "id": f"udpos-{split}-{lang}-{counts['sentences']}",
                    "lang": lang,
                    "tokens": sentence.words,
                    "tags": tags,
                }
                counts["sentences"] += 1
                counts["words"] += len(sentence.words)
        per_lang[lang] = dict(sorted(counts.items()))
        LOG.info(
            "udpos %s %s: %d sentences, %d words from %s",
            split,
            lang,
            counts["sentences"],
            counts["words"],
            files[lang] or "no files",
        )
        if counts["fused_head_fallback"]:
            LOG.warning(
                "udpos %s %s: %d multiword tokens tie on UPOS outside the converter's precedence list; "
                "the first tied word gives the tag",
                split,
                lang,
                counts["fused_head_fallback"],
            )


def _udpos_hub(src: Source, split: str, langs: list[str]) -> Iterator[Row]:
    task = get_task("udpos")
    hub_split = {"train": "train", "dev": "validation", "test": "test"}[split]
    for lang in langs:
        if lang not in UD_LANGUAGE_NAMES:
            hint = (
                " (google/xtreme has udpos configs for XTREME's languages only; XTREME-R reads this one from "
                "UD v2.7: set options.ud_release_extra)"
                if lang in XTREME_R_UD27_LANGUAGES
                else ""
            )
            raise InputError(f"udpos: no UD language name known for {lang!r}{hint}")
        for i, r in enumerate(src.rows(f"udpos.{UD_LANGUAGE_NAMES[lang]}", hub_split)):
            tags = [task.labels[label_index(task, t, f"udpos {lang} {split}")] for t in r["pos_tags"]]
            yield {"id": f"udpos-{split}-{lang}-{i}", "lang": lang, "tokens": list(r["tokens"]), "tags": tags}
