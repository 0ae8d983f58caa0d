"""A training phase's data (training/recipe.py): each task's training rows in the phase's
language (or the languages a transfer setting's recipe names), encoded once; the dev
subsets that select the model, encoded once; and each task's fresh head.

Data: ``--data`` maps each task to its train and dev files (spec/data_map.py), either as
paths (the phase's language is kept) or as a transfer setting's recipe (each file with the
languages it gives).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.data.features import Encoded, encode
from workflow_scripts.data.prepare import read_table
from workflow_scripts.data.ranking_inputs import CANDIDATE
from workflow_scripts.evaluation import pool_ranking
from workflow_scripts.models import dual_encoder
from workflow_scripts.models.adapters import lineage
from workflow_scripts.models.heads import load_mlm_head, load_saved_heads, make_head
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_map import DataMap, TaskFiles
from workflow_scripts.spec.formats import get_format, head_kind
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.task_options import ScoringOptions, TaskOptions
from workflow_scripts.spec.tasks import MLM, RANKING, TAGGING, Task, get_task

DevRows = dict[tuple[str, str], list[dict[str, Any]]]


@dataclasses.dataclass
class PhaseData:
    """A phase's tasks (CCG's tag set filled in from its files), their encoded training sets,
    heads, and the encoded dev subsets that select the model."""

    tasks: dict[str, Task]
    train_sets: dict[str, Encoded]
    heads: dict[str, Any]
    dev_sets: dict[tuple[str, str], Encoded]
    dev_scoring: dict[str, ScoringOptions]
    # Visual tasks: where their images' features came from and the projector's size. The
    # projector is part of the task's head: dropped with the heads after the intermediate
    # phase, saved with them (heads.pt) by the target phase of an image target (XVNLI).
    visual: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def load_phase_data(
    encoder_dir: Path,
    encoder,
    tokenizer,
    data: DataMap,
    settings: PhaseSettings,
    mlm_head=load_mlm_head,
) -> PhaseData:
    """``mlm_head``: how the masked-LM head is built from the base directory and the encoder
    (``sharded_loading.empty_mlm_head`` for a backbone on the meta device)."""
    loaded = PhaseData({}, {}, {}, {}, {})
    dev_rows: DevRows = {}
    for name, opts in settings.tasks.items():
        if name not in data:
            raise InputError(f"--data has no files for task {name} (it names {', '.join(sorted(data)) or 'none'})")
        task, train, image_task = _training_rows(get_task(name), data[name], opts, settings.train_language)
        if head_kind(task.format) != MLM:  # masked-LM losses select nothing
            dev_rows.update(_selection_rows(task, data[name], opts, settings.dev_examples, image_task))
        task = _with_tag_set(task, train, dev_rows)
        loaded.tasks[name] = task
        loaded.train_sets[name] = encode(task, tokenizer, train, opts, train=True)
        if head_kind(task.format) == MLM:
            loaded.heads[name] = mlm_head(lineage(encoder_dir).base, encoder)
        elif image_task is not None:
            loaded.heads[name] = image_task.head(encoder.config, settings.dropout, initializer_range(encoder.config))
            loaded.visual[name] = image_task.describe(data[name].images, loaded.heads[name])
        else:
            loaded.heads[name] = _fresh_head(task, opts, encoder.config, settings.dropout)
    # The selection subsets never change: encode them once, not at every evaluation.
    loaded.dev_scoring = {name: _scoring_options(settings, name) for name in loaded.tasks}
    loaded.dev_sets = {
        key: encode(loaded.tasks[key[0]], tokenizer, rows, loaded.dev_scoring[key[0]], train=False)
        for key, rows in dev_rows.items()
    }
    return loaded


def _training_rows(task: Task, entry: TaskFiles, opts: TaskOptions, language: str):
    """(the task, its training rows, its ImageTask or None). Multilingual files (XNLI's
    translated MNLI, a target's own train split) hold several languages: the rows of those
    the data map (or the phase's language) names are kept; MLM keeps every language."""
    import pyarrow as pa

    sources = entry.sources("train", None if head_kind(task.format) == MLM else [language])
    train = pa.concat_tables(
        [
            within_shots(table_in(read_table(path, task.format), langs, task.format), entry.shots_of(path))
            for path, langs in sources
        ],
        promote_options="permissive",
    )
    image_task = None
    if task.visual:  # rows meet their images' features (training/image_tasks.py)
        from workflow_scripts.training.image_tasks import prepare_image_task

        image_task = prepare_image_task(task, train, entry, opts)
        task, train = image_task.task, image_task.train  # VQA's: with the answer vocabulary
    if not train.num_rows:
        wanted = ", ".join(sorted({l for _, langs in sources for l in langs or []}))
        files = ", ".join(path for path, _ in sources)
        raise InputError(f"{files}: no {wanted} training examples for task {task.name}")
    return task, train, image_task


def _selection_rows(task: Task, entry: TaskFiles, opts: TaskOptions, examples: int, image_task) -> DevRows:
    """The dev rows that select the model, per (task, selection language): the first
    ``examples`` of each language; a ranking task selects in a pool of candidates of every
    language (pool_ranking.py)."""
    subset = pool_ranking.selection_subset if get_format(task.format).scorer == RANKING else dev_subset
    rows: DevRows = {}
    if entry.dev is None:
        raise InputError(f"--data.{task.name}: no dev files (task {task.name} selects its model on dev data)")
    for path, langs in entry.sources("dev", [opts.select_language or "en"]):
        dev_table = table_in(read_table(path, task.format), langs, task.format)
        dev_file = (image_task.attach(dev_table, f"{task.name} dev") if image_task else dev_table).to_pylist()
        for lang in langs:
            rows[(task.name, lang)] = subset(dev_file, examples, lang, path)
    return rows


def _with_tag_set(task: Task, train, dev_rows: DevRows) -> Task:
    """CCG's supertag set comes from the user's files (train and dev), not the catalogue."""
    if task.format != TAGGING or task.labels:
        return task
    import pyarrow.compute as pc

    dev_tags = {t for (n, _), rs in dev_rows.items() if n == task.name for r in rs for t in r["tags"]}
    tags = sorted(set(pc.unique(pc.list_flatten(train["tags"])).to_pylist()) | dev_tags)
    return dataclasses.replace(task, labels=tuple(tags))


def _fresh_head(task: Task, opts: TaskOptions, config, dropout: float):
    head = make_head(task.format, config.hidden_size, task.num_labels, dropout, initializer_range(config))
    if head_kind(task.format) == RANKING:
        dual_encoder.configure_head(head, opts)
    return head


def _scoring_options(settings: PhaseSettings, name: str) -> ScoringOptions:
    """How task ``name``'s dev subsets are scored: its options, the phase's evaluation batch
    and the backbone's precision (the dev scores' compute dtype too)."""
    fields = {k: v for k, v in settings.tasks[name].to_dict().items() if k in ScoringOptions.keys()}
    return ScoringOptions.parse(
        {**fields, "eval_batch_size": settings.eval_batch_size, "precision": settings.method.precision}
    )


def initializer_range(config) -> float:
    """The backbone's weight-init std for fresh heads (T5 configs name none: BERT's 0.02)."""
    return float(getattr(config, "initializer_range", 0.02))


def carry_head(model_dir: Path, heads: dict[str, Any], source: str, target: str) -> None:
    """Load the head ``source`` that ``model_dir``'s phase trained into this phase's head
    ``target`` (same format, so the same shapes: XCOPA after SIQA)."""
    saved = load_saved_heads(model_dir)
    if source not in saved:
        raise InputError(f"{model_dir}: no trained head {source!r} to continue (it has {sorted(saved)})")
    try:
        heads[target].load_state_dict(saved[source])
    except RuntimeError as err:
        raise InputError(f"{model_dir}: head {source!r} does not fit {target!r}'s: {err}") from None
    LOG.info("head %s continues from %s's in %s", target, source, model_dir)


def input_files(encoder_dir: Path, data: DataMap) -> list[Path | str]:
    """The files a phase reads: the encoder, each task's train and dev files and image
    features (a checkpoint of a run whose inputs were rebuilt since is discarded)."""
    return [
        encoder_dir,
        *(path for files in data.values() for split in ("train", "dev") for path, _ in files.sources(split, None)),
        *(Path(files.images) / "features.npy" for files in data.values() if files.images),
    ]


def within_shots(table, shots: int | None):
    """A few-shot pool's rows of at most ``shots`` shots (each row carries the fewest shots
    whose release file holds it: spec/few_shot.py); every row without a limit."""
    if shots is None:
        return table
    import pyarrow.compute as pc

    if "shots" not in table.column_names:
        raise InputError(f"a {shots}-shot recipe reads a file without the few-shot pool's 'shots' column")
    return table.filter(pc.less_equal(table["shots"], shots))


def table_in(table, languages: list[str] | None, fmt: str | None = None):
    """The rows of the given languages, filtered in Arrow before any Python object is made
    (XNLI-MT train holds 5.5M rows in 14 languages; a model trains on one of them). A
    ranking file keeps its whole candidate pool: the language is the queries'."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if languages is not None:
        keep = pc.is_in(table["lang"], value_set=pa.array(languages, pa.string()))
        if fmt == RANKING:
            keep = pc.or_(keep, pc.equal(table["side"], CANDIDATE))
        table = table.filter(keep)
    return table


def dev_subset(rows: list[dict[str, Any]], n: int, language: str, path: str) -> list[dict[str, Any]]:
    """The first ``n`` dev examples of the selection language (the setting's: English for
    zero-shot, so model selection never sees another language there)."""
    subset = [r for r in rows if r["lang"] == language][:n]
    if not subset:
        raise InputError(f"{path}: no {language} dev examples for model selection")
    return subset
