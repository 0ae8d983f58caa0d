"""Each GPU job's estimated time (job_work.py's tokens at job_cost.py's throughput) and the
Slurm time limit sized from it: the estimate x ``cost.safety_factor`` + ``cost.floor_minutes``,
at most the rule's ``resources.<rule>.runtime`` (one allocation: the partition's limit, which
the preflight checks). A training job longer than one allocation continues from its
checkpoint in the next (slurm.py); the allocations it needs are part of its estimate.
Image embedding, translation and prompting are estimated (their GPU-hours in the plan) but
keep their configured runtime as their limit (``CONFIGURED_LIMIT_RULES`` says why).

A rule's ``expected_runtime`` (minutes), where the config sets one, replaces the estimate of
its jobs: a measured figure from a first run beats the model.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflow_scripts.planning import job_work, slurm
from workflow_scripts.planning.job_cost import Estimate, estimate, translation_estimate
from workflow_scripts.spec import few_shot
from workflow_scripts.spec.schema import default
from workflow_scripts.workflow import grid, grid_settings

TRAINING_RULES = ("train_intermediate", *slurm.TARGET_TRAINING_RULES)
EVALUATION_RULES = ("evaluate_target",)
PROBE_RULES = ("probe_retention", "probe_retention_before", "probe_retention_target")
EMBEDDING_RULES = ("embed_images",)
TRANSLATION_RULES = tuple(job_work.TRANSLATION_RULES)
PROMPTED_RULES = ("evaluate_prompted",)
ESTIMATED_RULES = TRAINING_RULES + EVALUATION_RULES + PROBE_RULES + EMBEDDING_RULES + TRANSLATION_RULES + PROMPTED_RULES
# Jobs whose estimate counts their GPU-hours but does not set their time limit, which stays
# resources.<rule>.runtime: image embedding (decoding the images, which the FLOPs do not
# see, sets its time), translation (its MFU is assumed, not measured, and a job cut off at
# its limit loses its batch in flight) and prompting (lm-eval's per-request host work).
CONFIGURED_LIMIT_RULES = EMBEDDING_RULES + TRANSLATION_RULES + PROMPTED_RULES


@dataclass(frozen=True)
class JobTime:
    """One job's estimate (None: none could be made) and what it asks Slurm for."""

    rule: str
    estimate: Estimate | None
    minutes: float | None  # expected wall time: the estimate's, or the rule's expected_runtime
    runtime: int  # minutes per allocation
    allocations: int
    basis: str


def cost_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's ``cost`` block, completed with the schema's defaults."""
    defaults = {key: default("cost", key) for key in ("gpu", "safety_factor", "floor_minutes")}
    return {**defaults, "mfu": None, **(config.get("cost") or {})}


def job_estimate(config: Mapping[str, Any], rule: str, wildcards: Mapping[str, str]) -> Estimate | None:
    """The cost model's estimate of one job of ``rule`` (None: unknown sizes or shape)."""
    if rule in TRANSLATION_RULES:
        return _translation_estimate(config, rule, wildcards)
    work = _job_work(config, rule, wildcards)
    if work is None:
        return None
    shape, tokens = work
    cost = cost_settings(config)
    return estimate(shape, tokens, cost["gpu"], cost["mfu"])


def _translation_estimate(config, rule: str, wildcards: Mapping[str, str]) -> Estimate | None:
    found = job_work.translation_job(config, rule, wildcards)
    if found is None:
        return None
    hub_id, translator, tokens = found
    cost = cost_settings(config)
    beams = grid_settings.translation_settings(dict(config)).num_beams
    return translation_estimate(translator, tokens, beams, cost["gpu"], cost["mfu"], hub_id)


# Rules whose jobs read another rule's resources: `use rule` variants their parent's, the
# translation scorers the translators'.
SHARED_RESOURCES = {
    **dict.fromkeys(slurm.TARGET_TRAINING_RULES, "train_target"),
    **dict.fromkeys(PROBE_RULES, "probe_retention"),
    "score_translation_quality": "translate_task_data",
    "score_translation_quality_to_english": "translate_test_data",
}


def resources_rule(rule: str) -> str:
    """The rule whose resources a rule's jobs read."""
    return SHARED_RESOURCES.get(rule, rule)


def _job_work(config, rule: str, w: Mapping[str, str]):
    if rule in EMBEDDING_RULES:
        return job_work.embedding_job(config, w["task"])
    if rule not in TRAINING_RULES + EVALUATION_RULES + PROBE_RULES + PROMPTED_RULES:
        return None
    shape = job_work.backbone_shape(config, w["backbone"])
    if shape is None:  # no parameter count (the demo's backbones): nothing to estimate from
        return None
    if rule in PROMPTED_RULES:
        return _prompted_work(config, shape, w)
    if rule in TRAINING_RULES:
        settings, data = _training_job(config, rule, w)
        shape = dataclasses.replace(shape, method=settings.method.name)  # an image arm's adapters
        return _with(shape, job_work.data_map_tokens(config, settings, data, shape.gpus))
    # Scoring runs on the GPUs its rule asks for, not on the backbone's training GPUs.
    shape = dataclasses.replace(shape, gpus=max(1, int(grid.resources(dict(config), resources_rule(rule))["gpu"])))
    if rule in EVALUATION_RULES:
        from workflow_scripts.workflow import backbone_grid

        plan = backbone_grid.find_plan(config, w["backbone"], w["setting"], w["target"])
        return _with(shape, job_work.evaluation_tokens(config, w["target"], plan.eval_data))
    from workflow_scripts.workflow.retention import probe_settings

    return _with(shape, job_work.retention_tokens(probe_settings(config, w["backbone"])))


def _prompted_work(config, shape, w: Mapping[str, str]):
    from workflow_scripts.workflow import prompted

    gpus = prompted.gpus(dict(config), w["backbone"], int(grid.resources(dict(config), "evaluate_prompted")["gpu"]))
    settings = prompted.settings(dict(config), w["backbone"], w["task"])
    tokens = job_work.prompted_tokens(config, w["task"], list(settings.languages), list(settings.shots))
    return _with(dataclasses.replace(shape, gpus=max(1, gpus)), tokens)


def _with(shape, tokens):
    return None if tokens is None else (shape, tokens)


def _training_job(config, rule: str, w: Mapping[str, str]):
    """The settings and data map a training job's params carry (rules/train.smk)."""
    if rule == "train_intermediate":
        return (
            grid_settings.intermediate_settings(config, w["backbone"], w["intermediate"]),
            grid.intermediate_data(config, w["intermediate"]),
        )
    if "stage" in w:
        return grid_settings.stage_settings(config, w["backbone"], w["target"], w["stage"]), grid.stage_data(
            config, w["stage"]
        )
    if "point" in w and re.fullmatch(few_shot.RECIPE_PATTERN, w["recipe"]):
        settings = grid_settings.few_shot_settings(config, w["backbone"], w["target"], w["recipe"], w["point"])
        return settings, grid_settings.few_shot_data(config, w["target"], w["recipe"])
    if "point" in w:
        settings = grid_settings.sweep_point_settings(config, w["backbone"], w["target"], w["point"])
        return settings, grid.target_data(config, w["target"], w["recipe"])
    return grid_settings.target_settings(config, w["backbone"], w["target"]), grid.target_data(
        config, w["target"], w["recipe"]
    )


def job_time(config: Mapping[str, Any], rule: str, wildcards: Mapping[str, str], resources_rule: str) -> JobTime:
    """The time limit of one job: from its estimate (or the rule's expected_runtime), at most
    the rule's configured runtime; ``resources_rule`` is the rule whose resources it reads."""
    res = grid.resources(dict(config), resources_rule)
    cap, cost = int(res["runtime"]), cost_settings(config)
    found = job_estimate(config, rule, wildcards)
    if res.get("expected_runtime"):  # the user's measured figure, taken as it is
        minutes = float(res["expected_runtime"])
        needed, basis = int(minutes), f"resources.{resources_rule}.expected_runtime"
    elif found is not None:
        minutes = found.minutes
        needed = math.ceil(minutes * cost["safety_factor"] + cost["floor_minutes"])
        basis = found.basis
    else:
        return JobTime(rule, None, None, cap, 1, f"no estimate: resources.{resources_rule}.runtime")
    if rule in CONFIGURED_LIMIT_RULES:
        return JobTime(rule, found, minutes, cap, 1, basis)
    allocations = 1
    if needed > cap:
        if rule in TRAINING_RULES:  # continues from its checkpoint in further allocations
            lead = int(res.get("signal_lead", slurm.DEFAULT_SIGNAL_LEAD))
            allocations = slurm.allocations_needed(needed, cap, lead)
        else:
            allocations = math.ceil(needed / cap)  # cannot resume: it would not finish
    return JobTime(rule, found, minutes, min(needed, cap), allocations, basis)


def training_jobs(config: Mapping[str, Any], rule: str) -> list[dict[str, str]]:
    """One job's wildcards per (backbone, intermediate config) or (backbone, target, recipe)
    of a training rule (seed and intermediate config do not change a target job's work)."""
    from workflow_scripts.workflow import backbone_grid

    config, jobs = dict(config), []
    for backbone in backbone_grid.names(config):
        if rule == "train_intermediate":
            for name in backbone_grid.grid_of(config, backbone)["intermediate"]:
                if grid.intermediate_data(config, name):  # a config with nothing to train has no job
                    jobs.append({"backbone": backbone, "intermediate": name, "seed": "1"})
            continue
        for plan in backbone_grid.plans(config, backbone):
            job = {"backbone": backbone, "intermediate": plan.intermediate[0], "target": plan.target, "seed": "1"}
            jobs += [{**job, "recipe": recipe.name} for recipe in plan.recipes()]
            jobs += [{**job, "stage": stage} for stage in grid.target_stages(config, plan.target)]
    return jobs


def max_allocations(config: Mapping[str, Any], rule: str) -> int | None:
    """The most allocations any job of a training rule needs (its retries cover them); None
    where no job of the rule has an estimate."""
    if all(job_work.backbone_shape(config, b) is None for b in config["backbones"]):
        return None  # no backbone the model can size (the demos): nothing to enumerate
    times = [job_time(config, rule, w, rule) for w in training_jobs(config, rule)]
    known = [t.allocations for t in times if t.estimate is not None]
    return max(known) if known else None
