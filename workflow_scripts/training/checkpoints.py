"""Training state on disk: resumable checkpoints and the early-stopping best weights.

A checkpoint is one directory replaced atomically. The best weights live in their own file
(``best/step-<N>.safetensors``) instead of a second copy of the model in host memory: for
XLM-R large that copy is 2.2 GB of RAM per training job. A checkpoint names the best step;
the file it names is kept until a newer checkpoint names another, so a run killed between a
new best and the next checkpoint resumes with the best weights its checkpoint knew.

Weights files use the safetensors layout (8-byte header length, JSON header, raw tensors),
written and read one tensor at a time straight from and into the model's own storage: the
safetensors library builds the whole file in memory to save it, which is the copy this
module exists to avoid.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path
from workflow_scripts.spec.basics import InputError

_DTYPES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


# Signals on which training writes a checkpoint at the end of the current step and stops
# (recipe.py): SIGTERM (scancel, preemption, torchrun ending its workers), SIGUSR1 (Slurm's
# warning before the time limit, sbatch --signal) and SIGINT (Ctrl-C: the terminal sends it to
# the whole foreground process group, Snakemake and the training process alike; torchrun,
# whose workers run in sessions of their own, passes it on to them).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class Preempted(Exception):
    """Training stopped on a signal after writing a checkpoint; a rerun resumes from it."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None = None) -> None:
        name = signal.Signals(signum).name
        if checkpoint is None:
            saved = "no checkpoint directory, so no checkpoint: a rerun starts over"
        else:
            saved = f"checkpoint written to {checkpoint}: a rerun resumes from it"
        super().__init__(f"stopped by {name} after step {step}; {saved}")
        self.signum = signum


def _byte_view(tensor):
    """The bytes of a contiguous CPU tensor as a writable buffer sharing its storage."""
    import torch

    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def save_weights(state: dict[str, Any], path: Path) -> None:
    """Write a state dict as a safetensors file, one tensor at a time, atomically."""
    header: dict[str, Any] = {}
    offset = 0
    for name, tensor in state.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPES[str(tensor.dtype).removeprefix("torch.")],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format aligns the data to 8 bytes
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(encoded)) + encoded)
        for tensor in state.values():
            out.write(_byte_view(tensor.detach().to("cpu").contiguous()))


def load_weights_into(module, path: Path, targets: dict[str, Any] | None = None) -> None:
    """Read a safetensors file into ``module``'s parameters and buffers in place (or into
    ``targets``, a part of its state: an adapter's trainable tensors).

    CPU tensors are filled straight from the file; on a GPU each tensor goes through one
    host buffer of its own size. Names, shapes and dtypes must match exactly."""
    import torch

    targets = module.state_dict() if targets is None else targets
    with open(path, "rb") as src:
        (length,) = struct.unpack("<Q", src.read(8))
        header = json.loads(src.read(length))
        header.pop("__metadata__", None)
        if set(header) != set(targets):
            missing, extra = sorted(set(targets) - set(header)), sorted(set(header) - set(targets))
            raise InputError(f"{path}: weights do not match the model (missing {missing[:5]}, unexpected {extra[:5]})")
        start = 8 + length
        for name, meta in header.items():
            target = targets[name]
            if (
                list(target.shape) != meta["shape"]
                or _DTYPES[str(target.dtype).removeprefix("torch.")] != meta["dtype"]
            ):
                raise InputError(
                    f"{path}: {name} is {meta['dtype']} {meta['shape']}, "
                    f"the model's is {target.dtype} {list(target.shape)}"
                )
            src.seek(start + meta["data_offsets"][0])
            staging = (
                target
                if target.device.type == "cpu" and target.is_contiguous()
                else torch.empty(target.shape, dtype=target.dtype)
            )
            if src.readinto(_byte_view(staging)) != meta["data_offsets"][1] - meta["data_offsets"][0]:
                raise InputError(f"{path}: truncated at tensor {name}")
            if staging is not target:
                with torch.no_grad():
                    target.copy_(staging)


class BestWeights:
    """The early-stopping best weights, one file per best step under ``directory``."""

    def __init__(self, directory: Path, state_of: Callable[[Any], dict[str, Any]] | None = None) -> None:
        self.directory = directory
        # What is kept of the model: its whole state, or (adapters) its trainable tensors.
        self.state_of = state_of or (lambda model: model.state_dict())
        self.kept_step: int | None = None  # named by the newest checkpoint: never deleted

    def path(self, step: int) -> Path:
        return self.directory / f"step-{step}.safetensors"

    def _files(self) -> Iterator[tuple[int, Path]]:
        if self.directory.is_dir():
            for file in self.directory.glob("step-*.safetensors"):
                yield int(file.name.removeprefix("step-").removesuffix(".safetensors")), file

    def save(self, model, step: int) -> None:
        save_weights(self.state_of(model), self.path(step))
        self.prune(keep={step})

    def prune(self, keep: set[int]) -> None:
        """Delete every best-weights file but those of ``keep`` and the checkpoint's."""
        for file_step, file in self._files():
            if file_step not in keep and file_step != self.kept_step:
                file.unlink()

    def checkpointed(self, step: int | None) -> None:
        """A checkpoint naming best step ``step`` (None: no best yet) has been written."""
        self.kept_step = step
        self.prune(keep=set() if step is None else {step})

    def restore(self, model, step: int) -> None:
        load_weights_into(model, self.path(step), self.state_of(model))

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class Checkpointer:
    """The complete training state in one directory, replaced atomically.

    Model, optimiser, scheduler, every RNG (python, numpy, torch, CUDA, the MLM masking
    generator), the task sampler, each task's data position and the early-stopping state
    (the best step, whose weights ``best`` keeps on disk): a resumed run continues exactly
    where the stopped one was.
    """

    def __init__(self, directory: Path | None, fingerprint: dict[str, Any], every: int) -> None:
        self.directory, self.fingerprint, self.every = directory, fingerprint, max(1, every)

    @property
    def path(self) -> Path | None:
        return self.directory / "checkpoint" if self.directory else None

    def load(self) -> dict[str, Any] | None:
        import torch

        if self.path is None or not (self.path / "state.pt").is_file():
            return None
        meta = json.loads((self.path / "meta.json").read_text())
        differ = sorted(
            k
            for k in set(meta["fingerprint"]) | set(self.fingerprint)
            if meta["fingerprint"].get(k) != self.fingerprint.get(k)
        )
        if differ:
            # Snakemake reruns a job whose settings, code or inputs changed; the checkpoint of the
            # job as it was would continue the old run under the new one's name.
            details = "; ".join(
                f"{k}: checkpoint {meta['fingerprint'].get(k)!r} vs run {self.fingerprint.get(k)!r}" for k in differ
            )
            LOG.warning(
                "discarding checkpoint %s at step %d: written by a different run (%s); starting from scratch",
                self.path,
                meta["step"],
                details,
            )
            self.remove()
            return None
        LOG.info("resuming from %s at step %d", self.path, meta["step"])
        # mmap: the optimiser state is read as it is copied in, not held twice
        return torch.load(self.path / "state.pt", map_location="cpu", weights_only=False, mmap=True)

    def save(self, state: dict[str, Any]) -> None:
        import torch

        if self.path is None:
            return
        with atomic_path(self.path) as tmp:
            tmp.mkdir()
            torch.save(state, tmp / "state.pt")
            (tmp / "meta.json").write_text(
                json.dumps({"fingerprint": self.fingerprint, "step": state["step"]}, sort_keys=True) + "\n"
            )

    def remove(self) -> None:
        if self.directory is not None and self.directory.exists():
            shutil.rmtree(self.directory)


def files_stamp(paths: Iterable[str | Path]) -> str:
    """A digest of the name, size and modification time of every file under ``paths``
    (directories walked, dot-named temporaries skipped). A rebuilt encoder or a rewritten data
    file changes it, as it makes Snakemake rerun the job, without reading gigabytes of weights."""
    digest = hashlib.sha256()
    for root in paths:
        root = Path(root)
        files = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]
        for file in files:
            if any(part.startswith(".") for part in file.relative_to(root).parts):
                continue
            stat = file.stat() if file.exists() else None
            digest.update(f"{file}\0{stat.st_size if stat else -1}\0{stat.st_mtime_ns if stat else -1}\0".encode())
    return digest.hexdigest()[:16]


def rng_state(dev) -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if dev.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


# ----- the same, for a model sharded over ranks (torchrun + FSDP2; distributed.py) ----------


class ShardedBestWeights:
    """BestWeights for a sharded model: each best step is a DCP checkpoint directory
    (``best/step-<N>/``) every rank writes its shards to; the same keep-and-prune rules."""

    def __init__(self, directory: Path, ctx) -> None:
        self.directory, self.ctx = directory, ctx
        self.kept_step: int | None = None

    def path(self, step: int) -> Path:
        return self.directory / f"step-{step}"

    def save(self, model, step: int) -> None:
        from workflow_scripts.training.distributed import save_checkpoint

        save_checkpoint(self.path(step), model, None, {"step": step}, self.ctx, rng=False)
        self.prune(keep={step})

    def prune(self, keep: set[int]) -> None:
        if not self.ctx.is_main or not self.directory.is_dir():
            return
        for path in self.directory.glob("step-*"):
            step = int(path.name.removeprefix("step-"))
            if step not in keep and step != self.kept_step:
                shutil.rmtree(path, ignore_errors=True)

    def checkpointed(self, step: int | None) -> None:
        self.kept_step = step
        self.prune(keep=set() if step is None else {step})

    def restore(self, model, step: int) -> None:
        from workflow_scripts.training.distributed import load_checkpoint

        if load_checkpoint(self.path(step), model, None, self.ctx) is None:
            raise InputError(f"{self.path(step)}: the best weights of step {step} are missing")

    def remove(self) -> None:
        if self.ctx.is_main:
            shutil.rmtree(self.directory, ignore_errors=True)


class ShardedCheckpointer:
    """Checkpointer for a sharded model: model and optimiser shards through DCP (they reshard
    on load, so a resumed job may run on another GPU count), the rest of the training state
    and the run's fingerprint as the checkpoint's ``extra``, each rank's random states apart.
    A checkpoint of another run is discarded, as Checkpointer does."""

    def __init__(self, directory: Path | None, fingerprint: dict[str, Any], every: int, ctx) -> None:
        self.directory, self.fingerprint, self.every, self.ctx = directory, fingerprint, max(1, every), ctx

    @property
    def path(self) -> Path | None:
        return self.directory / "checkpoint" if self.directory else None

    def load(self, model, optimizer) -> dict[str, Any] | None:
        from workflow_scripts.training.distributed import from_rank0, load_checkpoint, read_extra

        if self.path is None:
            return None
        extra = read_extra(self.path) if self.ctx.is_main else None
        differ = None
        if extra is not None:
            differ = sorted(
                k
                for k in set(extra["fingerprint"]) | set(self.fingerprint)
                if extra["fingerprint"].get(k) != self.fingerprint.get(k)
            )
        differ = from_rank0(differ, self.ctx)
        if differ is None:
            return None
        if differ:
            if self.ctx.is_main:
                LOG.warning(
                    "discarding checkpoint %s: written by a different run (%s differ); starting from scratch",
                    self.path,
                    ", ".join(differ),
                )
                self.remove()
            return None
        resumed = load_checkpoint(self.path, model, optimizer, self.ctx)
        if resumed is not None and self.ctx.is_main:
            LOG.info("resuming from %s at step %d (%d processes)", self.path, resumed["step"], self.ctx.world_size)
        return resumed

    def save(self, model, optimizer, state: dict[str, Any]) -> None:
        from workflow_scripts.training.distributed import save_checkpoint

        if self.path is None:
            return
        save_checkpoint(self.path, model, optimizer, {**state, "fingerprint": self.fingerprint}, self.ctx)

    def remove(self) -> None:
        if self.directory is not None and self.directory.exists() and self.ctx.is_main:
            shutil.rmtree(self.directory)
