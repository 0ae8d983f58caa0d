"""Sharded multi-GPU, multi-node training: process group, data split, FSDP2, DCP checkpoints, launch.

One training job runs as W = nodes x GPUs-per-node processes started by torchrun (one
torchrun per node; on Slurm through ``srun``, docs/protocol.md §10). Every rank builds the same
seeded global batches a single process would build and trains on its own contiguous part of
each (``rank_share``), so a run's result does not depend on the GPU count beyond
floating-point noise, and the global batch is the configured one whatever W is.

Gradients: FSDP2 (like DDP) *averages* gradients over the W ranks. A rank whose micro-batch
mean loss is weighted by ``W * local_examples / global_examples`` (``loss_weight``) therefore
contributes exactly its examples' share, and the averaged gradient equals the single-process
gradient of the mean loss over the global batch, also when W does not divide the batch. With
W = 1 the weight is ``micro_examples / global_examples``: the single-process accumulation.

Every rank must take part in every collective, in the same order: every forward and
backward (FSDP all-gathers the weights of each block in forward, reduce-scatters gradients
in backward), every checkpoint save/load and every ``any_rank``/``from_rank0`` call. Hence
``micro_batches`` gives all ranks the same number of micro-steps (a rank with no examples
left runs a stand-in with weight 0), and every decision that ends or branches the loop
(early stopping, a stop signal) must be agreed on through ``any_rank``/``from_rank0``.

On CPU (tests, laptops) the process group uses gloo; on GPUs NCCL for CUDA tensors and gloo
for CPU tensors (``any_rank`` agrees on a CPU flag without waiting for the GPU). torch 2.13's
FSDP2 (``fully_shard``), its mixed precision (weights gathered in bf16 or fp16, gradients
reduced in fp32), activation checkpointing and DCP run on CPU with gloo as on GPUs with NCCL, so the sharded
path is the one the CPU tests exercise.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts.common import LOG
from workflow_scripts.precision import FP32, Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.launch import RANKS_FROM
from workflow_scripts.spec.phase_steps import accumulation_steps

if TYPE_CHECKING:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

LATEST = "LATEST"  # names the complete checkpoint version; replaced atomically
EXTRA = "extra.pt"


@dataclasses.dataclass(frozen=True)
class Context:
    """Where this process stands in the job. ``backend`` is None for a single process
    (no process group: every collective helper here is then a no-op)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None
    is_main: bool

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def init_from_env(timeout_minutes: float = 30.0) -> Context:
    """The process group torchrun's environment describes (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR/PORT), or srun's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, when the srun
    launcher marked the step), or a single process when neither (``python -m ...``).

    The timeout bounds how long a collective waits for a peer: a rank stuck or dead on
    another node turns into an error here instead of a job that hangs until its time limit."""
    import torch
    import torch.distributed as dist

    if "WORLD_SIZE" not in os.environ and os.environ.get(RANKS_FROM) == "slurm":
        # Started by `srun` as one task per rank (launcher "srun"): Slurm numbers the ranks.
        os.environ.update(
            RANK=os.environ["SLURM_PROCID"],
            WORLD_SIZE=os.environ["SLURM_NTASKS"],
            LOCAL_RANK=os.environ["SLURM_LOCALID"],
        )
    if "WORLD_SIZE" not in os.environ:
        dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        return Context(0, 1, 0, dev, None, True)
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    kwargs: dict[str, Any] = {}
    if torch.cuda.is_available():
        dev = local_device(local, torch.cuda.device_count(), os.environ)
        torch.cuda.set_device(dev)
        backend = "cpu:gloo,cuda:nccl"
        kwargs["device_id"] = dev  # binds NCCL to this rank's GPU (no guessing from the rank)
    else:
        dev, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(minutes=timeout_minutes), **kwargs)
    return Context(rank, world, local, dev, backend, rank == 0)


def local_world_size(env: Mapping[str, str]) -> tuple[int | None, str]:
    """How many ranks run on this node, and the variable that says so: torchrun's
    LOCAL_WORLD_SIZE first (a torchrun started by a one-task-per-node srun also sees Slurm's
    task counts, which count the torchruns, not the ranks), then srun's. (None, "") if neither."""
    if "LOCAL_WORLD_SIZE" in env:
        return int(env["LOCAL_WORLD_SIZE"]), "LOCAL_WORLD_SIZE"
    if env.get("SLURM_NTASKS_PER_NODE", "").isdigit():
        return int(env["SLURM_NTASKS_PER_NODE"]), "SLURM_NTASKS_PER_NODE"
    # srun's own count for the step, "4" or "4(x2)"; a step with other counts on other nodes
    # ("4,2(x3)") does not say which is this node's
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "").removesuffix(")").split("(x")[0]
    if per_node.isdigit() and "," not in env["SLURM_STEP_TASKS_PER_NODE"]:
        return int(per_node), "SLURM_STEP_TASKS_PER_NODE"
    return None, ""


def local_device(local_rank: int, visible_count: int, env: Mapping[str, str]) -> torch.device:
    """The device of the rank numbered ``local_rank`` on its node, which sees
    ``visible_count`` CUDA devices (``torch.cuda.device_count()``, after CUDA_VISIBLE_DEVICES).

    - no GPU visible: the CPU;
    - every GPU of the node visible to every rank (torchrun's workers; srun with
      ``--gpus-per-node``): ``cuda:LOCAL_RANK``;
    - one GPU visible (srun ``--gpus-per-task=1``, or a CUDA_VISIBLE_DEVICES set per task):
      ``cuda:0``, whatever physical GPU that is. Not for torchrun's workers: they all inherit
      one environment, so one visible GPU is one GPU they would all share;
    - anything else (2 GPUs for 4 ranks): an error naming the counts and the fix, rather than
      rank 2 failing on ``cuda:2`` or two ranks meeting on one GPU, where NCCL stops."""
    import torch

    if visible_count < 1:
        return torch.device("cpu")
    local_world, world_from = local_world_size(env)
    if local_world is not None and visible_count >= local_world:
        return torch.device("cuda", local_rank)
    if visible_count == 1 and world_from != "LOCAL_WORLD_SIZE":
        return torch.device("cuda", 0)
    if local_world is None and local_rank < visible_count:
        return torch.device("cuda", local_rank)  # no count of local ranks to check against
    raise InputError(_binding_problem(local_rank, visible_count, local_world, world_from, env))


def _binding_problem(
    local_rank: int, visible_count: int, local_world: int | None, world_from: str, env: Mapping[str, str]
) -> str:
    said = {
        name: env[name]
        for name in (
            "LOCAL_RANK",
            "SLURM_LOCALID",
            world_from,
            "CUDA_VISIBLE_DEVICES",
            "SLURM_GPUS_PER_TASK",
            "SLURM_STEP_GPUS",
        )
        if name and name in env
    }
    ranks = f"{local_world} ranks on this node" if local_world is not None else "an unknown number of ranks"
    return (
        f"local rank {local_rank} sees {visible_count} GPU(s) (torch.cuda.device_count()) for {ranks}: "
        f"{', '.join(f'{k}={v!r}' for k, v in said.items()) or 'no launcher variables'}. "
        "Each rank needs a GPU of its own: either every rank sees all of the node's GPUs "
        "(torchrun, or srun --gpus-per-node=N with one task per GPU, N = ranks per node), or each "
        "Slurm task sees exactly one (srun --gpus-per-task=1). A CUDA_VISIBLE_DEVICES set for the "
        "whole job must list at least as many GPUs as there are ranks per node."
    )


def shutdown(ctx: Context) -> None:
    """Leave the process group (a clean exit; without it NCCL warns about leaked resources)."""
    import torch.distributed as dist

    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


# --- data: the same global batches, split over the ranks ---------------------------------------


def _bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """Part ``index`` of ``n`` items cut into ``parts`` contiguous runs whose sizes differ by at most 1."""
    return index * n // parts, (index + 1) * n // parts


def rank_share(global_batch: list, ctx: Context) -> list:
    """This rank's contiguous part of a global batch every rank built identically.

    Contiguous (rank 0 the first ~n/W examples) rather than strided: a length-grouped batch
    stays length-sorted within each rank's part, so no rank pads more than it would alone.
    The parts differ in size by at most one example; ``loss_weight`` accounts for that."""
    start, end = _bounds(len(global_batch), ctx.world_size, ctx.rank)
    return global_batch[start:end]


def loss_weight(micro_examples: int, global_examples: int, world_size: int) -> float:
    """Factor for a micro-batch's *mean* loss so that FSDP's/DDP's gradient average over the
    ranks equals the gradient of the mean loss over the whole global batch:
    sum_r (W * n_r / N * grad mean_r) / W = sum_r n_r / N * grad mean_r."""
    return world_size * micro_examples / global_examples


def micro_batches(global_batch: list, ctx: Context, max_micro_batch: int) -> list[tuple[list, float]]:
    """This rank's micro-batches of one global batch, each with its ``loss_weight``.

    Every rank gets ``accumulation_steps(...)`` entries, also a rank whose share is shorter
    than that (a global batch smaller than W times the micro-steps): its missing entries are
    the global batch's first example with weight 0.0. It must still run forward and backward
    on them, since its peers wait for its part of each all-gather and reduce-scatter. Count
    examples and tokens only of entries with a non-zero weight."""
    steps = accumulation_steps(len(global_batch), ctx.world_size, max_micro_batch)
    share = rank_share(global_batch, ctx)
    out: list[tuple[list, float]] = []
    for k in range(steps):
        start, end = _bounds(len(share), steps, k)
        chunk = share[start:end]
        if chunk:
            out.append((chunk, loss_weight(len(chunk), len(global_batch), ctx.world_size)))
        else:
            out.append((global_batch[:1], 0.0))
    return out


# --- agreement between ranks -------------------------------------------------------------------


def any_rank(flag: bool, ctx: Context) -> bool:
    """True on every rank if ``flag`` is true on any. A signal reaches the ranks at different
    steps; checkpointing and stopping when *this* rank saw it would leave the others waiting
    in the next collective. A CPU tensor: on GPUs it goes through gloo, without a GPU sync."""
    if not ctx.distributed:
        return flag
    import torch
    import torch.distributed as dist

    value = torch.tensor([int(flag)], dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def from_rank0(value: Any, ctx: Context) -> Any:
    """Rank 0's ``value`` (any picklable object) on every rank: a dev score or an
    early-stopping decision, so that all ranks branch the same way."""
    if not ctx.distributed:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(ctx: Context) -> None:
    """Wait until every rank is here (rank 0 has written what the others report done)."""
    if ctx.distributed:
        import torch.distributed as dist

        dist.barrier()


def sum_over_ranks(tensor: torch.Tensor, ctx: Context) -> torch.Tensor:
    """The sum of ``tensor`` over ranks, in place (e.g. each rank's weighted loss, giving the
    global batch's mean loss; token counts for throughput)."""
    if ctx.distributed:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


# --- the model ---------------------------------------------------------------------------------


def shard_model(
    model,
    block_classes: tuple[type, ...],
    ctx: Context,
    precision: Precision = FP32,
    activation_checkpointing: bool = False,
    *,
    sync_module_states: bool = True,
):
    """Shard ``model`` with FSDP2: ``fully_shard`` on every module whose class is in
    ``block_classes`` (XLM-R: ``XLMRobertaLayer``), then on the root, which takes the rest
    (embeddings, heads; weights tied between them stay tied). Returns the same object.

    One block's weights are gathered at a time, so memory holds the shards plus one full
    block. ``precision`` bf16 or fp16: weights are gathered and computed in that dtype,
    gradients reduced in fp32 (``mixed_precision_policy``). Activation checkpointing
    recomputes each block's activations in backward instead of storing them (composable
    ``checkpoint``: the parameter names, hence state dicts and ``save_pretrained``, are
    unchanged).

    The root's ``forward`` must be the entry point of every forward pass: FSDP gathers the
    root's own weights in its pre-forward hook, so calling ``model.encoder(...)`` directly
    fails with "mixed torch.Tensor and DTensor". Without a process group nothing is sharded
    (the precision is then autocast's alone); only activation checkpointing is applied.

    ``sync_module_states`` copies rank 0's weights to all ranks first: the shards of
    differently initialised ranks (a head drawn from an unseeded RNG) would silently form a
    model no rank ever had."""
    import torch
    from torch.distributed._composable import checkpoint

    blocks = [m for m in model.modules() if isinstance(m, tuple(block_classes))]
    if block_classes and not blocks:
        # A wrong class name would otherwise shard the whole model as one unit: correct, but it
        # gathers every weight at once, the memory sharding is there to avoid.
        raise ValueError(f"no module of {[c.__name__ for c in block_classes]} in {type(model).__name__}")
    if activation_checkpointing:
        for block in blocks:
            checkpoint(block)
    if not ctx.distributed:
        return model
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not any(p.is_meta for p in model.parameters()):  # a meta base is materialised after sharding
        model.to(ctx.device)
    if sync_module_states:
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=0)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    policy = mixed_precision_policy(precision)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def mixed_precision_policy(precision: Precision) -> MixedPrecisionPolicy:
    """FSDP2's casts for ``precision``. bf16 / fp16: each unit's weights are all-gathered in
    the compute dtype (half the bytes of fp32 on the wire and in the gathered copy) and the
    forward runs in it; gradients are reduced in fp32 into the shards' own dtype, the fp32
    master weights and adapters the optimiser updates. A weight already in the compute dtype
    (a frozen 16-bit LoRA base) is gathered as it is. fp32: no casts."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if not precision.mixed:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=precision.compute_dtype, reduce_dtype=torch.float32)


def full_state_dict(model, ctx: Context) -> dict[str, Any]:
    """The complete, unsharded weights on CPU on rank 0 (``{}`` elsewhere), for
    ``save_pretrained`` or a safetensors export. Collective: every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return state if ctx.is_main else {}


def trainable_state_dict(model, ctx: Context) -> dict[str, torch.Tensor]:
    """The parameters that train (``requires_grad``: LoRA matrices, heads), each gathered
    whole to CPU on rank 0 (``{}`` elsewhere), under every name the model gives it: what an
    adapter phase writes (``adapters.trained_state``'s keys), without gathering the frozen
    base (``full_state_dict`` of a 176B backbone would put all of it in rank 0's host
    memory). Buffers are not included: the heads have no persistent ones. Collective: every
    rank must call it (the ranks walk the same parameters in the same order)."""
    import torch
    from torch.distributed.tensor import DTensor

    names: dict[int, list[str]] = {}
    params: dict[int, torch.nn.Parameter] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if param.requires_grad:
            names.setdefault(id(param), []).append(name)
            params[id(param)] = param
    state: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for key, param in params.items():
            # full_tensor: an all-gather of this one tensor (every rank holds it whole briefly;
            # adapter tensors are small)
            whole = param.full_tensor() if isinstance(param, DTensor) else param.detach()
            if ctx.is_main:
                value = whole.to("cpu", copy=True)
                state.update(dict.fromkeys(names[key], value))
            del whole
    return state


# --- checkpoints -------------------------------------------------------------------------------


def _rng_states(dev) -> dict[str, Any]:
    import numpy as np
    import torch

    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if dev.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(dev)
    return states


def _set_rng_states(states: dict[str, Any], dev) -> None:
    import numpy as np
    import torch

    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and dev.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], dev)


def _latest(path: Path) -> Path | None:
    pointer = path / LATEST
    if not pointer.is_file():
        return None
    version = path / pointer.read_text().strip()
    return version if (version / EXTRA).is_file() else None


@contextmanager
def _quiet_single_process(ctx: Context):
    """DCP warns at every save and load without a process group that it assumes a single
    process; here that is the intent, not an accident."""
    with warnings.catch_warnings():
        if not ctx.distributed:
            warnings.filterwarnings("ignore", message=r"torch\.distributed is .*single process")
        yield


def _state(model, optimizer) -> dict[str, Any]:
    """The DCP state of model (and optimiser): each rank's shards, keyed by parameter name,
    so a checkpoint loads into any world size."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state}


def save_checkpoint(
    path: str | os.PathLike[str], model, optimizer, extra: dict[str, Any], ctx: Context, *, rng: bool = True
) -> None:
    """Write model and optimiser shards (torch.distributed.checkpoint) plus ``extra`` to
    directory ``path``. Collective: every rank calls it at the same step.

    Atomic: each save writes a new version directory under a dot-named temporary name; rank
    0 renames it once every rank has written its shards (DCP's own final gather), then
    replaces the ``LATEST`` pointer file atomically and deletes older versions. A run killed
    at any moment leaves either the previous checkpoint or the new one complete, never a
    half-written one that loads. A final barrier keeps all ranks alive until the pointer is
    written: torchrun tears down the job when a rank exits non-zero, so a rank leaving early
    (exit 143 after a stop signal) could have rank 0 killed mid-rename.

    ``extra``: small picklable state, identical on all ranks (step, scheduler, sampler, the
    history), taken from rank 0. ``rng``: also store each rank's RNG states separately
    (python, numpy, torch, this rank's CUDA device), restored per rank on load. ``optimizer``
    None: weights only (e.g. the early-stopping best weights)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    version = None
    if ctx.is_main:
        path.mkdir(parents=True, exist_ok=True)
        current = _latest(path)
        number = int(current.name.removeprefix("v")) + 1 if current else 1
        version = f"v{number:06d}"
        for stale in path.glob(".v*.tmp"):  # left by a run killed while saving
            shutil.rmtree(stale, ignore_errors=True)
    version = from_rank0(version, ctx)
    tmp = path / f".{version}.tmp"
    with _quiet_single_process(ctx):
        dcp.save(_state(model, optimizer), checkpoint_id=tmp)
    rng_states: list[Any] | None = None
    if rng:
        rng_states = [None] * ctx.world_size
        if ctx.distributed:
            dist.all_gather_object(rng_states, _rng_states(ctx.device))
        else:
            rng_states = [_rng_states(ctx.device)]
    if ctx.is_main:
        torch.save({"extra": extra, "rng": rng_states, "world_size": ctx.world_size}, tmp / EXTRA)
        os.replace(tmp, path / version)
        pointer = path / f".{LATEST}.tmp"
        with open(pointer, "w") as out:
            out.write(version + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(pointer, path / LATEST)
        for old in path.glob("v*"):
            if old.name != version:
                shutil.rmtree(old, ignore_errors=True)
    if ctx.distributed:
        dist.barrier()


def read_extra(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``extra`` of the complete checkpoint under ``path`` without touching any model
    (to compare a run fingerprint before loading), or None if there is none."""
    import torch

    version = _latest(Path(path))
    if version is None:
        return None
    return torch.load(version / EXTRA, map_location="cpu", weights_only=False)["extra"]


def load_checkpoint(path: str | os.PathLike[str], model, optimizer, ctx: Context) -> dict[str, Any] | None:
    """Load the complete checkpoint under ``path`` into ``model`` (sharded or not) and
    ``optimizer``, restore this rank's RNG states, and return its ``extra``; None (nothing
    changed) if there is no complete checkpoint. Collective: every rank calls it.

    DCP reshards on load, so a checkpoint written by W ranks loads into any other W (or a
    single process). The per-rank RNG states are restored only when W is the same; then the
    resumed run continues exactly (dropout included), otherwise it continues from the
    current seeding and says so. Needs a file system every rank sees (the job's output
    directory on a cluster)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    version = _latest(Path(path))
    found = from_rank0(version is not None, ctx)  # one answer, even on a lagging file system view
    if not found:
        return None
    if version is None:
        raise RuntimeError(
            f"rank {ctx.rank}: rank 0 sees a checkpoint under {path}, this rank does not "
            "(checkpoints need a file system shared by all nodes)"
        )
    state = _state(model, optimizer)
    with _quiet_single_process(ctx):
        dcp.load(state, checkpoint_id=version)
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    payload = torch.load(version / EXTRA, map_location="cpu", weights_only=False)
    if payload["rng"] is not None:
        if payload["world_size"] == ctx.world_size:
            _set_rng_states(payload["rng"][ctx.rank], ctx.device)
        elif ctx.is_main:
            LOG.warning(
                "checkpoint %s was written by %d processes, this run has %d: weights and optimiser "
                "resharded, random states not restored",
                version,
                payload["world_size"],
                ctx.world_size,
            )
    return payload["extra"]


# --- launching ---------------------------------------------------------------------------------
