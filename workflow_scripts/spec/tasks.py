"""The task catalogue: every intermediate and target task, its format, metric and converter.

A task is declared as data: one YAML entry per task (``tasks/<name>.yaml`` for the built-in
tasks; a user's own in the folders the config's ``task_catalogues`` names), read here into
:class:`Task` records. An entry names the converter module that turns the task's source rows
into canonical rows (``data/loaders``); a job's rerun trigger covers the entries and
converters of its own tasks only (``workflow/codehash.task_fingerprint``), so adding or
editing a task reruns nothing that does not use it. ``docs/guides/`` shows how.

Where a task's data lives (Hub id, revision, languages) is configuration. Standard library
and PyYAML only (both in the Snakefile's environment): the Snakefile imports this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from workflow_scripts.spec.basics import load_yaml
from workflow_scripts.spec.few_shot import FewShotError, FewShotProtocol
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.formats import names as format_names
from workflow_scripts.spec.suggest import did_you_mean
from workflow_scripts.spec.task_sizes import SizesError, TaskSizes

CLASSIFICATION = "classification"
MULTIPLE_CHOICE = "multiple_choice"
SPAN = "span"
TAGGING = "tagging"
RETRIEVAL = "retrieval"  # parallel sentence pairs (Tatoeba)
MINING = "mining"  # monolingual corpora plus gold alignments (BUCC)
# Queries and candidates in one file, each query naming its gold candidates (Mewsli-X,
# LAReQA): a dual encoder trained on (query, gold candidate) pairs ranks the candidates.
RANKING = "ranking"
MLM = "mlm"
# Text plus an image (SNLI-VE: the hypothesis, the premise image): the image enters the
# backbone as a projected visual prefix (multimodal/prefix.py); intermediate tasks only.
VISUAL_CLASSIFICATION = "visual_classification"
# A question about an image, answered from an answer vocabulary with soft targets (VQA v2;
# data/vqa_answers.py). The vocabulary comes from the training split, as CCG's tag set does.
VISUAL_ANSWER = "visual_answer"
# Captions and their images, trained contrastively: the text backbone's pooled caption
# against the projected image (multimodal/prefix.py), the other images of the batch as negatives.
VISUAL_RETRIEVAL = "visual_retrieval"
# Every format, each declared by its module in workflow_scripts/spec/formats/ (the built-in ones first).
FORMATS = format_names()
VISUAL_FORMATS = tuple(f for f in FORMATS if get_format(f).visual)


@dataclass(frozen=True)
class HubSource:
    """A further Hub dataset a task's converter reads (``Task.hub_sources``)."""

    name: str
    path: str  # its default Hub id; options.<name>_path overrides it
    # The languages read from it (empty: it is read whatever the languages).
    languages: tuple[str, ...] = ()
    # Read only when options.<name>_path names it (an alternative to the task's own path).
    only_when_set: bool = False

    def is_read(self, languages: list[str], options: dict[str, Any]) -> bool:
        if self.only_when_set:
            return bool(options.get(f"{self.name}_path"))
        return not self.languages or any(lang in self.languages for lang in languages)


@dataclass(frozen=True)
class Task:
    name: str
    format: str
    metric: str
    splits: tuple[str, ...]
    labels: tuple[str, ...] = ()
    num_choices: int = 0
    # Targets only: which task's train split trains it and which dev split selects the model;
    # zero-shot uses their English rows (docs/protocol.md §3: model selection looks at
    # English dev data only), other transfer settings other languages (transfer.py).
    train_from: str | None = None
    select_from: str | None = None
    eval_splits: tuple[str, ...] = field(default=())
    # Languages the source data has no dev split for (their dev scores are left out, by name).
    dev_missing: frozenset[str] = frozenset()
    # A target whose training split has languages other than English, for in-language
    # training (XTREME's in-language setting: PAN-X, UD-POS, TyDiQA-GoldP).
    in_language_train: bool = False
    # Languages of such a target without a training split (UD v2.5's th, tl, yo).
    train_missing: frozenset[str] = frozenset()
    # The task whose train split holds published translations of a target's English training
    # data, one language per row (XNLI's: xnli_mt; PAWS-X's: its own), for translate-train.
    train_translations: str | None = None
    # The task whose test split holds published machine translations of a target's test rows
    # into English, each row labelled with its own language (IGLUE's *_gmt files): the
    # translate-test setting scores those instead of the pipeline's own translations.
    test_translations: str | None = None
    # IGLUE's in-language few-shot protocol of a target (spec/few_shot.py): the task holding
    # its shots and translated dev split, the shot counts, epochs, batch size, learning rates.
    few_shot: FewShotProtocol | None = None
    # A few-shot pool (a target's few_shot.task): its rows carry ``shots``, the fewest shots
    # whose file holds the row (IGLUE's files are nested: train_5 holds train_1's rows).
    shot_pool: bool = False
    # How its leaderboard files differ from the canonical rows: class indices instead of label
    # names in a classification label file (XTREME's PAWS-X files), and question ids whose
    # "-<lang>" suffix the converter added (XQuAD, MLQA: one id per language) and the
    # leaderboard's do not carry.
    submission_label_ids: bool = False
    language_suffixed_ids: bool = False
    # A ranking target's mAP@k, as its official scorer computes it (evaluation/ranking.py):
    # lareqa (the default) or mewslix.
    map_convention: str = ""
    # Tasks trained, each selected on its own dev split, before the target's own training
    # (XTREME-R's XCOPA: SIQA, then COPA); the config can switch them off.
    stages: tuple[str, ...] = ()
    # Images per example of an image task (NLVR2: a pair); 0 for text tasks.
    images_per_example: int = 0
    # Text-only controls of an image task, built from its own rows (docs/protocol.md §9).
    controls: tuple[str, ...] = ()
    # A task whose translations are published data rather than our MT output (MNLI: xnli_mt).
    provided_translations: str | None = None
    # The languages its data has, where the entry declares them (a user's multilingual task);
    # the built-in targets' come from the benchmarks' official lists (spec/benchmark.py).
    languages: tuple[str, ...] = ()
    # Further Hub datasets its converter reads some rows from, by name, each with its default
    # Hub id; options.<name>_path and options.<name>_revision override it (PAN-X reads
    # XTREME-R's added languages from wikiann). Declared here, the lock and the preflight
    # know every repository a task may read.
    hub_sources: tuple[HubSource, ...] = ()
    # Options naming an original release its converter reads instead of the Hub path (BUCC's
    # archives); with one of them set, hub.path is not read.
    release_options: tuple[str, ...] = ()
    # The Hub holds no faithful copy: with data from the Hub, one of release_options is required.
    release_required: bool = False
    # The module that converts its source rows: a dotted module name, or a .py file
    # relative to the entry's folder (a user's converter). None: its rows come from local
    # files only, mapped by their columns (workflow/local_data.py).
    converter: str = ""
    # Its release's documented split sizes, for the cost model before the data is prepared
    # (spec/task_sizes.py); read by no job.
    sizes: TaskSizes | None = None
    description: str = ""
    # The YAML file the entry was read from.
    entry_file: str = ""

    @property
    def is_retrieval(self) -> bool:
        """Scored without target training, on the encoder the intermediate phase left."""
        return get_format(self.format).retrieval

    @property
    def foreign_train(self) -> bool:
        """Its train split is read in every language it has (in-language data, or the task's
        own published translations)."""
        return self.in_language_train or self.train_translations == self.name

    @property
    def is_target(self) -> bool:
        return bool(self.eval_splits)

    @property
    def trains(self) -> bool:
        return self.train_from is not None

    @property
    def visual(self) -> bool:
        """Reads images (through the cached features of a frozen vision encoder)."""
        return get_format(self.format).visual

    @property
    def converter_file(self) -> Path | None:
        """A converter given as a .py file, relative to its entry's folder (None: a module name)."""
        return Path(self.entry_file).parent / self.converter if self.converter.endswith(".py") else None

    def hub_source(self, name: str) -> HubSource:
        """One of its further Hub sources (hub_sources), by name."""
        found = {s.name: s for s in self.hub_sources}
        if name not in found:
            raise KeyError(f"task {self.name} declares no hub source {name!r} (has {sorted(found)})")
        return found[name]

    @property
    def num_labels(self) -> int:
        return len(self.labels)


BUILTIN_CATALOGUE = Path(__file__).resolve().parents[2] / "tasks"
# The folders of a run's own task entries, for job processes (the Snakefile exports it).
CATALOGUE_ENV = "XSTILTS_TASK_CATALOGUES"
# The mAP@k conventions of the ranking targets' official scorers (evaluation/ranking.py).
MAP_CONVENTIONS = ("lareqa", "mewslix")
METRICS = (
    "accuracy",
    "squad_v1",
    "squad_v2",
    "mlqa",
    "seqeval_f1",
    "bucc_f1",
    "tatoeba_accuracy",
    "mlm_loss",
    "map_at_20",
    "recall_at_1",
    "vqa_accuracy",
    # accuracy over every row of the release, its rows without a gold label counted as wrong (IGLUE's XVNLI)
    "iglue_accuracy",
)
SPLITS = ("train", "dev", "test")
_TUPLES = ("splits", "labels", "eval_splits", "stages", "controls", "languages", "release_options")
# A task without a converter is read from local files only, by their columns (tasks.<name>.data).
_REQUIRED = ("name", "format", "metric", "splits")


class CatalogueError(ValueError):
    """A task entry that cannot be read, named by file and key."""


def read_entry(path: Path) -> Task:
    """One task entry, checked: every error names the file and the key."""
    import yaml

    try:
        entry = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise CatalogueError(f"task entry {path}: not valid YAML: {err}") from None
    if not isinstance(entry, dict):
        raise CatalogueError(f"task entry {path}: expected a mapping of keys, got {type(entry).__name__}")
    known = {f.name for f in fields(Task)} - {"entry_file"}
    unknown = sorted(set(entry) - known)
    if unknown:
        hints = "".join(did_you_mean(key, known) for key in unknown)
        raise CatalogueError(f"task entry {path}: unknown keys {unknown}{hints}; known keys: {sorted(known)}")
    for key in _REQUIRED:
        if not entry.get(key):
            raise CatalogueError(f"task entry {path}: key {key!r} is required")
    if entry["name"] != path.stem:
        raise CatalogueError(f"task entry {path}: name {entry['name']!r} differs from the file name {path.stem!r}")
    if entry["format"] not in FORMATS:
        raise CatalogueError(f"task entry {path}: format {entry['format']!r} is not one of {', '.join(FORMATS)}")
    if entry["metric"] not in METRICS:
        raise CatalogueError(f"task entry {path}: metric {entry['metric']!r} is not one of {', '.join(METRICS)}")
    for key in ("splits", "eval_splits"):
        bad = [s for s in entry.get(key, ()) if s not in SPLITS]
        if bad:
            raise CatalogueError(f"task entry {path}: {key} {bad} are not splits ({', '.join(SPLITS)})")
    if entry.get("map_convention", MAP_CONVENTIONS[0]) not in MAP_CONVENTIONS:
        raise CatalogueError(
            f"task entry {path}: map_convention {entry['map_convention']!r} is not one of {', '.join(MAP_CONVENTIONS)}"
        )
    values: dict[str, Any] = {k: tuple(str(x) for x in v) if k in _TUPLES else v for k, v in entry.items()}
    values["hub_sources"] = _hub_sources(path, entry.get("hub_sources", {}))
    if "few_shot" in entry:
        try:
            values["few_shot"] = FewShotProtocol.parse(entry["few_shot"], f"task entry {path}")
        except FewShotError as err:
            raise CatalogueError(str(err)) from None
    if "sizes" in entry:
        try:
            values["sizes"] = TaskSizes.parse(entry["sizes"], f"task entry {path}")
        except SizesError as err:
            raise CatalogueError(str(err)) from None
    if entry.get("release_required") and not entry.get("release_options"):
        raise CatalogueError(f"task entry {path}: release_required needs release_options (the options naming it)")
    for key in ("dev_missing", "train_missing"):
        if key in values:
            values[key] = frozenset(values[key])
    return Task(**values, entry_file=str(path))


def _hub_sources(path: Path, sources: Any) -> tuple[HubSource, ...]:
    """``{name: hub id}`` or ``{name: {path, languages, only_when_set}}``, checked."""
    if not isinstance(sources, dict):
        raise CatalogueError(f"task entry {path}: hub_sources must map a source name to a Hub id, got {sources!r}")
    found = []
    for name, spec in sorted(sources.items()):
        spec = {"path": spec} if isinstance(spec, str) else spec
        known = {"path", "languages", "only_when_set"}
        if not isinstance(spec, dict) or not isinstance(spec.get("path"), str) or set(spec) - known:
            raise CatalogueError(
                f"task entry {path}: hub_sources.{name}: a Hub id, or a mapping of {sorted(known)} "
                f"with a path, got {spec!r}"
            )
        found.append(
            HubSource(
                name=str(name),
                path=spec["path"],
                languages=tuple(spec.get("languages", ())),
                only_when_set=bool(spec.get("only_when_set", False)),
            )
        )
    return tuple(found)


def read_catalogue(directory: str | os.PathLike[str]) -> dict[str, Task]:
    directory = Path(directory)
    if not directory.is_dir():
        raise CatalogueError(f"task catalogue {directory} is not a folder")
    return {t.name: t for t in (read_entry(p) for p in sorted(directory.glob("*.yaml")))}


TASKS: dict[str, Task] = {}
# Derived from the entries (kept up to date in place, so importers see added catalogues).
CONTROLS: dict[str, tuple[str, ...]] = {}
PROVIDED_TRANSLATIONS: dict[str, str] = {}


def _register(found: dict[str, Task]) -> None:
    for name, task in found.items():
        if name in TASKS and TASKS[name].entry_file != task.entry_file:
            raise CatalogueError(f"task {name!r} is declared twice: {TASKS[name].entry_file} and {task.entry_file}")
        TASKS[name] = task
        if task.controls:
            CONTROLS[name] = task.controls
        if task.provided_translations:
            PROVIDED_TRANSLATIONS[name] = task.provided_translations


def few_shot_target(pool: str) -> Task | None:
    """The target whose few-shot protocol reads the pool task ``pool`` (None: no target's)."""
    return next((t for t in TASKS.values() if t.few_shot is not None and t.few_shot.task == pool), None)


def use_catalogues(directories: list[str | os.PathLike[str]]) -> None:
    """Add the task entries of ``directories`` (a config's ``task_catalogues``) to TASKS."""
    for directory in directories:
        _register(read_catalogue(directory))


def catalogue_dirs_from_env() -> list[str]:
    return [d for d in os.environ.get(CATALOGUE_ENV, "").split(os.pathsep) if d]


_register(read_catalogue(BUILTIN_CATALOGUE))
use_catalogues(catalogue_dirs_from_env())
# The three NLI labels in the order of the NLI tasks' entries (MNLI, XNLI, SNLI-VE).
NLI_LABELS = TASKS["mnli"].labels

# Formats whose data the translation step can translate (labels carry over; spans re-aligned).
TRANSLATABLE_FORMATS = tuple(f for f in FORMATS if get_format(f).translatable)


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}{did_you_mean(name, TASKS)}; known tasks: {', '.join(TASKS)}") from None


def qa_answer_score(metric: str, scores: dict[str, float]) -> float:
    """One number per task for the XTREME average: QA counts (F1 + EM) / 2."""
    if "f1" in scores and "exact_match" in scores:
        return (scores["f1"] + scores["exact_match"]) / 2
    return scores[primary_metric(metric)]


def primary_metric(metric: str) -> str:
    return {
        "squad_v1": "f1",
        "squad_v2": "f1",
        "mlqa": "f1",
        "seqeval_f1": "f1",
        "bucc_f1": "f1",
        "mlm_loss": "loss",
        "map_at_20": "map_at_20",
        "recall_at_1": "recall_at_1",
    }.get(metric, "accuracy")
