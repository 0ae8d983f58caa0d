"""Exact k-NN search: xstilts' tiled search vs faiss IndexFlatIP with default settings.

Same L2-normalised random embeddings (seeded), same k, one process. Prints, from one run:
the device and each GEMM's rate (numpy's BLAS, oneDNN through torch); each method's wall
time and multiply-add rate and their ratio; how many rows' neighbour lists differ from
faiss's, whether the neighbour sets are the same, and in how many of the differing rows our
order is the float64 order (faiss orders by its fp32 GEMM, ours by the float64 product of
the kept candidates); then our rate per tile size. On a machine with a CUDA GPU the GPU
search is measured too.

Two shapes are worth running: Tatoeba/BUCC-like (the default) and Mewsli-X-like
(``--queries 2048 --keys 1000000 -k 20``: ~1M candidate descriptions, top-20).

    .venv/bin/python benchmarks/retrieval_speed.py [--queries 8000] [--keys 20000] [--dim 1024] [-k 4]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow_scripts.evaluation.neighbours import DEFAULT_BLOCK_BYTES, exact_knn, l2_normalize, tile_shape  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def faiss_flat(queries, keys, k):
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    return index.search(queries, k)


def gemm_rates(queries, keys) -> dict[str, float]:
    """G multiply-adds/s of one (queries x 4,096 keys) product, best of three, per library."""
    import torch

    q, k = queries[:1024], keys[:4096]
    out = np.empty((len(q), len(k)), dtype=np.float32)
    calls = {"numpy BLAS (faiss's kind)": lambda: np.matmul(q, k.T, out=out)}
    if torch.backends.mkldnn.is_available():
        qm, km = torch.from_numpy(q).to_mkldnn(), torch.from_numpy(k).to_mkldnn()
        calls["oneDNN via torch"] = lambda: torch._C._nn.mkldnn_linear(qm, km, None).to_dense()
    rates = {}
    for name, call in calls.items():
        call()
        seconds = min(timed(call)[1] for _ in range(3))
        rates[name] = len(q) * len(k) * q.shape[1] / 1e9 / seconds
    return rates


def agreement(queries, keys, found, ref_found) -> str:
    differing = np.where(~np.all(found == ref_found, axis=1))[0]
    same_sets = all(set(found[r]) == set(ref_found[r]) for r in differing)
    ours_exact = sum(bool(np.all(np.diff(keys[found[r]].astype(np.float64) @ queries[r].astype(np.float64)) <= 0))
                     for r in differing)
    return (f"{len(differing)} rows differ from faiss ({'same sets' if same_sets else 'SETS DIFFER'}; "
            f"ours in float64 order in {ours_exact} of them)")


def main() -> None:
    import faiss
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=8000)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("-k", type=int, default=4)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    queries = l2_normalize(rng.standard_normal((args.queries, args.dim), dtype=np.float32))
    keys = l2_normalize(rng.standard_normal((args.keys, args.dim), dtype=np.float32))
    giga = args.queries * args.keys * args.dim / 1e9  # multiply-adds

    print(f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"{faiss.omp_get_max_threads()} faiss threads; gpu: "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
    for name, rate in gemm_rates(queries, keys).items():
        print(f"GEMM 1024 x 4096 x {args.dim}, {name:28s} {rate:8.1f} G MAC/s")
    print(f"search: {args.queries} x {args.keys} x {args.dim}, k={args.k} ({giga:.0f} G multiply-adds)")
    (ref_scores, ref_found), faiss_s = timed(lambda: faiss_flat(queries, keys, args.k))
    (scores, found), ours_s = timed(lambda: exact_knn(queries, keys, args.k))
    rows = [("faiss IndexFlatIP (defaults), cpu", faiss_s, ref_found, ref_scores),
            ("xstilts exact_knn, cpu", ours_s, found, scores)]
    if torch.cuda.is_available():
        exact_knn(queries[:256], keys, args.k, dev="cuda")  # warm-up: CUDA context and cuBLAS handles
        (gpu_scores, gpu_found), gpu_s = timed(lambda: exact_knn(queries, keys, args.k, dev="cuda"))
        rows.append(("xstilts exact_knn, cuda", gpu_s, gpu_found, gpu_scores))
    print(f"{'method':36s} {'seconds':>8s} {'G MAC/s':>8s} {'vs faiss':>8s} {'max |score diff|':>17s}  neighbours")
    for name, seconds, f, s in rows:
        print(f"{name:36s} {seconds:8.2f} {giga / seconds:8.1f} {faiss_s / seconds:7.2f}x "
              f"{float(np.abs(s - ref_scores).max()):17.2e}  {agreement(queries, keys, f, ref_found)}")

    sample = queries[:min(len(queries), 4096)]
    print(f"\ntile size sweep on {len(sample)} queries (default {DEFAULT_BLOCK_BYTES >> 20} MiB of scores per tile)")
    for mib in (4, 16, 64, 256):
        _, s = timed(lambda: exact_knn(sample, keys, args.k, block_bytes=mib << 20))
        shape = tile_shape(len(sample), len(keys), mib << 20, args.k + 8)
        rate = len(sample) * args.keys * args.dim / 1e9 / s
        print(f"{f'exact_knn, {mib} MiB tiles {shape[0]} x {shape[1]}':40s} {rate:8.1f} G MAC/s")


if __name__ == "__main__":
    main()
