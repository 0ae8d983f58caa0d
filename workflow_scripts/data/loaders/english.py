"""English intermediate tasks (docs/protocol.md §2) and XNLI's machine-translated MNLI, from the
Hub (GLUE, SNLI, ANLI, HellaSwag, CommonsenseQA, Cosmos QA, XNLI) or, for CCGbank, from
the user's own files."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from workflow_scripts.data.loaders.registry import Report, Row, choice_index, converter, label_index
from workflow_scripts.data.loaders.source import Source, extra_source, repo_path
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions
from workflow_scripts.spec.tasks import Task, get_task


@converter("mnli")
def _mnli(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation_matched"}[split]
    yield from _nli_rows(src, "mnli", hub_split, f"mnli-{split}", get_task("mnli"))


@converter("xnli_mt")
def _xnli_mt(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """facebook/xnli: one config per language; train is MNLI machine-translated by the XNLI authors."""
    task = get_task("xnli_mt")
    hub_split = {"train": "train", "dev": "validation"}[split]
    for lang in langs:
        for i, r in enumerate(src.rows(lang, hub_split)):
            yield {
                "id": f"xnli_mt-{split}-{lang}-{i}",
                "lang": lang,
                "text_a": r["premise"],
                "text_b": r["hypothesis"],
                "label": label_index(task, r["label"], f"xnli_mt {lang} {split}"),
            }


@converter("qqp")
def _qqp(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    task = get_task("qqp")
    hub_split = {"train": "train", "dev": "validation"}[split]
    for i, r in enumerate(src.rows("qqp", hub_split)):
        yield {
            "id": f"qqp-{split}-{r.get('idx', i)}",
            "lang": "en",
            "text_a": r["question1"],
            "text_b": r["question2"],
            "label": label_index(task, r["label"], f"qqp {split}"),
        }


@converter("hellaswag")
def _hellaswag(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(None, hub_split):
        if r["label"] in ("", None):  # the public test split has no labels
            continue
        endings = list(r["endings"])
        if len(endings) != 4:
            raise InputError(f"hellaswag {split} row {r['ind']}: expected 4 endings, got {len(endings)}")
        # Like the reference implementations: the context is ctx_a, each choice ctx_b + ending.
        yield {
            "id": f"hellaswag-{split}-{r['ind']}",
            "lang": "en",
            "context": r["ctx_a"],
            "choices": [f"{r['ctx_b']} {e}".strip() for e in endings],
            "label": choice_index(r["label"], 4, f"hellaswag {split} row {r['ind']}"),
        }


def _nli_rows(src: Source, name: str | None, hub_split: str, prefix: str, task: Task) -> Iterator[Row]:
    for i, r in enumerate(src.rows(name, hub_split)):
        if r["label"] == -1:  # SNLI: no annotator consensus; GLUE test: unlabeled
            continue
        uid = r.get("uid") or r.get("idx", i)
        yield {
            "id": f"{prefix}-{uid}",
            "lang": "en",
            "text_a": r["premise"],
            "text_b": r["hypothesis"],
            "label": label_index(task, r["label"], f"{prefix} {hub_split}"),
        }


@converter("anli_plus")
def _anli_plus(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """ANLI rounds 1-3 + MNLI + SNLI (label -1 dropped): 1,104,934 train / 22,857 dev."""
    task = get_task("anli_plus")
    glue, snli = (extra_source(src, opts, "anli_plus", name) for name in ("mnli", "snli"))
    anli_split, glue_split, snli_split = {
        "train": ("train", "train", "train"),
        "dev": ("dev", "validation_matched", "validation"),
    }[split]
    for rnd in (1, 2, 3):
        yield from _nli_rows(src, "plain_text", f"{anli_split}_r{rnd}", f"anli-r{rnd}-{split}", task)
    yield from _nli_rows(glue, "mnli", glue_split, f"mnli-{split}", task)
    yield from _nli_rows(snli, "plain_text", snli_split, f"snli-{split}", task)


@converter("commonsenseqa")
def _commonsenseqa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(opts.hub_name, hub_split):
        if not r["answerKey"]:  # the public test split has no answers
            continue
        labels = list(r["choices"]["label"])
        if r["answerKey"] not in labels or len(labels) != 5:
            raise InputError(f"commonsenseqa {split} {r['id']}: answerKey {r['answerKey']!r} not in {labels}")
        yield {
            "id": f"csqa-{r['id']}",
            "lang": "en",
            "context": r["question"],
            "choices": list(r["choices"]["text"]),
            "label": labels.index(r["answerKey"]),
        }


@converter("cosmosqa")
def _cosmosqa(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    hub_split = {"train": "train", "dev": "validation"}[split]
    for r in src.rows(opts.hub_name, hub_split):
        if int(r["label"]) == -1:  # the public test split has no labels
            continue
        # docs/protocol.md §2: the context and the question together are the first segment.
        yield {
            "id": f"cosmosqa-{r['id']}",
            "lang": "en",
            "context": f"{r['context']} {r['question']}",
            "choices": [r[f"answer{k}"] for k in range(4)],
            "label": choice_index(r["label"], 4, f"cosmosqa {split}"),
        }


@converter("ccg")
def _ccg(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """A user-provided CCGbank-derived file (CCGbank is licensed, LDC2005T13; never downloaded).

    ``options.path`` is a directory with ``train.tsv`` and ``dev.tsv``: one ``word<TAB>supertag``
    per line, a blank line between sentences (e.g. sections 02-21 and 00)."""
    root = repo_path(opts.path or "")
    file = root / f"{split}.tsv"
    if not opts.path or not file.is_file():
        raise InputError(
            f"CCG file {file} does not exist: CCGbank is licensed (LDC2005T13); put your "
            "CCGbank-derived train.tsv/dev.tsv there or set tasks.ccg.options.path"
        )
    report["release"] = {"name": "CCGbank-derived files (user-provided)", "location": str(root)}
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
