"""Sharded training throughput: 2 processes (torchrun + FSDP2) against 1, side by side.

Same model (the base-size, 12 x 768, random-init XLM-R of ``training_efficiency.py``), same
NLI-shaped pairs of real English text, same global batch, steps and schedule: one process
with ``--threads 2``, then ``torchrun --standalone --nproc-per-node 2`` with ``--threads 1``
per rank (the machine's cores shared out, as GPUs would be). Each is one ``python -m
workflow_scripts.training.train`` job, timed by its own train log (training steps only). Prints the
device, examples/s and tokens/s of each, their ratio, the largest difference of the logged
losses, and whether the two runs chose the same best step.

No target: on a 2-core CPU the ranks share the cores and pay gloo's all-gathers and
reduce-scatters on top, so this shows the cost of sharding here, not the gain it brings on
GPUs (where each rank has its own device and NCCL moves the shards).

    .venv/bin/python benchmarks/sharded_throughput.py [--steps 20] [--batch-size 8] [--max-length 128]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lora_vs_full import cpu_model
from training_efficiency import REPO, data_map, xstilts_settings


def train(workdir: Path, args, processes: int) -> dict:
    settings, data = xstilts_settings(args), data_map(workdir)
    output = workdir / f"out-{processes}"
    launcher = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(processes),
            "--max-restarts",
            "0",
        ]
        if processes > 1
        else [sys.executable]
    )
    cmd = [
        *launcher,
        "-m",
        "workflow_scripts.training.train",
        "target",
        "--encoder",
        str(workdir / "encoder"),
        "--data",
        json.dumps(data),
        "--settings",
        settings.to_json(),
        "--seed",
        "0",
        "--threads",
        str(max(1, args.threads // processes)),
        "--output",
        str(output),
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": str(max(1, args.threads // processes))},
    )
    if proc.returncode != 0:
        raise SystemExit(f"{processes} process(es) failed:\n{proc.stderr[-3000:]}")
    log = json.loads((output / "train_log.json").read_text())
    return {
        "processes": log["throughput"]["processes"],
        "examples_per_s": log["throughput"]["examples_per_s"],
        "tokens_per_s": log["throughput"]["tokens_per_s"],
        "train_seconds": log["throughput"]["train_seconds"],
        "losses": [h["loss"] for h in log["history"]],
        "best_step": log["best"]["step"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=2, help="cores in all; each of 2 ranks gets half")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        build = [
            sys.executable,
            str(Path(__file__).resolve().parent / "lora_vs_full.py"),
            "--build",
            "--workdir",
            tmp,
            "--steps",
            str(args.steps),
            "--batch-size",
            str(args.batch_size),
        ]
        proc = subprocess.run(build, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"building the inputs failed:\n{proc.stderr[-3000:]}")
        runs = {n: train(Path(tmp), args, n) for n in (1, 2)}
    one, two = runs[1], runs[2]
    print(f"device: cpu; CPU: {cpu_model()}; {args.threads} cores")
    print(
        f"model: base-size random-init XLM-R; global batch {args.batch_size}, {args.steps} steps, max length "
        f"{args.max_length}"
    )
    print(f"\n{'processes':>9s} {'examples/s':>10s} {'tokens/s':>9s} {'train s':>8s} {'best step':>9s}")
    for n, run in runs.items():
        print(
            f"{n:9d} {run['examples_per_s']:10.2f} {run['tokens_per_s']:9.0f} {run['train_seconds']:8.1f} "
            f"{run['best_step']:9d}"
        )
    diff = max((abs(a - b) for a, b in zip(one["losses"], two["losses"])), default=float("nan"))
    print(
        f"\n2 / 1 processes, examples/s: {two['examples_per_s'] / one['examples_per_s']:.2f} (no target on a "
        f"2-core CPU)\nlargest difference of the logged losses: {diff:.2e} (dropout masks differ per rank); "
        f"same best step: {one['best_step'] == two['best_step']}"
    )
    print(
        json.dumps(
            {
                "runs": runs,
                "ratio_examples_per_s": two["examples_per_s"] / one["examples_per_s"],
                "max_loss_difference": diff,
            }
        )
    )


if __name__ == "__main__":
    main()
