"""Which task each step trains and on which batch, how many steps a phase takes, and the
learning-rate schedule (docs/protocol.md §2-3).

Multi-task: at each step task m is drawn with probability
r_m = min(e_m, K) / sum_n min(e_n, K) (e_m = training examples, K = ``multitask_cap``),
by a sampler seeded from the run seed; MLM is one more task of the same sampler. A task with
a fixed share (an arm recipe's text-only task: ``PhaseSettings.fixed_shares``) is drawn with
that probability, and the others divide the rest by the same rule. Each task's batches are
length-grouped (dynamic padding) and reshuffled, seeded, at every pass.
"""

from __future__ import annotations

import math
import random
from typing import Any

from workflow_scripts.data.features import Encoded, length_grouped_batches
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.phase_steps import steps_for_sizes, task_probabilities
from workflow_scripts.spec.tasks import Task


class TaskSampler:
    """Capped examples-proportional sampling over tasks, seeded by the run seed."""

    def __init__(self, sizes: dict[str, int], cap: int, seed: int, shares: dict[str, float] | None = None) -> None:
        self.names = sorted(sizes)
        self.probabilities = task_probabilities(sizes, cap, shares or {})
        self.rng = random.Random(seed)

    def next(self) -> str:
        return self.rng.choices(self.names, weights=[self.probabilities[n] for n in self.names])[0]


class TaskStream:
    """Endless length-grouped batches of one task, reshuffled (seeded) at every pass."""

    def __init__(self, task: Task, encoded: Encoded, batch_size: int, seed: int) -> None:
        self.task, self.encoded, self.batch_size = task, encoded, batch_size
        self.rng = random.Random(f"{seed}-{task.name}")
        self.batches: list[list[int]] = []
        self.passes = 0

    def next(self) -> list[dict[str, Any]]:
        if not self.batches:
            # reversed: batches are popped from the end, the first batch is consumed first
            self.batches = length_grouped_batches(self.encoded.features, self.batch_size, self.rng)[::-1]
            self.passes += 1
        return self.encoded.features.take(self.batches.pop())


def linear_schedule(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: 0 -> 1 over ``warmup`` steps, then 1 -> 0 at ``total``
    (the convention of transformers' get_linear_schedule_with_warmup)."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def total_steps(settings: PhaseSettings, train_sets: dict[str, Encoded]) -> int:
    """The phase's steps: one task's epochs of its batches, or for several tasks the
    multi-task epochs of every task's (capped) batches; at most ``max_steps``. Tasks at a
    fixed share come on top: the others keep the steps they would have alone."""
    return steps_for_sizes(settings, {name: len(train.features) for name, train in train_sets.items()})


def epoch_steps(settings: PhaseSettings, train_sets: dict[str, Encoded]) -> int:
    """The steps of one epoch of a single-task phase (its batches); the phase's eval_every
    for several tasks, whose epochs do not end together."""
    if len(train_sets) != 1:
        return settings.eval_every
    ((name, train),) = train_sets.items()
    return math.ceil(len(train.features) / settings.tasks[name].batch_size)


def warmup_steps(settings: PhaseSettings, total: int) -> int:
    """The linear warmup's steps: ``warmup_ratio`` of the total, rounded down."""
    return int(settings.warmup_ratio * total)
