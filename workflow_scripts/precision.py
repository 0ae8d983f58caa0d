"""The precision policy: what a backbone's ``precision`` (fp32 | bf16 | fp16) means, decided here
and nowhere else (docs/backbones.md, "Precision").

One setting decides the compute dtype of every step that runs the backbone: training,
evaluation, retrieval embeddings and the transformers translation engine, on a CPU and on a
GPU alike, so one config gives the same kind of numbers on every machine.

- ``fp32``: no autocast; weights, gradients and optimizer state in fp32.
- ``bf16`` / ``fp16``: the forward runs under ``torch.autocast`` in that dtype. fp16's
  narrow range needs loss scaling (``torch.amp.GradScaler``); bf16's does not.
- Whatever dtype a checkpoint is stored in, full fine-tuning loads it in fp32: the weights
  the optimizer updates and AdamW's moments are fp32 (master weights), so an update smaller
  than a 16-bit weight's rounding step is not lost. transformers 5 otherwise loads a
  checkpoint in its stored dtype.
- LoRA keeps its frozen base in the compute dtype (bf16 or fp16: half the memory; fp32 with
  fp32); QLoRA keeps it in 4-bit NF4 with the compute dtype for its matrix products. Their
  adapters and heads train in fp32 (peft's default).
- A bf16 request on a GPU without native bf16 (compute capability below 8.0: V100, T4)
  is refused: ``torch.cuda.is_bf16_supported()`` answers True there by emulation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.method import DEFAULT_PRECISION, PrecisionName

DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclasses.dataclass(frozen=True)
class Precision:
    """One backbone's precision policy."""

    name: PrecisionName = DEFAULT_PRECISION

    @property
    def compute_dtype(self):  # -> torch.dtype
        import torch

        return getattr(torch, DTYPE_NAMES[self.name])

    @property
    def mixed(self) -> bool:
        """Whether the forward runs under autocast in a 16-bit dtype."""
        return self.name != "fp32"

    @property
    def loss_scaling(self) -> bool:
        return self.name == "fp16"

    def autocast(self, dev) -> contextlib.AbstractContextManager:
        """The context every forward of the backbone runs in, on ``dev`` (CPU or GPU)."""
        import torch

        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(dev.type, dtype=self.compute_dtype)

    def grad_scaler(self, dev):  # -> torch.amp.GradScaler
        """fp16's dynamic loss scaling; a pass-through scaler for bf16 and fp32."""
        import torch

        return torch.amp.GradScaler(dev.type, enabled=self.loss_scaling)

    def base_dtype(self, method: str):  # -> torch.dtype | None
        """The dtype a backbone's weights are loaded in: fp32 master weights for full
        fine-tuning, the compute dtype for a frozen LoRA base, None for QLoRA (bitsandbytes
        quantises the base; BitsAndBytesConfig carries the compute dtype)."""
        import torch

        if method == "full":
            return torch.float32
        if method == "lora":
            return self.compute_dtype
        return None

    def check_device(self, dev, where: str = "") -> None:
        """Refuse bf16 on a GPU that only emulates it (before any weight is loaded)."""
        import torch

        if self.name != "bf16" or dev.type != "cuda":
            return
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return
        name = torch.cuda.get_device_name(dev)
        major, minor = torch.cuda.get_device_capability(dev)
        raise InputError(
            f"{where + ': ' if where else ''}precision bf16: {name} (compute capability {major}.{minor}) has no "
            "native bf16 (PyTorch would emulate it, many times slower); set the backbone's precision to fp16 "
            "(loss-scaled) or fp32, or run on a GPU of compute capability 8.0 or newer (A100, H100, L40)"
        )

    def record(self, dev, method: str) -> dict[str, Any]:
        """What ran, for metric files and training logs."""
        base = self.base_dtype(method)
        return {
            "precision": self.name,
            "device": dev.type,
            "autocast": DTYPE_NAMES[self.name] if self.mixed else None,
            "weights": "nf4" if method == "qlora" else str(base).removeprefix("torch."),
            "trained_weights": "float32",
            "loss_scaling": self.loss_scaling,
        }


FP32 = Precision("fp32")
