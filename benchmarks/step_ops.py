"""What one training step asks of the host: aten ops dispatched per step, eager against
compiled (workflow_scripts/models/compiled.py), side by side in one run.

The step is the engine's own (heads.forward under the precision policy's autocast,
step.backward, step.optimizer_step), on a random-init XLM-R-shaped encoder built and loaded
as training loads it (benchmarks/gpu_check.py's helpers). The count does not depend on the
width, so the default is XLM-R large's depth (24 layers) at a narrow width that a CPU
compiles in minutes; ``--width 1024 --heads 16 --ffn 4096`` is XLM-R large itself.

Counted with torch.profiler over one step after warm-up:
- ``aten ops``: top-level aten calls (none of their callees), what Python and the
  dispatcher issue one by one; ``casts`` among them: aten::to / aten::_to_copy, autocast's
  copies of fp32 weights and activations;
- ``fused kernels``: calls of the compiler's generated kernels (C++ on a CPU; on a GPU, the
  CUDA kernel launches of the whole step are counted instead);
- on a GPU also the step's CPU time against its GPU kernel time: a step whose CPU time
  exceeds its GPU time is host-bound.

    python benchmarks/step_ops.py [--layers 24] [--width 64] [--seq 128] [--batch 4] [--precision bf16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CASTS = ("aten::to", "aten::_to_copy")
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC")


def _top_level(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def profile_step(one_step: Callable[[], Any], dev) -> dict[str, Any]:
    """Ops, casts, fused kernels (or CUDA launches) and CPU / GPU time of one call of
    ``one_step``, which has already run (warm-up, compilation)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        one_step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - started
    events = prof.events()
    aten = Counter(e.name for e in events if e.name.startswith("aten::") and _top_level(e))
    row = {
        "aten_ops": sum(aten.values()),
        "casts": sum(aten[name] for name in CASTS),
        "fused_kernels": sum(1 for e in events if "cpp_fused" in e.name or e.name.startswith("triton_")),
        "profiled_wall_ms": 1000 * wall,
    }
    if dev.type == "cuda":
        row["cuda_launches"] = sum(1 for e in events if e.name in LAUNCHES)
        row["gpu_kernel_ms"] = sum(e.device_time for e in events if e.device_type.name == "CUDA") / 1000
        row["cpu_ms"] = max(e.time_range.end for e in events) / 1000 - min(e.time_range.start for e in events) / 1000
    return row


def engine_step(model, method, batch: dict[str, Any], dev) -> Callable[[], Any]:
    """One optimizer step as the training loop takes it (recipe.TrainingRecipe.step)."""
    from workflow_scripts.models.heads import forward
    from workflow_scripts.precision import Precision
    from workflow_scripts.training import step

    precision = Precision(method.precision)
    optimizer, scaler = step.make_optimizer(model, 1e-5, 0.0), precision.grad_scaler(dev)
    model.train()

    def one_step():
        with precision.autocast(dev):
            _, loss = forward(model, "classification", "nli", batch)
        step.backward(loss, scaler)
        step.optimizer_step(model, optimizer, scaler, 1.0)
        optimizer.zero_grad(set_to_none=True)
        return loss

    return one_step


def measure(engine: str, model_dir: Path, batch_shape: tuple[int, int], precision: str, dev, steps: int):
    import gpu_check
    import torch
    import torch._inductor.config as inductor_config

    from workflow_scripts.models import compiled

    compiled.configure("always" if engine == "compiled" else "never", dev.type)
    inductor_config.cpp.enable_kernel_profile = True  # each generated C++ kernel a profiler event
    model, method = gpu_check.build_model(model_dir, "encoder", {"name": "full", "precision": precision}, dev)
    seq, rows = batch_shape
    batch = gpu_check.synthetic_batch(model.encoder.config.vocab_size, seq, rows, dev)
    one_step = engine_step(model, method, batch, dev)
    started = time.perf_counter()
    one_step()
    first = time.perf_counter() - started
    seconds, _ = gpu_check.timed(one_step, dev, warmup=1, steps=steps)
    row = {"engine": engine, "first_step_s": first, "step_ms": 1000 * seconds / steps, **profile_step(one_step, dev)}
    del model
    torch._dynamo.reset()
    return row


def add_encoder_arguments(ap: argparse.ArgumentParser, layers: int, width: int, heads: int, ffn: int) -> None:
    """The XLM-R-shaped encoder's depth and width, the run's steps and host threads."""
    ap.add_argument("--layers", type=int, default=layers)
    ap.add_argument("--width", type=int, default=width)
    ap.add_argument("--heads", type=int, default=heads)
    ap.add_argument("--ffn", type=int, default=ffn)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)


def encoder_shape(args: argparse.Namespace) -> dict[str, Any]:
    """XLM-R large's config at the arguments' depth and width (an 8,000-token vocabulary)."""
    import gpu_check

    return {
        **gpu_check.XLMR_LARGE,
        "vocab_size": 8000,
        "hidden_size": args.width,
        "num_attention_heads": args.heads,
        "intermediate_size": args.ffn,
        "num_hidden_layers": args.layers,
    }


def set_up_device(threads: int):
    """The jobs' torch settings on ``threads`` host threads; the GPU if there is one."""
    import torch

    from workflow_scripts.common import configure_torch

    configure_torch(threads)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_encoder_arguments(ap, layers=24, width=64, heads=4, ffn=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    args = ap.parse_args(argv)
    import gpu_check

    dev = set_up_device(args.threads)
    shape = encoder_shape(args)
    with tempfile.TemporaryDirectory(prefix="xstilts-step-ops-") as tmp:
        gpu_check.save_backbone("encoder", shape, Path(tmp) / "encoder", dev)
        rows = [
            measure(engine, Path(tmp) / "encoder", (args.seq, args.batch), args.precision, dev, args.steps)
            for engine in ("eager", "compiled")
        ]
    print(
        f"# one training step, {args.layers} layers x {args.width} wide, seq {args.seq} x batch {args.batch}, "
        f"{args.precision}, full fine-tuning, on {dev.type}"
    )
    keys = [k for k in rows[0] if k != "engine"]
    print("| engine | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for row in rows + [_ratio(rows[0], rows[1])]:
        print(f"| {row['engine']} | " + " | ".join(_cell(row[k]) for k in keys) + " |")
    return 0


def _ratio(eager: dict[str, Any], compiled: dict[str, Any]) -> dict[str, Any]:
    ratio = {k: (eager[k] / compiled[k] if compiled[k] else None) for k in eager if k != "engine"}
    return {"engine": "eager / compiled", **ratio}


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


if __name__ == "__main__":
    sys.exit(main())
