"""SNLI-VE (Xie et al. 2019; docs/protocol.md §9) and its text-only controls, all read from the
same SNLI-VE annotation rows so that the arms share ids, labels and SNLI-VE's image-disjoint
splits and differ in the premise only:
- ``snli_ve``: the hypothesis, with the image (its file name) as premise;
- ``snli_caption``: the SNLI caption the Flickr30k image replaced (``sentence1``), then the
  hypothesis: SNLI restricted to SNLI-VE's rows;
- ``hypothesis_only``: the hypothesis alone.

Two row schemas are read: the release's ``snli_ve_{train,dev,test}.jsonl`` (SNLI's fields plus
``Flickr30K_ID``; ids are ``pairID``) and the Hub's ``HuggingFaceM4/SNLI-VE`` (``filename``,
``premise``, ``hypothesis``, ``label`` 0-2; ids are the row's position in its split, the same
for every arm since all read one file in its stored order). The option ``path`` reads the
release's files from a folder instead (the Hub's copy is a loading script, which ``datasets``
5 does not run). Rows without a gold label
(``-`` / -1) are dropped and counted, as SNLI's are.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import Report, Row, converter, label_index
from workflow_scripts.data.loaders.source import Source, jsonl_records, repo_path
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions
from workflow_scripts.spec.tasks import NLI_LABELS, get_task

HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


RELEASE_FILES = {"train": "snli_ve_train.jsonl", "dev": "snli_ve_dev.jsonl", "test": "snli_ve_test.jsonl"}
# IGLUE's copy of the English SNLI-VE files (e-bug/iglue, datasets/XVNLI/annotations/en): the
# same rows as <split>.jsonl, the image field spelt Flikr30kID.
IGLUE_RELEASE_FILES = {"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"}
# The image's Flickr30k id: the release's field, then IGLUE's spelling of it.
IMAGE_ID_FIELDS = ("Flickr30K_ID", "Flikr30kID")


def release_file(directory: str, split: str) -> Path:
    """The release's ``snli_ve_<split>.jsonl`` in ``directory`` (option ``path``), as
    necla-ml/SNLI-VE's generator writes it from SNLI 1.0 and Flickr30k, or IGLUE's
    ``<split>.jsonl``."""
    folder = repo_path(directory)
    for name in (RELEASE_FILES[split], IGLUE_RELEASE_FILES[split]):
        if (folder / name).is_file():
            return folder / name
    raise InputError(
        f"SNLI-VE release folder {folder} has neither {RELEASE_FILES[split]} nor IGLUE's "
        f"{IGLUE_RELEASE_FILES[split]}: build the files with necla-ml/SNLI-VE's "
        "data/snli_ve_generator.py (SNLI 1.0 + Flickr30k), or use IGLUE's datasets/XVNLI/annotations/en, "
        "and point tasks.<task>.options.path at the folder"
    )


def release_rows(directory: str, split: str) -> Iterator[dict[str, Any]]:
    """The rows of the release file of ``split`` (``release_file``)."""
    for _, record in jsonl_records(release_file(directory, split)):
        yield record


def _release_image(row: dict[str, Any], where: str) -> str:
    """The image file of a release row: its Flickr30k id + .jpg; a row without it is refused,
    not given an image named None."""
    found = next((row[f] for f in IMAGE_ID_FIELDS if row.get(f) not in (None, "")), None)
    if found is None:
        raise InputError(f"{where}: no image id (field {' or '.join(IMAGE_ID_FIELDS)}); has {sorted(row)}")
    return f"{found}.jpg"


def snli_ve_rows(
    src: Source, split: str, config: str | None, counts: Counter, release: str | None = None
) -> Iterator[dict[str, Any]]:
    """(id, image, premise caption, hypothesis, label) of every labelled SNLI-VE row, from
    the source (the Hub's schema, or a local mirror) or a release folder."""
    task = get_task("snli_caption")
    rows = release_rows(release, split) if release else src.rows(config, HUB_SPLITS[split])
    origin = str(release_file(release, split)) if release else f"snli_ve {split}"
    for i, r in enumerate(rows):
        where = f"{origin} row {i}"
        if "sentence2" in r:  # the release's schema (and IGLUE's copy of it)
            label, uid = r.get("gold_label"), r.get("pairID") or f"snli_ve-{split}-{i}"
            image, premise, hypothesis = _release_image(r, where), r.get("sentence1"), r["sentence2"]
        elif "hypothesis" in r:  # the Hub's
            label, uid = r.get("label"), f"snli_ve-{split}-{i}"
            image, premise, hypothesis = r.get("filename"), r.get("premise"), r["hypothesis"]
            if not image:
                raise InputError(f"{where}: no image (field filename); has {sorted(r)}")
        else:
            raise InputError(
                f"{where}: neither the release's fields (sentence1, sentence2, gold_label) "
                f"nor the Hub's (premise, hypothesis, label); has {sorted(r)}"
            )
        if label in ("-", "", None, -1):
            counts["no_gold_label"] += 1
            continue
        if not premise or not hypothesis:
            counts["empty_text"] += 1
            LOG.warning("%s (%s): empty premise or hypothesis; dropped", where, uid)
            continue
        yield {
            "id": uid,
            "image": image,
            "premise": premise,
            "hypothesis": hypothesis,
            "label": label_index(task, label, where),
        }


def _arm_rows(name: str, src: Source, split: str, opts: DataOptions, report: Report) -> Iterator[Row]:
    counts: Counter = Counter()
    if opts.path:  # provenance: the release folder, not a Hub commit
        report["release"] = {"path": opts.path, "file": release_file(opts.path, split).name}
    for r in snli_ve_rows(src, split, opts.hub_name, counts, opts.path):
        if name == "snli_ve":
            yield {"id": r["id"], "lang": "en", "text_a": r["hypothesis"], "images": [r["image"]], "label": r["label"]}
        else:
            with_premise = name == "snli_caption"
            yield {
                "id": r["id"],
                "lang": "en",
                "text_a": r["premise"] if with_premise else r["hypothesis"],
                "text_b": r["hypothesis"] if with_premise else None,
                "label": r["label"],
            }
        counts[NLI_LABELS[r["label"]]] += 1
    report["load_counts"] = dict(counts)


@converter("snli_ve")
def _snli_ve(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    return _arm_rows("snli_ve", src, split, opts, report)


@converter("snli_caption")
def _snli_caption(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    return _arm_rows("snli_caption", src, split, opts, report)


@converter("hypothesis_only")
def _hypothesis_only(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    return _arm_rows("hypothesis_only", src, split, opts, report)


# NLVR2's release (lil-lab/nlvr, nlvr2/data): JSON Lines per split, the images under
# <split>/ (train: <split>/<directory>/), named after the identifier without its sentence
# number: <split>-<set>-<pair>-img0.png (left) and -img1.png (right).
NLVR2_FILES = {"train": "train.json", "dev": "dev.json", "test": "test1.json"}


def nlvr2_images(row: dict[str, Any], where: str) -> list[str]:
    """The left and right image names of an NLVR2 row, relative to the image folder."""
    identifier = str(row.get("identifier", ""))
    parts = identifier.split("-")
    if len(parts) != 4:
        raise InputError(f"{where}: identifier {identifier!r} is not <split>-<set>-<pair>-<sentence>")
    folder = parts[0] if row.get("directory") in (None, "") else f"{parts[0]}/{row['directory']}"
    prefix = "-".join(parts[:3])
    return [f"{folder}/{prefix}-img0.png", f"{folder}/{prefix}-img1.png"]


@converter("nlvr2")
def _nlvr2(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """Statement, left and right image, True/False. Read from the release's folder (option
    ``path``): the Hub has no copy with a dev split (the_cauldron's nlvr2 is train only)."""
    if not opts.path:
        raise InputError(
            "nlvr2: set tasks.nlvr2.options.path to the folder of lil-lab/nlvr's nlvr2/data (train.json, dev.json)"
        )
    file = repo_path(opts.path) / NLVR2_FILES[split]
    report["release"] = {"path": opts.path, "file": NLVR2_FILES[split]}
    task = get_task("nlvr2")
    counts: Counter = Counter()

    def rows() -> Iterator[Row]:
        if not file.is_file():
            raise InputError(
                f"NLVR2 release file {file} does not exist (lil-lab/nlvr: nlvr2/data/{NLVR2_FILES[split]})"
            )
        for where, r in jsonl_records(file):
            if r.get("label") not in task.labels or not (r.get("sentence") or "").strip():
                counts["no_label_or_sentence"] += 1
                LOG.warning(
                    "%s (%s): label %r or an empty sentence; dropped", where, r.get("identifier"), r.get("label")
                )
                continue
            counts[r["label"]] += 1
            yield {
                "id": r["identifier"],
                "lang": "en",
                "text_a": r["sentence"].strip(),
                "images": nlvr2_images(r, where),
                "label": task.labels.index(r["label"]),
            }
        report["load_counts"] = dict(counts)

    return rows()


# VQA v2's release (visualqa.org): per split a questions file and an annotations file, the
# images in COCO's folders (train2014/COCO_train2014_<id:012d>.jpg).
VQA_SUBSETS = {"train": "train2014", "dev": "val2014"}


@converter("vqa_v2")
def _vqa_v2(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """Question, image, the 10 annotators' answers (normalised as the official evaluation
    does, data/vqa_answers.py). Read from the release's folder (option ``path``): the Hub's
    copies are a loading script (HuggingFaceM4/VQAv2) or lack the train split (lmms-lab/VQAv2)."""
    from workflow_scripts.data.vqa_answers import normalize_answer

    if not opts.path:
        raise InputError(
            "vqa_v2: set tasks.vqa_v2.options.path to the folder of VQA v2's question and annotation "
            "files (v2_OpenEnded_mscoco_<subset>_questions.json, v2_mscoco_<subset>_annotations.json)"
        )
    subset = VQA_SUBSETS[split]
    folder = repo_path(opts.path)
    files = {
        "questions": folder / f"v2_OpenEnded_mscoco_{subset}_questions.json",
        "annotations": folder / f"v2_mscoco_{subset}_annotations.json",
    }
    for kind, file in files.items():
        if not file.is_file():
            raise InputError(f"VQA v2 {kind} file {file} does not exist (visualqa.org, 'VQA v2' downloads)")
    report["release"] = {"path": opts.path, "files": sorted(f.name for f in files.values())}
    try:
        questions = json.loads(files["questions"].read_text(encoding="utf-8"))["questions"]
        annotations = json.loads(files["annotations"].read_text(encoding="utf-8"))["annotations"]
    except (json.JSONDecodeError, KeyError) as err:
        raise InputError(
            f"VQA v2 {subset}: {files['questions'].name} or {files['annotations'].name} is not the "
            f"release's JSON ({err})"
        ) from None
    answers_of = {a["question_id"]: [normalize_answer(x["answer"]) for x in a.get("answers", [])] for a in annotations}
    counts: Counter = Counter()
    for q in questions:
        answers = [a for a in answers_of.get(q["question_id"], []) if a]
        if not answers or not str(q.get("question", "")).strip():
            counts["no_answers_or_question"] += 1
            continue
        counts["questions"] += 1
        yield {
            "id": str(q["question_id"]),
            "lang": "en",
            "text_a": q["question"].strip(),
            "images": [f"{subset}/COCO_{subset}_{int(q['image_id']):012d}.jpg"],
            "answers": answers,
        }
    if counts["no_answers_or_question"]:
        LOG.warning("vqa_v2 %s: %d questions without answers or text dropped", split, counts["no_answers_or_question"])
    report["load_counts"] = dict(counts)


# Karpathy's splits of Flickr30k (dataset_flickr30k.json, from his neuraltalk2 release): one
# record per image with its split and five captions; the images are Flickr30k's JPEGs, the
# folder SNLI-VE reads too (so the feature cache serves both).
KARPATHY_SPLITS = {"train": "train", "dev": "val", "test": "test"}


@converter("flickr30k")
def _flickr30k(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """One row per caption: the caption and its image. Read from Karpathy's split file in the
    folder the option ``path`` names (the Hub's nlphuji/flickr30k carries the images inline)."""
    if not opts.path:
        raise InputError(
            "flickr30k: set tasks.flickr30k.options.path to the folder of Karpathy's dataset_flickr30k.json"
        )
    file = repo_path(opts.path) / "dataset_flickr30k.json"
    if not file.is_file():
        raise InputError(
            f"Flickr30k split file {file} does not exist (Karpathy's caption_datasets: dataset_flickr30k.json)"
        )
    try:
        records = json.loads(file.read_text(encoding="utf-8"))["images"]
    except (json.JSONDecodeError, KeyError) as err:
        raise InputError(f"{file}: not Karpathy's split file ({err})") from None
    report["release"] = {"path": opts.path, "file": file.name}
    counts: Counter = Counter()
    for record in records:
        if record.get("split") != KARPATHY_SPLITS[split]:
            continue
        counts["images"] += 1
        for k, sentence in enumerate(record.get("sentences", [])):
            text = str(sentence.get("raw", "")).strip()
            if not text:
                counts["empty_caption"] += 1
                continue
            counts["captions"] += 1
            yield {"id": f"{record['filename']}#{k}", "lang": "en", "text_a": text, "images": [record["filename"]]}
    report["load_counts"] = dict(counts)
