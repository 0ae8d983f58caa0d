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
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if grads and all(type(g) is torch.Tensor and g.device == grads[0].device for g in grads):
        grad_norm = clip_local_gradients(grads, max_grad_norm)
    else:  # a sharded model's gradients (DTensors): torch's own, which reduces over the ranks
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return grad_norm


def clip_local_gradients(grads: list, max_norm: float):
    """``torch.nn.utils.clip_grad_norm_`` for gradients on one device, with its arithmetic
    (2-norm of the per-tensor 2-norms, coefficient max_norm / (norm + 1e-6) clamped to 1),
    without its per-tensor device move of each norm: one dispatched op per parameter, some
    400 a step for XLM-R large, that a host-bound GPU step waits for."""
    import torch

    by_dtype: dict = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    norms = [torch.stack(torch._foreach_norm(group, 2.0)) for group in by_dtype.values()]
    stacked = norms[0] if len(norms) == 1 else torch.cat([n.float() for n in norms])
    total = torch.linalg.vector_norm(stacked, 2.0)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for group in by_dtype.values():
        torch._foreach_mul_(group, coefficient)
    return total
