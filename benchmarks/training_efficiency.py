"""Training throughput and memory: the xstilts engine vs the HF Trainer, side by side.

Same model (a base-size, 12-layer, 768-wide random-init XLM-R built locally), same data, batch
size, learning-rate schedule and number of steps for every engine:

- xstilts: ``recipe.train_phase`` (length-grouped batches, dynamic padding);
- HF Trainer with its defaults (shuffled batches, ``DataCollatorWithPadding``: dynamic padding);
- HF Trainer with length grouping (``group_by_length=True`` before transformers 5,
  ``train_sampling_strategy="group_by_length"`` now: what a careful user switches on).

Data: NLI-shaped pairs cut from real English text (the XQuAD sample under tests/real_data:
premise one or two consecutive sentences, hypothesis one sentence of the same paragraph,
seeded random labels), so the lengths vary as in MNLI rather than as in the demo's
synthetic sentences. By default the run is one epoch (steps x batch size examples), so every
engine trains on exactly the same examples, each in its own batches. Each engine runs in its own process (peak memory is that process's:
resident set on CPU, ``max_memory_allocated`` on a GPU), timed over its training steps
only. Prints the device, examples/s, real (unpadded) tokens/s, padding share and peak memory
per engine, the ratios to both Trainers, and the loss every 5 steps of each.

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python benchmarks/training_efficiency.py [--steps 30] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BASE = {
    "vocab_size": 8000,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 514,
}
LOG_EVERY = 5
ENGINES = ("xstilts", "trainer", "trainer_group_by_length")


def build_inputs(workdir: Path, examples: int, build_encoder: bool = True) -> None:
    """The NLI-shaped pairs (train and a small dev file) and (``build_encoder``) the base-size encoder."""
    import pyarrow.parquet as pq

    from workflow_scripts.data.prepare import to_table
    from workflow_scripts.models.demo_models import build_demo_encoder
    from workflow_scripts.spec.model_settings import DemoEncoder
    from workflow_scripts.spec.tasks import get_task

    paragraphs = [
        p["context"]
        for a in json.loads((REPO / "tests/real_data/xquad/xquad.en.json").read_text())["data"]
        for p in a["paragraphs"]
    ]
    sentences = [re.split(r"(?<=[.!?])\s+", p) for p in paragraphs]
    rng = random.Random(0)
    rows = []
    for k in range(examples):
        para = rng.choice([s for s in sentences if len(s) >= 3])
        start = rng.randrange(len(para) - 1)
        premise = " ".join(para[start : start + rng.choice((1, 2))])
        rows.append(
            {"id": f"pair-{k}", "lang": "en", "text_a": premise, "text_b": rng.choice(para), "label": rng.randrange(3)}
        )
    task = get_task("mnli")
    pq.write_table(to_table(task, rows), workdir / "train.parquet")
    pq.write_table(to_table(task, rows[:16]), workdir / "dev.parquet")
    if build_encoder:
        settings = DemoEncoder.defaults().replace(**BASE, seed=0)  # no corpora: not pre-trained
        build_demo_encoder(settings, [str(workdir / "train.parquet")], workdir / "encoder")


def peak_memory_mb(dev) -> float:
    import torch

    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def xstilts_settings(args):
    """The phase settings (spec/phase_settings.PhaseSettings) of an xstilts run over the
    benchmark's pairs, full fine-tuning at the schema's precision (shared by the benchmarks
    that time the engine)."""
    from workflow_scripts.spec.method import MethodSettings
    from workflow_scripts.spec.phase_settings import PhaseSettings

    settings = {
        "dropout": 0.1,
        "dev_examples": 8,
        "eval_batch_size": 16,
        "eval_every": LOG_EVERY,
        "learning_rate": args.lr,
        "max_grad_norm": 1.0,
        "max_micro_batch": args.batch_size,
        "multitask_cap": 2**17,
        "multitask_epochs": 1,
        "patience": 10**6,
        "warmup_ratio": 0.1,
        "weight_decay": 0.0,
        "max_steps": args.steps,
        "tasks": {
            "mnli": {
                "batch_size": args.batch_size,
                "epochs": 100,
                "max_length": args.max_length,
                "select_language": "en",
            }
        },
        "method": MethodSettings(),
    }
    return PhaseSettings.parse(settings, "xstilts_settings")


def data_map(workdir: Path) -> dict:
    return {"mnli": {"train": str(workdir / "train.parquet"), "dev": str(workdir / "dev.parquet")}}


def run_xstilts(workdir: Path, args, dev) -> dict:
    from workflow_scripts.training.recipe import train_phase

    settings, data = xstilts_settings(args), data_map(workdir)
    log = train_phase(
        "intermediate",
        workdir / "encoder",
        data,
        settings,
        seed=0,
        threads=args.threads,
        output=workdir / "xstilts-out",
    )
    speed = log["throughput"]
    return {
        "seconds": speed["train_seconds"],
        "examples": speed["examples"],
        "tokens": speed["tokens"],
        "padded_tokens": speed["padded_tokens"],
        "losses": [h["loss"] for h in log["history"]],
        "attention": speed["attention"],
    }


def run_trainer(workdir: Path, args, dev, group_by_length: bool) -> dict:
    import torch
    from transformers import (
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        XLMRobertaForSequenceClassification,
    )

    from workflow_scripts.data.prepare import read_table

    tokenizer = AutoTokenizer.from_pretrained(workdir / "encoder")
    rows = read_table(workdir / "train.parquet").to_pylist()
    enc = tokenizer(
        [r["text_a"] for r in rows], [r["text_b"] for r in rows], truncation=True, max_length=args.max_length
    )
    dataset = [{"input_ids": ids, "labels": r["label"]} for ids, r in zip(enc["input_ids"], rows)]
    counts = {"examples": 0, "tokens": 0, "padded_tokens": 0}
    collator = DataCollatorWithPadding(tokenizer)

    def counting_collator(features):
        batch = collator(features)
        counts["examples"] += len(features)
        counts["tokens"] += int(batch["attention_mask"].sum())
        counts["padded_tokens"] += batch["attention_mask"].numel()
        return batch

    class StepClock(TrainerCallback):
        start = end = None

        def on_step_begin(self, targs, state, control, **kw):
            if self.start is None:
                self.start = time.perf_counter()

        def on_train_end(self, targs, state, control, **kw):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            self.end = time.perf_counter()

    clock = StepClock()
    model = XLMRobertaForSequenceClassification.from_pretrained(workdir / "encoder", num_labels=3)
    targs = TrainingArguments(
        output_dir=str(workdir / "hf"),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=args.lr,
        warmup_steps=int(0.1 * args.steps),
        logging_steps=LOG_EVERY,
        report_to=[],
        save_strategy="no",
        seed=0,
        use_cpu=dev.type == "cpu",
        bf16=dev.type == "cuda" and torch.cuda.is_bf16_supported(),
        train_sampling_strategy="group_by_length" if group_by_length else "random",
        dataloader_num_workers=0,
    )
    torch.set_num_threads(args.threads)
    trainer = Trainer(
        model=model, args=targs, train_dataset=dataset, data_collator=counting_collator, callbacks=[clock]
    )
    trainer.train()
    return {
        "seconds": clock.end - clock.start,
        **counts,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "attention": model.config._attn_implementation,
    }


def child(args) -> None:
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workdir = Path(args.workdir)
    if args.engine == "xstilts":
        result = run_xstilts(workdir, args, dev)
    else:
        result = run_trainer(workdir, args, dev, group_by_length=args.engine == "trainer_group_by_length")
    result["peak_memory_mb"] = peak_memory_mb(dev)
    result["device"] = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print("RESULT " + json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument(
        "--examples",
        type=int,
        help="default: steps x batch size, one epoch, so every engine "
        "trains on exactly the same examples (in its own order)",
    )
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine:
        child(args)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        build_inputs(Path(tmp), args.examples or args.steps * args.batch_size)
        for engine in ENGINES:
            cmd = [
                sys.executable,
                __file__,
                "--engine",
                engine,
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
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"{engine} failed:\n{proc.stderr[-3000:]}")
            results[engine] = json.loads(lines[-1][len("RESULT ") :])

    device = results["xstilts"]["device"]
    print(
        f"device: {device}, {args.threads} threads; base-size XLM-R (12 x 768), batch {args.batch_size}, "
        f"{args.steps} steps, lr {args.lr}"
    )
    print(
        f"{'engine':26s} {'examples/s':>10s} {'tokens/s':>9s} {'padding':>8s} {'peak MB':>8s} "
        f"{'vs Trainer':>10s} {'vs grouped':>10s}  attention"
    )
    ref, grouped = results["trainer"], results["trainer_group_by_length"]
    for name, r in results.items():
        rate = r["examples"] / r["seconds"]
        print(
            f"{name:26s} {rate:10.2f} {r['tokens'] / r['seconds']:9.0f} "
            f"{1 - r['tokens'] / r['padded_tokens']:8.3f} {r['peak_memory_mb']:8.0f} "
            f"{rate / (ref['examples'] / ref['seconds']):9.2f}x {rate / (grouped['examples'] / grouped['seconds']):9.2f}x"
            f"  {r['attention']}"
        )
    print(f"\nmean training loss per {LOG_EVERY} steps")
    for name, r in results.items():
        print(f"{name:26s} " + " ".join(f"{x:6.3f}" for x in r["losses"]))


if __name__ == "__main__":
    main()
