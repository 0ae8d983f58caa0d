"""Which figures have data to draw, and why the others have none.

The rules write a figure for every target, transfer setting and intermediate config of the
config, on every backbone (a rule's outputs are the same for each of its jobs); a backbone whose
grid leaves one out gets a placeholder image saying so. These predicates are the one answer to
"does this figure hold data?": the code that draws decides with them between the figure and its
placeholder (reporting/plots.py, at job time), and the report lists only the figures drawn from
data, naming the others with the reason on its "not available" page (rules/report.smk, at parse
time). Both layers import it, hence its place in spec/.

Each predicate takes the settings the figure's rule passes (``workflow.grid``'s
``table_settings``, ``modality_settings`` or ``comparison_settings``: spec/report_settings.py)
and returns ``None`` when the figure holds data, else the reason it does not.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflow_scripts.spec.report_settings import ArmPair, ComparisonSettings, TableSettings


def _backbone(settings: TableSettings) -> str:
    return settings.backbone_name or "this backbone"


def _no_other_config(settings: TableSettings) -> str | None:
    """Differences to the baseline config need the baseline and one other config."""
    baseline, configs = settings.baseline, settings.intermediate
    if baseline not in configs:
        return f"backbone {_backbone(settings)} does not run the baseline config `{baseline}` (its grid leaves it out)"
    if not [c for c in configs if c != baseline]:
        return f"backbone {_backbone(settings)} runs no intermediate config besides the baseline `{baseline}`"
    return None


def main_deltas(settings: TableSettings) -> str | None:
    return _no_other_config(settings)


def per_language(settings: TableSettings, target: str) -> str | None:
    if target not in settings.targets:
        return f"backbone {_backbone(settings)} does not run target {target} (its grid leaves it out)"
    return _no_other_config(settings)


def setting_deltas(settings: TableSettings, setting: str) -> str | None:
    if setting not in settings.settings:
        return f"backbone {_backbone(settings)} does not run setting {setting} (its grid leaves it out)"
    return None


def training_curves(settings: TableSettings, config: str) -> str | None:
    if config not in settings.intermediate:
        return f"backbone {_backbone(settings)} does not run intermediate config {config} (its grid leaves it out)"
    return None


def modality(pairs: Sequence[ArmPair]) -> str | None:
    """The image-vs-text figures need a pair of configs that differ only by an image task and
    one of its text-only controls (``workflow.grid.arm_pairs``)."""
    if not pairs:
        return "no pair of intermediate configs differs only by an image task and one of its text-only controls"
    return None


def across_backbones(settings: ComparisonSettings) -> str | None:
    """The gain across backbones needs a config besides the baseline."""
    if not [c for c in settings.intermediate if c != settings.baseline]:
        return f"no intermediate config besides the baseline `{settings.baseline}`"
    return None
