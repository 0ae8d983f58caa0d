"""IGLUE's few-shot pools (spec/few_shot.py): for each target with a few-shot protocol, one
task whose ``train`` split holds every shot file of every language and whose ``dev`` split is
the English dev split machine-translated into each language (IGLUE's ``dev-mt`` selection),
read from the release (github.com/e-bug/iglue, ``datasets/``):

- ``xvnli_few_shot`` (and the text arms ``xvnli_caption_few_shot``,
  ``xvnli_hypothesis_only_few_shot``): ``XVNLI/annotations/<lang>/train_<N>.jsonl`` and
  ``XVNLI/annotations/en/dev-<lang>_gmt.jsonl``, XVNLI's fields;
- ``marvl_few_shot``: ``marvl/few_shot/annotations/marvl-<lang>_train<N>.jsonl`` (MaRVL's
  fields, its own images) and NLVR2's English dev split, ``nlvr2/annotations/dev.jsonl``
  (NLVR2's fields and dev images: the option ``dev_path`` names that folder): IGLUE's MaRVL
  scripts select on it (``few_shot.selection: english``; the translated
  ``dev-<lang>_gmt.jsonl`` files are read under ``selection: translated``);
- ``xflickrco_few_shot``: ``xFlickrCO/annotations/<lang>/train_<N>.jsonl`` and
  ``flickr30k/annotations_machine-translate/valid-<lang>_gmt.jsonl`` (``dev_path``).

The shot files of a language are nested (``train_5`` holds ``train_1``'s rows): each row is
kept once, tagged with the fewest shots whose file holds it (column ``shots``), so the N-shot
training set is the rows with ``shots <= N``. A file that drops a row of the smaller one stops
the step, naming both files: the tag would not describe it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.data.loaders.iglue import (
    caption_arm,
    hypothesis_arm,
    image_arm,
    marvl_record,
    xflickrco_captions,
    xvnli_record,
)
from workflow_scripts.data.loaders.multimodal import nlvr2_images
from workflow_scripts.data.loaders.registry import Report, Row, converter, require_languages
from workflow_scripts.data.loaders.source import Source, jsonl_records, repo_path
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions
from workflow_scripts.spec.tasks import few_shot_target, get_task

# A pool's files, relative to its options' path (shots) and dev_path (the translated dev; XVNLI:
# the same folder), and the key that identifies a row across the nested shot files.
SHOT_FILES = {
    "xvnli": ("datasets/XVNLI/annotations", "{lang}/train_{shots}.jsonl", "pairID"),
    "marvl": ("datasets/marvl/few_shot/annotations", "marvl-{lang}_train{shots}.jsonl", "id"),
    "xflickrco": ("datasets/xFlickrCO/annotations", "{lang}/train_{shots}.jsonl", "img_path"),
}
DEV_FILES = {
    "xvnli": ("datasets/XVNLI/annotations", "en/dev-{lang}_gmt.jsonl"),
    "marvl": ("datasets/nlvr2/annotations", "dev-{lang}_gmt.jsonl"),
    "xflickrco": ("datasets/flickr30k/annotations_machine-translate", "valid-{lang}_gmt.jsonl"),
}
# The English dev split, for a protocol that selects on it (few_shot.selection: english).
ENGLISH_DEV_FILES = {"marvl": ("datasets/nlvr2/annotations", "dev.jsonl")}


def _file(folder: str | None, pattern: str, option: str, pool: str, in_repo: str, **names: Any) -> Path:
    if not folder:
        raise InputError(f"{pool}: set tasks.{pool}.options.{option} to the folder of e-bug/iglue's {in_repo}")
    file = repo_path(folder) / pattern.format(**names)
    if not file.is_file():
        raise InputError(
            f"{pool} release file {file} does not exist (e-bug/iglue: {in_repo}/{pattern.format(**names)})"
        )
    return file


def shot_records(pool: str, release: str, opts: DataOptions, lang: str, report: Report):
    """(where, record, shots) of every row of one language's shot files, each row once, with
    the fewest shots whose file holds it."""
    protocol = few_shot_target(pool).few_shot
    in_repo, pattern, key = SHOT_FILES[release]
    first_seen: dict[str, int] = {}
    smaller: tuple[Path, set[str]] | None = None
    for shots in protocol.shots:
        file = _file(opts.path, pattern, "path", pool, in_repo, lang=lang, shots=shots)
        report.setdefault("release", {"path": opts.path, "files": []})["files"].append(file.name)
        records = list(jsonl_records(file))
        keys = {str(r.get(key)) for _, r in records}
        if smaller is not None and not smaller[1] <= keys:
            lost = sorted(smaller[1] - keys)
            raise InputError(
                f"{file}: lacks {len(lost)} rows of {smaller[0]} (e.g. {key} {lost[0]!r}); IGLUE's shot "
                "files are nested, and the pool tags each row with the fewest shots holding it"
            )
        for where, r in records:
            if str(r.get(key)) not in first_seen:
                first_seen[str(r.get(key))] = shots
                yield where, r, shots
        smaller = (file, keys)


def dev_records(pool: str, release: str, opts: DataOptions, lang: str, report: Report):
    """The rows of the dev split that selects the learning rate in ``lang`` (en: English)."""
    if lang == "en":
        if release not in ENGLISH_DEV_FILES:
            raise InputError(f"{pool}: no English dev split is read for {release}'s few-shot protocol")
        in_repo, pattern = ENGLISH_DEV_FILES[release]
    else:
        in_repo, pattern = DEV_FILES[release]
    file = _file(opts.dev_path or opts.path, pattern, "dev_path", pool, in_repo, lang=lang)
    report.setdefault("release", {"path": opts.path, "files": []})["files"].append(file.name)
    yield from jsonl_records(file)


def nlvr2_dev_record(where: str, r: dict[str, Any], lang: str, counts: Counter) -> Row | None:
    """A row of NLVR2's dev split translated into ``lang`` (NLVR2's fields and images)."""
    labels = get_task("marvl").labels
    if r.get("label") not in labels or not str(r.get("sentence") or "").strip():
        counts[f"{lang}:no_label_or_sentence"] += 1
        return None
    counts[f"{lang}:{r['label']}"] += 1
    return {
        "id": f"{lang}-{r['identifier']}",
        "lang": lang,
        "text_a": r["sentence"].strip(),
        "images": nlvr2_images(r, where),
        "label": labels.index(r["label"]),
    }


# Per release: the record reader of its shot files and of its translated dev split; each
# returns the rows of one record (none: dropped and counted).
def _one(read: Callable[..., Row | None]) -> Callable[..., list[Row]]:
    return lambda where, r, lang, counts: [row] if (row := read(where, r, lang, counts)) is not None else []


READERS: dict[str, tuple[Callable[..., list[Row]], Callable[..., list[Row]]]] = {
    "xvnli": (_one(xvnli_record), _one(xvnli_record)),
    "marvl": (_one(marvl_record), _one(nlvr2_dev_record)),
    "xflickrco": (xflickrco_captions, xflickrco_captions),
}


def pool_rows(
    pool: str, release: str, split: str, langs: list[str], opts: DataOptions, report: Report
) -> Iterator[dict[str, Any]]:
    """The pool's rows of ``split``: the shots (``train``, each with ``shots``) or the
    translated dev split (``dev``), in every language of ``langs``."""
    if split not in ("train", "dev"):
        raise InputError(f"{pool}: IGLUE's few-shot pools have a train and a dev split, not {split!r}")
    read_shot, read_dev = READERS[release]
    if split == "dev" and few_shot_target(pool).few_shot.selection == "english":
        langs = ["en"]  # one English dev split selects every language's model
    counts: Counter = Counter()
    per_lang = dict.fromkeys(langs, 0)
    for lang in langs:
        if split == "train":
            found = (
                {**row, "shots": shots}
                for where, r, shots in shot_records(pool, release, opts, lang, report)
                for row in read_shot(where, r, lang, counts)
            )
        else:
            found = (
                row
                for where, r in dev_records(pool, release, opts, lang, report)
                for row in read_dev(where, r, lang, counts)
            )
        for row in found:
            per_lang[lang] += 1
            yield row
    require_languages(pool, split, per_lang)
    report["load_counts"] = dict(sorted(counts.items()))


def _register(pool: str, release: str, arm: Callable[[dict], Row] | None) -> None:
    def convert(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
        rows = pool_rows(pool, release, split, langs, opts, report)
        if arm is None:
            return rows
        return ({**arm(r), "shots": r["shots"]} if "shots" in r else arm(r) for r in rows)

    converter(pool)(convert)


_register("xvnli_few_shot", "xvnli", image_arm)
_register("xvnli_caption_few_shot", "xvnli", caption_arm)
_register("xvnli_hypothesis_only_few_shot", "xvnli", hypothesis_arm)
_register("marvl_few_shot", "marvl", None)
_register("xflickrco_few_shot", "xflickrco", None)
