"""k-nearest-neighbour search by inner product for the retrieval targets (Tatoeba, BUCC).

Exact search is a sequence of matrix products: the queries are cut into blocks so that one
block's score matrix (block rows x all keys, float32) stays under ``block_bytes``, each
block is one GEMM against all keys, then a top-k. On a GPU the keys are copied to the
device once and every block runs there (cuBLAS, full fp32 precision: TF32 is switched off
for the call); on CPU the GEMM is numpy's BLAS into a reused buffer and the top-k is
torch's, which runs on all threads. Results are ordered by score descending, ties by key
index ascending, so they do not depend on the device or the block size. Bit-identical key
vectors (the same entity description twice in a pool) are searched once and expanded to
all their indices, lowest first: their scores are then equal by construction, where a
blocked GEMM may give two copies scores 1 ulp apart depending on their column position.

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
        groups = duplicate_groups(keys)
        if groups is None:
            return exact_knn(queries, keys, k, dev, block_bytes)
        representatives, members = groups
        scores, found = exact_knn(queries, keys[representatives], min(k, len(representatives)), dev, block_bytes)
        return _expanded(scores, found, members, k)
    return faiss_knn(queries, keys, k, index, nprobe, seed)


def duplicate_groups(keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """None when every key vector is distinct (bit for bit); else the index of each distinct
    vector's first occurrence (ascending) and, for each, all its indices (ascending).

    A 64-bit hash of every row (one integer pass over the keys) settles the common case of
    no duplicates; only otherwise are the rows compared byte for byte."""
    keys = np.ascontiguousarray(keys)
    multipliers = np.random.default_rng(0).integers(1, 2**63, size=keys.shape[1], dtype=np.uint64) | np.uint64(1)
    hashes = np.empty(len(keys), dtype=np.uint64)
    for b in range(0, len(keys), 1 << 14):  # in slices: a uint64 copy of 1M x 1024 keys would be 8 GB
        with np.errstate(over="ignore"):
            hashes[b:b + (1 << 14)] = (keys[b:b + (1 << 14)].view(np.uint32).astype(np.uint64) * multipliers).sum(axis=1)
    if len(np.unique(hashes)) == len(keys):
        return None
    rows = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.dtype.itemsize * keys.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    if len(first) == len(keys):
        return None
    order = np.argsort(first, kind="stable")  # distinct vectors by their first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group_of = rank[inverse.ravel()]
    members = [[] for _ in range(len(first))]
    for index, group in enumerate(group_of.tolist()):
        members[group].append(index)
    return first[order], [np.array(m, dtype=np.int64) for m in members]


def _expanded(scores: np.ndarray, found: np.ndarray, members: list[np.ndarray], k: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Results over distinct vectors expanded to every index carrying them, ordered by score
    descending then index ascending, cut to k."""
    out_scores = np.empty((len(found), k), dtype=np.float32)
    out_found = np.empty((len(found), k), dtype=np.int64)
    for row in range(len(found)):
        indices = np.concatenate([members[g] for g in found[row]])
        values = np.concatenate([np.full(len(members[g]), scores[row, j], dtype=np.float32)
                                 for j, g in enumerate(found[row])])
        order = np.lexsort((indices, -values))[:k]
        out_scores[row], out_found[row] = values[order], indices[order]
    return out_scores, out_found


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
