"""GPU memory planner: each backbone of a config in each training phase, at the phase's peak,
against the GPUs its jobs ask for (the byte model: ``memory_model.py``).

Why: a 10.7B or 176B backbone that cannot fit the GPUs its jobs ask for fails only after
the queue wait and the model download, one job at a time. The Snakefile calls
``check_fits(config)`` so such a config stops before any job, naming the key to change.

A phase's peak is its most demanding task (each training step samples one task, MLM
included), planned at that task's ``max_length`` and min(max_micro_batch, batch_size)
examples, each multiple-choice example counted as one sequence per choice; the heads are
those of the phase's largest job (a multitask config trains all its heads at once).

CLI: ``python -m workflow_scripts.planning.memory_plan CONFIG.yaml [--gpu-memory-gb 80]`` prints a
Markdown table per backbone and phase and exits 1 if a backbone does not fit the GPUs it
asks for; ``--reference`` prints the README's plan of the reference backbones.
Standard library only at import time (the Snakefile imports this module).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from workflow_scripts.planning.memory_model import (
    GB,
    MAX_GPUS,
    METHOD_NAMES,
    Architecture,
    Backbone,
    MemoryEstimate,
    PlanError,
    Workload,
    activation_bytes,
    estimate,
    min_gpus,
    parse_backbone,
    skip_reason,
    usable_bytes,
)
from workflow_scripts.planning.memory_table import format_count, plan_markdown, reference_plan_markdown
from workflow_scripts.spec.backbone_entry import BackboneEntry, entry_of
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.formats import head_kind
from workflow_scripts.spec.model_settings import DemoVision
from workflow_scripts.spec.record import parsed_once
from workflow_scripts.spec.schema import default
from workflow_scripts.spec.schema_block import filled
from workflow_scripts.spec.source_entries import vision_of
from workflow_scripts.spec.task_entry import TaskEntry
from workflow_scripts.spec.tasks import (
    CLASSIFICATION,
    MLM,
    MULTIPLE_CHOICE,
    RANKING,
    SPAN,
    TAGGING,
    TASKS,
    VISUAL_ANSWER,
    VISUAL_CLASSIFICATION,
    VISUAL_FORMATS,
    VISUAL_RETRIEVAL,
)

# training.<phase>.max_micro_batch: auto (fitting_micro_batch)
AUTO_MICRO_BATCH = "auto"
PHASES = ("intermediate", "target")


@dataclass(frozen=True)
class PhaseShape:
    """A phase's workloads, and each job's tasks (the heads of one job train together).
    ``auto``: the phase's ``max_micro_batch`` is ``auto``, each backbone's own
    (``fitting_micro_batch``); the workloads then hold whole batches until capped."""

    workloads: tuple[Workload, ...]
    jobs: tuple[tuple[str, ...], ...]
    auto: bool = False

    def capped(self, cap: int) -> PhaseShape:
        return replace(self, workloads=tuple(w.capped(cap) for w in self.workloads), auto=False)


@dataclass(frozen=True)
class PhasePlan:
    """One row of the plan: a backbone in a phase (``skipped`` says why there is no estimate)."""

    backbone: str
    phase: str
    method: str = ""
    precision: str = ""
    parameters: float | None = None
    task: str | None = None
    seq_len: int | None = None
    micro_batch: int | None = None
    with_mlm_logits: bool = False
    gpus_asked: int = 0
    memory_gb: float = 0.0
    estimate: MemoryEstimate | None = None
    min_gpus: int | None = None
    min_gpus_memory_gb: float = 0.0
    fits: bool = True
    skipped: str | None = None


# CCG's supertag set comes from the user's files; an upper guess for its tagging head.
UNKNOWN_TAGSET = 1024
# A classification task outside the catalogue: its label count is not known here.
UNKNOWN_CLASSES = 8
# VQA v2's answer vocabulary as it is usually built (answers given 9 or more times).
VQA_ANSWERS = 3129
# The resolution of a vision tower whose Hub id names none.
DEFAULT_IMAGE_SIZE = 224


def task_head_parameters(task: str, arch: Architecture) -> float:
    """A task head's parameters, by the format models/heads.py builds for it: classification and
    multiple choice a dense h x h layer before the output, tagging and span one projection,
    MLM a dense layer and an output bias (its decoder is tied to the embedding)."""
    h = arch.hidden_size
    spec = TASKS.get(task)
    fmt = head_kind(spec.format) if spec else CLASSIFICATION  # a new format sized as the head it names
    labels = spec.num_labels if spec and spec.num_labels else 0
    if fmt == MULTIPLE_CHOICE:
        return float(h * h + h + h + 1)
    if fmt == SPAN:
        return float(2 * (h + 1))
    if fmt == RANKING:  # dense h x h and the logit scale (dual_encoder.RankingHead)
        return float(h * h + h + 1)
    if fmt == TAGGING:
        return float((h + 1) * (labels or UNKNOWN_TAGSET))
    if fmt == MLM:
        return float(h * h + 3 * h + (arch.vocab_size or 0))
    if fmt in VISUAL_FORMATS:  # projector (vision width taken as h), slots, and the pooled output's head
        projector = 2 * h * h + 2 * h + spec.images_per_example * h  # (a visual format has its spec)
        if fmt not in (VISUAL_CLASSIFICATION, VISUAL_ANSWER):  # retrieval: the caption's projection
            return float(projector + h * h + h)
        answers = labels or (VQA_ANSWERS if fmt == VISUAL_ANSWER else UNKNOWN_CLASSES)
        return float(projector + h * h + h + (h + 1) * answers)
    return float(h * h + h + (h + 1) * (labels or UNKNOWN_CLASSES))


# ----- phases of a config ---------------------------------------------------------------


def _is_trained(task: str) -> bool:
    """Retrieval and mining targets are scored with the encoder directly, never trained."""
    spec = TASKS.get(task)
    return not (spec and spec.is_retrieval)


def phase_jobs(config: Mapping[str, Any], phase: str) -> list[tuple[str, ...]]:
    """The task sets trained together in one job of the phase: an intermediate config's tasks
    (plus ``mlm`` when it has ``mlm: true``), or one target each. A config without
    ``intermediate``/``targets`` lists counts every task of ``tasks`` as a job of its own."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    tasks = config.get("tasks") or {}
    if phase == "intermediate" and isinstance(config.get("intermediate"), Mapping):
        jobs = []
        for entry in config["intermediate"].values():
            entry = entry or {}
            names = tuple(entry.get("tasks") or ()) + (("mlm",) if entry.get("mlm") else ())
            if names:
                jobs.append(names)
        return jobs
    if phase == "target" and config.get("targets") is not None:
        names = list(config["targets"])
        settings = (config.get("transfer") or {}).get("settings") or {}
        for setting in settings.values():
            names += [t for t in (setting or {}).get("targets") or () if t not in names]
        return [(t,) for t in names if _is_trained(t)]
    return [(t,) for t in tasks if _is_trained(t) and not (TASKS.get(t) and TASKS[t].format == MLM)]


def visual_tokens(config: Mapping[str, Any]) -> int:
    """Tokens one image adds to a text's sequence in the backbone (multimodal/prefix.py)."""
    try:
        vision = vision_of(config)
    except InputError as err:  # the planner's CLI reads configs the schema has not checked
        raise PlanError(f"config key {err}") from None
    if vision.visual_tokens:
        return vision.visual_tokens
    if vision.features == "pooled":
        return 1
    if (config.get("models") or {}).get("source") == "demo":
        demo = {**filled(DemoVision), **vision.demo}  # the tower's defaults, then the config's
        return (int(demo["image_size"]) // int(demo["patch_size"])) ** 2 + 1
    hub_id = vision.hub_id
    found = re.search(r"patch(\d+)(?:-(\d+))?", hub_id)
    if not found:
        raise PlanError(
            f"config key vision.visual_tokens: the number of tokens {hub_id} gives one image cannot be "
            "read from its Hub id (no patch size in it); set it"
        )
    patch, size = int(found.group(1)), int(found.group(2) or DEFAULT_IMAGE_SIZE)
    return (size // patch) ** 2 + (0 if "siglip" in hub_id.lower() else 1)


def phase_shape(config: Mapping[str, Any], phase: str, seq_len: int | None = None) -> PhaseShape | None:
    """Each trained task's ``max_length`` (or ``seq_len`` for all; an image task's visual
    tokens added) and micro-batch per device, min(max_micro_batch, task batch_size) x
    choices; None if nothing trains in the phase."""
    jobs = phase_jobs(config, phase)
    if not jobs:
        return None
    cap = phase_cap(config, phase)
    workloads = []
    for name in sorted({t for job in jobs for t in job}):
        length, choices = task_sequence(config, name, seq_len)
        spec = TASKS.get(name)
        batch = planned_task(config, name).batch_size
        workloads.append(
            Workload(
                task=name,
                seq_len=length,
                micro_batch=batch * choices,
                with_mlm_logits=spec is not None and head_kind(spec.format) == MLM,
                batch_size=batch,
                choices=choices,
            )
        )
    shape = PhaseShape(workloads=tuple(workloads), jobs=tuple(jobs), auto=cap == AUTO_MICRO_BATCH)
    return shape if shape.auto else shape.capped(int(cap))


def phase_cap(config: Mapping[str, Any], phase: str) -> int | str:
    """A phase's ``max_micro_batch`` as the config gives it (a number or ``auto``)."""
    phase_cfg = (config.get("training") or {}).get(phase) or {}
    return phase_cfg.get("max_micro_batch", default("max_micro_batch", definition="phase"))


def fitting_micro_batch(bb: Backbone, shape: PhaseShape) -> int:
    """``max_micro_batch: auto`` on this backbone: the largest micro-batch (examples, at most
    the phase's largest batch) at which every task's step fits the backbone's GPUs, so that a
    step is one forward and backward wherever the card holds the whole batch; 1 where even
    that does not fit (the plan then says so)."""
    heads = job_head_parameters(shape, bb.architecture)
    usable = usable_bytes(bb.memory_gb)

    def fits(cap: int) -> bool:
        return all(
            estimate(bb, w.seq_len, w.micro_batch, bb.gpus, w.with_mlm_logits, heads).total <= usable
            for w in shape.capped(cap).workloads
        )

    low, high = 1, max(w.batch_size for w in shape.workloads)
    while low < high:  # the largest cap that fits (memory grows with the cap)
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def resolved_micro_batch(config: Mapping[str, Any], backbone: str, phase: str) -> int:
    """A phase's ``max_micro_batch`` for one backbone: the config's number, or for ``auto``
    what ``fitting_micro_batch`` finds; a backbone the planner cannot size (no parameter
    count: the demo's) takes the schema's default cap."""
    cap = phase_cap(config, phase)
    if cap != AUTO_MICRO_BATCH:
        return int(cap)
    entry = planned_entry(config, backbone)
    shape = phase_shape(backbone_part(config, entry), phase)
    if shape is None or skip_reason(entry) is not None:
        return int(default("max_micro_batch", definition="phase"))
    return fitting_micro_batch(parse_backbone(backbone, entry), shape)


def task_sequence(config: Mapping[str, Any], name: str, seq_len: int | None = None) -> tuple[int, int]:
    """(tokens per sequence, sequences per example) of a task as training batches it: its
    ``max_length`` (or ``seq_len``) with an image task's visual tokens added, and its choices
    (a ranking example: a query and its gold candidate). The cost model counts the same."""
    entry = planned_task(config, name)
    spec = TASKS.get(name)
    choices = spec.num_choices if spec and spec.num_choices else 1
    kind = head_kind(spec.format) if spec is not None else None  # spec/formats/: TaskFormat.head
    if kind == RANKING:
        choices = 2
    visual = 0
    if kind in (VISUAL_CLASSIFICATION, VISUAL_ANSWER):  # the images' tokens join the text
        visual = spec.images_per_example * visual_tokens(config)
    return (seq_len or entry.max_length) + visual, choices


def peak_workload(bb: Backbone, shape: PhaseShape) -> Workload:
    """The task whose activations are largest on this backbone (s x b, MLM's vocabulary logits)."""
    return max(shape.workloads, key=lambda w: activation_bytes(bb, w.seq_len, w.micro_batch, w.with_mlm_logits))


def job_head_parameters(shape: PhaseShape, arch: Architecture) -> float:
    """The heads of the phase's largest job: a multitask job trains all its heads at once."""
    return max(sum(task_head_parameters(t, arch) for t in job) for job in shape.jobs)


def plan_phase(bb: Backbone, phase: str, shape: PhaseShape, gpu_memory_gb: float | None = None) -> PhasePlan:
    """The phase's peak on the GPUs asked, and the smallest count on ``gpu_memory_gb`` GPUs
    (default: the backbone's own). The heads are those of the phase's largest job, even when
    the peak task belongs to another: an upper bound, by at most a few heads."""
    if shape.auto:
        shape = shape.capped(fitting_micro_batch(bb, shape))
    heads = job_head_parameters(shape, bb.architecture)
    peak = peak_workload(bb, shape)
    est = estimate(bb, peak.seq_len, peak.micro_batch, bb.gpus, peak.with_mlm_logits, heads)
    memory = gpu_memory_gb or bb.memory_gb
    return PhasePlan(
        backbone=bb.name,
        phase=phase,
        method=bb.method,
        precision=bb.precision,
        parameters=bb.parameters,
        task=peak.task,
        seq_len=peak.seq_len,
        micro_batch=peak.micro_batch,
        with_mlm_logits=peak.with_mlm_logits,
        gpus_asked=bb.gpus,
        memory_gb=bb.memory_gb,
        estimate=est,
        min_gpus=min_gpus(bb, peak.seq_len, peak.micro_batch, memory, peak.with_mlm_logits, heads),
        min_gpus_memory_gb=memory,
        fits=est.total <= usable_bytes(bb.memory_gb),
    )


def planned_task(config: Mapping[str, Any], name: str) -> TaskEntry:
    """The record of ``tasks.<name>`` (its defaults where the config has no such entry); a bad
    entry is a PlanError naming the key, as for a backbone (planned_entry)."""
    found = (config.get("tasks") or {}).get(name)
    if found is None:
        return TaskEntry.parse({}, f"tasks.{name}")
    try:
        return parsed_once(TaskEntry, found, f"tasks.{name}")
    except InputError as err:
        raise PlanError(f"config key {err}") from None


def planned_entry(config: Mapping[str, Any], name: str) -> BackboneEntry:
    """The record of ``backbones.<name>``; a bad entry (the planner's CLI reads configs the
    schema has not checked) is a PlanError naming the key."""
    if not isinstance(config["backbones"][name], Mapping):
        raise PlanError(f"config key backbones.{name}: expected a mapping")
    try:
        return entry_of(config, name)
    except InputError as err:
        raise PlanError(f"config key {err}") from None


def backbone_part(config: Mapping[str, Any], entry: BackboneEntry) -> Mapping[str, Any]:
    """The config as one backbone runs it: its ``grid`` may narrow the intermediate configs
    and targets (a decoder runs no MLM config), and only those are planned for it."""
    narrowed = entry.narrowed_grid()
    intermediate, targets = narrowed.get("intermediate"), narrowed.get("targets")
    part = dict(config)
    if intermediate is not None and isinstance(config.get("intermediate"), Mapping):
        part["intermediate"] = {n: config["intermediate"][n] for n in intermediate if n in config["intermediate"]}
    if targets is not None and config.get("targets") is not None:
        part["targets"] = [t for t in config["targets"] if t in targets]
    return part


def plan_config(
    config: Mapping[str, Any], gpu_memory_gb: float | None = None, seq_len: int | None = None
) -> list[PhasePlan]:
    """One plan per backbone and phase. ``gpu_memory_gb`` sets the GPUs the smallest count is
    sought on (default: each backbone's own ``gpus.memory_gb``); ``fits`` is always judged
    on the GPUs the backbone asks for."""
    backbones = config.get("backbones") or {}
    if not isinstance(backbones, Mapping):
        raise PlanError("config key backbones: expected a mapping of backbone name -> settings")
    plans = []
    for name, raw in backbones.items():
        reason = skip_reason(raw) if isinstance(raw, Mapping) else None  # not sized: not read either
        if reason:
            plans += [PhasePlan(backbone=name, phase=p, skipped=reason) for p in PHASES]
            continue
        entry = planned_entry(config, name)
        bb = parse_backbone(name, entry)
        part = backbone_part(config, entry)
        shapes = {phase: phase_shape(part, phase, seq_len) for phase in PHASES}
        for phase, shape in shapes.items():
            if shape is None:
                plans.append(
                    PhasePlan(
                        backbone=name,
                        phase=phase,
                        method=bb.method,
                        precision=bb.precision,
                        parameters=bb.parameters,
                        skipped="no task trains in this phase",
                    )
                )
            else:
                plans.append(plan_phase(bb, phase, shape, gpu_memory_gb))
    return plans


def misfit_message(plan: PhasePlan) -> str:
    """The line that stops the workflow: the key, what is needed, what is asked, the fix."""
    est = plan.estimate
    assert est is not None
    key = f"backbones.{plan.backbone}.gpus"
    needed = (
        f"{METHOD_NAMES[plan.method]} of {format_count(plan.parameters or 0)} parameters needs "
        f"{est.total / GB:.1f} GB per GPU on {plan.gpus_asked} x {plan.memory_gb:g} GB "
        f"({usable_bytes(plan.memory_gb) / GB:.1f} GB usable each) in the {plan.phase} phase "
        f"(peak task {plan.task}: seq len {plan.seq_len}, {plan.micro_batch} sequences per micro-batch"
        f"{', MLM logits' if plan.with_mlm_logits else ''})"
    )
    if plan.min_gpus is not None:
        fix = f"smallest count that fits on {plan.min_gpus_memory_gb:g} GB GPUs: {plan.min_gpus}"
    else:
        fix = (
            f"no count up to {MAX_GPUS} fits: more GPUs shrink only the sharded state, and the "
            f"activations alone need {est.activations / GB:.1f} GB per GPU; set "
            f"backbones.{plan.backbone}.activation_checkpointing: true or lower "
            f"training.{plan.phase}.max_micro_batch"
        )
    return f"config key {key}: {needed}; {fix}"


def check_auto_micro_batch(config: Mapping[str, Any]) -> None:
    """``max_micro_batch: auto`` is refused for a phase that trains a contrastive task (a
    dual encoder's ranking, image-caption retrieval): its negatives are the other examples of
    its micro-batch, so the loss itself would change with the GPU's memory."""
    for phase in PHASES:
        if phase_cap(config, phase) != AUTO_MICRO_BATCH:
            continue
        contrastive = sorted(
            {t for job in phase_jobs(config, phase) for t in job if t in TASKS and _in_batch_negatives(TASKS[t].format)}
        )
        if contrastive:
            raise PlanError(
                f"config key training.{phase}.max_micro_batch: auto would size the micro-batch by the GPU's "
                f"memory, and {', '.join(contrastive)} contrast each example with the others of its micro-batch "
                "(its negatives); set a number (8: the XTREME-R reference's per-GPU batch)"
            )


def _in_batch_negatives(fmt: str) -> bool:
    return head_kind(fmt) in (RANKING, VISUAL_RETRIEVAL)


def check_fits(config: Mapping[str, Any]) -> None:
    """Raise PlanError, naming ``backbones.<name>.gpus``, if any backbone cannot fit the GPUs
    it asks for in some phase. Backbones without a size (demo models) are skipped."""
    check_auto_micro_batch(config)
    problems = [misfit_message(p) for p in plan_config(config) if p.skipped is None and not p.fits]
    if problems:
        raise PlanError("\n".join(problems))


# ----- CLI ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", nargs="?", help="a workflow config (YAML) with a `backbones` section")
    parser.add_argument(
        "--gpu-memory-gb",
        type=float,
        default=None,
        help="GPU memory the smallest count is sought on (default: each backbone's gpus.memory_gb)",
    )
    parser.add_argument("--reference", action="store_true", help="print the reference backbones' plan (README) instead")
    args = parser.parse_args(argv)
    if args.reference:
        print(reference_plan_markdown(gpu_memory_gb=args.gpu_memory_gb or 80))
        return 0
    if not args.config:
        parser.error("give a CONFIG file or --reference")
    # only the CLI reads a config file; the Snakefile passes its resolved config
    from workflow_scripts.spec import tasks
    from workflow_scripts.spec.basics import repo_path
    from workflow_scripts.workflow import config_layers

    try:
        config = config_layers.load([args.config])
    except config_layers.ConfigLayerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    tasks.use_catalogues([repo_path(d) for d in config.get("task_catalogues", [])])  # the user's own tasks
    try:
        plans = plan_config(config, gpu_memory_gb=args.gpu_memory_gb)
    except PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not plans:
        print(f"{args.config}: no `backbones` to plan")
        return 0
    print(plan_markdown(plans, args.gpu_memory_gb))
    try:
        check_fits(config)  # its smallest counts are on the GPUs asked, whatever --gpu-memory-gb says
    except PlanError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
