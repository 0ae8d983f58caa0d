"""Slurm job control that ends every interruption in a retry that resumes.

Two gaps between Slurm and the Snakemake Slurm executor, closed from the Snakefile:

1. **Ended jobs the executor would wait on forever.** snakemake-executor-plugin-slurm
   2.8.0 (pinned in requirements.txt; the newest release when this was written) decides a
   job's fate by comparing the state column of `sacct -X --format=JobIdRaw,State` (or
   `squeue -o %T`) with exact strings (`check_active_jobs`). Two end states never match:

   - `CANCELLED by <uid>`: what `sacct` prints for any job ended by `scancel` (running or
     pending) or by an administrator. Only `CANCELLED` is in the plugin's failure list.
   - `PREEMPTED`: the plugin assumes Slurm requeues the job and keeps waiting. True for
     `PreemptMode=REQUEUE` with a requeueable job, where `squeue` soon shows it pending
     again; false for `PreemptMode=CANCEL`, where the job has simply ended.

   `install()` wraps the plugin's status query (`query_job_status`) so that
   `CANCELLED by <uid>` reads `CANCELLED`, and a `PREEMPTED` job that the controller does not
   hold as pending or running again reads `CANCELLED`. The plugin then reports the job as
   failed and Snakemake's `retries` resubmit it; training resumes from its checkpoint.
   A job that looks failed but is still COMPLETING (its processes writing a checkpoint in
   Slurm's KillWait) is reported as COMPLETING until it has ended, so the retry never runs
   beside it. States the plugin already handles pass through, so the wrapper is harmless
   on a plugin that fixes this.

2. **Snakemake in the job step dies of SIGUSR1.** `sbatch --signal=USR1@<s>` (what the
   training rules ask for, so a job checkpoints before its time limit) and
   `scancel --signal=USR1` deliver the signal to every process of the job step: the
   Snakemake that runs the rule as well as the training process. SIGUSR1's default action
   is to terminate; Snakemake would die at once, the step would end, and the training
   process would be killed or orphaned while writing its checkpoint.
   `ignore_usr1_in_job_step()` gives Snakemake a handler that does nothing, inside Slurm
   jobs only; the training rules `exec` their command so no shell stands in between. A
   handler (unlike SIG_IGN) is reset by `exec`, so the training process gets the default
   disposition and installs its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

LOG = logging.getLogger(__name__)

PLUGIN_MODULE = "snakemake_executor_plugin_slurm"
# End states the plugin reports as failures (then Snakemake retries), as it spells them.
FAILURE_STATES = frozenset(
    {"BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "ERROR"}
)
# States in which the controller holds a job that is still ending (COMPLETING: its processes
# may be writing a checkpoint) or waiting or running again (requeued).
LIVE_STATES = frozenset(
    {
        "PENDING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "RESIZING",
        "SUSPENDED",
        "STAGE_OUT",
        "SIGNALING",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)


def _as_ended(state: str) -> str:
    """The plugin's spelling of an end state: `CANCELLED by <uid>` and a `PREEMPTED` job that
    is not requeued both mean the job was cancelled."""
    return "CANCELLED" if state.startswith("CANCELLED") or state == "PREEMPTED" else state


def needs_controller(states: Mapping[str, str]) -> bool:
    """Whether any job looks ended, so the controller must say if it really is."""
    return any(_as_ended(state) in FAILURE_STATES for state in states.values())


def normalise_states(states: Mapping[str, str], live: Mapping[str, str]) -> dict[str, str]:
    """Job states as the plugin should see them.

    `states` maps job id to the state the plugin's query returned (`sacct` or `squeue`);
    `live` maps job id to the controller's current state (`squeue`), for the jobs it still
    holds. A job that looks failed while the controller still holds it live (completing,
    or requeued after preemption) is reported in its live state, so that no retry starts
    while its processes still write their checkpoint, and none at all if Slurm requeues it.
    """
    out = {}
    for job_id, state in states.items():
        ended = _as_ended(state)
        if ended in FAILURE_STATES and live.get(job_id) in LIVE_STATES:
            ended = live[job_id]
        out[job_id] = ended
    return out


def parse_squeue(text: str) -> dict[str, str]:
    """`squeue --format=%i|%T` output as {job id: state}."""
    rows = (line.split("|", 1) for line in text.splitlines() if "|" in line)
    return {job_id.strip(): state.strip() for job_id, state in rows}


async def _controller_states() -> dict[str, str]:
    """Every job the controller still holds for this user, with its state."""
    try:
        process = await asyncio.create_subprocess_exec(
            "squeue",
            "--me",
            "--states=all",
            "--noheader",
            "--format=%i|%T",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    except (TimeoutError, OSError):
        return {}
    return parse_squeue(out.decode()) if process.returncode == 0 else {}


QueryFunction = Callable[..., Awaitable[tuple]]


def wrap_query(
    query: QueryFunction, controller_states: Callable[[], Awaitable[dict[str, str]]] = _controller_states
) -> QueryFunction:
    """The plugin's `query_job_status(command, logger)`, returning normalised states."""

    async def query_job_status(command: str, logger, *args, **kwargs):
        states, duration = await query(command, logger, *args, **kwargs)
        if not states or not needs_controller(states):
            return states, duration
        normalised = normalise_states(states, await controller_states())
        for job_id, state in states.items():
            if state == "PREEMPTED" and normalised[job_id] == "CANCELLED":
                logger.warning(
                    f"Slurm job {job_id} was preempted and not requeued: reporting it "
                    "as ended (CANCELLED) so that Snakemake retries it"
                )
        return normalised, duration

    query_job_status.xstilts_normalised = True
    return query_job_status


def install() -> bool:
    """Wrap the Slurm executor's status query, if that plugin is loaded; True if wrapped.

    Snakemake imports every installed executor plugin when it parses its command line, so
    the plugin is in `sys.modules` whenever it can be in use; nothing is imported here.
    """
    plugin = sys.modules.get(PLUGIN_MODULE)
    query = getattr(plugin, "query_job_status", None)
    if query is None:
        if plugin is not None:
            LOG.warning(
                "%s has no query_job_status: cancelled or preempted jobs may not be "
                "seen as ended (see workflow_scripts/planning/slurm.py)",
                PLUGIN_MODULE,
            )
        return False
    if not getattr(query, "xstilts_normalised", False):
        plugin.query_job_status = wrap_query(query)
    return True


def ignore_usr1_in_job_step() -> bool:
    """Inside a Slurm job, keep SIGUSR1 from killing this (Snakemake) process; True if set."""
    if "SLURM_JOB_ID" not in os.environ:
        return False
    signal.signal(signal.SIGUSR1, _leave_usr1_to_the_job)
    return True


def _leave_usr1_to_the_job(signum: int, frame: object) -> None:
    """The job's own process (training) checkpoints and exits on SIGUSR1; nothing to do here."""


# -- time limits: training that continues across allocations ------------------------------

# Minutes an allocation spends before training proper (start-up, loading model and data)
# and after the checkpoint signal; not counted as training progress.
STARTUP_MINUTES = 5
# The rules that train a target model (rules/train.smk): each asks for the GPUs of its backbone.
TARGET_TRAINING_RULES = ("train_target", "train_target_stage", "train_target_sweep_point", "train_few_shot_candidate")
# Seconds before the time limit at which Slurm signals a training job to checkpoint and stop.
DEFAULT_SIGNAL_LEAD = 600
DEFAULT_FAILURE_RETRIES = 2


def signal_option(lead_seconds: int) -> str:
    """The sbatch option asking for SIGUSR1 `lead_seconds` before the time limit, sent to the
    job's steps (where training runs), not to the batch shell."""
    return f"--signal=USR1@{lead_seconds}"


def training_minutes_per_allocation(runtime: int, lead_seconds: int) -> int:
    """Minutes of training progress one allocation of `runtime` minutes buys."""
    return runtime - STARTUP_MINUTES - -(-lead_seconds // 60)


def allocations_needed(expected_runtime: int, runtime: int, lead_seconds: int) -> int:
    """Allocations of `runtime` minutes a training of `expected_runtime` minutes needs."""
    per_allocation = training_minutes_per_allocation(runtime, lead_seconds)
    if per_allocation < 1:
        raise ValueError(
            f"runtime {runtime} min leaves no time to train after "
            f"{STARTUP_MINUTES} min start-up and the checkpoint signal "
            f"{lead_seconds} s before the limit"
        )
    return -(-expected_runtime // per_allocation)


def training_retries(resources: Mapping[str, object], estimated_allocations: int | None = None) -> int | None:
    """Snakemake retries for a training rule: one per extra allocation its expected runtime
    needs (`expected_runtime`, else the cost model's most allocations of any of its jobs:
    job_estimates.max_allocations), plus `retries` for failures (preemption, cancellation,
    node failure).

    None (Snakemake's --retries applies) when none of the three is known.
    """
    expected, failures = resources.get("expected_runtime"), resources.get("retries")
    if expected is None and failures is None and estimated_allocations is None:
        return None
    continuations = 0
    if expected is not None:
        continuations = (
            allocations_needed(
                int(expected), int(resources["runtime"]), int(resources.get("signal_lead", DEFAULT_SIGNAL_LEAD))
            )
            - 1
        )
    elif estimated_allocations is not None:
        continuations = estimated_allocations - 1
    return continuations + int(DEFAULT_FAILURE_RETRIES if failures is None else failures)


# ----- the Slurm geometry of a sharded training job --------------------------------------


def steps_its_own_ranks(asked: dict[str, Any]) -> bool:
    """Whether a training job starts its ranks with its own srun (several nodes, or the srun
    launcher): such a job must run without the jobstep plugin's `srun -n1` wrapper."""
    ranks = asked["per_node"] * asked["nodes"]
    return ranks > 1 and (asked["nodes"] > 1 or asked.get("launcher") == "srun")


def training_geometry(asked: dict[str, Any]) -> dict[str, Any]:
    """The executor resources of a training job that asked for `asked` (backbone_grid.gpus)
    in a config where some job starts its own ranks (declared only then: the pinned jobstep
    plugin runs any job with an `mpi` resource, even an empty one, without its srun wrapper,
    and a job without a job step receives no `scancel --signal` or `sbatch --signal`).

    - one process, or one torchrun on one node: no task geometry (the plugin reads `tasks` of
      a GPU job as tasks per GPU unless `tasks_per_gpu` is set, hence 0);
    - one torchrun per node: `nodes` tasks, one per node, GPUs per node as gres;
    - the srun launcher: one task per rank, `per_node` tasks on each node (per node, not a
      total: a total lets Slurm pack more ranks than GPUs onto a node with many CPUs)."""
    nodes, per_node = asked["nodes"], asked["per_node"]
    own = steps_its_own_ranks(asked)
    srun_ranks = own and asked.get("launcher") == "srun"
    tasks = 0
    tasks_per_node = 0
    if srun_ranks and per_node > 1:
        tasks_per_node = per_node
    elif srun_ranks or (own and nodes > 1):
        tasks = nodes if not srun_ranks else nodes * per_node
    return {
        "nodes": nodes,
        "tasks": tasks,
        "tasks_per_node": tasks_per_node,
        "tasks_per_gpu": 0,
        # GPUs per node (Slurm's gres is per node; the `gpu` resource is a job total)
        "gres": f"gpu:{per_node}" if own and nodes > 1 else "",
        "mpi": "srun" if own else "",
    }


def training_gpu_total(asked: dict[str, Any], default: int) -> int:
    """The `gpu` resource of a training job: its GPUs on one node; 0 on several (gres per node)."""
    if not asked["per_node"]:
        return default
    return asked["per_node"] if asked["nodes"] == 1 else 0
