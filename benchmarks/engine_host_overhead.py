"""Where the training engine's steps lose time to the host on a GPU: the engine as it runs,
against the same engine with one setting changed at a time, and the HF Trainer, side by side.

Each variant trains the benchmark's base-size encoder (benchmarks/training_efficiency.py: 12 x
768, NLI-shaped pairs of varying length, length-grouped batches) for the same steps in its own
process, with evaluation only at the end (not timed). Variants:

- ``engine``: recipe.train_phase as it runs (configure_torch's settings, SDPA's cuDNN backend
  switched off);
- ``cudnn_attention``: the same with SDPA's cuDNN backend switched back on
  (``torch.backends.cuda.enable_cudnn_sdp(True)``): it builds an execution graph for each new
  sequence length, and length-grouped batches bring a new length at almost every step;
- ``no_nan_fill``: deterministic kernels on, without filling fresh memory with NaN
  (``torch.utils.deterministic.fill_uninitialized_memory = False``);
- ``nondeterministic``: deterministic kernels off;
- ``trainer``: the HF Trainer with its defaults (shuffled batches), the reference.

    python benchmarks/engine_host_overhead.py [--steps 30] [--batch-size 32] [--max-length 128]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

VARIANTS = ("engine", "cudnn_attention", "no_nan_fill", "nondeterministic", "trainer")


def patched_configure_torch(variant: str):
    import torch

    from workflow_scripts import common

    original = common.configure_torch

    def configure(threads: int) -> None:
        original(threads)
        if variant == "cudnn_attention":
            torch.backends.cuda.enable_cudnn_sdp(True)
        elif variant == "no_nan_fill":
            from torch.utils import deterministic

            deterministic.fill_uninitialized_memory = False
        elif variant == "nondeterministic":
            torch._C._set_deterministic_algorithms(False)

    return configure


def child(args) -> None:
    import torch

    from benchmarks import training_efficiency as bench

    workdir, dev = Path(args.workdir), torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.variant == "trainer":
        result = bench.run_trainer(workdir, args, dev, group_by_length=False)
    else:
        import workflow_scripts.training.recipe as recipe

        recipe.configure_torch = patched_configure_torch(args.variant)
        settings = bench.xstilts_settings(args).replace(eval_every=10**6)
        log = recipe.train_phase(
            "intermediate",
            workdir / "encoder",
            bench.data_map(workdir),
            settings,
            0,
            args.threads,
            workdir / args.variant,
        )
        speed = log["throughput"]
        result = {"seconds": speed["train_seconds"], "examples": speed["examples"], "tokens": speed["tokens"]}
    result["device"] = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        child(args)
        return
    from benchmarks.training_efficiency import build_inputs

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        build_inputs(Path(tmp), args.steps * args.batch_size)
        for variant in VARIANTS:
            cmd = [sys.executable, __file__, "--variant", variant, "--workdir", tmp]
            cmd += [
                f"--{k.replace('_', '-')}={getattr(args, k)}"
                for k in ("steps", "batch_size", "max_length", "lr", "threads")
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                print(f"{variant}: failed\n{proc.stderr[-2000:]}", flush=True)
                continue
            results[variant] = json.loads(lines[-1][len("RESULT ") :])
            r = results[variant]
            print(f"{variant:20s} {r['examples'] / r['seconds']:9.1f} examples/s  {r['seconds']:6.2f} s", flush=True)
    device = next(iter(results.values()))["device"] if results else "?"
    print(
        f"\ndevice: {device}; base-size encoder, batch {args.batch_size}, {args.steps} steps, max length {args.max_length}"
    )
    reference = results.get("engine")
    for variant, r in results.items():
        rate = r["examples"] / r["seconds"]
        ratio = rate / (reference["examples"] / reference["seconds"]) if reference else float("nan")
        print(f"{variant:20s} {rate:9.1f} examples/s  {ratio:5.2f}x the engine")


if __name__ == "__main__":
    main()
