"""Translation throughput of the xstilts step vs a naive one-sentence-at-a-time loop.

Same MarianMT model (a random-init Marian of OPUS-MT's width, built locally, since the real
OPUS-MT weights are not reachable here), same inputs (the texts of the demo SQuAD split,
whose contexts repeat across questions) and the same decoding settings. Prints sentences/s
for both and their ratio from one run, then the cache hit rate of a rerun.

    .venv/bin/python benchmarks/translation_throughput.py [--examples 120]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow_scripts.data import prepare, read_table  # noqa: E402
from workflow_scripts.models import build_demo_translator  # noqa: E402
from workflow_scripts.translate import MarianTranslator  # noqa: E402

SETTINGS = {"batch_size": 32, "num_beams": 1, "max_new_tokens": 40, "max_fuzzy_distance": 10}
MODEL = {"vocab_size": 2000, "d_model": 512, "layers": 2, "heads": 8, "ffn_dim": 2048, "max_position_embeddings": 256}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=120)
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        prepare("squad", "train", {"source": "local", "local_root": str(REPO / "demo/hub"),
                                   "hub": {"path": "rajpurkar/squad"}}, tmp / "squad.parquet")
        build_demo_translator(MODEL, [str(tmp / "squad.parquet")], "de", tmp / "mt")
        rows = read_table(tmp / "squad.parquet").to_pylist()[:args.examples]
        texts = [r["question"] for r in rows] + [r["context"] for r in rows]
        ours = MarianTranslator(tmp / "mt", SETTINGS, torch.device("cpu"), tmp / "cache.sqlite")
        sentences = [s for t in texts for s in ours._segments(t)]

        start = time.perf_counter()
        ours(texts)
        ours_s = time.perf_counter() - start

        tok, model = ours.tokenizer, ours.model
        start = time.perf_counter()
        with torch.inference_mode():
            for sentence in sentences:  # the naive loop: every sentence, one generate call each
                enc = tok([sentence], return_tensors="pt", truncation=True, max_length=ours.limit)
                model.generate(**enc, num_beams=SETTINGS["num_beams"], max_new_tokens=SETTINGS["max_new_tokens"])
        naive_s = time.perf_counter() - start

        rerun = MarianTranslator(tmp / "mt", SETTINGS, torch.device("cpu"), tmp / "cache.sqlite")
        rerun(texts)
        hit_rate = rerun.counts["segments_from_cache"] / rerun.counts["segments_requested"]

    n = len(sentences)
    print(f"sentences (with repeats)         {n}")
    print(f"unique sentences                 {ours.counts['segments_requested']}")
    print(f"xstilts step                     {n / ours_s:8.1f} sentences/s")
    print(f"naive one-at-a-time loop         {n / naive_s:8.1f} sentences/s")
    print(f"ratio xstilts / naive            {naive_s / ours_s:.2f}")
    print(f"cache hit rate on a rerun        {hit_rate:.3f}")


if __name__ == "__main__":
    main()
