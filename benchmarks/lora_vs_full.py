"""LoRA vs full fine-tuning in the xstilts engine: peak memory and throughput, side by side.

The targets this benchmark checks: LoRA at most 0.7x the peak memory of full fine-tuning and at
least 1.0x its examples/s (LoRA and QLoRA backbones: docs/protocol.md §10).

Both methods run ``recipe.train_phase("target", ...)`` with the same model, data, batch size,
learning-rate schedule and number of steps; only ``settings["method"]`` differs:

- full: ``{"name": "full"}`` (every weight trains: dense gradients, the embedding matrix's
  included, and fused AdamW's two fp32 moments for all of them);
- lora: ``{"name": "lora", "rank": 16, "alpha": 32, "dropout": 0.0}`` (the backbone frozen,
  peft adapters on query, key, value and attention.output.dense of every layer, the head
  trained whole: adapters.py). No adapter dropout, as the demo's config.yaml trains LoRA:
  peft's ``lora_dropout`` keeps a dropped-out copy of each adapted layer's input and its
  fp32 mask for the backward pass, 0.4 GB more at the first batch here (with dropout 0.05,
  and peft's adapter sum, LoRA's peak was above full fine-tuning's: ratio 1.11).

Model, data and settings are those of ``training_efficiency.py`` (whose helpers this script
imports): a random-init XLM-R with base-size layers (12 x 768, FFN 3072) built locally, and
NLI-shaped pairs cut from the real English text of the XQuAD sample under tests/real_data
(the MNLI task's head and settings), one epoch of steps x batch size examples by default, so
both methods train on exactly the same examples in the same order. Its embedding matrix
has XLM-R base's 250,002 rows (``--vocab-size``, default), so the model has XLM-R base's
278M parameters, 192M of them in the embeddings: the tokenizer the demo's unigram trainer
learns from those pairs has 1,783 pieces (``BASE`` asks for 8,000), the other rows are never
looked up, but full fine-tuning trains them (dense gradients and AdamW state) as it trains
the unused rows of a real vocabulary. ``--vocab-size 0`` keeps the tokenizer's 1,783 rows:
87.4M parameters, 1.4M in the embeddings (the model of ``training_efficiency.py``). Each method
runs in its own process, timed over its training steps only (the engine's ``throughput``:
dev evaluations excluded).

Peak memory is that process's: ``torch.cuda.max_memory_allocated`` on a GPU; on CPU the
resident set's high-water mark (``ru_maxrss``), which also holds the Python/torch/transformers
runtime, the model's weights and the encoded data, roughly the same for both methods (LoRA
also imports peft, as a real run does), and the heap that glibc's malloc keeps after tensors
are freed. On CPU the memory ratio is therefore one of whole processes, not of training
state alone; the ``before`` column (the high-water mark after the imports, before
``train_phase``) shows the runtime part, and the ratio net of it is printed for information.
The judged ratio is the whole-process one. (The inputs are built in a process of their own:
on Linux a child's ``ru_maxrss`` starts at its parent's high-water mark, which would
otherwise floor both.)

Where the memory goes (CPU, ``--vocab-size 0``, otherwise default settings, measured with the tensors saved for backward
summed by storage and the resident set sampled every 2 ms; "live" = with glibc's mmap
threshold fixed, so that freed tensors leave the resident set):

- both: runtime 0.24 GB, fp32 weights 0.33 GB, data, tokenizer and caches ~0.25 GB;
- activations kept for the backward pass at the first batch (8 x 256 tokens: the engine
  puts the longest batch first): full 2.17 GB, LoRA 1.81 GB. Attention is 1.1 GB of either
  (per layer the softmax output, its fp32 dropout mask and the dropped-out probabilities,
  24 MB each: on CPU, SDPA takes its math path when attention dropout is on), then the GELU
  inputs (0.29 GB), the LayerNorm inputs and hidden-dropout masks. LoRA needs them all:
  adapters sit in every layer, so the backward pass runs through the whole network. What
  it does not keep is what only the frozen weights' gradients need, the inputs of the
  Linear layers (0.50 GB), and it keeps its adapters' inputs instead (0.14 GB);
- training state: full fine-tuning's gradients (0.33 GB, from backward to ``zero_grad``)
  and AdamW moments (0.67 GB, created by the first optimiser step, after the first
  backward); LoRA's 7 MB and 14 MB;
- live peaks: full 3.44 GB (step 7: AdamW state, then a batch of 8 x 235 tokens), LoRA
  2.68 GB (step 1); resident-set peaks 0.6-0.7 GB higher: glibc raises its mmap threshold to
  the size of each freed mapping (up to 32 MB), after which activations come from the heap,
  whose freed holes stay resident. peft's out-of-place adapter sum made that 0.7 GB worse
  for LoRA; adapters.py adds each adapter's output in place (``fuse_adapter_sums``).

So at the 87M size the activations, not the training state, set the peak. LoRA drops
1.0 GB of training state and 0.36 GB of activations, but full fine-tuning's peak holds its
AdamW state only with a shorter batch (its longest one runs before the state exists): LoRA
is at 0.78 of full fine-tuning's live peak and 0.79-0.80 of its resident one (3.3 against
4.1 GB) with ``--vocab-size 0``. Keeping only each block's input
(``--activation-checkpointing``) leaves the training state to set the peak: 0.61. With XLM-R
base's embedding matrix (the default: 278M parameters, 4.4 GB of fp32 weights, gradients
and AdamW moments under full fine-tuning) LoRA is at 0.46. For the backbones LoRA
is for (XLM-R large and up) the frozen model's training state is the bulk.

Prints the device and CPU model, the model's vocabulary and size, per method the trainable
and total parameters, examples/s, real (unpadded) tokens/s and peak memory, the LoRA/full
ratios next to the targets (met / not met), and the loss every 5 steps of each. The last
line of stdout is the numbers as JSON (also written to ``--json FILE`` if given).

    .venv/bin/python benchmarks/lora_vs_full.py [--steps 30] [--batch-size 8] [--activation-checkpointing]
        [--vocab-size 250002] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_efficiency import BASE, LOG_EVERY, REPO, build_inputs, data_map, peak_memory_mb, xstilts_settings

# LoRA without adapter dropout (as the demo config.yaml trains it): peft's dropout keeps a
# dropped-out copy of each adapted layer's input, and its fp32 mask, for the backward pass.
METHODS = {"full": {"name": "full"}, "lora": {"name": "lora", "rank": 16, "alpha": 32, "dropout": 0.0}}
XLMR_BASE_VOCAB = 250002  # xlm-roberta-base's vocabulary: 192M of its 278M parameters
MEMORY_TARGET = 0.7  # LoRA / full peak memory, at most
SPEED_TARGET = 1.0  # LoRA / full examples/s, at least


def widen_vocabulary(encoder_dir: Path, vocab_size: int) -> None:
    """Give the built encoder ``vocab_size`` embedding rows (``--vocab-size``). The new rows are
    initialised as the others (normal, std 0.02) and no token id reaches them, but they are
    trained, with gradients and AdamW state, as the unused rows of a real vocabulary are."""
    import torch
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(encoder_dir)
    if vocab_size < model.config.vocab_size:
        raise SystemExit(f"--vocab-size {vocab_size} is below the tokenizer's {model.config.vocab_size} pieces")
    model.resize_token_embeddings(vocab_size, mean_resizing=False)
    model.save_pretrained(encoder_dir)


def run_method(workdir: Path, args, method: str) -> dict:
    from workflow_scripts.training.recipe import train_phase

    # The settings and data map of training_efficiency.run_xstilts, plus the method.
    settings = xstilts_settings(args).replace(
        method={**METHODS[method], "activation_checkpointing": args.activation_checkpointing}
    )
    data = data_map(workdir)
    log = train_phase(
        "target", workdir / "encoder", data, settings, seed=0, threads=args.threads, output=workdir / f"{method}-out"
    )
    logged = json.loads((workdir / f"{method}-out" / "train_log.json").read_text())
    speed, backbone = logged["throughput"], logged["backbone"]
    return {
        "examples_per_s": speed["examples_per_s"],
        "tokens_per_s": speed["tokens_per_s"],
        "train_seconds": speed["train_seconds"],
        "examples": speed["examples"],
        "tokens": speed["tokens"],
        "trainable_parameters": backbone["trainable_parameters"],
        "parameters": backbone["parameters"],
        "losses": [h["loss"] for h in log["history"]],
        "attention": speed["attention"],
    }


def child(args) -> None:
    import torch
    import transformers  # noqa: F401  (the runtime both methods carry, counted in "before")

    import workflow_scripts.training.recipe  # noqa: F401  (peft: imported by train_phase for LoRA only, as in a real run)

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
    ap.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="both methods recompute activations in backward (as large backbones train): the "
        "peak is then the training state, which LoRA shrinks, not the activations",
    )
    ap.add_argument(
        "--vocab-size",
        type=int,
        default=XLMR_BASE_VOCAB,
        help="embedding rows of the model (default 250002: XLM-R base's embedding matrix and its 278M "
        "parameters, the base-size model the targets are set on; 0: the tokenizer's pieces, 1,783 "
        "for the default 240 pairs)",
    )
    ap.add_argument("--method", choices=METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build_inputs(Path(args.workdir), args.examples or args.steps * args.batch_size)
        if args.vocab_size:
            widen_vocabulary(Path(args.workdir) / "encoder", args.vocab_size)
        return
    if args.method:
        child(args)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Built in a process of its own: a child's ru_maxrss starts at its parent's high-water
        # mark (Linux keeps it across fork and exec), so this process must stay small.
        build = [
            sys.executable,
            __file__,
            "--build",
            "--workdir",
            tmp,
            "--steps",
            str(args.steps),
            "--batch-size",
            str(args.batch_size),
        ] + (["--examples", str(args.examples)] if args.examples else [])
        build += ["--vocab-size", str(args.vocab_size)] if args.vocab_size else []
        proc = subprocess.run(build, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"building the inputs failed:\n{proc.stderr[-3000:]}")
        vocab_size = json.loads((Path(tmp) / "encoder" / "config.json").read_text())["vocab_size"]
        for method in METHODS:
            cmd = [
                sys.executable,
                __file__,
                "--method",
                method,
                "--workdir",
                tmp,
                "--steps",
                str(args.steps),
                "--batch-size",
                str(args.batch_size),
                "--max-length",
                str(args.max_length),
                "--lr",
                str(args.lr),
                "--threads",
                str(args.threads),
            ]
            cmd += ["--activation-checkpointing"] if args.activation_checkpointing else []
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"{method} failed:\n{proc.stderr[-3000:]}")
            results[method] = json.loads(lines[-1][len("RESULT ") :])

    full, lora = results["full"], results["lora"]
    device = full["device"]
    cpu = cpu_model()
    on_cpu = device == "cpu"
    memory_ratio = lora["peak_memory_mb"] / full["peak_memory_mb"]
    speed_ratio = lora["examples_per_s"] / full["examples_per_s"]
    net_ratio = (lora["peak_memory_mb"] - lora["before_training_mb"]) / (
        full["peak_memory_mb"] - full["before_training_mb"]
    )
    memory_met, speed_met = memory_ratio <= MEMORY_TARGET, speed_ratio >= SPEED_TARGET
    memory_kind = "max resident set of the whole process" if on_cpu else "torch.cuda.max_memory_allocated"

    print(f"device: {device}; CPU: {cpu}; {args.threads} threads")
    print(
        f"model: random-init XLM-R, {BASE['num_hidden_layers']} x {BASE['hidden_size']} (base size), "
        f"vocab {vocab_size:,d}, {full['parameters'] / 1e6:.1f}M parameters; batch {args.batch_size}, "
        f"{args.steps} steps, max length "
        f"{args.max_length}, lr {args.lr}, activation checkpointing {'on' if args.activation_checkpointing else 'off'}; "
        f"LoRA r={METHODS['lora']['rank']}, alpha={METHODS['lora']['alpha']}, "
        f"dropout {METHODS['lora']['dropout']}"
    )
    print(f"peak memory: {memory_kind}")
    print(
        f"\n{'method':8s} {'trainable':>12s} {'params':>12s} {'share':>7s} {'examples/s':>10s} {'tokens/s':>9s} "
        f"{'train s':>8s} {'peak GB':>8s} {'before GB':>9s}  attention"
    )
    for name, r in results.items():
        print(
            f"{name:8s} {r['trainable_parameters']:12,d} {r['parameters']:12,d} "
            f"{r['trainable_parameters'] / r['parameters']:7.2%} {r['examples_per_s']:10.2f} "
            f"{r['tokens_per_s']:9.0f} {r['train_seconds']:8.1f} {r['peak_memory_mb'] / 1024:8.2f} "
            f"{r['before_training_mb'] / 1024:9.2f}  {r['attention']}"
        )
    print(f"\nLoRA / full  {'ratio':>6s}  {'target':>7s}")
    print(f"peak memory  {memory_ratio:6.2f}  {'<= ' + str(MEMORY_TARGET):>7s}  {'met' if memory_met else 'not met'}")
    print(f"examples/s   {speed_ratio:6.2f}  {'>= ' + str(SPEED_TARGET):>7s}  {'met' if speed_met else 'not met'}")
    if on_cpu:
        print(
            f"(CPU: the memory ratio is of whole processes. The runtime, {full['before_training_mb'] / 1024:.2f} / "
            f"{lora['before_training_mb'] / 1024:.2f} GB before training, the fp32 weights and the data count in "
            f"both;\n net of the runtime the ratio is {net_ratio:.2f}, for information)"
        )
    print(f"\nmean training loss per {LOG_EVERY} steps")
    for name, r in results.items():
        print(f"{name:8s} " + " ".join(f"{x:6.3f}" for x in r["losses"]))

    summary = {
        "device": device,
        "cpu_model": cpu,
        "threads": args.threads,
        "steps": args.steps,
        "vocab_size": vocab_size,
        "activation_checkpointing": args.activation_checkpointing,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "lr": args.lr,
        "peak_memory_kind": memory_kind,
        "methods": {
            name: {**{k: v for k, v in r.items() if k != "device"}, "settings": METHODS[name]}
            for name, r in results.items()
        },
        "ratios": {
            "peak_memory": memory_ratio,
            "peak_memory_net_of_runtime": net_ratio if on_cpu else None,
            "examples_per_s": speed_ratio,
        },
        "targets": {
            "peak_memory": {"at_most": MEMORY_TARGET, "met": memory_met},
            "examples_per_s": {"at_least": SPEED_TARGET, "met": speed_met},
        },
    }
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
