"""IGLUE's multimodal targets (Bugliarello et al. 2022), read from the release's JSON Lines
(github.com/e-bug/iglue, ``datasets/``) in the folder the option ``path`` names:

- ``xvnli``: XVNLI, SNLI-VE test pairs in ar, es, fr, ru and English
  (``datasets/XVNLI/annotations/<lang>/test.jsonl``, 1,164 rows per language, the same
  ``pairID`` order in every language). Each row carries SNLI's fields with the caption
  (``sentence1``) and hypothesis (``sentence2``) in its language, and the Flickr30k image
  (``Flikr30kID``, the release's spelling). One test set gives the three arms of SNLI-VE
  (docs/protocol.md §9), per language: ``xvnli`` (the hypothesis, the image as premise),
  ``xvnli_caption`` (the translated caption, then the hypothesis) and
  ``xvnli_hypothesis_only``. They share ids and labels and differ in the premise only.
  Rows without a gold label (``-``; 14 per language) are dropped and counted: IGLUE scores
  them as wrong answers (evaluation/metrics.py: ``iglue_accuracy``).
- ``marvl``: MaRVL, NLVR2-style statements about a left and a right image in id, sw, ta, tr,
  zh (``datasets/marvl/zero_shot/annotations/marvl-<lang>.jsonl``; labels ``true``/``false``,
  mapped onto NLVR2's ``False``/``True`` so NLVR2's head carries over). Images are named as in
  MaRVL's image release, ``<lang>/images/<concept>/<file>``.
- ``xflickrco``: xFlickr&CO, image-text retrieval in de, es, id, ja, ru, tr, zh and English
  (``datasets/xFlickrCO/annotations/<lang>/test.jsonl``: 1,000 Flickr30k images, then 1,000
  COCO val2014 images, one caption each, the same image order in every language). One row per
  caption, as Flickr30k's rows; images are named under one root holding both releases'
  folders: ``flickr30k-images/<file>`` and ``coco-images/val2014/<file>``.

The Hub's parquet copies (``floschne/xvnli``, ``floschne/marvl``, ``floschne/xflickrco``) have
not been checked against the release, so the release files are required.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import Report, Row, converter, label_index, require_languages
from workflow_scripts.data.loaders.source import Source, jsonl_records, repo_path
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions
from workflow_scripts.spec.tasks import get_task

# Each task's file of one language's test split, relative to its release folder.
RELEASE = {
    "xvnli": ("datasets/XVNLI/annotations", "{lang}/test.jsonl"),
    "marvl": ("datasets/marvl/zero_shot/annotations", "marvl-{lang}.jsonl"),
    "xflickrco": ("datasets/xFlickrCO/annotations", "{lang}/test.jsonl"),
    # IGLUE's translate-test files: the same rows, their text machine-translated into English
    # (Google MT), each still labelled with its language
    "xvnli_gmt": ("datasets/XVNLI/annotations_machine-translate", "{lang}/test.jsonl"),
    "marvl_gmt": ("datasets/marvl/zero_shot/annotations_machine-translate", "marvl-{lang}_gmt.jsonl"),
    "xflickrco_gmt": ("datasets/xFlickrCO/annotations_machine-translate", "{lang}/test_gmt.jsonl"),
}
# xFlickr&CO's images under one image root: Flickr30k's JPEGs and COCO's val2014.
FLICKR30K_FOLDER = "flickr30k-images"
COCO_VAL_FOLDER = "coco-images/val2014"


def release_rows(task: str, opts: DataOptions, lang: str, report: Report) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) for every row of one language's release file of ``task`` (its text
    variant: XVNLI's arms read XVNLI's files)."""
    folder_in_repo, pattern = RELEASE[task]
    if not opts.path:
        raise InputError(
            f"{task}: set tasks.<task>.options.path to the folder of e-bug/iglue's {folder_in_repo} "
            f"(files {pattern.format(lang='<lang>')})"
        )
    file = repo_path(opts.path) / pattern.format(lang=lang)
    report.setdefault("release", {"path": opts.path, "files": []})["files"].append(pattern.format(lang=lang))
    if not file.is_file():
        raise InputError(f"{task} release file {file} does not exist (e-bug/iglue: {folder_in_repo}/{file.name})")
    yield from jsonl_records(file)


def _test_only(task: str, split: str) -> None:
    if split != "test":
        raise InputError(f"{task}: IGLUE's release has a test split only, not {split!r}")


# ----- XVNLI and its text arms -------------------------------------------------------------


def xvnli_record(where: str, r: dict[str, Any], lang: str, counts: Counter) -> dict[str, Any] | None:
    """(id, lang, image, caption, hypothesis, label index) of one XVNLI-layout row (the test
    sets, their translate-test copies, the few-shot files and translated dev splits), or None
    for a row without a gold label or text (counted)."""
    missing = [k for k in ("sentence1", "sentence2", "gold_label", "pairID", "Flikr30kID") if k not in r]
    if missing:
        raise InputError(f"{where}: lacks XVNLI's fields {missing}; has {sorted(r)}")
    if r["gold_label"] in ("-", "", None):
        counts[f"{lang}:no_gold_label"] += 1
        return None
    if not str(r["sentence1"]).strip() or not str(r["sentence2"]).strip():
        counts[f"{lang}:empty_text"] += 1
        LOG.warning("%s (%s): empty caption or hypothesis; dropped", where, r["pairID"])
        return None
    counts[f"{lang}:{r['gold_label']}"] += 1
    return {
        "id": f"{lang}-{r['pairID']}",
        "lang": lang,
        "image": f"{str(r['Flikr30kID']).split('.')[0]}.jpg",
        "caption": r["sentence1"].strip(),
        "hypothesis": r["sentence2"].strip(),
        "label": label_index(get_task("xvnli"), r["gold_label"], where),
    }


def xvnli_rows(
    split: str, langs: list[str], opts: DataOptions, report: Report, release: str = "xvnli"
) -> Iterator[dict[str, Any]]:
    """Every labelled XVNLI row of ``release`` (the test set, or its translate-test copy
    ``xvnli_gmt``), as ``xvnli_record`` reads it."""
    _test_only(release, split)
    counts: Counter = Counter()
    per_lang = dict.fromkeys(langs, 0)
    for lang in langs:
        for where, r in release_rows(release, opts, lang, report):
            row = xvnli_record(where, r, lang, counts)
            if row is not None:
                per_lang[lang] += 1
                yield row
    require_languages(release, split, per_lang)
    report["load_counts"] = dict(sorted(counts.items()))


def image_arm(r: dict[str, Any]) -> Row:
    return {"id": r["id"], "lang": r["lang"], "text_a": r["hypothesis"], "images": [r["image"]], "label": r["label"]}


def caption_arm(r: dict[str, Any]) -> Row:
    return {"id": r["id"], "lang": r["lang"], "text_a": r["caption"], "text_b": r["hypothesis"], "label": r["label"]}


def hypothesis_arm(r: dict[str, Any]) -> Row:
    return {"id": r["id"], "lang": r["lang"], "text_a": r["hypothesis"], "text_b": None, "label": r["label"]}


# ----- MaRVL --------------------------------------------------------------------------------


def marvl_images(row: dict[str, Any], lang: str) -> list[str]:
    """The left and right image of a MaRVL row, as MaRVL's image release lays them out. The
    test files name a file of the row's concept folder (``39-0.jpg``), the few-shot files the
    concept folder too (``39-Panci/39-n-5.jpg``)."""
    names = [str(row[side]) for side in ("left_img", "right_img")]
    return [f"{lang}/images/{n if '/' in n else row['concept'] + '/' + n}" for n in names]


def marvl_record(where: str, r: dict[str, Any], lang: str, counts: Counter) -> Row | None:
    """Statement, left and right image, True/False (NLVR2's label names) of one MaRVL-layout
    row, or None for a row without a boolean label or a statement (counted)."""
    missing = [k for k in ("id", "caption", "concept", "left_img", "right_img", "label") if k not in r]
    if missing:
        raise InputError(f"{where}: lacks MaRVL's fields {missing}; has {sorted(r)}")
    if r.get("language", lang) != lang:
        raise InputError(f"{where}: a {r['language']!r} row in the {lang!r} file")
    if not isinstance(r["label"], bool) or not str(r["caption"]).strip():
        counts[f"{lang}:no_label_or_caption"] += 1
        LOG.warning("%s (%s): label %r or an empty caption; dropped", where, r["id"], r["label"])
        return None
    counts[f"{lang}:{r['label']}"] += 1
    return {
        "id": str(r["id"]),
        "lang": lang,
        "text_a": r["caption"].strip(),
        "images": marvl_images(r, lang),
        "label": label_index(get_task("marvl"), str(r["label"]), where),
    }


def marvl_rows(
    split: str, langs: list[str], opts: DataOptions, report: Report, release: str = "marvl"
) -> Iterator[Row]:
    """Every labelled row of ``release`` (the test set, or its translate-test copy ``marvl_gmt``)."""
    _test_only(release, split)
    counts: Counter = Counter()
    per_lang = dict.fromkeys(langs, 0)
    for lang in langs:
        for where, r in release_rows(release, opts, lang, report):
            row = marvl_record(where, r, lang, counts)
            if row is not None:
                per_lang[lang] += 1
                yield row
    require_languages(release, split, per_lang)
    report["load_counts"] = dict(sorted(counts.items()))


# ----- xFlickr&CO ---------------------------------------------------------------------------


def xflickrco_image(img_path: str) -> str:
    """An xFlickr&CO image under the image root: COCO's val2014 or Flickr30k's folder."""
    name = img_path.split("/")[-1]
    return f"{COCO_VAL_FOLDER if name.startswith('COCO_') else FLICKR30K_FOLDER}/{name}"


def xflickrco_captions(where: str, r: dict[str, Any], lang: str, counts: Counter) -> list[Row]:
    """One row per caption of an xFlickr&CO-layout record (``sentences``, ``img_path``: the
    test sets, the few-shot files, Flickr30k's translated validation split). An empty caption
    is kept, as IGLUE scores it: its image stays in the similarity matrix."""
    if not isinstance(r.get("sentences"), list) or not r.get("img_path"):
        raise InputError(f"{where}: lacks xFlickr&CO's fields (sentences: a list, img_path); has {sorted(r)}")
    image = xflickrco_image(str(r["img_path"]))
    rows = []
    for k, sentence in enumerate(r["sentences"]):
        text = str(sentence).strip()
        if not text:
            counts[f"{lang}:empty_caption"] += 1
            LOG.warning("%s: caption %d is empty; scored as the empty text, as IGLUE does", where, k)
        rows.append({"id": f"{lang}-{r['img_path']}#{k}", "lang": lang, "text_a": text, "images": [image]})
    return rows


def xflickrco_rows(
    split: str, langs: list[str], opts: DataOptions, report: Report, release: str = "xflickrco"
) -> Iterator[Row]:
    """One row per caption with its image, in the release's order: IGLUE's retrieval ranks the
    images in the order of their first row (evaluation/retrieval.py: ``caption_image_index``).
    ``release``: the test set, or its translate-test copy ``xflickrco_gmt``."""
    _test_only(release, split)
    counts: Counter = Counter()
    per_lang = dict.fromkeys(langs, 0)
    for lang in langs:
        images: set[str] = set()
        for where, r in release_rows(release, opts, lang, report):
            rows = xflickrco_captions(where, r, lang, counts)
            images.update(row["images"][0] for row in rows)
            per_lang[lang] += len(rows)
            yield from rows
        counts[f"{lang}:images"] = len(images)
        counts[f"{lang}:captions"] = per_lang[lang]
    require_languages(release, split, per_lang)
    report["load_counts"] = dict(sorted(counts.items()))


# ----- the converters: each task's rows from its release, its translate-test copy's alike --


def _register(task: str, rows: Callable[..., Iterator[Row]], release: str, arm: Callable[[dict], Row] | None) -> None:
    def convert(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
        found = rows(split, langs, opts, report, release)
        return map(arm, found) if arm is not None else found

    converter(task)(convert)


for _suffix in ("", "_gmt"):  # the test set, and IGLUE's translate-test copy (tasks/*_gmt.yaml)
    _register(f"xvnli{_suffix}", xvnli_rows, f"xvnli{_suffix}", image_arm)
    _register(f"xvnli_caption{_suffix}", xvnli_rows, f"xvnli{_suffix}", caption_arm)
    _register(f"xvnli_hypothesis_only{_suffix}", xvnli_rows, f"xvnli{_suffix}", hypothesis_arm)
    _register(f"marvl{_suffix}", marvl_rows, f"marvl{_suffix}", None)
    _register(f"xflickrco{_suffix}", xflickrco_rows, f"xflickrco{_suffix}", None)
