"""LoRA vs full fine-tuning in the xstilts engine: peak memory and throughput, side by side.

The targets (PROTOCOL.md §10): on the base-size benchmark model, LoRA at most 0.7x the peak
memory of full fine-tuning and at least 1.0x its examples/s.

Both methods run ``train.train_phase("target", ...)`` with the same model, data, batch size,
learning-rate schedule and number of steps; only ``settings["method"]`` differs:

- full: ``{"name": "full"}`` (every weight trains; AdamW state for all of them);
- lora: ``{"name": "lora", "rank": 16, "alpha": 32, "dropout": 0.05}`` (the backbone frozen,
  peft adapters on the attention projections, the head trained whole: adapters.py).

Model, data and settings are those of ``training_efficiency.py`` (whose helpers this script
imports): a base-size, 12-layer, 768-wide random-init XLM-R built locally, NLI-shaped pairs
cut from the real English text of the XQuAD sample under tests/real_data (the MNLI task's
head and settings), one epoch of steps x batch size examples by default, so both methods
train on exactly the same examples in the same order. Each method runs in its own process,
timed over its training steps only (the engine's ``throughput``: dev evaluations excluded).

Peak memory is that process's: ``torch.cuda.max_memory_allocated`` on a GPU; on CPU the
resident set's high-water mark (``ru_maxrss``), which also holds the Python/torch/transformers
runtime, the model's weights and the encoded data, roughly the same for both methods (LoRA
also imports peft, as a real run does). On CPU the memory ratio is therefore one of whole
processes, not of training state alone; the ``before`` column (the high-water mark after the
imports, before ``train_phase``) shows the runtime part, and the ratio net of it is printed
for information. The judged ratio is the whole-process one. (The inputs are built in a
process of their own: on Linux a child's ``ru_maxrss`` starts at its parent's high-water
mark, which would otherwise floor both.)

The engine puts the batch with the most padded tokens first, so the first step usually sets
the peak. LoRA saves the full model's gradients and AdamW state (12 bytes a parameter on
CPU, fp32) but not its activations: adapters sit in every layer, so the backward pass still
runs through all of them, and at batch 8 x up to 256 tokens the activations are of the same
order as the optimiser state.

Prints the device and CPU model, per method the trainable and total parameters,
examples/s, real (unpadded) tokens/s and peak memory, the LoRA/full ratios next to the
targets (met / not met), and the loss every 5 steps of each. The last line of stdout is the
numbers as JSON (also written to ``--json FILE`` if given).

    .venv/bin/python benchmarks/lora_vs_full.py [--steps 30] [--batch-size 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_efficiency import BASE, LOG_EVERY, REPO, build_inputs, data_map, peak_memory_mb, xstilts_settings  # noqa: E402

METHODS = {"full": {"name": "full"},
           "lora": {"name": "lora", "rank": 16, "alpha": 32, "dropout": 0.05}}
MEMORY_TARGET = 0.7  # LoRA / full peak memory, at most
SPEED_TARGET = 1.0  # LoRA / full examples/s, at least


def run_method(workdir: Path, args, method: str) -> dict:
    from workflow_scripts.train import train_phase

    # The settings and data map of training_efficiency.run_xstilts, plus the method.
    settings = {**xstilts_settings(args),
                "method": {**METHODS[method], "activation_checkpointing": args.activation_checkpointing}}
    data = data_map(workdir)
    log = train_phase("target", workdir / "encoder", data, settings, seed=0, threads=args.threads,
                      output=workdir / f"{method}-out")
    logged = json.loads((workdir / f"{method}-out" / "train_log.json").read_text())
    speed, backbone = logged["throughput"], logged["backbone"]
    return {"examples_per_s": speed["examples_per_s"], "tokens_per_s": speed["tokens_per_s"],
            "train_seconds": speed["train_seconds"], "examples": speed["examples"], "tokens": speed["tokens"],
            "trainable_parameters": backbone["trainable_parameters"], "parameters": backbone["parameters"],
            "losses": [h["loss"] for h in log["history"]], "attention": speed["attention"]}


def child(args) -> None:
    import torch
    import transformers  # noqa: F401  (the runtime both methods carry, counted in "before")
    import workflow_scripts.train  # noqa: F401  (peft: imported by train_phase for LoRA only, as in a real run)

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    before = peak_memory_mb(dev)
    result = run_method(Path(args.workdir), args, args.method)
    result["peak_memory_mb"] = peak_memory_mb(dev)
    result["before_training_mb"] = before
    result["device"] = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print("RESULT " + json.dumps(result))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--examples", type=int, help="default: steps x batch size, one epoch")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the numbers as JSON to this file")
    ap.add_argument("--activation-checkpointing", action="store_true",
                    help="both methods recompute activations in backward (as large backbones train): the "
                         "peak is then the training state, which LoRA shrinks, not the activations")
    ap.add_argument("--method", choices=METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build_inputs(Path(args.workdir), args.examples or args.steps * args.batch_size)
        return
    if args.method:
        child(args)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Built in a process of its own: a child's ru_maxrss starts at its parent's high-water
        # mark (Linux keeps it across fork and exec), so this process must stay small.
        build = [sys.executable, __file__, "--build", "--workdir", tmp, "--steps", str(args.steps),
                 "--batch-size", str(args.batch_size)] + (["--examples", str(args.examples)] if args.examples else [])
        proc = subprocess.run(build, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"building the inputs failed:\n{proc.stderr[-3000:]}")
        for method in METHODS:
            cmd = [sys.executable, __file__, "--method", method, "--workdir", tmp, "--steps", str(args.steps),
                   "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
                   "--lr", str(args.lr), "--threads", str(args.threads)]
            cmd += ["--activation-checkpointing"] if args.activation_checkpointing else []
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"{method} failed:\n{proc.stderr[-3000:]}")
            results[method] = json.loads(lines[-1][len("RESULT "):])

    full, lora = results["full"], results["lora"]
    device = full["device"]
    cpu = cpu_model()
    on_cpu = device == "cpu"
    memory_ratio = lora["peak_memory_mb"] / full["peak_memory_mb"]
    speed_ratio = lora["examples_per_s"] / full["examples_per_s"]
    net_ratio = ((lora["peak_memory_mb"] - lora["before_training_mb"])
                 / (full["peak_memory_mb"] - full["before_training_mb"]))
    memory_met, speed_met = memory_ratio <= MEMORY_TARGET, speed_ratio >= SPEED_TARGET
    memory_kind = "max resident set of the whole process" if on_cpu else "torch.cuda.max_memory_allocated"

    print(f"device: {device}; CPU: {cpu}; {args.threads} threads")
    print(f"model: base-size random-init XLM-R ({BASE['num_hidden_layers']} x {BASE['hidden_size']}, "
          f"vocab {BASE['vocab_size']}); batch {args.batch_size}, {args.steps} steps, max length "
          f"{args.max_length}, lr {args.lr}, activation checkpointing {'on' if args.activation_checkpointing else 'off'}; "
          f"LoRA r={METHODS['lora']['rank']}, alpha={METHODS['lora']['alpha']}, "
          f"dropout {METHODS['lora']['dropout']}")
    print(f"peak memory: {memory_kind}")
    print(f"\n{'method':8s} {'trainable':>12s} {'params':>12s} {'share':>7s} {'examples/s':>10s} {'tokens/s':>9s} "
          f"{'train s':>8s} {'peak GB':>8s} {'before GB':>9s}  attention")
    for name, r in results.items():
        print(f"{name:8s} {r['trainable_parameters']:12,d} {r['parameters']:12,d} "
              f"{r['trainable_parameters'] / r['parameters']:7.2%} {r['examples_per_s']:10.2f} "
              f"{r['tokens_per_s']:9.0f} {r['train_seconds']:8.1f} {r['peak_memory_mb'] / 1024:8.2f} "
              f"{r['before_training_mb'] / 1024:9.2f}  {r['attention']}")
    print(f"\nLoRA / full  {'ratio':>6s}  {'target':>7s}")
    print(f"peak memory  {memory_ratio:6.2f}  {'<= ' + str(MEMORY_TARGET):>7s}  "
          f"{'met' if memory_met else 'not met'}")
    print(f"examples/s   {speed_ratio:6.2f}  {'>= ' + str(SPEED_TARGET):>7s}  "
          f"{'met' if speed_met else 'not met'}")
    if on_cpu:
        print(f"(CPU: the memory ratio is of whole processes. The runtime, {full['before_training_mb'] / 1024:.2f} / "
              f"{lora['before_training_mb'] / 1024:.2f} GB before training, the fp32 weights and the data count in "
              f"both;\n net of the runtime the ratio is {net_ratio:.2f}, for information)")
    print(f"\nmean training loss per {LOG_EVERY} steps")
    for name, r in results.items():
        print(f"{name:8s} " + " ".join(f"{x:6.3f}" for x in r["losses"]))

    summary = {"device": device, "cpu_model": cpu, "threads": args.threads, "steps": args.steps,
               "activation_checkpointing": args.activation_checkpointing,
               "batch_size": args.batch_size, "max_length": args.max_length, "lr": args.lr,
               "peak_memory_kind": memory_kind,
               "methods": {name: {**{k: v for k, v in r.items() if k != "device"},
                                  "settings": METHODS[name]} for name, r in results.items()},
               "ratios": {"peak_memory": memory_ratio, "peak_memory_net_of_runtime": net_ratio if on_cpu else None,
                          "examples_per_s": speed_ratio},
               "targets": {"peak_memory": {"at_most": MEMORY_TARGET, "met": memory_met},
                           "examples_per_s": {"at_least": SPEED_TARGET, "met": speed_met}}}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
