"""Training efficiency on CPU: padding share and throughput, ours vs a plain HF Trainer.

Prints, for the demo MNLI data and a base-size (12-layer, 768-wide) random-init XLM-R
encoder: the share of padding tokens with length-grouped dynamic padding vs fixed
max-length padding, and training throughput (examples/s) of the xstilts engine vs
`transformers.Trainer` on the same model, data, batch size and number of steps, as ratios
measured in one run.

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python benchmarks/training_efficiency.py [--steps 30] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow_scripts.data import prepare, read_table  # noqa: E402
from workflow_scripts.features import collate, encode, length_grouped_batches  # noqa: E402
from workflow_scripts.models import build_demo_encoder  # noqa: E402
from workflow_scripts.tasks import get_task  # noqa: E402
from workflow_scripts.train import train_phase  # noqa: E402

BASE = {"vocab_size": 2000, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "max_position_embeddings": 514}


def padding_share(batches, features, pad_id, fixed: int | None = None) -> float:
    real = total = 0
    for b in batches:
        feats = [features[k] for k in b]
        mask = collate(feats, "classification", pad_id)["attention_mask"]
        real += int(mask.sum())
        total += len(feats) * fixed if fixed else mask.numel()
    return 1 - real / total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args()
    import torch
    from transformers import (AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments,
                              XLMRobertaForSequenceClassification)

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        settings = {"source": "local", "local_root": str(REPO / "demo/hub"), "hub": {"path": "nyu-mll/glue"}}
        prepare("mnli", "train", settings, tmp / "train.parquet")
        prepare("mnli", "dev", settings, tmp / "dev.parquet")
        build_demo_encoder(BASE, [str(tmp / "train.parquet")], tmp / "encoder")
        tokenizer = AutoTokenizer.from_pretrained(tmp / "encoder")
        rows = read_table(tmp / "train.parquet").to_pylist()
        enc = encode(get_task("mnli"), tokenizer, rows, {"max_length": args.max_length}, train=True)
        grouped = length_grouped_batches(enc.features, args.batch_size, random.Random(0))
        order = list(range(len(enc.features)))
        random.Random(0).shuffle(order)
        plain = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
        pad_grouped = padding_share(grouped, enc.features, tokenizer.pad_token_id)
        pad_dynamic = padding_share(plain, enc.features, tokenizer.pad_token_id)
        pad_fixed = padding_share(plain, enc.features, tokenizer.pad_token_id, fixed=args.max_length)

        phase = {"dropout": 0.1, "dev_examples": 1, "eval_batch_size": 64, "eval_every": 10 ** 9,
                 "learning_rate": 1e-5, "max_grad_norm": 1.0, "max_micro_batch": args.batch_size,
                 "multitask_cap": 2 ** 17, "multitask_epochs": 1, "patience": 30, "warmup_ratio": 0.1,
                 "weight_decay": 0.0, "max_steps": args.steps,
                 "tasks": {"mnli": {"batch_size": args.batch_size, "epochs": 100, "max_length": args.max_length,
                                    "select_language": "en"}}}
        data = {"mnli": {"train": str(tmp / "train.parquet"), "dev": str(tmp / "dev.parquet")}}
        # Our step includes loading, encoding and saving: time a 1-step run too and take the
        # difference, so both sides are measured on the training loop alone.
        elapsed = {}
        for steps in (1, args.steps):
            start = time.perf_counter()
            train_phase("intermediate", tmp / "encoder", data, {**phase, "max_steps": steps}, seed=0, threads=2,
                        output=tmp / f"ours{steps}")
            elapsed[steps] = time.perf_counter() - start
        ours = (args.steps - 1) * args.batch_size / (elapsed[args.steps] - elapsed[1])

        model = XLMRobertaForSequenceClassification.from_pretrained(tmp / "encoder", num_labels=3)
        train_ds = [{"input_ids": f["input_ids"], "labels": f["labels"]} for f in enc.features]
        targs = TrainingArguments(output_dir=str(tmp / "hf"), per_device_train_batch_size=args.batch_size,
                                  max_steps=args.steps, learning_rate=1e-5, warmup_steps=max(1, args.steps // 10),
                                  report_to=[],
                                  save_strategy="no", logging_strategy="no", use_cpu=True, seed=0,
                                  dataloader_num_workers=0)
        trainer = Trainer(model=model, args=targs, train_dataset=train_ds,
                          data_collator=DataCollatorWithPadding(tokenizer))
        start = time.perf_counter()
        trainer.train()
        hf = args.steps * args.batch_size / (time.perf_counter() - start)

    print(f"padding share, length-grouped dynamic padding   {pad_grouped:.3f}")
    print(f"padding share, shuffled dynamic padding          {pad_dynamic:.3f}")
    print(f"padding share, fixed max-length ({args.max_length}) padding     {pad_fixed:.3f}")
    print(f"ratio grouped / fixed padding share              {pad_grouped / pad_fixed:.3f}")
    print(f"throughput xstilts engine   {ours:8.2f} examples/s (training loop)")
    print(f"throughput HF Trainer       {hf:8.2f} examples/s (trainer.train())")
    print(f"ratio xstilts / HF Trainer  {ours / hf:.2f}")


if __name__ == "__main__":
    main()
