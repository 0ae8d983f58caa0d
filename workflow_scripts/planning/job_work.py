"""What one job of the grid computes, in tokens through its backbone, from what the grid
already knows: the examples of each split it reads (the prepared file where it exists, else the
task's documented ``sizes``), each task's ``max_length`` (plus an image task's visual tokens)
and choices, the steps the training loop will take (training/sampling.py's own count), its dev
evaluations, and the backbone's shape (``parameters`` and ``architecture``, as the memory
planner reads them). job_cost.py turns the tokens into GPU time.

Every function returns None where something it needs is unknown (a demo backbone without a
parameter count, a task without sizes and without prepared data): that job has no estimate,
and its time limit stays the configured one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from workflow_scripts.planning import memory_model, memory_plan
from workflow_scripts.planning.job_cost import Shape, Tokens, Translator
from workflow_scripts.spec.backbone_entry import entry_of
from workflow_scripts.spec.data_map import DataMap, DataRef
from workflow_scripts.spec.formats import get_format, head_kind
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.phase_steps import accumulation_steps, steps_for_sizes, task_probabilities
from workflow_scripts.spec.source_entries import vision_of
from workflow_scripts.spec.tasks import MLM, TASKS, get_task

# Translators the cost model can size, by Hub id prefix (the first that matches): OPUS-MT's
# Marian models (Tiedemann & Thottingal 2020, "OPUS-MT -- Building open translation services
# for the World"): transformer-base, 6 encoder and 6 decoder layers of width 512 with
# 2,048-wide FFNs; the tc-big ones transformer-big (1,024, 4,096). Their SentencePiece
# vocabularies hold about 60k pieces (58,101 for en-de).
TRANSLATORS = (
    ("Helsinki-NLP/opus-mt-tc-big-", Translator(6, 6, 1024, 4096, 60000)),
    ("Helsinki-NLP/opus-mt-", Translator(6, 6, 512, 2048, 60000)),
)
# The translation jobs and the data each one reads: rule -> (task, None: the wildcard's;
# splits, None: the wildcard's; whether the wildcard language is the one translated from).
TRANSLATION_RULES = {
    "translate_task_data": (None, None, False),
    "translate_test_data": (None, ("test",), True),
    "score_translation_quality": ("xnli", ("dev", "test"), False),
    "score_translation_quality_to_english": ("xnli", ("dev", "test"), True),
}

# Vision towers the cost model can size (layers, width): CLIP ViT-B/32's image encoder
# (Radford et al. 2021, Table 20: 12 layers of width 768).
VISION_TOWERS = {"openai/clip-vit-base-patch32": (12, 768)}


def backbone_shape(config: Mapping[str, Any], backbone: str) -> Shape | None:
    """The backbone's FLOP-relevant shape (None: no ``parameters``/``architecture`` given)."""
    entry = entry_of(config, backbone)
    if memory_model.skip_reason(entry) is not None:
        return None
    bb = memory_model.parse_backbone(backbone, entry)
    arch = bb.architecture
    return Shape(
        family=bb.family,
        method=bb.method,
        precision=bb.precision,
        non_embedding=max(bb.parameters - memory_model.embedding_parameters(arch), 0.0),
        layers=arch.num_layers,
        width=arch.hidden_size,
        gpus=bb.gpus,
        recompute=bb.activation_checkpointing,
        vocab=arch.vocab_size or 0,
    )


# ----- examples of a data file ------------------------------------------------------------------

_DATA = re.compile(r"/data/(?P<task>[^/]+)/(?P<split>train|dev|test)\.parquet$")
_TRANSLATED = re.compile(r"/data_mt/(?P<task>[^/]+)/(?P<lang>[^/]+)/(?P<split>train|dev|test)\.parquet$")
_TRANSLATE_TEST = re.compile(r"/translate_test/(?P<task>[^/]+)/(?P<lang>[^/]+)/test\.parquet$")


def examples(path: str, languages: list[str] | tuple[str, ...] | None = None) -> int | None:
    """Rows of a canonical data file in ``languages`` (None: all of them): counted in the
    file where it is prepared, else from its task's documented sizes."""
    file = Path(path)  # relative: to the working directory, as the rules' paths are
    if file.is_file():
        counts = _language_counts(str(file), file.stat().st_mtime_ns)
        if counts is not None:
            return (
                sum(counts.values())
                if languages is None or None in counts
                else sum(counts.get(lang, 0) for lang in languages)
            )
    if m := _DATA.search(path):
        return _documented(m["task"], m["split"], languages)
    if m := _TRANSLATED.search(path):  # a translation of the English split, row for row
        return _documented(m["task"], m["split"], ["en"])
    if m := _TRANSLATE_TEST.search(path):  # the test rows of one language, translated to English
        return _documented(m["task"], "test", [m["lang"]])
    return None


def _documented(task: str, split: str, languages) -> int | None:
    sizes = TASKS[task].sizes if task in TASKS else None
    return None if sizes is None else sizes.examples(split, languages)


@cache  # one read per file and version: every job of a grid asks about the same few files
def _language_counts(file: str, mtime_ns: int) -> dict[str | None, int] | None:
    """Rows per language of a prepared file ({None: rows} without a lang column); None where
    the file cannot be read as parquet (its documented size is used instead)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        if "lang" not in pq.read_schema(file).names:
            return {None: pq.read_metadata(file).num_rows}
        counts = pc.value_counts(pq.read_table(file, columns=["lang"]).column("lang")).to_pylist()
    except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
        return None
    return {row["values"]: row["counts"] for row in counts}


# ----- tokens per example -----------------------------------------------------------------------


def sequence(config: Mapping[str, Any], task: str) -> tuple[int, int]:
    """(tokens per sequence, sequences per example) of ``task`` as its jobs batch it: as the
    memory planner counts them, a retrieval task's sentence and its pair counted as two."""
    length, per_example = memory_plan.task_sequence(config, task)
    if get_format(get_task(task).format).retrieval:
        per_example = 2
    return length, per_example


# ----- training jobs ------------------------------------------------------------------------


def training_tokens(
    config: Mapping[str, Any],
    settings: PhaseSettings,
    train: dict[str, int | None],
    dev: dict[str, int | None],
    gpus: int = 1,
) -> list[Tokens] | None:
    """Training and dev-selection tokens of one phase: ``train``/``dev`` map each task of
    ``settings`` to its examples (None: unknown); ``gpus``: the ranks a step's batch is split
    over, each of which runs its share in micro-batches of at most ``max_micro_batch``."""
    if not train or any(n is None or n <= 0 for n in train.values()):
        return None
    sizes = {name: int(n) for name, n in train.items() if n is not None}
    steps = steps_for_sizes(settings, sizes)
    if len(sizes) == 1:
        share = dict.fromkeys(sizes, 1.0)
    else:
        share = task_probabilities(sizes, settings.multitask_cap, settings.fixed_shares)
    work = []
    for name in sorted(sizes):
        length, per_example = sequence(config, name)
        batch = settings.tasks[name].batch_size
        task_steps = steps * share[name]
        micro = task_steps * accumulation_steps(batch, gpus, settings.max_micro_batch)
        mlm = head_kind(get_task(name).format) == MLM
        work.append(Tokens("train", task_steps * batch * length * per_example, length, task_steps, micro, mlm))
    every = _eval_every(settings, sizes, steps)
    evaluations = math.ceil(steps / every)
    for name, n in sorted(dev.items()):
        if n:
            length, per_example = sequence(config, name)
            work.append(Tokens("inference", evaluations * min(n, settings.dev_examples) * length * per_example, length))
    return work


def _eval_every(settings: PhaseSettings, sizes: dict[str, int], steps: int) -> int:
    if settings.eval_each_epoch and len(sizes) == 1:
        ((name, n),) = sizes.items()
        return max(1, math.ceil(n / settings.tasks[name].batch_size))
    return max(1, min(settings.eval_every, steps))


def data_map_tokens(
    config: Mapping[str, Any], settings: PhaseSettings, data: DataMap, gpus: int = 1
) -> list[Tokens] | None:
    """Tokens of a training job from its data map (the ``--data`` of the rule): each task's
    train and dev files, given as a path or as references with their languages."""
    train: dict[str, int | None] = {}
    dev: dict[str, int | None] = {}
    for task, files in data.items():
        if task not in settings.tasks:
            continue
        language = settings.tasks[task].select_language or settings.language
        train[task] = _count_refs(files.train, language)
        if files.dev is not None:
            dev[task] = _count_refs(files.dev, language)
    return training_tokens(config, settings, train, dev, gpus)


def _count_refs(refs: str | Iterable[DataRef], language: str | None) -> int | None:
    """Examples of a split given as one path (an intermediate task's: the language's rows of a
    multilingual file, else all) or as references with their languages (a target's)."""
    if isinstance(refs, str):
        languages = [language] if language and language != "en" else None
        return examples(refs, languages)
    total = 0
    for ref in refs:
        n = examples(ref.path, list(ref.languages) or None)
        if n is None:
            return None
        total += min(n, ref.shots * len(ref.languages or (1,))) if ref.shots else n
    return total


# ----- evaluation jobs ----------------------------------------------------------------------


def evaluation_tokens(
    config: Mapping[str, Any], target: str, data: Mapping[str, Iterable[DataRef]]
) -> list[Tokens] | None:
    """Forward tokens of one metric file's job: every evaluated split in every language (the
    plan's data of each split, ``transfer.Plan.eval_data``)."""
    length, per_example = sequence(config, target)
    total = 0
    for refs in data.values():
        n = _count_refs(refs, None)
        if n is None:
            return None
        total += n
    return [Tokens("inference", total * length * per_example, length)]


def retention_tokens(settings) -> list[Tokens]:
    """A retention probe: the LM-loss forward of each sentence (through the LM head's
    vocabulary projection) and its alignment forward, in each language."""
    tokens = settings.text.sentences * len(settings.text.languages) * settings.max_length
    return [
        Tokens("inference", tokens, settings.max_length, vocabulary_logits=True),
        Tokens("inference", tokens, settings.max_length),
    ]


def embedding_job(config: Mapping[str, Any], task: str) -> tuple[Shape, list[Tokens]] | None:
    """The vision tower over a task's images (every row counted as one image per image slot:
    an upper bound where rows share images)."""
    hub_id = vision_of(config).hub_id
    if hub_id not in VISION_TOWERS or config["models"]["source"] == "demo":
        return None
    layers, width = VISION_TOWERS[hub_id]
    spec = get_task(task)
    rows = [_documented(task, split, None) for split in spec.splits]
    if any(n is None for n in rows):
        return None
    tokens = memory_plan.visual_tokens(config)
    images = sum(n for n in rows if n is not None) * max(spec.images_per_example, 1)
    shape = Shape("encoder", "full", "bf16", 12 * layers * width**2, layers, width)
    return shape, [Tokens("inference", images * tokens, tokens)]


# ----- translation and prompting ----------------------------------------------------------------


def translator_of(config: Mapping[str, Any], lang: str, to_english: bool) -> tuple[str, Translator] | None:
    """(Hub id, shape) of the translator a job uses; None for the demo's own or an unknown one."""
    from workflow_scripts.workflow import grid_settings

    prepared = grid_settings.translator_settings(dict(config), lang, to_english)
    hub_id = prepared.hub_id if prepared.source == "hub" else None
    return next(((hub_id, shape) for prefix, shape in TRANSLATORS if hub_id and hub_id.startswith(prefix)), None)


def translation_job(config: Mapping[str, Any], rule: str, w: Mapping[str, str]) -> tuple[str, Translator, float] | None:
    """(Hub id, translator, source tokens) of a translation job: its rows (the prepared file,
    else the documented sizes) in the language it translates from, each at its task's
    ``max_length`` per choice, an upper bound (texts are as long at most)."""
    from workflow_scripts.workflow import transfer

    task, splits, from_wildcard = TRANSLATION_RULES[rule]
    task = task or w["task"]
    found = translator_of(config, w["lang"], to_english=from_wildcard)
    if found is None or task not in TASKS:
        return None
    source = w["lang"] if from_wildcard else "en"
    rows = [examples(transfer.data_path(task, split), [source]) for split in splits or (w["split"],)]
    if any(n is None for n in rows):
        return None
    length, per_example = memory_plan.task_sequence(config, task)
    return found[0], found[1], sum(n for n in rows if n is not None) * length * per_example


def prompted_tokens(
    config: Mapping[str, Any], task: str, languages: list[str], shots: list[int]
) -> list[Tokens] | None:
    """A prompted job's forwards: every test row in every language at every shot count, each
    choice scored with the k examples of its prompt (k + 1 examples of ``max_length``), an
    upper bound: prompts are as long at most."""
    from workflow_scripts.workflow import transfer

    rows = examples(transfer.data_path(task, "test"), languages)
    if rows is None:
        return None
    length, choices = memory_plan.task_sequence(config, task)
    choices = max(choices, get_task(task).num_labels or 1)
    per_row = sum((k + 1) * length for k in shots) * choices
    return [Tokens("inference", rows * per_row, length)]
