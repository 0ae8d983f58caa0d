"""What the data steps receive: one task split's data settings (``data.prepare``, built by
``workflow/grid.py``'s ``data_settings``) and the leakage check's (``data.leakage``,
``grid.leakage_settings``).

A task's ``options`` (``tasks.<name>.options``) are its converter's: :class:`DataOptions`
types every option a built-in loader reads (``data/loaders/*.py``), each absent unless the
config gives it, so a loader applies its own default. A task entry of the user's own may name
a converter that reads options of its own, and further Hub sources (``hub_sources``) whose
``<name>_path`` / ``<name>_revision`` override them: those keys are kept, as given, in
``DataOptions.own``, and written back flat, so the JSON is the config's block. For a task read
by a built-in converter such a key is a config error (:func:`unread_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.local_data import SOURCE as FILES_SOURCE
from workflow_scripts.spec.local_data import LocalFiles
from workflow_scripts.spec.record import Record, default_factory, optional
from workflow_scripts.spec.schema_block import key as config_key
from workflow_scripts.spec.suggest import did_you_mean

if TYPE_CHECKING:
    from workflow_scripts.spec.tasks import Task

# The package of the built-in converters: a task entry naming a module of it reads the
# options DataOptions declares, and no other.
BUILT_IN_CONVERTERS = "workflow_scripts.data.loaders."
# Options no converter reads any more, with what replaced them.
RETIRED_OPTIONS = {
    "squad_path": "LAReQA's training SQuAD is the task's hub.path (e.g. rajpurkar/squad); remove the option",
}


@dataclass(frozen=True)
class UdReleaseExtra(Record):
    """``options.ud_release_extra`` of udpos: a second UD release some languages are read from
    (XTREME-R: UD v2.7 for lt pl uk wo ro)."""

    release: str  # its URL, archive or directory
    languages: tuple[str, ...] | None = optional()  # default: XTREME-R's five
    name: str | None = optional()  # for the load report; default "UD v2.7"


@dataclass(frozen=True)
class DataOptions(Record):
    """``tasks.<name>.options``: what a task's converter reads besides the Hub path."""

    # the Hub config a converter reads (span tasks, SIQA, COPA, CommonsenseQA, CosmosQA, SNLI-VE)
    hub_name: str | None = optional()
    # an original release's folder (CCG, the image tasks, IGLUE's targets)
    path: str | None = optional()
    # IGLUE's few-shot pools: the folder of the translated dev split, where it is not ``path``
    dev_path: str | None = optional()
    # mlm: the Wikipedia snapshot, the sentences in all, XLM's smoothing exponent, the shuffle's seed
    snapshot: str | None = optional()
    sentences: int | None = optional()
    alpha: float | None = optional()
    seed: int | None = optional()
    # udpos: the UD v2.5 release (else the Hub's udpos configs), and a second release
    ud_release: str | None = optional()
    ud_release_extra: UdReleaseExtra | None = optional()
    # bucc: the URL or directory of the BUCC 2018 archives
    archives: str | None = optional()
    # xcopa: "majority" repairs the release's wrong cause/effect fields
    question_repair: Literal["none", "majority"] | None = optional()
    # mewslix: the release recorded, and the split of its candidate pool
    version: str | None = optional()
    candidates_split: str | None = optional()
    # lareqa: the Hub config of its training SQuAD, and XQuAD-R's files (its test pool)
    squad_name: str | None = optional()
    xquad_r_path: str | None = optional()
    # the built-in entries' further Hub sources (Task.hub_sources): <name>_path, <name>_revision
    pawsx_path: str | None = optional()
    pawsx_revision: str | None = optional()
    wikiann_path: str | None = optional()
    wikiann_revision: str | None = optional()
    tatoeba_path: str | None = optional()
    tatoeba_revision: str | None = optional()
    xquad_path: str | None = optional()
    xquad_revision: str | None = optional()
    mnli_path: str | None = optional()
    mnli_revision: str | None = optional()
    snli_path: str | None = optional()
    snli_revision: str | None = optional()
    # every other key, for a user's converter (module docstring); written back flat
    own: dict[str, Any] = default_factory(dict)

    @classmethod
    def parse(cls, data: str | Mapping[str, Any], where: str | None = None) -> DataOptions:
        """The options of ``data``: the declared keys checked by type, the others kept in ``own``."""
        data = cls.mapping_of(data, where or cls.__name__)
        declared = _declared_options()
        named = {k: v for k, v in data.items() if k in declared}
        own = {k: v for k, v in data.items() if k not in declared}
        return super().parse({**named, "own": own}, where)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        own = out.pop("own")
        return {**out, **own}

    def hub_source(self, name: str) -> tuple[str | None, str | None]:
        """``options.<name>_path`` and ``options.<name>_revision`` of the further Hub source
        ``name`` (None: the entry's default Hub id, revision main). The names come from the
        task entries (``hub_sources``): a built-in entry's are fields, a user's are in own."""
        given = self.to_dict()
        path, revision = given.get(f"{name}_path"), given.get(f"{name}_revision")
        for key, value in ((f"{name}_path", path), (f"{name}_revision", revision)):
            if value is not None and not isinstance(value, str):
                raise InputError(f"options.{key}: expected a Hub id or revision (a string), got {value!r}")
        return path, revision


def _declared_options() -> frozenset[str]:
    return frozenset(f.name for f in fields(DataOptions) if f.name != "own")


def unread_options(task: Task, options: DataOptions, where: str) -> None:
    """A task read by a built-in converter has no option the converter does not read: a
    misspelt or retired key stops the grid, named by its config key, before any job runs."""
    if not task.converter.startswith(BUILT_IN_CONVERTERS):
        return  # a user's converter may read options of its own
    for key in sorted(options.own):
        if key in RETIRED_OPTIONS:
            raise InputError(f"config key {where}.{key}: {RETIRED_OPTIONS[key]}")
        raise InputError(
            f"config key {where}.{key}: task {task.name}'s converter reads no option {key!r}"
            f"{did_you_mean(key, _declared_options())}"
        )


@dataclass(frozen=True)
class HubDataset(Record):
    """``tasks.<name>.hub``: the Hub dataset (or its directory under data.local_root)."""

    path: str
    revision: str = "main"


@dataclass(frozen=True)
class DataSettings(Record):
    """One task split's data: from the Hub, its local mirror, or the task's own files."""

    step: ClassVar[str] = "data.prepare"

    # hub, local (data.source), or files: the task's own (tasks.<name>.data), whatever data.source says
    source: Literal["hub", "local", "files"]
    # the languages loaded (a target's train split: every language that has one)
    languages: tuple[str, ...] = ("en",)
    options: DataOptions = default_factory(DataOptions)
    hub: HubDataset | None = optional()  # source hub or local
    local_root: str | None = optional()  # source local: the mirror's root
    data: LocalFiles | None = optional()  # source files: the split's file and its mapping

    def __post_init__(self) -> None:
        if self.source == FILES_SOURCE and self.data is None:
            raise InputError("data settings of source 'files' need the key 'data' (the task's own files)")
        if self.source != FILES_SOURCE and self.hub is None:
            raise InputError(f"data settings of source {self.source!r} need the key 'hub' (the Hub dataset)")


@dataclass(frozen=True)
class LeakageSettings(Record):
    """``leakage``: how an intermediate task's rows are compared with a target's test rows (the
    config's block, whose schema ``$defs.leakage`` is generated from this record)."""

    step: ClassVar[str] = "data.leakage"

    on_overlap: Literal["flag", "refuse"] = config_key(
        "flag",
        description="""flag: run the pair and mark its cells; refuse: the check fails, naming the pair, and no
        target model of that pair is trained""",
    )
    min_words: int = config_key(
        6,
        description="Texts shorter than this many words are not compared (stock sentences recur legitimately)",
        minimum=1,
    )
