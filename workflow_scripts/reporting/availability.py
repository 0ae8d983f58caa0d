"""Which figures have data to draw, and why the others have none.

The rules write a figure for every target, transfer setting and intermediate config of the
config, on every backbone (a rule's outputs are the same for each of its jobs); a backbone whose
grid leaves one out gets a placeholder image saying so. These predicates are the one answer to
"does this figure hold data?": the code that draws decides with them between the figure and its
placeholder (plots.py), and the report lists only the figures drawn from data, naming the others
with the reason on its "not available" page (rules/report.smk).

Each predicate takes the settings the figure's rule passes (``workflow.grid``'s
``table_settings``, ``modality_settings`` or ``comparison_settings``) and returns ``None`` when
the figure holds data, else the reason it does not.
"""

from __future__ import annotations

from typing import Any


def _backbone(settings: dict[str, Any]) -> str:
    return settings.get("backbone", {}).get("name", "this backbone")


def _no_other_config(settings: dict[str, Any]) -> str | None:
    """Differences to the baseline config need the baseline and one other config."""
    baseline, configs = settings["baseline"], settings["intermediate"]
    if baseline not in configs:
        return f"backbone {_backbone(settings)} does not run the baseline config `{baseline}` (its grid leaves it out)"
    if not [c for c in configs if c != baseline]:
        return f"backbone {_backbone(settings)} runs no intermediate config besides the baseline `{baseline}`"
    return None


def main_deltas(settings: dict[str, Any]) -> str | None:
    return _no_other_config(settings)


def per_language(settings: dict[str, Any], target: str) -> str | None:
    if target not in settings["targets"]:
        return f"backbone {_backbone(settings)} does not run target {target} (its grid leaves it out)"
    return _no_other_config(settings)


def setting_deltas(settings: dict[str, Any], setting: str) -> str | None:
    if setting not in settings["settings"]:
        return f"backbone {_backbone(settings)} does not run setting {setting} (its grid leaves it out)"
    return None


def training_curves(settings: dict[str, Any], config: str) -> str | None:
    if config not in settings["intermediate"]:
        return f"backbone {_backbone(settings)} does not run intermediate config {config} (its grid leaves it out)"
    return None


def modality(pairs: list[dict[str, str]]) -> str | None:
    """The image-vs-text figures need a pair of configs that differ only by an image task and
    one of its text-only controls (``workflow.grid.arm_pairs``)."""
    if not pairs:
        return "no pair of intermediate configs differs only by an image task and one of its text-only controls"
    return None


def across_backbones(settings: dict[str, Any]) -> str | None:
    """The gain across backbones needs a config besides the baseline."""
    if not [c for c in settings["intermediate"] if c != settings["baseline"]]:
        return f"no intermediate config besides the baseline `{settings['baseline']}`"
    return None
