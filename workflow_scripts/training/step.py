"""One optimizer step, as every training run takes it: the training loop (recipe.py) and the
preflight's smoke steps (preflight.py) share it, so the preflight fails exactly
where training would and nowhere else.

The precision policy (precision.py) enters twice: the forward runs under its autocast (the
caller's ``with precision.autocast(dev):``), and fp16's loss scaling wraps the backward and
the step here. The gradient norm is clipped on unscaled gradients."""

from __future__ import annotations

from typing import Any


def make_optimizer(model, learning_rate: float, weight_decay: float):
    """AdamW over the trainable parameters. Fused: one kernel for all parameters, on GPUs and
    (PyTorch >= 2.4) on CPU, where it is ~6x the per-tensor loop for a base-size model."""
    import torch

    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=weight_decay, fused=True
    )


def backward(loss, scaler) -> None:
    """The loss's gradients, scaled by fp16's loss scale (bf16, fp32: as they are)."""
    scaler.scale(loss).backward()


def optimizer_step(model, optimizer, scaler, max_grad_norm: float) -> Any:
    """Unscale, clip to ``max_grad_norm``, step (skipped by the scaler when an fp16 gradient
    overflowed, with a smaller scale next time; to know, fp16's scaler reads its overflow flag,
    one wait for the GPU per step that bf16 and fp32 do not pay). Returns the gradient norm
    before clipping."""
    import torch

    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return grad_norm
