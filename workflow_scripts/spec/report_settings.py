"""What the reporting jobs read: the settings ``workflow/grid_settings.py`` builds for a backbone's
tables and figures (``table_settings``), its image-vs-text comparison (``modality_settings``),
that comparison across backbone sizes (``modality_scaling_settings``) and the comparison
across backbones (``comparison_settings``), with the pieces they share: a backbone's
description (``backbone_grid.describe``), the benchmark's (``Benchmark.describe``), a
translated config's English counterpart and a pair of image-vs-text arms.

The settings' JSON sorts its keys, so a mapping read back is in key order, not the config's:
where the order matters (the benchmark's categories, the backbones' families) the record says
how to recover it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from workflow_scripts.spec import benchmark
from workflow_scripts.spec.model_settings import BackboneProvenance
from workflow_scripts.spec.record import Record, default_factory, optional, parsed_once
from workflow_scripts.spec.schema_block import key
from workflow_scripts.spec.transfer_names import ZERO_SHOT


@dataclass(frozen=True, kw_only=True)
class TablesEntry(Record):
    """The config's ``tables`` block: the reference row and the rounding of every table,
    figure and LaTeX file (the schema's ``$defs.tables`` is generated from it)."""

    key_noun = "config key"

    baseline: str = key(
        "none", description="The intermediate config shown in absolute numbers; other rows are differences to it."
    )
    decimals: int = key(1, minimum=0, maximum=4)


def tables_of(config: dict[str, Any]) -> TablesEntry:
    """The ``tables`` block's record, parsed once."""
    return parsed_once(TablesEntry, config.get("tables") or {}, "tables")


@dataclass(frozen=True, kw_only=True)
class BackboneDescription(BackboneProvenance):
    """What a table row records of a backbone (``backbone_grid.describe``): its provenance and
    how it trains, its size and the targets its training mixture held (not zero-shot)."""

    step: ClassVar[str | None] = None

    contaminated_targets: tuple[str, ...]
    # The config writes counts as floats (2.78e+8); None: count the prepared weights.
    parameters: float | None = optional()
    contamination_source: str | None = optional()  # what held the targets (e.g. xP3)
    prepared_as: str | None = optional()  # the backbone whose prepared directory it loads, where not its own


@dataclass(frozen=True)
class BenchmarkDescription(Record):
    """The benchmark the tables report (``Benchmark.describe``): its categories, official
    languages and the notes a reader needs to compare with published scores."""

    name: str
    title: str
    categories: dict[str, tuple[str, ...]]  # category -> its targets
    languages: dict[str, tuple[str, ...]]  # target -> its official evaluation languages
    notes: dict[str, str]
    leaderboard_names: dict[str, str]
    retrieval_encoders: dict[str, str]
    # Languages left out of every average (IGLUE's English); absent for the others.
    average_excludes: tuple[str, ...] | None = optional()

    @classmethod
    def of(cls, bench: benchmark.Benchmark) -> BenchmarkDescription:
        return cls.parse(bench.describe(), f"benchmark {bench.name}")

    @property
    def registered(self) -> benchmark.Benchmark:
        """The registry's record of this benchmark (its category layout, its scorer)."""
        return benchmark.get(self.name)

    def categories_in_order(self) -> dict[str, tuple[str, ...]]:
        """The categories in the paper's order (the JSON's are sorted by name)."""
        return {category: self.categories[category] for category in self.registered.categories}


@dataclass(frozen=True)
class TranslatedCounterpart(Record):
    """A translated intermediate config: its data's language and the English-data config with
    the same tasks and MLM setting (None when the grid has none)."""

    language: str
    english: str | None


@dataclass(frozen=True)
class ArmPair(Record):
    """Two intermediate configs that differ only by an image task (in ``visual``) replaced by
    one of its text-only controls (in ``control``): ``workflow.grid.arm_pairs``."""

    visual: str
    control: str
    task: str
    control_task: str
    recipe: str | None = optional()  # the arm recipe both configs run under (spec/arm_recipe.py)


@dataclass(frozen=True)
class TableSettings(Record):
    """A backbone's tables, LaTeX files and figures: its part of the grid, the backbone and
    the benchmark. The figures and the LaTeX tables read the same JSON, each as its own step's
    record below (FigureSettings, LatexSettings)."""

    step: ClassVar[str] = "reporting.tables"

    # The config shown absolute (tables.baseline); None in a setting's view that lacks it.
    baseline: str | None
    targets: tuple[str, ...]
    intermediate: tuple[str, ...]
    seeds: tuple[int, ...]
    decimals: int = 1
    translated: dict[str, TranslatedCounterpart] = default_factory(dict)
    settings: tuple[str, ...] = (ZERO_SHOT,)  # the transfer settings this backbone runs
    baseline_setting: str = ZERO_SHOT
    target_languages: dict[str, tuple[str, ...]] = default_factory(dict)  # target -> languages run
    # None: tables of no named backbone (every job's settings name one).
    backbone: BackboneDescription | None = optional()
    benchmark: BenchmarkDescription = default_factory(lambda: BenchmarkDescription.of(benchmark.XTREME))
    # Figures and LaTeX files are written for every target and setting of the config, which
    # a backbone may not all run; None: this backbone's own.
    output_targets: tuple[str, ...] | None = optional()
    output_settings: tuple[str, ...] | None = optional()

    @property
    def backbone_name(self) -> str | None:
        return self.backbone.name if self.backbone else None

    @property
    def contaminated_targets(self) -> tuple[str, ...]:
        return self.backbone.contaminated_targets if self.backbone else ()

    def targets_drawn(self) -> tuple[str, ...]:
        """The targets a figure or LaTeX file is written for (placeholders where not run)."""
        return self.targets if self.output_targets is None else self.output_targets

    def settings_drawn(self) -> tuple[str, ...]:
        """The transfer settings a figure is written for (placeholders where not run)."""
        return self.settings if self.output_settings is None else self.output_settings


@dataclass(frozen=True)
class FigureSettings(TableSettings):
    """The table settings as the figures read them (the same JSON: grid_settings.table_settings)."""

    step: ClassVar[str] = "reporting.plots"


@dataclass(frozen=True)
class LatexSettings(TableSettings):
    """The table settings as the LaTeX tables read them (the same JSON: grid_settings.table_settings)."""

    step: ClassVar[str] = "reporting.latex"


@dataclass(frozen=True)
class ModalitySettings(Record):
    """A backbone's image-vs-text comparison: its pairs of arms, targets and seeds."""

    step: ClassVar[str] = "reporting.modality"

    targets: tuple[str, ...]
    seeds: tuple[int, ...]
    pairs: tuple[ArmPair, ...]
    decimals: int = 1
    # the pairs' arm recipes, each described in one line (ArmRecipe.describe), by name
    recipes: dict[str, str] = default_factory(dict)


@dataclass(frozen=True)
class ModalityScalingSettings(Record):
    """The image-vs-text comparison across backbone sizes: every backbone described."""

    step: ClassVar[str] = "reporting.modality_scaling"

    targets: tuple[str, ...]
    seeds: tuple[int, ...]
    backbones: dict[str, BackboneDescription]  # name -> description, in key order
    order: tuple[str, ...]  # the config's order of backbones: their families appear in it
    decimals: int = 1

    def family_rank(self) -> dict[str, int]:
        """Each family's place: the order its first backbone has in the config."""
        families = (self.backbones[name].family for name in self.order if name in self.backbones)
        return {family: rank for rank, family in enumerate(dict.fromkeys(families))}


@dataclass(frozen=True)
class ComparisonSettings(Record):
    """The table and figure across backbones: the configs, targets and every backbone."""

    step: ClassVar[str] = "reporting.compare_backbones"

    baseline: str
    baseline_setting: str
    targets: tuple[str, ...]
    intermediate: tuple[str, ...]
    backbones: dict[str, BackboneDescription]  # name -> description, in key order
    decimals: int = 1


@dataclass(frozen=True)
class PromptedScalingSettings(Record):
    """The fine-tuned-versus-prompted comparison across backbone sizes."""

    step: ClassVar[str] = "reporting.prompted_scaling"

    backbones: dict[str, BackboneDescription]  # the prompted backbones, by name
    baselines: dict[str, str]  # backbone -> its baseline config (fine-tuned from, prompted as it is)
    tasks: tuple[str, ...]  # every task some backbone is prompted on
    shots: tuple[int, ...]
    decimals: int = 1
