"""Every GPU of a workstation: ``snakemake --cores N --resources gpu=G`` gives each GPU job
devices of its own (docs/configuration/index.md, "Several GPUs on one machine").

Snakemake counts the ``gpu`` resource (never more than G GPU jobs at once) but does not say
which device a job takes: without more, every job would run on ``cuda:0``. So in a local run
with ``--resources gpu=G`` the Snakefile lists the run's devices (the first G of the
``CUDA_VISIBLE_DEVICES`` it was started with, else 0 .. G-1), and each GPU rule's command
starts with the shell function ``bind_gpus`` (bind_gpus.sh): it locks as many of them as the
job's ``gpu`` resource asks for, for the job's lifetime, and sets the job's own
``CUDA_VISIBLE_DEVICES``. A job with ``gpu: 0`` sees no GPU, so it cannot crowd one.

Under a cluster executor (Slurm) nothing is bound here: the scheduler gives each job its GPUs.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

SCRIPT = Path(__file__).with_name("bind_gpus.sh")
# cuBLAS is deterministic only with a fixed workspace (two 4 MiB workspaces per stream, what
# PyTorch's reproducibility notes name); without one, the jobs' deterministic mode has every
# cuBLAS call warn in C++ (about 450 per XLM-R-large step). Exported to every job by the shell
# prefix, unless the user set one: an environment of the jobs, like PYTHONPATH, so it is no
# job's code and reruns nothing.
CUBLAS_WORKSPACE = ":4096:8"
DEVICES_ENV = "XSTILTS_GPUS"
LOCKS_ENV = "XSTILTS_GPU_LOCKS"
SLOTS_ENV = "XSTILTS_GPU_SLOTS"


class GpuBindingError(ValueError):
    """--resources gpu=G that the machine's visible devices cannot give."""


def run_devices(granted: int | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The devices a local run with ``--resources gpu=granted`` binds its jobs to ([]: none
    bound, no ``gpu`` resource given)."""
    environ = os.environ if environ is None else environ
    if not granted:
        return []
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(k) for k in range(granted)]
    listed = [d.strip() for d in visible.split(",") if d.strip()]
    if len(listed) < granted:
        raise GpuBindingError(
            f"--resources gpu={granted}, but CUDA_VISIBLE_DEVICES={visible!r} lists {len(listed)} device(s): "
            f"ask for at most {len(listed)}, or list more devices"
        )
    return listed[:granted]


def lock_dir() -> Path:
    """Where the device locks live: one folder per user and machine (node-local temp), so
    that two runs of one user on one machine share their GPUs without crowding one."""
    return lock_dir_for(tempfile.gettempdir())


def lock_dir_for(temp_root: str | os.PathLike[str]) -> Path:
    return Path(temp_root) / f"xstilts-gpu-locks-{os.getuid()}"


def shell_prefix(devices: list[str], slots_per_gpu: int = 1) -> str:
    """What every job's shell runs first: the function defined, cuBLAS's workspace, and the
    run's devices with their slots (gpu_sharing.py); a job sees no GPU until ``bind_gpus``
    gives it its own. (Braces doubled: Snakemake formats its shell prefix.)"""
    cublas = f' export CUBLAS_WORKSPACE_CONFIG="${{{{CUBLAS_WORKSPACE_CONFIG:-{CUBLAS_WORKSPACE}}}}}";'
    exports = cublas + (
        f" export {DEVICES_ENV}={shlex.quote(','.join(devices))}; export {LOCKS_ENV}={shlex.quote(str(lock_dir()))};"
        f" export {SLOTS_ENV}={int(slots_per_gpu)};"
        ' export CUDA_VISIBLE_DEVICES="";'
        if devices
        else f" unset {DEVICES_ENV};"
    )
    return f" . {shlex.quote(str(SCRIPT))};{exports}"


def granted_gpus(workflow) -> int | None:
    """The ``gpu`` resource a local run was given (None: not given, or not a local run)."""
    if not workflow.local_exec or workflow.remote_exec:
        return None
    resource = workflow.global_resources.get("gpu")
    value = getattr(resource, "value", resource)
    return int(value) if isinstance(value, int | float) and value > 0 else None


def unbound_gpus_warning(granted: int | None, asks_for_gpus: bool) -> str | None:
    """A warning for a local run on a machine with GPUs, whose jobs ask for GPUs, without
    ``--resources gpu=G``: they would all share the first GPU."""
    if granted or not asks_for_gpus or shutil.which("nvidia-smi") is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    count = sum(1 for line in listed.splitlines() if line.startswith("GPU "))
    if count == 0:
        return None
    return (
        f"this machine has {count} GPU(s) and the config's jobs ask for GPUs, but the run has no "
        f"`--resources gpu=N`: every GPU job may start at once on the first GPU. Run "
        f"`snakemake --cores N --resources gpu={count}` to give each job GPUs of its own."
    )
