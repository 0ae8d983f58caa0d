"""workflow_scripts.planning.slurm without a cluster: the state normalisation the Slurm executor
needs, the retries a long training gets, and the config errors for impossible runtimes."""

from __future__ import annotations

import asyncio
import signal
import sys
import types

import pytest

from workflow_scripts.planning import slurm
from workflow_scripts.workflow import grid

pytestmark = pytest.mark.unit


def test_cancelled_by_uid_reads_cancelled():
    # sacct's spelling for any scancel; the plugin only knows "CANCELLED".
    assert slurm.normalise_states({"7": "CANCELLED by 1042"}, {}) == {"7": "CANCELLED"}


def test_preempted_job_that_is_not_requeued_has_ended():
    # PreemptMode=CANCEL: the controller no longer holds it live (or not at all).
    states = {"7": "PREEMPTED", "8": "PREEMPTED"}
    assert slurm.normalise_states(states, {"7": "PREEMPTED"}) == {"7": "CANCELLED", "8": "CANCELLED"}


def test_preempted_job_that_slurm_requeues_is_left_to_slurm():
    # PreemptMode=REQUEUE: pending again, so no retry may be submitted beside it.
    assert slurm.normalise_states({"7": "PREEMPTED"}, {"7": "PENDING"}) == {"7": "PENDING"}


def test_failed_job_still_completing_is_not_yet_ended():
    # Its processes may still be writing a checkpoint inside Slurm's KillWait.
    states = {"7": "CANCELLED by 0", "8": "TIMEOUT", "9": "FAILED"}
    live = {"7": "COMPLETING", "8": "COMPLETING"}
    assert slurm.normalise_states(states, live) == {"7": "COMPLETING", "8": "COMPLETING", "9": "FAILED"}


def test_other_states_pass_through():
    states = {"1": "COMPLETED", "2": "RUNNING", "3": "PENDING", "4": "REQUEUED", "5": "OUT_OF_MEMORY"}
    assert slurm.normalise_states(states, {}) == states


def test_parse_squeue():
    assert slurm.parse_squeue("12|RUNNING\n13_2|PENDING\n\n") == {"12": "RUNNING", "13_2": "PENDING"}


def test_wrapped_query_asks_the_controller_only_when_a_job_looks_ended():
    calls = []

    async def query(command, logger):
        return ({"1": "RUNNING", "2": command}, 0.01)

    async def controller():
        calls.append(1)
        return {"2": "COMPLETING"}

    wrapped = slurm.wrap_query(query, controller)
    logger = types.SimpleNamespace(warning=lambda msg: None)
    assert asyncio.run(wrapped("COMPLETED", logger)) == ({"1": "RUNNING", "2": "COMPLETED"}, 0.01)
    assert calls == []
    assert asyncio.run(wrapped("CANCELLED by 0", logger)) == ({"1": "RUNNING", "2": "COMPLETING"}, 0.01)
    assert calls == [1]


def test_wrapped_query_warns_about_preemption_without_requeue():
    async def query(command, logger):
        return ({"5": "PREEMPTED"}, 0.0)

    async def controller():
        return {}

    warnings = []
    logger = types.SimpleNamespace(warning=warnings.append)
    states, _ = asyncio.run(slurm.wrap_query(query, controller)("", logger))
    assert states == {"5": "CANCELLED"}
    assert len(warnings) == 1 and "Slurm job 5 was preempted and not requeued" in warnings[0]


def test_failed_query_passes_through():
    async def query(command, logger):
        return (None, None)

    assert asyncio.run(slurm.wrap_query(query)("", None)) == (None, None)


def test_install_wraps_a_loaded_plugin_once(monkeypatch):
    async def query(command, logger):
        return ({"1": "CANCELLED by 0"}, 0.0)

    plugin = types.ModuleType(slurm.PLUGIN_MODULE)
    plugin.query_job_status = query
    monkeypatch.setitem(sys.modules, slurm.PLUGIN_MODULE, plugin)
    assert slurm.install() and slurm.install()
    wrapped = plugin.query_job_status
    assert wrapped is not query and wrapped.xstilts_normalised
    slurm.install()
    assert plugin.query_job_status is wrapped


def test_install_without_the_plugin_does_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, slurm.PLUGIN_MODULE, raising=False)
    assert slurm.install() is False


def test_pinned_plugin_has_the_query_the_wrapper_replaces():
    # If an upgrade renames it, this fails here instead of cancelled jobs hanging a cluster run.
    plugin = pytest.importorskip(slurm.PLUGIN_MODULE)
    assert callable(plugin.query_job_status)


def test_usr1_is_left_to_the_job_inside_slurm_only(monkeypatch):
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
        assert slurm.ignore_usr1_in_job_step() is False
        assert signal.getsignal(signal.SIGUSR1) == previous
        monkeypatch.setenv("SLURM_JOB_ID", "7")
        assert slurm.ignore_usr1_in_job_step() is True
        signal.raise_signal(signal.SIGUSR1)  # would end this process without the handler
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize(
    ("expected", "runtime", "lead", "allocations"),
    [
        (100, 240, 600, 1),  # fits one allocation
        (225, 240, 600, 1),  # exactly one allocation of training time: 240 - 5 - 10
        (226, 240, 600, 2),
        (360, 240, 600, 2),
        (1440, 120, 300, 14),  # 24 h in 2 h allocations: 120 - 5 - 5 = 110 min each
    ],
)
def test_allocations_needed(expected, runtime, lead, allocations):
    assert slurm.allocations_needed(expected, runtime, lead) == allocations


def test_training_retries():
    assert slurm.training_retries({"runtime": 240}) is None  # Snakemake's --retries applies
    assert slurm.training_retries({"runtime": 240, "retries": 1}) == 1
    assert slurm.training_retries({"runtime": 240, "expected_runtime": 360}) == 1 + slurm.DEFAULT_FAILURE_RETRIES
    assert slurm.training_retries({"runtime": 120, "expected_runtime": 1440, "signal_lead": 300, "retries": 0}) == 13
    # the cost model's most allocations of the rule's jobs, where no expected_runtime is set
    assert slurm.training_retries({"runtime": 240}, 3) == 2 + slurm.DEFAULT_FAILURE_RETRIES
    assert slurm.training_retries({"runtime": 240, "expected_runtime": 360}, 5) == 1 + slurm.DEFAULT_FAILURE_RETRIES


def test_runtime_too_short_for_the_signal_is_a_config_error():
    config = {"resources": {"train_target": {"runtime": 10, "expected_runtime": 100, "signal_lead": 600}}}
    with pytest.raises(ValueError, match="runtime 10 min leaves no time to train"):
        slurm.training_retries(grid.resources(config, "train_target"))


def test_signal_option():
    assert slurm.signal_option(600) == "--signal=USR1@600"


class _Resources(dict):
    """A job's resources as the Slurm plugin reads them (get() and attributes)."""

    __getattr__ = dict.__getitem__


GEOMETRIES = {
    "one process": (1, 0, "torchrun"),
    "one node": (1, 8, "torchrun"),
    "two nodes": (2, 8, "torchrun"),
    "srun ranks, one node": (1, 2, "srun"),
    "srun ranks, two nodes": (2, 8, "srun"),
    "srun, one GPU per node": (2, 1, "srun"),
}


@pytest.mark.parametrize("nodes,per_node,launcher", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_training_resources_give_the_sbatch_geometry_of_their_launcher(nodes, per_node, launcher):
    """The training rules' resources in a config where some backbone starts its own ranks
    (slurm.training_geometry) as the pinned Slurm plugin turns them into sbatch options: one
    task for one process or one torchrun, one task per node (and the GPUs per node) for a
    multi-node job whose own srun starts one torchrun per node, one task per rank (per node)
    for the srun launcher."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    asked = {"nodes": nodes, "per_node": per_node, "launcher": launcher}
    own = slurm.steps_its_own_ranks(asked)
    resources = _Resources(
        runtime=60,
        mem_mb=4000,
        **slurm.training_geometry(asked),
        gpu=slurm.training_gpu_total(asked, 0),
        slurm_extra="",
        cpus_per_task=2,
        _cores=2,
        threads=2,
    )
    job = SimpleNamespace(
        resources=resources, threads=2, is_group=lambda: False, name="train_target", wildcards={}, jobid=1
    )
    params = {
        "run_uuid": "u",
        "slurm_logfile": "log",
        "comment_str": "c",
        "account": "",
        "partition": "",
        "workdir": ".",
    }
    try:
        call = get_submit_command(job, params)
    except (AttributeError, TypeError) as err:  # the plugin reads another job attribute: name it
        pytest.fail(f"the fake job lacks what the plugin reads: {err}")
    gres = set_gres_string(job)
    assert f"--nodes={nodes}" in call
    assert "--ntasks-per-gpu" not in call
    assert own == (nodes * per_node > 1 and (nodes > 1 or launcher == "srun"))
    if launcher == "srun" and own:
        expected = f"--ntasks-per-node={per_node}" if per_node > 1 else f"--ntasks={nodes}"
        assert expected in call, call
        assert (f"--gres=gpu:{per_node}" in gres) if nodes > 1 else (f"--gpus={per_node}" in gres), gres
    elif nodes > 1:
        assert "--ntasks=2" in call and "--gres=gpu:8" in gres
    elif not per_node:
        assert "--ntasks=1" in call
    else:  # one node: its GPUs (added by the plugin's gpu option), and no task geometry forced on them
        assert "--ntasks" not in call and "--gpus=8" in gres


def test_the_jobstep_plugin_runs_a_job_with_any_mpi_resource_unwrapped():
    """Why the training rules declare `mpi` only in configs with a multi-node backbone: the
    pinned jobstep plugin tests the key's presence, not its value, and a job it does not wrap
    in `srun -n1` is no job step, which `scancel --signal` and `sbatch --signal` address."""
    import inspect

    import snakemake_executor_plugin_slurm_jobstep as jobstep

    assert '"mpi" in job.resources.keys()' in inspect.getsource(jobstep)
