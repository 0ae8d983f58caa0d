"""Backbones: one more axis of the grid, next to the intermediate config, the transfer
setting and the seed (docs/protocol.md §10).

The config names each backbone under ``backbones``: where it comes from (Hub id and pinned
revision, or a demo model built locally), its family (backbones/), its training method
(full, lora, qlora; adapters.py) and precision, and what the memory planner needs. Every
model, metric file and table lives under the backbone's name, so adding a backbone to a
finished grid plans only that backbone's jobs and the tables that compare backbones.

A backbone may run a part of the grid (``grid``: intermediate configs, targets, seeds and
transfer settings): a 176B decoder is rarely run on every cell a base-size encoder is.

Standard library only: the Snakefile imports this to validate the config and build the DAG.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workflow_scripts.spec import intermediate_entry, paths
from workflow_scripts.spec.backbone_entry import GRID_PARTS, BackboneEntry, entries, entry_of
from workflow_scripts.spec.families import DEMO_FAMILIES
from workflow_scripts.spec.families import facts as family_facts
from workflow_scripts.spec.method import MethodSettings
from workflow_scripts.spec.model_settings import BackbonePrepare, BackboneProvenance
from workflow_scripts.spec.report_settings import tables_of
from workflow_scripts.spec.source_entries import models_of
from workflow_scripts.spec.suggest import did_you_mean
from workflow_scripts.spec.tasks import TASKS, get_task
from workflow_scripts.workflow import transfer


class BackboneError(ValueError):
    """A backbone entry that cannot work, named by its config key."""


# ----- the configured backbones ----------------------------------------------------------


def configured(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(config["backbones"])


def names(config: dict[str, Any]) -> list[str]:
    return list(config["backbones"])


def first(config: dict[str, Any]) -> str:
    """The first backbone: the one whose intermediate models the translation table scores."""
    return names(config)[0]


def whole_grid(config: dict[str, Any]) -> dict[str, list[Any]]:
    """The config's intermediate configs, targets, seeds and transfer settings."""
    return {
        "intermediate": list(config["intermediate"]),
        "targets": list(config["targets"]),
        "seeds": list(config["seeds"]),
        "settings": list(transfer.configured(config)),
    }


def grid_of(config: dict[str, Any], backbone: str) -> dict[str, list[Any]]:
    """The part of the grid a backbone runs (everything, unless its ``grid`` narrows it)."""
    narrowed = entry_of(config, backbone).narrowed_grid()
    full = whole_grid(config)
    return {key: [v for v in full[key] if v in narrowed[key]] if key in narrowed else full[key] for key in GRID_PARTS}


def plans(config: dict[str, Any], backbone: str) -> list[transfer.Plan]:
    """The transfer plans a backbone runs: its settings and targets, each with the backbone's
    intermediate configs and seeds among the plan's own."""
    part = grid_of(config, backbone)
    out = []
    for plan in transfer.plans(config):
        if plan.setting not in part["settings"] or plan.target not in part["targets"]:
            continue
        inter = tuple(n for n in plan.intermediate if n in part["intermediate"])
        seeds = tuple(s for s in plan.seeds if s in part["seeds"])
        if inter and seeds:
            out.append(dataclasses.replace(plan, intermediate=inter, seeds=seeds))
    return out


def find_plan(config: dict[str, Any], backbone: str, setting_token: str, target: str) -> transfer.Plan:
    for plan in plans(config, backbone):
        if transfer.path_token(plan.setting) == setting_token and plan.target == target:
            return plan
    raise KeyError(f"backbone {backbone} runs no setting {setting_token!r} for target {target!r}")


def contaminated(config: dict[str, Any], backbone: str) -> list[str]:
    """Targets whose data the backbone saw in its training mixture (mT0, BLOOMZ and Aya-101
    were tuned on xP3, which holds XNLI and XCOPA): their scores are not zero-shot."""
    return list(entry_of(config, backbone).contaminated_targets)


# ----- paths ------------------------------------------------------------------------------


def prepared_as(config: dict[str, Any], backbone: str) -> str:
    """The backbone whose prepared directory ``backbone`` loads: the first one in the config
    that prepares the same model (source, family, and Hub id and revision or demo settings).
    Entries of one model that differ in how they train (full, LoRA, QLoRA, precision,
    sharding) share one download or one demo pre-training: one copy of BLOOM's 352 GB,
    not one per method."""
    wanted = _prepare_fields(config, backbone)
    return next(name for name in names(config) if _prepare_fields(config, name) == wanted)


def base_dir(config: dict[str, Any], backbone: str) -> str:
    """The pretrained backbone as prepared (Hub snapshot or demo model)."""
    return f"{paths.results()}/models/backbones/{prepared_as(config, backbone)}"


def base_dirs(config: dict[str, Any], backbones: list[str]) -> list[str]:
    """The prepared directories of ``backbones``, each once (backbones may share one)."""
    return list(dict.fromkeys(base_dir(config, b) for b in backbones))


def tables_dir(backbone: str) -> str:
    return f"{paths.results()}/tables/{backbone}"


def figures_dir(backbone: str) -> str:
    return f"{paths.results()}/figures/{backbone}"


# ----- settings handed to the rules -------------------------------------------------------


def method_settings(config: dict[str, Any], backbone: str, adapters: bool = False) -> MethodSettings:
    """The training method as train.py reads it (adapters.Method): every setting that applies
    spelt out, so a training job's params change exactly when its method does. ``adapters``:
    a phase that trains adapters whatever the backbone's method (an arm recipe's ``trains:
    adapters``): LoRA with the backbone's lora settings where the method is full."""
    return entry_of(config, backbone).method_settings(adapters)


def _prepare_fields(config: dict[str, Any], backbone: str) -> dict[str, Any]:
    entry = entry_of(config, backbone)
    if not models_of(config).demo:
        return {"source": "hub", "family": entry.family, "hub_id": entry.hub_id, "revision": entry.revision}
    return {"source": "demo", "family": entry.family, "demo": entry.demo or {}}


def prepare_settings(config: dict[str, Any], backbone: str) -> BackbonePrepare:
    """What prepare_backbone fetches or builds, and the family it records."""
    return BackbonePrepare.parse(_prepare_fields(config, backbone), f"backbones.{backbone}")


def retrieval_settings(config: dict[str, Any], backbone: str) -> dict[str, Any]:
    """The retrieval options, with the backbone's own layer and pooling where it sets them."""
    own = entry_of(config, backbone).retrieval
    return {**config["retrieval"], **(own.to_dict() if own else {})}


def gpus(config: dict[str, Any], backbone: str) -> dict[str, Any]:
    """GPUs per node, nodes and launcher (torchrun or srun) a training job of the backbone
    asks for (no per_node: the rule's own `resources` decide, one process)."""
    asked = entry_of(config, backbone).gpu_request
    return {"per_node": asked.per_node or 0, "nodes": asked.nodes, "launcher": asked.launcher}


def provenance(config: dict[str, Any], backbone: str) -> BackboneProvenance:
    """What a metric file records of its backbone: where it comes from (Hub id and revision,
    or a demo model), its family, and how it trains (method_settings: method, precision, the
    LoRA settings of an adapter method). The evaluation adds what the prepared directory
    says: the commit a Hub revision resolved to, or the demo model's weights digest."""
    entry, source = entry_of(config, backbone), models_of(config).source
    hub = {"hub_id": entry.hub_id, "revision": entry.revision} if source == "hub" else {}
    return BackboneProvenance.of_method(
        method_settings(config, backbone), name=backbone, family=entry.family, source=source, **hub
    )


def describe(config: dict[str, Any], backbone: str) -> dict[str, Any]:
    """What a table row records of the backbone: its provenance, its size, and the targets
    its training mixture held (footnoted: not zero-shot)."""
    entry = entry_of(config, backbone)
    out = {**provenance(config, backbone).to_dict(), "contaminated_targets": contaminated(config, backbone)}
    if entry.parameters:
        out["parameters"] = entry.parameters
    if entry.contamination_source:
        out["contamination_source"] = entry.contamination_source
    loads = prepared_as(config, backbone)
    if loads != backbone:  # named only then: other tables' settings stay as they were
        out["prepared_as"] = loads
    return out


# ----- checks -----------------------------------------------------------------------------


def check(config: dict[str, Any]) -> None:
    """Every backbone entry can run: known family and method, a Hub id and revision in hub
    mode, a demo builder in demo mode, a grid within the config's, MLM only where the family
    has a masked-LM head."""
    if not config.get("backbones"):
        raise BackboneError(
            "config key backbones: name at least one backbone (the 2020 grid: "
            "xlmr_large: {hub_id: FacebookAI/xlm-roberta-large, family: encoder})"
        )
    for name, entry in entries(config).items():
        key = f"backbones.{name}"
        _check_source(config, key, entry)
        _check_sharding(key, entry)
        _check_grid(config, name, entry)
        for i, target in enumerate(entry.contaminated_targets):
            if target not in TASKS or not get_task(target).is_target:
                targets = [t.name for t in TASKS.values() if t.is_target]
                raise BackboneError(
                    f"config key {key}.contaminated_targets[{i}]: {target!r} is not a target task"
                    f"{did_you_mean(target, targets)}"
                )


def _check_source(config: dict[str, Any], key: str, entry: BackboneEntry) -> None:
    """A Hub id and revision in hub mode, a family the demo builds in demo mode."""
    if not models_of(config).demo:
        for field in ("hub_id", "revision"):
            if not getattr(entry, field):
                raise BackboneError(f"config key {key}.{field}: required when models.source is hub")
    elif entry.family not in DEMO_FAMILIES:
        raise BackboneError(
            f"config key {key}.family: the demo builds {' and '.join(DEMO_FAMILIES)} backbones, "
            f"not {entry.family} (use models.source: hub)"
        )


def _check_sharding(key: str, entry: BackboneEntry) -> None:
    """What does not run across several GPUs: fp16's loss scaling and QLoRA."""
    gpu_count = entry.gpu_request.count
    if entry.precision == "fp16" and gpu_count > 1:
        raise BackboneError(
            f"config key {key}.precision: fp16 needs loss scaling, which sharded training does not run "
            "(a per-rank scale would let the ranks skip different steps); use bf16 on several GPUs"
        )
    if entry.method == "qlora" and gpu_count > 1:
        raise BackboneError(
            f"config key {key}.gpus: qlora trains on one GPU; across {gpu_count} GPUs "
            "each rank would have to quantise and hold the whole 4-bit base (sharded loading reads bf16/fp32 "
            "rows, which bitsandbytes' 4-bit blocks are not). Use method lora (bf16 base, sharded) for "
            "several GPUs, or one GPU with qlora"
        )


def _check_grid(config: dict[str, Any], name: str, entry: BackboneEntry) -> None:
    """The backbone's grid lies within the config's, holds the tables' baselines, and mixes in
    MLM only where the family has a masked-LM head."""
    key, full = f"backbones.{name}", whole_grid(config)
    narrowed = entry.narrowed_grid()  # arm_recipes: checked where the recipes expand
    for part, values in narrowed.items():
        unknown = [v for v in values if v not in full[part]]
        if unknown:
            hints = "".join(did_you_mean(value, full[part]) for value in unknown)
            raise BackboneError(
                f"config key {key}.grid.{part}: {unknown}{hints} not in the config's {part} {full[part]}"
            )
    part = grid_of(config, name)
    baseline = tables_of(config).baseline
    if baseline not in part["intermediate"]:
        raise BackboneError(
            f"config key {key}.grid.intermediate: lacks the baseline config {baseline!r}, which every table compares with"
        )
    baseline_setting = transfer.baseline_setting(config)
    if baseline_setting not in part["settings"]:
        raise BackboneError(f"config key {key}.grid.settings: lacks the baseline setting {baseline_setting!r}")
    if not family_facts(entry.family).has_mlm:
        for inter in part["intermediate"]:
            if intermediate_entry.entry_of(config, inter).mlm:
                raise BackboneError(
                    f"config key {key}.grid.intermediate: {inter!r} mixes in MLM, and a {entry.family} "
                    "backbone has no masked-LM head; leave it out of this backbone's grid"
                )
