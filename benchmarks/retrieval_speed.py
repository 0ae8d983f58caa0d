"""Exact k-NN by inner product: the search the pipeline uses against faiss IndexFlatIP with
its defaults (the reference's engine), the own tiled search beside them.

One run prints the machine (CPU model, threads, GPU), then per method: the median wall time
over ``--rounds`` interleaved rounds (every method once per round, so a drift of the
machine's speed hits all of them), the multiply-add rate, the time ratio to faiss
(median and range over the rounds, faiss's time / the method's), and whether its neighbours,
in order, and its scores are faiss's bit for bit. Queries and keys are random and
L2-normalised; ``--tied`` queries lie near a key that is copied, bit for bit, to three other
positions (as Mewsli-X's pool repeats entity descriptions), so their top k holds exact ties
whose order faiss decides. On a machine with a CUDA GPU the GPU search is measured too.

    .venv/bin/python benchmarks/retrieval_speed.py [--queries 8000] [--keys 20000] [--dim 1024] [-k 4]
        [--rounds 3] [--tied 64] [--no-own]

Shapes worth running: BUCC-like (the default), Tatoeba-like (``--queries 1000 --keys 1000
-k 1``), LAReQA-like (``--queries 1190 --keys 13090 --dim 768 -k 20``) and Mewsli-X-like,
one language's test mentions against the whole pool (``--queries 1330 --keys 1000000 -k 20
--no-own``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow_scripts.evaluation.neighbours import device_knn, knn, l2_normalize  # noqa: E402

Search = Callable[[], tuple[np.ndarray, np.ndarray]]


def cpu_model() -> str:
    """The CPU's model name as lscpu prints it."""
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def with_tied_neighbours(
    queries: np.ndarray, keys: np.ndarray, n_tied: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n_tied`` queries moved near a key each, that key copied to three other
    positions: each such query's best keys include four bit-identical ones."""
    queries, keys = queries.copy(), keys.copy()
    for row in range(min(n_tied, len(queries))):
        source, *copies = rng.choice(len(keys), 4, replace=False)
        keys[copies] = keys[source]
        queries[row] = keys[source] + 0.5 * queries[row]
    return l2_normalize(queries), keys


def faiss_index_flat_ip(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """What the reference runs: an IndexFlatIP with faiss's defaults, filled and searched."""
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    return index.search(queries, k)


def timed_rounds(methods: dict[str, Search], rounds: int) -> tuple[dict[str, list[float]], dict[str, tuple]]:
    """Each method's wall time per round, methods in turn within a round (in reverse order
    every other round, so that none always runs right after the same other), after one
    untimed warm-up round; and each method's result."""
    results = {name: search() for name, search in methods.items()}
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    for round_ in range(rounds):
        for name in list(methods)[:: -1 if round_ % 2 else 1]:
            start = time.perf_counter()
            methods[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds, results


def agreement(result: tuple[np.ndarray, np.ndarray], reference: tuple[np.ndarray, np.ndarray]) -> str:
    """How a method's (scores, neighbours) compare with faiss's."""
    scores, found = result
    ref_scores, ref_found = reference
    differing = int((found != ref_found).any(axis=1).sum())
    if differing == 0:
        same_scores = (
            "scores identical"
            if np.array_equal(scores, ref_scores)
            else f"max |score diff| {float(np.abs(scores - ref_scores).max()):.1e}"
        )
        return f"identical, ties included; {same_scores}"
    same_sets = all(set(found[r]) == set(ref_found[r]) for r in np.flatnonzero((found != ref_found).any(axis=1)))
    return f"{differing} rows differ ({'same sets, other order' if same_sets else 'other neighbours'})"


def main() -> None:
    import faiss
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=8000)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tied", type=int, default=64, help="queries whose top k holds four bit-identical keys")
    ap.add_argument("--no-own", action="store_true", help="leave the own tiled search on CPU out (slow at 1M keys)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    queries = l2_normalize(rng.standard_normal((args.queries, args.dim), dtype=np.float32))
    keys = l2_normalize(rng.standard_normal((args.keys, args.dim), dtype=np.float32))
    queries, keys = with_tied_neighbours(queries, keys, args.tied, rng)
    giga = args.queries * args.keys * args.dim / 1e9  # multiply-adds
    k = args.k
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(
        f"cpu: {cpu_model()}, {torch.get_num_threads()} torch threads, {faiss.omp_get_max_threads()} faiss "
        f"threads; faiss {faiss.__version__}, torch {torch.__version__}; gpu: {gpu}"
    )
    print(
        f"search: {args.queries} x {args.keys} x {args.dim}, k={k} ({giga:.0f} G multiply-adds), "
        f"{min(args.tied, args.queries)} queries with exact ties; median of {args.rounds} interleaved rounds"
    )

    reference = "faiss IndexFlatIP (defaults), cpu"
    methods: dict[str, Search] = {
        reference: lambda: faiss_index_flat_ip(queries, keys, k),
        "pipeline: neighbours.knn, cpu": lambda: knn(queries, keys, k),
    }
    if not args.no_own:
        methods["own tiled search (device_knn), cpu"] = lambda: device_knn(queries, keys, k, "cpu")
    if torch.cuda.is_available():
        device_knn(queries[:256], keys, k, "cuda")  # CUDA context and cuBLAS handles, outside the timing
        methods["pipeline on a GPU: device_knn, cuda"] = lambda: knn(queries, keys, k, dev="cuda")
    seconds, results = timed_rounds(methods, args.rounds)

    print(
        f"{'method':40s} {'seconds':>8s} {'G MAC/s':>8s} {'vs faiss':>9s} {'(range)':>13s}  "
        "neighbours and scores vs faiss"
    )
    for name, times in seconds.items():
        ratios = [faiss_s / s for faiss_s, s in zip(seconds[reference], times)]
        median = statistics.median(times)
        print(
            f"{name:40s} {median:8.3f} {giga / median:8.1f} {statistics.median(ratios):8.2f}x "
            f"{f'{min(ratios):.2f}-{max(ratios):.2f}':>13s}  {agreement(results[name], results[reference])}"
        )


if __name__ == "__main__":
    main()
