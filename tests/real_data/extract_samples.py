"""How the real-data samples beside this file were cut from the public releases.

Run with local git mirrors of the source repositories (see README.md for each source's
repository, revision and licence):

    python tests/real_data/extract_samples.py --mirrors /path/to/mirrors

where ``<mirrors>/<owner>+<name>/repo`` is a bare clone; ``--only iglue`` cuts one family of
samples. Each sample keeps the files' own bytes: whole sentences (CoNLL-U), whole paragraphs
(XQuAD and XQuAD-R JSON), whole lines (Tatoeba, IGLUE's JSON Lines).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
XQUAD_LANGS = ["ar", "de", "el", "en", "es", "hi", "ru", "th", "tr", "vi", "zh"]
# (repository, file at tag r2.5, sentences kept: the first n, plus the longest if asked)
UD_SAMPLES = [
    ("UD_German-GSD", "de_gsd-ud-test.conllu", 25, True),
    ("UD_Spanish-GSD", "es_gsd-ud-test.conllu", 20, False),
    ("UD_Arabic-PUD", "ar_pud-ud-test.conllu", 15, False),
    ("UD_Hebrew-HTB", "he_htb-ud-test.conllu", 15, False),
    ("UD_Greek-GDT", "el_gdt-ud-test.conllu", 15, False),
    ("UD_Greek-GDT", "el_gdt-ud-dev.conllu", 10, False),
    ("UD_Ancient_Greek-Perseus", "grc_perseus-ud-test.conllu", 10, False),
    ("UD_Chinese-GSD", "zh_gsd-ud-test.conllu", 15, False),
    ("UD_Classical_Chinese-Kyoto", "lzh_kyoto-ud-test.conllu", 10, False),
    ("UD_English-GUM", "en_gum-ud-train.conllu", 15, False),
    ("UD_English-ParTUT", "en_partut-ud-train.conllu", 15, False),
    ("UD_English-ESL", "en_esl-ud-train.conllu", 5, False),
    ("UD_English-PUD", "en_pud-ud-test.conllu", 10, False),
]
# XQuAD-R paragraphs kept, as (article, paragraph) positions, the same in every language:
# the first two of the first article (Arabic's first context starts with white space), a
# paragraph whose context starts with white space in en, es, hi and ru, and the Turkish
# paragraph whose sentence_breaks do not cut its own "sentences" field out of its context.
XQUAD_R_REVISION = "9bc8c7fb6dd8d01d72a05a93c2cb96882b0d299c"
XQUAD_R_PARAGRAPHS = [(0, 0), (0, 1), (9, 3), (14, 0)]
TATOEBA = ["deu", "rus", "cmn", "swh"]
TATOEBA_LINES = 25
# IGLUE (e-bug/iglue): (release folder, file pattern, languages, 0-based line ranges kept).
# xFlickr&CO's test files list 1,000 Flickr30k images, then 1,000 COCO images, in the same
# order in every language: the sample keeps 20 of each.
IGLUE_REVISION = "43cbac91513388d40b2c6d93925f00ca9fc08a98"
IGLUE_SAMPLES = {
    "xvnli": ("datasets/XVNLI/annotations", "{lang}/test.jsonl", ["en", "ar", "es", "fr", "ru"], [(0, 30)]),
    "marvl": ("datasets/marvl/zero_shot/annotations", "marvl-{lang}.jsonl", ["id", "sw", "ta", "tr", "zh"], [(0, 20)]),
    "xflickrco": ("datasets/xFlickrCO/annotations", "{lang}/test.jsonl", ["en", "de", "ja", "zh"], [(0, 20), (1000, 1020)]),
    # the one caption of the German and of the Indonesian file that is empty, with its
    # neighbours: IGLUE scores it (2,000 captions), so the loader must keep it
    "xflickrco_empty_captions": ("datasets/xFlickrCO/annotations", "{lang}/test.jsonl", ["de", "id"],
                                 {"de": [(1958, 1961)], "id": [(899, 902)]}),
    # the translate-test files: the same first rows, their text in Google's English translation
    "xvnli_gmt": ("datasets/XVNLI/annotations_machine-translate", "{lang}/test.jsonl", ["ar", "es", "fr", "ru"],
                  [(0, 30)]),
    "marvl_gmt": ("datasets/marvl/zero_shot/annotations_machine-translate", "marvl-{lang}_gmt.jsonl",
                  ["id", "sw", "ta", "tr", "zh"], [(0, 20)]),
    "xflickrco_gmt": ("datasets/xFlickrCO/annotations_machine-translate", "{lang}/test_gmt.jsonl", ["de", "ja", "zh"],
                      [(0, 20), (1000, 1020)]),
}

# IGLUE's few-shot files (whole, every shot count a protocol reads: the pool checks they are
# nested) of one language per target, and the first lines of the translated dev splits the
# protocol selects on. XVNLI's en/dev-<lang>_gmt.jsonl files are not in the stored copy.
IGLUE_FEW_SHOT_SAMPLES = {
    "xvnli_few_shot": ("datasets/XVNLI/annotations", [f"ar/train_{n}.jsonl" for n in (1, 5, 10, 20, 25, 48)], None),
    "marvl_few_shot": ("datasets/marvl/few_shot/annotations", [f"marvl-id_train{n}.jsonl" for n in (1, 2, 4, 10)], None),
    "xflickrco_few_shot": ("datasets/xFlickrCO/annotations", [f"de/train_{n}.jsonl" for n in (1, 5, 10, 25, 50, 100)],
                           None),
    "nlvr2_dev": ("datasets/nlvr2/annotations", ["dev.jsonl", "dev-id_gmt.jsonl"], 6),
    "flickr30k_gmt": ("datasets/flickr30k/annotations_machine-translate", ["valid-de_gmt.jsonl"], 4),
}


def git_show(mirrors: Path, repo: str, rev: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(mirrors / repo / "repo"), "show", f"{rev}:{path}"], check=True,
                          capture_output=True).stdout


def xquad(mirrors: Path) -> None:
    """Every paragraph that starts with whitespace in any language (the ones the Hub's
    conversion shifts), plus the first paragraph, in all 11 XTREME languages."""
    data = {lang: json.loads(git_show(mirrors, "deepmind+xquad", "HEAD", f"xquad.{lang}.json"))
            for lang in XQUAD_LANGS}
    keep = {(0, 0)}
    for doc in data.values():
        for a, article in enumerate(doc["data"]):
            for p, para in enumerate(article["paragraphs"]):
                if para["context"] != para["context"].lstrip():
                    keep.add((a, p))
    out = HERE / "xquad"
    out.mkdir(exist_ok=True)
    for lang, doc in data.items():
        articles = []
        for a, article in enumerate(doc["data"]):
            paras = [para for p, para in enumerate(article["paragraphs"]) if (a, p) in keep]
            if paras:
                articles.append({"title": article["title"], "paragraphs": paras})
        (out / f"xquad.{lang}.json").write_text(json.dumps({"data": articles, "version": doc.get("version", "1.0")},
                                                           ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def xquad_r(mirrors: Path) -> None:
    """Whole paragraphs of XQuAD-R (``XQUAD_R_PARAGRAPHS``) in all 11 languages, each
    paragraph's JSON unchanged (context, qas, sentence_breaks, sentences)."""
    out = HERE / "xquad_r"
    out.mkdir(exist_ok=True)
    for lang in XQUAD_LANGS:
        doc = json.loads(git_show(mirrors, "google-research-datasets+lareqa", XQUAD_R_REVISION, f"xquad-r/{lang}.json"))
        articles = []
        for a, article in enumerate(doc["data"]):
            paras = [para for p, para in enumerate(article["paragraphs"]) if (a, p) in XQUAD_R_PARAGRAPHS]
            if paras:
                articles.append({"paragraphs": paras, "title": article["title"]})
        (out / f"{lang}.json").write_text(json.dumps({"version": doc["version"], "data": articles}, ensure_ascii=False),
                                          encoding="utf-8")


def ud(mirrors: Path) -> None:
    for repo, name, first, longest in UD_SAMPLES:
        text = git_show(mirrors, f"UniversalDependencies+{repo}", "r2.5", name).decode("utf-8")
        sentences = [s for s in text.split("\n\n") if s.strip()]
        keep = set(range(min(first, len(sentences))))
        if longest:
            keep.add(max(range(len(sentences)), key=lambda k: sum(1 for line in sentences[k].splitlines()
                                                                  if line and line[0].isdigit())))
        out = HERE / "ud-treebanks-v2.5" / repo / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(sentences[k].strip("\n") + "\n\n" for k in sorted(keep)), encoding="utf-8")


def tatoeba(mirrors: Path) -> None:
    out = HERE / "tatoeba"
    out.mkdir(exist_ok=True)
    for code in TATOEBA:
        for side in (code, "eng"):
            name = f"tatoeba.{code}-eng.{side}"
            lines = git_show(mirrors, "facebookresearch+LASER", "HEAD", f"data/tatoeba/v1/{name}").decode("utf-8")
            (out / name).write_text("".join(lines.splitlines(keepends=True)[:TATOEBA_LINES]), encoding="utf-8")


def iglue(mirrors: Path) -> None:
    """Whole lines of IGLUE's XVNLI, MaRVL and xFlickr&CO test files, in the release's layout."""
    for name, (folder, pattern, langs, ranges) in IGLUE_SAMPLES.items():
        for lang in langs:
            rel = pattern.format(lang=lang)
            lines = git_show(mirrors, "e-bug+iglue", IGLUE_REVISION, f"{folder}/{rel}").splitlines(keepends=True)
            out = HERE / name / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            spans = ranges[lang] if isinstance(ranges, dict) else ranges
            out.write_bytes(b"".join(line for start, stop in spans for line in lines[start:stop]))
    for name, (folder, files, first) in IGLUE_FEW_SHOT_SAMPLES.items():
        for rel in files:
            lines = git_show(mirrors, "e-bug+iglue", IGLUE_REVISION, f"{folder}/{rel}").splitlines(keepends=True)
            out = HERE / name / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(b"".join(lines[:first]))


SAMPLES = {"xquad": xquad, "xquad_r": xquad_r, "ud": ud, "tatoeba": tatoeba, "iglue": iglue}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", type=Path, required=True)
    ap.add_argument("--only", choices=sorted(SAMPLES), help="cut only this family of samples")
    args = ap.parse_args()
    for name, cut in SAMPLES.items():
        if args.only in (None, name):
            cut(args.mirrors)


if __name__ == "__main__":
    main()
