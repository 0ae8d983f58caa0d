"""Small jobs sharing a GPU: host-bound jobs run k to a card (docs/configuration/index.md,
"Sharing a GPU between small jobs").

A target training with a batch of 4, or an evaluation, keeps its GPU computing a few percent
of the time: the host launches its kernels one by one and the GPU waits (job_cost's host
floor). Such jobs can run side by side on one GPU at little cost to each. ``gpu_sharing``
in the config says how many at most (``jobs_per_gpu``; 1, the default, shares nothing); for
each job of a shareable rule the cost model and the memory plan then decide its k:

- ``busy``: the share of its time the job keeps the GPU computing (its FLOPs at the
  throughput against its host-bound wall time); k jobs fit the GPU's time when k x busy <= 1;
- memory: k copies of the job's peak (the memory plan's training estimate for its task, an
  upper bound for an evaluation, which holds no gradients or optimizer state) must fit the
  backbone's GPU memory;
- a job of a backbone trained on several GPUs, or whose rule asks for other than one GPU,
  or that the plans cannot size (the demo's backbones, retrieval targets), takes whole GPUs.

Where a job runs k to a GPU:

- locally, under ``snakemake --resources gpu=G``: each of the G GPUs has ``jobs_per_gpu``
  slots (Snakemake's ``gpu_slots`` resource, G x jobs_per_gpu, which the Snakefile
  registers); a whole-GPU job takes every slot of its GPUs, a job shared k ways
  ceil(jobs_per_gpu / k) slots of one (``bind_gpus``, gpu_binding.py, locks them);
- under Slurm, with ``slurm_shards_per_gpu`` > 0: Slurm's ``shard`` GRES (a cluster whose
  gres.conf gives each GPU that many shards); a shared job asks for ceil(shards / k) shards
  (the ``gres`` resource) instead of a GPU;
- k is then the number of jobs whose slots (and shards) fit one GPU (jobs_per_gpu 4 and 3
  that fit: 2);
- the cost plan charges a job the dry run shares 1/k of its GPU-hours.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflow_scripts.spec.backbone_entry import entry_of
from workflow_scripts.spec.schema import default

# The rules whose jobs may share a GPU: many small jobs of one GPU each.
SHAREABLE_RULES: tuple[str, ...] = ("train_target", "evaluate_target")


@dataclass(frozen=True)
class Settings:
    """The config's ``gpu_sharing`` block."""

    jobs_per_gpu: int = 1
    slurm_shards_per_gpu: int = 0

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Settings:
        block = config.get("gpu_sharing") or {}
        return cls(
            jobs_per_gpu=int(block.get("jobs_per_gpu", default("gpu_sharing", "jobs_per_gpu"))),
            slurm_shards_per_gpu=int(block.get("slurm_shards_per_gpu", default("gpu_sharing", "slurm_shards_per_gpu"))),
        )


@dataclass(frozen=True)
class Share:
    """How many jobs like this one run on one GPU (1: it takes whole GPUs), and why."""

    jobs: int
    reason: str


def job_share(config: Mapping[str, Any], rule: str, wildcards: Mapping[str, str]) -> Share:
    """The share of one job: its k from its GPU time and memory, at most ``jobs_per_gpu``."""
    most = Settings.of(config).jobs_per_gpu
    if most <= 1:
        return Share(1, "gpu_sharing.jobs_per_gpu is 1")
    if rule not in SHAREABLE_RULES:
        return Share(1, f"{rule} jobs are not shared")
    return _share(config, rule, wildcards)


def _share(config: Mapping[str, Any], rule: str, w: Mapping[str, str]) -> Share:
    from workflow_scripts.planning import job_estimates
    from workflow_scripts.workflow import backbone_grid, grid

    settings = Settings.of(config)
    most = settings.jobs_per_gpu
    asked = int(grid.resources(config, rule)["gpu"])
    trained_on = backbone_grid.gpus(config, w["backbone"])  # per_node 0: the rule's own count
    if asked != 1 or (trained_on["per_node"] or asked) * trained_on["nodes"] != 1:
        return Share(1, "the job takes more than one GPU")
    found = job_estimates.job_estimate(config, rule, w)
    peak = job_peak_bytes(config, rule, w)
    if found is None or peak is None:
        return Share(1, "the cost model or the memory plan cannot size it")
    by_time = most if found.busy <= 0 else max(1, math.floor(1 / found.busy))
    by_memory = max(1, math.floor(_usable_bytes(config, w["backbone"]) / peak))
    fitting = max(1, min(most, by_time, by_memory))
    jobs = most // slots(fitting, 1, most)  # as many as its slots let run side by side
    if settings.slurm_shards_per_gpu > 0:  # and its shards
        jobs = max(1, settings.slurm_shards_per_gpu // shards(jobs, settings.slurm_shards_per_gpu))
    return Share(
        jobs,
        f"the GPU computes {found.busy:.0%} of the job's time ({by_time} fit its time), "
        f"{peak / 1e9:.1f} GB at its peak ({by_memory} fit its memory), at most {most}",
    )


def job_peak_bytes(config: Mapping[str, Any], rule: str, w: Mapping[str, str]) -> float | None:
    """The memory plan's peak of the job's task trained on one GPU (None: not sized)."""
    from workflow_scripts.planning import memory_model, memory_plan

    entry = entry_of(config, w["backbone"])
    if memory_model.skip_reason(entry) is not None:
        return None
    bb = memory_model.parse_backbone(w["backbone"], entry)
    shape = memory_plan.phase_shape(memory_plan.backbone_part(config, entry), "target")
    if shape is None:
        return None
    if shape.auto:
        shape = shape.capped(memory_plan.fitting_micro_batch(bb, shape))
    workload = next((x for x in shape.workloads if x.task == w["target"]), None)
    if workload is None:
        return None
    heads = memory_plan.task_head_parameters(w["target"], bb.architecture)
    return memory_model.estimate(bb, workload.seq_len, workload.micro_batch, 1, workload.with_mlm_logits, heads).total


def _usable_bytes(config: Mapping[str, Any], backbone: str) -> float:
    from workflow_scripts.planning import memory_model

    bb = memory_model.parse_backbone(backbone, entry_of(config, backbone))
    return memory_model.usable_bytes(bb.memory_gb)


def slots(share: int, gpus: int, jobs_per_gpu: int) -> int:
    """A job's slots of the run's GPUs: every slot of its GPUs when it takes whole ones, else
    ceil(jobs_per_gpu / share) of one."""
    if share <= 1:
        return gpus * jobs_per_gpu
    return math.ceil(jobs_per_gpu / share)


def shards(share: int, shards_per_gpu: int) -> int:
    """The Slurm shards a job shared ``share`` ways asks for: rounded up, so that no more
    than ``share`` such jobs fit one GPU."""
    return max(1, math.ceil(shards_per_gpu / share))
