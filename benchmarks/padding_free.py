"""Padding-free batches against padded ones (workflow_scripts/models/packing.py), side by side
in one run: an encoder's evaluation forwards and its training steps on the same long-tailed
batch, real tokens per second each way, their ratio, the padded share of the padded batch,
and the largest difference between the two ways' logits.

The batch's lengths follow a long tail (log-normal, median a quarter of ``--max-length``,
clipped to [8, max-length]), as MNLI's and SQuAD's do. The encoder is XLM-R-shaped, random
init, without dropout inside it, so that both ways compute the same numbers. On a GPU in
bf16 the packed attention is torch's varlen FlashAttention kernel; on a CPU it runs sequence
by sequence, which measures the bookkeeping, not the GPU's gain.

    python benchmarks/padding_free.py [--layers 24 --width 1024 --heads 16 --ffn 4096]
        [--rows 64] [--max-length 256] [--precision bf16] [--steps 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

WAYS = ("padded", "packed")


def long_tailed_lengths(rows: int, max_length: int, seed: int = 0) -> list[int]:
    """``rows`` sequence lengths, log-normal around max_length / 4, within [8, max_length]."""
    import numpy as np

    drawn = np.random.default_rng(seed).lognormal(np.log(max_length / 4), 0.6, rows)
    return [int(n) for n in np.clip(drawn, 8, max_length)]


def features(lengths: list[int], vocab: int, seed: int = 0) -> list[dict[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(5, vocab, n).tolist(), "labels": int(rng.integers(0, 3))} for n in lengths]


def measure(way: str, model_dir: Path, feats, mode: str, precision: str, dev, steps: int) -> dict[str, Any]:
    """One way's tokens/s over ``steps`` calls (after one warm-up) and its last logits."""
    import gpu_check
    import step_ops
    import torch

    from workflow_scripts.data.features import collate
    from workflow_scripts.models import compiled, packing
    from workflow_scripts.models.heads import forward
    from workflow_scripts.precision import Precision

    torch.manual_seed(0)  # the same fresh head both ways
    model, method = gpu_check.build_model(model_dir, "encoder", {"name": "full", "precision": precision}, dev)
    packed = packing.configure(model, "always" if way == "packed" else "never", dev.type, precision, mode == "train")
    engine = compiled.configure("never", dev.type, packing=packed)
    cpu_batch = collate(feats, "classification", pad_id=1, pack=engine.pack)
    batch = {k: v.to(dev) for k, v in cpu_batch.items()}
    tokens, computed = packing.positions(cpu_batch)
    if mode == "train":
        run_once = step_ops.engine_step(model, method, batch, dev)
    else:
        model.eval()

        def run_once():
            with torch.no_grad(), Precision(precision).autocast(dev):
                logits, _ = forward(model, "classification", "nli", {k: v for k, v in batch.items() if k != "labels"})
            return logits.float().cpu()

    seconds, last = gpu_check.timed(run_once, dev, warmup=1, steps=steps)
    return {
        "way": way,
        "mode": mode,
        "tokens_per_s": tokens * steps / seconds,
        "ms_per_call": 1000 * seconds / steps,
        "padding_share": 1 - tokens / computed,
        "attention": packed.reason,
        "logits": last if mode == "inference" else None,
    }


def compare(model_dir: Path, feats, precision: str, dev, steps: int) -> list[dict[str, Any]]:
    """Padded and packed rows of evaluation and training, with a ratio row for each mode."""
    rows = []
    for mode in ("inference", "train"):
        pair = [measure(way, model_dir, feats, mode, precision, dev, steps) for way in WAYS]
        difference = None
        if mode == "inference":
            difference = float((pair[0]["logits"] - pair[1]["logits"]).abs().max())
        rows += [{k: v for k, v in row.items() if k != "logits"} for row in pair]
        rows.append(
            {
                "way": "packed / padded",
                "mode": mode,
                "tokens_per_s": pair[1]["tokens_per_s"] / pair[0]["tokens_per_s"],
                "max_logit_difference": difference,
            }
        )
    return rows


def run(shape: dict[str, Any], rows: int, max_length: int, precision: str, dev, steps: int) -> list[dict[str, Any]]:
    import gpu_check

    shape = {**shape, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    feats = features(long_tailed_lengths(rows, max_length), shape["vocab_size"])
    with tempfile.TemporaryDirectory(prefix="xstilts-padding-free-") as tmp:
        gpu_check.save_backbone("encoder", shape, Path(tmp) / "encoder", dev)
        return compare(Path(tmp) / "encoder", feats, precision, dev, steps)


def main(argv: list[str] | None = None) -> int:
    import step_ops

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    step_ops.add_encoder_arguments(ap, layers=4, width=256, heads=4, ffn=1024)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args(argv)
    dev = step_ops.set_up_device(args.threads)
    shape = step_ops.encoder_shape(args)
    table = run(shape, args.rows, args.max_length, args.precision, dev, args.steps)
    print(
        f"# {args.rows} sequences up to {args.max_length} tokens (long-tailed), {args.layers} layers x "
        f"{args.width} wide, {args.precision}, on {dev.type}"
    )
    keys = ("tokens_per_s", "ms_per_call", "padding_share", "max_logit_difference")
    print("| mode | way | " + " | ".join(keys) + " |")
    print("|---|---|" + "---:|" * len(keys))
    for row in table:
        cells = " | ".join("–" if row.get(k) is None else f"{row[k]:,.4g}" for k in keys)
        print(f"| {row['mode']} | {row['way']} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
