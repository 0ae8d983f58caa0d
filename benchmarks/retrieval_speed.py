"""Exact k-NN search: xstilts' blocked search vs faiss IndexFlatIP with default settings.

Same L2-normalised random embeddings (seeded), same k. Prints, from one run: the device, each
method's wall time and multiply-add rate, their ratio, whether the neighbours are identical
and the largest score difference; then our rate per block size next to one plain BLAS GEMM of
the same shape (the machine's GEMM speed), to show the block size reaches it. On a machine
with a CUDA GPU the GPU search is measured too.

One more faiss row shows where a slow "faiss default" comes from: IndexFlatIP multiplies by
BLAS only when one search call holds at least ``distance_compute_blas_threshold / dim``
queries (125 at 1,024 dimensions in faiss 1.15); a caller that sends fewer per call gets its
scalar scan, an order of magnitude slower. It runs on a slice of the queries to save time.

    .venv/bin/python benchmarks/retrieval_speed.py [--queries 20000] [--keys 20000] [--dim 1024]
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

from workflow_scripts.neighbours import DEFAULT_BLOCK_BYTES, exact_knn, l2_normalize  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def faiss_flat(queries, keys, k):
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    return index.search(queries, k)


def faiss_flat_small_calls(queries, keys, k, per_call):
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    for b in range(0, len(queries), per_call):
        index.search(queries[b:b + per_call], k)


def main() -> None:
    import faiss
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=20000)
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
    print(f"search: {args.queries} x {args.keys} x {args.dim}, k={args.k} ({giga:.0f} G multiply-adds)")
    (ref_scores, ref_found), faiss_s = timed(lambda: faiss_flat(queries, keys, args.k))
    (scores, found), ours_s = timed(lambda: exact_knn(queries, keys, args.k))
    rows = [("faiss IndexFlatIP (defaults), cpu", faiss_s, ref_found, ref_scores),
            ("xstilts exact_knn, cpu", ours_s, found, scores)]
    if torch.cuda.is_available():
        exact_knn(queries[:256], keys, args.k, dev="cuda")  # warm-up: CUDA context and cuBLAS handles
        (gpu_scores, gpu_found), gpu_s = timed(lambda: exact_knn(queries, keys, args.k, dev="cuda"))
        rows.append(("xstilts exact_knn, cuda", gpu_s, gpu_found, gpu_scores))
    print(f"{'method':40s} {'seconds':>8s} {'G MAC/s':>8s} {'vs faiss':>8s} {'same neighbours':>16s} {'max |score diff|':>17s}")
    for name, seconds, f, s in rows:
        same = float(np.mean(np.all(f == ref_found, axis=1)))
        print(f"{name:40s} {seconds:8.2f} {giga / seconds:8.1f} {faiss_s / seconds:7.2f}x {same:16.4f} "
              f"{float(np.abs(s - ref_scores).max()):17.2e}")

    blas_from = -(-faiss.cvar.distance_compute_blas_threshold // args.dim)
    per_call = max(1, min(100, blas_from - 1))
    few = queries[:min(len(queries), 1000)]
    _, few_s = timed(lambda: faiss_flat_small_calls(few, keys, args.k, per_call))
    few_rate = len(few) * args.keys * args.dim / 1e9 / few_s
    print(f"{f'faiss IndexFlatIP, {per_call} queries per call':40s} {'':8s} {few_rate:8.1f} "
          f"{few_rate / (giga / faiss_s):7.2f}x  (its scan without BLAS: faiss multiplies by BLAS from "
          f"{blas_from} queries per call at dimension {args.dim}; {len(few)} queries timed)")

    sample = queries[:min(len(queries), 4096)]
    print(f"\nblock size sweep on {len(sample)} queries (default {DEFAULT_BLOCK_BYTES >> 20} MiB of scores per block)")
    # The reference GEMM is the one exact_knn calls (the keys' transpose as a view, into a
    # preallocated buffer), best of two so that the BLAS threads' start-up is not counted.
    product = np.empty((len(sample), args.keys), dtype=np.float32)
    gemm_s = min(timed(lambda: np.matmul(sample, keys.T, out=product))[1] for _ in range(2))
    gemm_rate = len(sample) * args.keys * args.dim / 1e9 / gemm_s
    print(f"{'one BLAS GEMM, no top-k':40s} {gemm_rate:8.1f} G MAC/s")
    for mib in (4, 16, 64, 256, 1024):
        _, s = timed(lambda: exact_knn(sample, keys, args.k, block_bytes=mib << 20))
        rate = len(sample) * args.keys * args.dim / 1e9 / s
        print(f"{f'exact_knn, {mib} MiB blocks':40s} {rate:8.1f} G MAC/s ({rate / gemm_rate:.2f} of the GEMM)")
    faiss_rate = giga / faiss_s
    print(f"\nfaiss's default search ran at {faiss_rate / gemm_rate:.2f} of this GEMM: an exact fp32 search on this "
          f"device can be at most {gemm_rate / faiss_rate:.2f}x faster than it")


if __name__ == "__main__":
    main()
