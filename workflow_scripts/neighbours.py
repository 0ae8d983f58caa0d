"""k-nearest-neighbour search by inner product for the retrieval targets (Tatoeba, BUCC).

Exact search is a sequence of matrix products: the queries are cut into blocks so that one
block's score matrix (block rows x all keys, float32) stays under ``block_bytes``, each
block is one GEMM against all keys, then a top-k. On a GPU the keys are copied to the
device once and every block runs there (cuBLAS, full fp32 precision: TF32 is switched off
for the call); on CPU the GEMM is numpy's BLAS into a reused buffer and the top-k is
torch's, which runs on all threads. Results are ordered by score descending, ties by key
index ascending, so they do not depend on the device or the block size.

faiss stays for what exact search cannot do at very large scale: ``index`` may name a
faiss index_factory string ("IVF4096,Flat", "HNSW32", ...), searched with ``nprobe``.
Such an index is approximate; every metric file states which search produced it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from .common import InputError

EXACT = "exact"
# 256 MiB of scores per block: 655 queries against 100k keys. On CPU the rate levels off
# from 64 MiB (benchmarks/retrieval_speed.py prints it per block size, next to one GEMM).
DEFAULT_BLOCK_BYTES = 256 << 20
# Extra candidates taken per row before the (score, index) ordering, so that a tie at the
# k-th place resolves to the lower key index unless more than this many keys share it.
_TIE_SLACK = 8


def knn(queries: np.ndarray, keys: np.ndarray, k: int, dev: Any = None, index: str = EXACT, nprobe: int = 1,
        block_bytes: int = DEFAULT_BLOCK_BYTES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The k best keys of each query by inner product: (scores, key indices), each of shape
    (len(queries), min(k, len(keys)))."""
    queries, keys = _as_matrix(queries, "queries"), _as_matrix(keys, "keys")
    if queries.shape[1] != keys.shape[1]:
        raise InputError(f"queries have dimension {queries.shape[1]}, keys {keys.shape[1]}")
    if k < 1 or len(keys) == 0:
        raise InputError(f"nearest-neighbour search needs k >= 1 and keys, got k={k} and {len(keys)} keys")
    k = min(k, len(keys))
    if index == EXACT:
        return exact_knn(queries, keys, k, dev, block_bytes)
    return faiss_knn(queries, keys, k, index, nprobe, seed)


def exact_knn(queries: np.ndarray, keys: np.ndarray, k: int, dev: Any = None,
              block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    import torch

    dev = torch.device("cpu") if dev is None else torch.device(dev)
    width = min(len(keys), k + _TIE_SLACK)
    block = max(1, block_bytes // (4 * len(keys)))
    scores = np.empty((len(queries), k), dtype=np.float32)
    indices = np.empty((len(queries), k), dtype=np.int64)
    if dev.type == "cpu":
        keys_t = keys.T  # a view: BLAS reads the transpose in place, no copy of the keys (1.6 GB for BUCC de-en)
        buffer = np.empty((min(block, len(queries)), len(keys)), dtype=np.float32)
        for b in range(0, len(queries), block):
            part = buffer[:min(block, len(queries) - b)]
            np.matmul(queries[b:b + block], keys_t, out=part)
            values, found = torch.topk(torch.from_numpy(part), width, dim=1)
            scores[b:b + block], indices[b:b + block] = _ordered(values.numpy(), found.numpy(), k)
        return scores, indices
    with _full_fp32_matmul():
        keys_d = torch.from_numpy(keys).to(dev)
        for b in range(0, len(queries), block):
            part = torch.from_numpy(queries[b:b + block]).to(dev) @ keys_d.T
            values, found = torch.topk(part, width, dim=1)
            scores[b:b + block], indices[b:b + block] = _ordered(values.cpu().numpy(), found.cpu().numpy(), k)
    return scores, indices


def faiss_knn(queries: np.ndarray, keys: np.ndarray, k: int, factory: str, nprobe: int, seed: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Approximate search with a faiss index built from ``factory`` (inner-product metric)."""
    import faiss

    try:
        index = faiss.index_factory(keys.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise InputError(f"retrieval.index {factory!r} is not a faiss index_factory string: {err}") from None
    with contextlib.suppress(RuntimeError):  # only IVF indexes cluster; seed their k-means
        faiss.extract_index_ivf(index).cp.seed = seed
    if not index.is_trained:
        index.train(keys)
    index.add(keys)
    with contextlib.suppress(RuntimeError):  # indexes without probes ignore nprobe
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe)
    scores, indices = index.search(queries, k)
    return scores, indices.astype(np.int64)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    x = np.array(x, dtype=np.float32, copy=True, order="C")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    return x


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise InputError(f"{name} must be a 2-D matrix, got shape {x.shape}")
    return x


def _ordered(values: np.ndarray, found: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best per row, by score descending then key index ascending."""
    order = np.lexsort((found, -values), axis=1)[:, :k]
    return np.take_along_axis(values, order, 1), np.take_along_axis(found, order, 1)


@contextlib.contextmanager
def _full_fp32_matmul():
    import torch

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
