"""How a training job's ranks start: the launcher line a training rule puts before
``-m workflow_scripts.training.train`` (one process, torchrun on one node, srun or torchrun
across a Slurm allocation), and the environment the ranks read it back from
(``training/distributed.py``: ``init_from_env``). Standard library only: the Snakefile builds
the line at parse time."""

from __future__ import annotations

import shlex

# torchrun forwards these to every worker (SIGUSR1: Slurm's --signal=USR1@T warning; SIGINT:
# Ctrl-C, which reaches torchrun only: its workers run in sessions of their own)
FORWARDED_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
# Set by the srun launcher: this process is one Slurm task of a rank-per-task job step.
RANKS_FROM = "XSTILTS_RANKS_FROM"


def launch_command(
    argv: list[str],
    nodes: int,
    gpus_per_node: int,
    port: int | None = None,
    *,
    launcher: str = "torchrun",
    cpus_per_rank: int = 1,
    shutdown_timeout: int = 120,
) -> list[str] | str:
    """The command that starts ``python <argv>`` (e.g. ``["-m", "workflow_scripts.training.train", ...]``)
    on ``nodes`` x ``gpus_per_node`` processes.

    - 1 process: ``python <argv>``, no launcher (``init_from_env`` then runs unsharded).
    - ``launcher="torchrun"``, 1 node: ``torchrun --standalone`` (a private rendezvous on a
      free port; ``port`` unused).
    - ``launcher="torchrun"``, several nodes (inside a Slurm allocation, from a rule with an
      ``mpi`` resource, which runs without the jobstep wrapper): a shell string; ``srun``
      starts one torchrun per node, which meet at the c10d rendezvous on the allocation's
      first host at ``port`` (default 29500 + job id mod 10000, so jobs sharing a node do not
      collide); each torchrun's task holds ``cpus_per_rank`` CPUs per rank it starts.
    - ``launcher="srun"``: a shell string; inside a Slurm job ``srun`` starts every rank as a
      task of one job step (``--kill-on-bad-exit``), which ``init_from_env`` reads from
      ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``, meeting at MASTER_ADDR/PORT (the
      allocation's first host), each task holding ``cpus_per_rank`` CPUs; outside Slurm (a
      local ``snakemake --cores N``) the same one-node job falls back to
      ``torchrun --standalone``.

    Srun's steps get every GPU of the job (each rank takes ``cuda:LOCAL_RANK``; with one GPU per
    task, ``cuda:0``: ``local_device``) but only the CPUs they ask for: one per task unless
    told, hence ``--cpus-per-task``. The allocation's hosts come from ``squeue``, not
    ``SLURM_JOB_NODELIST``: the Slurm executor's job step removes every SLURM_* variable but
    the job id before it runs a job's command.

    A dead rank ends the whole job: with ``--max-restarts 0`` torchrun, when any worker exits
    non-zero, sends SIGTERM to the others, SIGKILLs them after 30 s and exits non-zero itself;
    ``srun --kill-on-bad-exit=1`` ends the other tasks (or the torchruns of the other nodes).
    Stop signals (SIGTERM, SIGUSR1 from ``sbatch --signal``, SIGINT from Ctrl-C) reach
    torchrun, which forwards them to every worker and waits up to ``shutdown_timeout`` s for
    them to checkpoint and exit; srun's tasks receive them from Slurm directly."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher {launcher!r}: one of {', '.join(LAUNCHERS)}")
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"need at least one node and one process per node, got {nodes} x {gpus_per_node}")
    if nodes == 1 and gpus_per_node == 1:
        return ["python", *argv]
    if launcher == "srun":
        return (
            f"{_srun_prefix(nodes, gpus_per_node, port, cpus_per_rank, shutdown_timeout)} {shlex.join(argv)}".rstrip()
        )
    common = _torchrun_options(gpus_per_node, shutdown_timeout)
    if nodes == 1:
        return ["torchrun", "--standalone", "--nnodes", "1", *common, *argv]
    return (
        f"{_HEAD} && "
        f"srun --nodes {nodes} --ntasks {nodes} --ntasks-per-node 1 --cpus-per-task {cpus_per_rank * gpus_per_node} "
        "--kill-on-bad-exit=1 "
        f"torchrun --nnodes {nodes} {shlex.join(common)} --rdzv-backend c10d "
        f'--rdzv-endpoint "$HEAD:{_port(port)}" --rdzv-id "$SLURM_JOB_ID" {shlex.join(argv)}'
    )


LAUNCHERS = ("torchrun", "srun")
# The allocation's first host: where the ranks (or torchruns) of a Slurm job meet.
_HEAD = (
    'HEAD=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(squeue --noheader --jobs "$SLURM_JOB_ID" '
    '--format %N)}" | head -n1)'
)


def _port(port: int | None) -> str:
    return str(port) if port is not None else "$((29500 + SLURM_JOB_ID % 10000))"


def _torchrun_options(gpus_per_node: int, shutdown_timeout: int) -> list[str]:
    return [
        "--nproc-per-node",
        str(gpus_per_node),
        "--max-restarts",
        "0",
        "--signals-to-handle",
        FORWARDED_SIGNALS,
        "--shutdown-timeout",
        str(shutdown_timeout),
    ]


def _srun_prefix(nodes: int, per_node: int, port: int | None, cpus_per_rank: int, shutdown_timeout: int) -> str:
    """Shell words that run ``"$@" <python args>``: srun's tasks inside a Slurm job, torchrun
    outside one (one node only: several nodes need an allocation)."""
    inside = (
        f'{_HEAD} && export MASTER_ADDR="$HEAD" MASTER_PORT={_port(port)} {RANKS_FROM}=slurm && '
        f"set -- srun --nodes {nodes} --ntasks {nodes * per_node} --ntasks-per-node {per_node} "
        f"--cpus-per-task {cpus_per_rank} --kill-on-bad-exit=1 python"
    )
    if nodes == 1:
        outside = shlex.join(
            ["set", "--", "torchrun", "--standalone", "--nnodes", "1", *_torchrun_options(per_node, shutdown_timeout)]
        )
    else:
        outside = f"echo 'a {nodes}-node training job runs inside a Slurm allocation only' >&2 && exit 2"
    return f'if [ -n "${{SLURM_JOB_ID:-}}" ]; then {inside}; else {outside}; fi && exec "$@"'


def launch_prefix(nodes: int, gpus_per_node: int, launcher: str = "torchrun", cpus_per_rank: int = 1) -> str:
    """The shell words a training rule puts before ``-m workflow_scripts.training.train ...``:
    ``exec python`` for one process, ``exec torchrun ...`` for one node, and for several
    nodes or the srun launcher the shell line that starts the ranks (``launch_command``).
    ``exec``: the launcher itself receives Slurm's signals, no shell in between."""
    command = launch_command([], nodes, gpus_per_node, launcher=launcher, cpus_per_rank=cpus_per_rank)
    if isinstance(command, list):
        return "exec " + shlex.join(command)
    if launcher == "srun":
        return command
    head, _, rest = command.partition(" && ")
    return f"{head} && exec {rest}".rstrip()
