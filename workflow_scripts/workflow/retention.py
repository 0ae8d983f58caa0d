"""The retention probe's part of the grid (config ``retention``; docs/multimodal.md,
"Forgetting"): which models of a backbone are probed, where each probe's file lives, and the
settings the probe and its table receive.

A backbone is probed once ``before`` (its pretrained weights), once per intermediate config
and seed that trains it (``intermediate``; the baseline has no such phase, so its
intermediate model is the ``before`` model and gets no second probe), and once per config,
seed and probed target (``target``: the zero-shot target model). Intermediate config names
are opaque strings here: the grid's own.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from typing import Any

from workflow_scripts.spec import intermediate_entry, paths, task_entry
from workflow_scripts.spec.backbone_entry import entry_of
from workflow_scripts.spec.report_settings import tables_of
from workflow_scripts.spec.retention_settings import (
    OBJECTIVES,
    TEXT_FORMATS,
    ProbeRun,
    RetentionEntry,
    RetentionProbeSettings,
    RetentionTableSettings,
)
from workflow_scripts.spec.schema_block import parsed_filled
from workflow_scripts.spec.tasks import TASKS, get_task
from workflow_scripts.spec.transfer_names import ZERO_SHOT
from workflow_scripts.workflow import backbone_grid, grid, grid_settings, transfer
from workflow_scripts.workflow.grid import ConfigError


def options(config: dict[str, Any]) -> RetentionEntry:
    """The config's ``retention`` block, parsed once."""
    return parsed_filled(RetentionEntry, config.get("retention") or {}, "retention")


def enabled(config: dict[str, Any]) -> bool:
    return options(config).probe


# ----- checks -----------------------------------------------------------------------------


def check(config: dict[str, Any]) -> None:
    """The probe's text and targets exist in this config (each error names its key)."""
    if not enabled(config):
        return
    text = options(config).text
    task = text.task
    if task not in config["tasks"] or task not in TASKS:
        raise ConfigError(f"config key retention.text.task: {task!r} is not a task of this config (tasks.{task})")
    fmt = get_task(task).format
    if fmt not in TEXT_FORMATS:
        raise ConfigError(
            f"config key retention.text.task: {task} is a {fmt} task; the probe reads a parallel sample "
            f"from a task of format {' or '.join(TEXT_FORMATS)}"
        )
    if text.split not in get_task(task).splits:
        raise ConfigError(f"config key retention.text.split: {task} has no {text.split!r} split")
    configured = set(task_entry.entry_of(config, task).languages_or(()))
    for i, lang in enumerate(options(config).languages or ()):
        if lang != "en" and lang not in configured:
            raise ConfigError(f"config key retention.languages[{i}]: {lang!r} is not a language of tasks.{task}")
    for i, target in enumerate(options(config).targets or ()):
        if target not in config["targets"] or get_task(target).is_retrieval:
            raise ConfigError(
                f"config key retention.targets[{i}]: {target!r} is not a target of this config that trains "
                "a target model"
            )


# ----- what is probed ---------------------------------------------------------------------


def probed_configs(config: dict[str, Any], backbone: str) -> list[str]:
    """The backbone's configs that train it in an intermediate phase (the baseline does not)."""
    part = backbone_grid.grid_of(config, backbone)
    return [name for name in part["intermediate"] if not grid.is_baseline(config, name)]


def _zero_shot_plans(config: dict[str, Any], backbone: str) -> dict[str, transfer.Plan]:
    """The backbone's zero-shot plans of targets that train a target model, by target."""
    return {
        plan.target: plan
        for plan in backbone_grid.plans(config, backbone)
        if plan.setting == ZERO_SHOT and plan.models and not get_task(plan.target).is_retrieval
    }


def probed_targets(config: dict[str, Any], backbone: str) -> list[str]:
    """The targets whose zero-shot models are probed: ``retention.targets`` the backbone runs,
    else its first target that trains a model."""
    plans = _zero_shot_plans(config, backbone)
    chosen = options(config).targets
    if chosen is None:
        return list(plans)[:1]
    return [t for t in chosen if t in plans]


def zero_shot_recipe(config: dict[str, Any], backbone: str, target: str) -> str:
    """The recipe of a target's zero-shot model (English training and selection: ``en.dev-en``)."""
    (recipe,) = {r.name for r in _zero_shot_plans(config, backbone)[target].recipes()}
    return recipe


def target_runs(config: dict[str, Any], backbone: str, target: str) -> list[tuple[str, int]]:
    """(config, seed) of every zero-shot model of ``target`` the backbone trains."""
    plan = _zero_shot_plans(config, backbone)[target]
    return [(name, seed) for name in plan.intermediate for seed in plan.seeds]


# ----- paths ------------------------------------------------------------------------------


def before_file(backbone: str) -> str:
    return f"{paths.results()}/retention/{backbone}/before.json"


def intermediate_file(backbone: str, name: str, seed: int | str) -> str:
    return f"{paths.results()}/retention/{backbone}/{name}/seed{seed}/intermediate.json"


def target_file(backbone: str, name: str, target: str, seed: int | str) -> str:
    return f"{paths.results()}/retention/{backbone}/{name}/seed{seed}/target-{target}.json"


def target_model(config: dict[str, Any], backbone: str, name: str, target: str, seed: int | str) -> str:
    """The zero-shot target model a ``target`` probe reads."""
    return grid.target_model(backbone, name, target, zero_shot_recipe(config, backbone, target), seed)


def probe_files(config: dict[str, Any], backbone: str) -> list[str]:
    """Every probe file of a backbone: its table's inputs."""
    seeds = backbone_grid.grid_of(config, backbone)["seeds"]
    found = [before_file(backbone)]
    found += [intermediate_file(backbone, name, seed) for name in probed_configs(config, backbone) for seed in seeds]
    for target in probed_targets(config, backbone):
        found += [target_file(backbone, name, target, seed) for name, seed in target_runs(config, backbone, target)]
    return found


def text_file(config: dict[str, Any]) -> str:
    """The prepared split the probe's sentences come from."""
    text = options(config).text
    return transfer.data_path(text.task, text.split)


# ----- settings -----------------------------------------------------------------------------


def probe_languages(config: dict[str, Any]) -> list[str]:
    """English, then the probed languages (``retention.languages``, else the text task's)."""
    task = options(config).text.task
    chosen = options(config).languages or task_entry.entry_of(config, task).languages_or(())
    return ["en", *sorted(set(chosen) - {"en"})]


def probe_settings(config: dict[str, Any], backbone: str) -> RetentionProbeSettings:
    """One backbone's probe settings: the same JSON at every stage, so the stages differ by
    their weights only."""
    ret = options(config)
    retrieval = backbone_grid.retrieval_settings(config, backbone)
    run = {key: getattr(ret, key) for key in ProbeRun.keys()}  # the keys the block and the probe share
    found = {
        "family": entry_of(config, backbone).family,
        "method": backbone_grid.method_settings(config, backbone).to_dict(),
        "text": {
            "task": ret.text.task,
            "split": ret.text.split,
            "format": get_task(ret.text.task).format,
            "languages": probe_languages(config),
            "sentences": ret.sentences,
        },
        "alignment": {"layer": retrieval["layer"], "pooling": retrieval["pooling"]},
        **run,
    }
    return RetentionProbeSettings.parse(found, f"retention probe settings of backbone {backbone}")


def table_settings(config: dict[str, Any], backbone: str) -> RetentionTableSettings:
    """What a backbone's retention table shows; its probe files are the rule's inputs."""
    part = backbone_grid.grid_of(config, backbone)
    chosen = {n: intermediate_entry.entry_of(config, n) for n in part["intermediate"]}
    found = {
        "backbone": backbone,
        "family": entry_of(config, backbone).family,
        "intermediate": part["intermediate"],
        "targets": probed_targets(config, backbone),
        "seeds": part["seeds"],
        "languages": probe_languages(config),
        "pairs": grid_settings.arm_pairs(chosen),
        # a loss moves by hundredths where a score moves by tenths
        "decimals": max(2, tables_of(config).decimals),
        "objective": objective(config, backbone),
    }
    return RetentionTableSettings.parse(found, f"retention table settings of backbone {backbone}")


def objective(config: dict[str, Any], backbone: str) -> str | None:
    """The loss a backbone's probe measures (None: a family with no LM head: alignment only)."""
    return OBJECTIVES.get(entry_of(config, backbone).family)
