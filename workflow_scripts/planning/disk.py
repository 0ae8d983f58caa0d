"""What stays on disk: the config's ``disk`` block, and the disk plan the preflight checks.

Target models are the bulk of a grid (the paper grid trains 741 models of 2 GB). With
``keep_target_models: none`` (the default) each is a Snakemake ``temp()`` output: deleted
once every job that reads it has run (its evaluations, a later stage, a sweep's selection),
while its metric file, predictions and training record (``curve.csv`` and
``train_log.json`` beside the model) stay. ``best`` keeps, per backbone, intermediate config,
target and recipe, the model of the seed with the best selection (dev) score, linked under
``kept/``; ``all`` keeps every model. Intermediate models stay by default
(``keep_intermediate_models: all``). ``while_needed`` deletes one once its targets are trained
and its retrieval targets evaluated, but Snakemake regenerates a deleted ``temp()`` input for
any job that needs it again and then reruns every job that reads it: one edited target task
would retrain the intermediate phase and every target trained from it. Target models have
few readers (their evaluations), so discarding them costs at most those.

A discarded model comes back only when a job that reads it must rerun (an edited evaluation
setting retrains the models it scores); with ``best``, adding a seed retrains the discarded
models of the configs it joins, since choosing the best needs them all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workflow_scripts.spec.disk_entry import disk_of


def keep_target_models(config: dict[str, Any]) -> str:
    return disk_of(config).keep_target_models


def discards_target_models(config: dict[str, Any]) -> bool:
    return keep_target_models(config) != "all"


def discards_intermediate_models(config: dict[str, Any]) -> bool:
    return disk_of(config).keep_intermediate_models != "all"


@dataclasses.dataclass(frozen=True)
class ModelCounts:
    """Trained models of a grid, as the disk plan counts them."""

    intermediate: int  # kept
    target: int  # every target model and stage the grid trains (sweep points included)
    kept_best: int  # configs whose best seed's model `best` keeps
    jobs_at_once: int  # jobs the run may run at once
    points: int  # sweep points per recipe and seed (1 without a sweep)


def peak_models(counts: ModelCounts, policy: str, keep_intermediate: bool) -> tuple[int, str]:
    """Models on disk at the grid's peak under the policy, and how that number is made.

    A discarded model lives from its training until its last reader has run. Evaluation,
    selection and the `kept/` links run before any further training, and target training
    before intermediate training (their rules' priorities), so an intermediate phase starts
    only when no target of a finished one waits: at most ``jobs_at_once`` intermediate
    models are being trained and as many have targets still training; at most
    ``jobs_at_once`` target models are being trained and as many wait for, or are in, their
    evaluation; a sweep keeps each seed's points until its selection."""
    at_once = 2 * counts.jobs_at_once
    intermediate = counts.intermediate if keep_intermediate else min(counts.intermediate, at_once)
    how = f"{intermediate} intermediate {'kept' if keep_intermediate else 'at once'}"
    if policy == "all":
        return intermediate + counts.target, how + f", {counts.target} target kept"
    in_flight = min(counts.target, at_once * counts.points)
    how += f", {in_flight} target at once ({counts.jobs_at_once} jobs at once"
    how += f", {counts.points} sweep points)" if counts.points > 1 else ")"
    kept = counts.kept_best if policy == "best" else 0
    if kept:
        how += f", {kept} best kept"
    return intermediate + in_flight + kept, how
