"""The prompted arm's part of the grid (config ``prompted``; docs/prompted.md): which decoder
backbones are prompted on which tasks at which phases, where each job's file lives, and the
settings the job and the table receive.

A backbone is prompted as it is (its baseline config's model, the pretrained backbone: one
job, no seed) and after each intermediate phase the grid trains (one job per config and
seed: the phase's weights, adapters merged as evaluation merges them). Each job prompts one
task in every language at every shot count.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

from workflow_scripts.planning import memory_model
from workflow_scripts.spec import paths, task_entry
from workflow_scripts.spec.backbone_entry import entries, entry_of
from workflow_scripts.spec.prompted import (
    LM_EVAL_LACKS,
    LM_EVAL_TASKS,
    NO_TASK,
    PromptedEntry,
    PromptedSettings,
    PromptedTableSettings,
    PromptRun,
)
from workflow_scripts.spec.report_settings import PromptedScalingSettings, tables_of
from workflow_scripts.spec.schema_block import parsed_filled
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.workflow import backbone_grid, grid, transfer
from workflow_scripts.workflow.grid import ConfigError

PRETRAINED = "pretrained"  # the run name of a baseline config's job: the backbone as it is


def options(config: dict[str, Any]) -> PromptedEntry:
    """The config's ``prompted`` block, parsed once."""
    return parsed_filled(PromptedEntry, config.get("prompted") or {}, "prompted")


def enabled(config: dict[str, Any]) -> bool:
    return options(config).enabled


def backbones(config: dict[str, Any]) -> list[str]:
    """The decoder backbones prompted (``prompted.backbones``, else every decoder)."""
    chosen = options(config).backbones
    decoders = [b for b, e in entries(config).items() if e.family == "decoder"]
    return decoders if chosen is None else [b for b in chosen if b in decoders]


def tasks(config: dict[str, Any], backbone: str) -> list[str]:
    """The backbone's targets lm-eval prompts (``prompted.tasks`` narrows them)."""
    chosen = options(config).tasks
    found = [t for t in backbone_grid.grid_of(config, backbone)["targets"] if t in LM_EVAL_TASKS]
    return found if chosen is None else [t for t in found if t in chosen]


def why_not(config: dict[str, Any], backbone: str) -> dict[str, str]:
    """Each target of the backbone that is not prompted, and why."""
    prompted = set(tasks(config, backbone))
    found = {}
    for target in backbone_grid.grid_of(config, backbone)["targets"]:
        if target in prompted:
            continue
        found[target] = LM_EVAL_LACKS.get(target) or ("not in prompted.tasks" if target in LM_EVAL_TASKS else NO_TASK)
    return found


def languages(config: dict[str, Any], task: str) -> list[str]:
    """The task's configured languages lm-eval has a task file for (English first)."""
    configured = task_entry.entry_of(config, task).languages or get_task(task).languages
    found = [lang for lang in configured if lang in LM_EVAL_TASKS[task].languages]
    return sorted(found, key=lambda lang: (lang != "en", lang))


# ----- checks -----------------------------------------------------------------------------


def check(config: dict[str, Any]) -> None:
    """Each named backbone is a decoder and each named task one lm-eval prompts (errors name the key)."""
    if not enabled(config):
        return
    for i, name in enumerate(options(config).backbones or ()):
        if name not in config["backbones"] or entry_of(config, name).family != "decoder":
            raise ConfigError(
                f"config key prompted.backbones[{i}]: {name!r} is not a decoder backbone of this config; "
                "lm-evaluation-harness prompts decoders"
            )
    for i, task in enumerate(options(config).tasks or ()):
        if task not in LM_EVAL_TASKS:
            why = LM_EVAL_LACKS.get(task, NO_TASK)
            raise ConfigError(
                f"config key prompted.tasks[{i}]: {task!r} is not prompted ({why}); "
                f"prompted tasks: {', '.join(LM_EVAL_TASKS)}"
            )
    for backbone in backbones(config):
        _check_fits_one_node(config, backbone)
    shots = list(options(config).shots)
    if len(set(shots)) != len(shots):
        raise ConfigError(f"config key prompted.shots: {shots} names a count twice")


def gpus(config: dict[str, Any], backbone: str, default: int) -> int:
    """The GPUs a prompted job of the backbone asks for: enough of its ``gpus.memory_gb`` to
    hold its weights (memory_model.inference_gpus), on one node; ``default`` (the rule's
    resources) for a backbone whose size is not known (the demo's)."""
    entry = entry_of(config, backbone)
    if memory_model.skip_reason(entry):
        return default
    return max(default, memory_model.inference_gpus(memory_model.parse_backbone(backbone, entry)))


def _check_fits_one_node(config: dict[str, Any], backbone: str) -> None:
    asked = backbone_grid.gpus(config, backbone)["per_node"]
    needed = gpus(config, backbone, 1)
    if asked and needed > asked:
        raise ConfigError(
            f"config key backbones.{backbone}.gpus.per_node: a prompted job holds the model on one node's GPUs; "
            f"its weights need {needed} and a node has {asked} (prompted.backbones leaves it out)"
        )


# ----- what runs ----------------------------------------------------------------------------


def runs(config: dict[str, Any], backbone: str) -> list[tuple[str, str]]:
    """(config, run) of every prompted model of a backbone: the baseline's pretrained model
    once, every other config's intermediate model per seed."""
    part = backbone_grid.grid_of(config, backbone)
    found = []
    for name in part["intermediate"]:
        if grid.is_baseline(config, name):
            found.append((name, PRETRAINED))
        else:
            found += [(name, f"seed{seed}") for seed in part["seeds"]]
    return found


def model_dir(config: dict[str, Any], backbone: str, name: str, run: str) -> str:
    """The model a job prompts: the pretrained backbone, or an intermediate phase's model."""
    if run == PRETRAINED:
        return backbone_grid.base_dir(config, backbone)
    return grid.intermediate_encoder(config, backbone, name, run.removeprefix("seed"))


def result_file(backbone: str, name: str, run: str, task: str) -> str:
    return f"{paths.results()}/prompted/{backbone}/{name}/{run}/{task}.json"


def result_files(config: dict[str, Any], backbone: str) -> list[str]:
    """Every prompted file of a backbone: its table's inputs."""
    return [
        result_file(backbone, name, run, task)
        for name, run in runs(config, backbone)
        for task in tasks(config, backbone)
    ]


def data_files(config: dict[str, Any], task: str) -> dict[str, str]:
    """The prepared splits a job reads: the test rows the fine-tuned arm scores, and the rows
    its shots come from: ``english``, the dev split of the task the fine-tuned arm selects on
    (``select_from``: XCOPA's COPA, TyDiQA-GoldP's SQuAD); ``own``, the task's own dev split
    (TyDiQA-GoldP, whose dev set is its test set: its train split)."""
    if options(config).shots_from == "english":
        return {
            "test": transfer.data_path(task, "test"),
            "shots": transfer.data_path(get_task(task).select_from, "dev"),
        }
    return {"test": transfer.data_path(task, "test"), "shots": transfer.data_path(task, own_shot_split(task))}


def own_shot_split(task: str) -> str:
    return "dev" if "dev" in get_task(task).splits else "train"


def task_files_digest(task: str) -> str:
    """A digest of lm-eval's installed task folder of ``task`` (its task files, shared
    configs and utils): a job reruns when lm-eval's prompt or metric code changes. Found
    without importing lm-eval; an environment without it gives "not installed" (the job
    itself then stops, saying so)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    folder = Path(next(iter(spec.submodule_search_locations))) / "tasks" / Path(LM_EVAL_TASKS[task].task_file).parent
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".pyc"):
        digest.update(f"{path.relative_to(folder)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


# ----- settings -----------------------------------------------------------------------------


def settings(config: dict[str, Any], backbone: str, task: str) -> PromptedSettings:
    """One backbone's settings for one task: the same JSON at every phase."""
    run = {key: getattr(options(config), key) for key in PromptRun.keys()}  # the keys block and job share
    found = {
        "task": task,
        "languages": languages(config, task),
        **run,
        "family": entry_of(config, backbone).family,
        "method": backbone_grid.method_settings(config, backbone).to_dict(),
    }
    return PromptedSettings.parse(found, f"prompted settings of backbone {backbone}, task {task}")


def table_settings(config: dict[str, Any], backbone: str) -> PromptedTableSettings:
    """What a backbone's fine-tuned-versus-prompted table shows."""
    part = backbone_grid.grid_of(config, backbone)
    found = {
        "backbone": backbone,
        "baseline": baseline(config, backbone),
        "intermediate": part["intermediate"],
        "seeds": part["seeds"],
        "shots": options(config).shots,
        "targets": part["targets"],
        "prompted": tasks(config, backbone),
        "why_not": why_not(config, backbone),
        "decimals": tables_of(config).decimals,
    }
    return PromptedTableSettings.parse(found, f"prompted table settings of backbone {backbone}")


def baseline(config: dict[str, Any], backbone: str) -> str:
    """The backbone's baseline config: the one it is fine-tuned from and prompted as it is."""
    part = backbone_grid.grid_of(config, backbone)["intermediate"]
    return next((n for n in part if grid.is_baseline(config, n)), part[0])


def scaling_settings(config: dict[str, Any]) -> PromptedScalingSettings:
    """What the comparison across backbone sizes shows: every prompted backbone."""
    chosen = backbones(config)
    found = {
        "backbones": {b: backbone_grid.describe(config, b) for b in chosen},
        "baselines": {b: baseline(config, b) for b in chosen},
        "tasks": list(dict.fromkeys(t for b in chosen for t in tasks(config, b))),
        "shots": options(config).shots,
        "decimals": tables_of(config).decimals,
    }
    return PromptedScalingSettings.parse(found, "prompted scaling settings")
