"""How many steps a training phase takes and how often it draws each task, from its settings
and its tasks' training sizes alone: what the training loop runs (training/sampling.py) and
what the cost model counts before any data is encoded (planning/job_work.py)."""

from __future__ import annotations

import math

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.phase_settings import PhaseSettings


def task_probabilities(sizes: dict[str, int], cap: int, shares: dict[str, float]) -> dict[str, float]:
    """r_m = min(e_m, K) / sum_n min(e_n, K) over the tasks without a fixed share, scaled to
    what the fixed shares leave (docs/protocol.md §2)."""
    if not sizes or any(n <= 0 for n in sizes.values()):
        raise InputError(f"every multi-task task needs training examples, got {sizes}")
    unknown = sorted(set(shares) - set(sizes))
    if unknown or sum(shares.values()) >= 1 or len(shares) == len(sizes):
        raise InputError(f"fixed task shares {shares} must name tasks of {sorted(sizes)}, leave one out, sum below 1")
    names = sorted(sizes)
    capped = {n: min(sizes[n], cap) for n in names if n not in shares}
    left = 1 - sum(shares.values())
    return {n: shares[n] if n in shares else left * capped[n] / sum(capped.values()) for n in names}


def steps_for_sizes(settings: PhaseSettings, sizes: dict[str, int]) -> int:
    """The phase's steps from each task's count of training features: one task's epochs of
    its batches, or for several tasks the multi-task epochs of every task's (capped) batches;
    at most ``max_steps``. Tasks at a fixed share come on top: the others keep the steps they
    would have alone. (The cost model counts examples before the data is encoded.)"""
    shares = settings.fixed_shares
    own = {n: size for n, size in sizes.items() if n not in shares}
    if len(own) == 1:
        ((name, size),) = own.items()
        opts = settings.tasks[name]
        total = whole_epochs(opts.epochs) * math.ceil(size / opts.batch_size)
    else:
        cap = settings.multitask_cap
        total = whole_epochs(settings.multitask_epochs) * sum(
            math.ceil(min(size, cap) / settings.tasks[n].batch_size) for n, size in own.items()
        )
    if shares:
        total = math.ceil(total / (1 - sum(shares.values())))
    if settings.max_steps:
        total = min(total, settings.max_steps)
    return total


def whole_epochs(epochs: float) -> int:
    """The passes a phase plans. The schema allows fractional epochs (a number), but the step
    count has always truncated them (1.5 epochs train as 1): kept so, that no settings' step
    count changes silently."""
    return int(epochs)


def accumulation_steps(global_batch_size: int, world_size: int, max_micro_batch: int) -> int:
    """Micro-steps per optimiser step, the same on every rank: the largest share
    (ceil(n / W) examples) cut into micro-batches of at most ``max_micro_batch``. What a
    sharded run takes (training/distributed.py; one process: W = 1) and what the cost
    model charges the host for (planning/job_work.py)."""
    if global_batch_size < 1 or world_size < 1 or max_micro_batch < 1:
        raise ValueError(
            f"need positive sizes, got batch {global_batch_size}, world {world_size}, micro-batch {max_micro_batch}"
        )
    return math.ceil(math.ceil(global_batch_size / world_size) / max_micro_batch)
