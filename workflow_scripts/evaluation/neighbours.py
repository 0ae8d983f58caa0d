"""k-nearest-neighbour search by inner product for the retrieval targets (Tatoeba, BUCC) and
the ranking targets (Mewsli-X, LAReQA).

On CPU, exact search is faiss's exhaustive inner-product search (``faiss.knn``), the function
``IndexFlatIP.search`` runs: XTREME-R's Mewsli-X evaluation and XTREME's BUCC miner search an
``IndexFlatIP``. It runs on the caller's arrays (an index would copy the keys: 4 GB at 1M x
1,024) with faiss's own GEMM blocks, so on one machine at one thread count the scores,
neighbours and tie order are ``IndexFlatIP``'s, bit for bit (benchmarks/retrieval_speed.py
checks it on every run; tests/test_neighbours.py too). The blocks are never widened: on some
CPUs (AMD EPYC with AVX-512 is one) the BLAS kernel gives a product a different last bit
depending on where its key falls in the block, and on the thread count, so a wider block
would move scores by an ulp and swap near-tied neighbours. Across machines and thread counts
faiss itself is exact only to that ulp; tables are reproducible on one machine at one
thread count (the job's ``threads``).

faiss's tie rule (faiss 1.15.1, 1 < k < 100; ``faiss_kept`` restates it): keys are read in
index order; a key joins a query's best k only when its score is strictly above the lowest
kept score, and the entry it evicts is the lowest kept score, of equal ones the lowest key
index; the k are returned by score descending, equal scores highest index first. So
bit-identical candidates (the same entity description twice in Mewsli-X's pool) come out
highest index first, and at the k-th place the copies kept are the highest-indexed of those
read before k keys scored as high. At k = 1 the first best key read wins, except where
faiss scans GEMM blocks with SIMD (queries x dimension >= 128,000): of equal scores within
one block of 1,024 keys, the one in the lowest SIMD lane wins (key index mod 16 with
AVX-512).

On any other torch device (a CUDA GPU) the search is xstilts' own, ``tiled_knn``: tiles of
the score matrix, one fp32 GEMM each (cuBLAS; TF32 off), a running top k + slack per query,
float64 rescoring where float32 rounding could decide the order. Bit-identical keys are
searched once and expanded, then put in faiss's tie order, so exact ties come out as on CPU.
Two distinct keys whose scores lie within float32 rounding of each other are ordered by
their float64 product there, by faiss's float32 GEMM on CPU; and at k = 1 the device takes
the lowest-indexed of equal best keys, whatever faiss's SIMD lanes would take. Only there
can the devices differ. ``tiled_knn`` also runs on CPU (the tests and the benchmark use it
there), but there it is slower than faiss (benchmarks/retrieval_speed.py prints both), so
the pipeline does not use it on CPU.

faiss stays for what exact search cannot do at very large scale: ``index`` may name a
faiss index_factory string ("IVF4096,Flat", "HNSW32", ...), searched with ``nprobe``.
Such an index is approximate; every metric file states which search produced it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError

EXACT = "exact"
# Bytes of float32 scores per tile of the own search: 16 MiB on CPU (the tile stays in the
# last-level cache between the GEMM that writes it and the selection that reads it), more on
# a GPU.
DEFAULT_BLOCK_BYTES = 16 << 20
DEVICE_BLOCK_BYTES = 256 << 20
# Extra candidates taken per row before the (score, index) ordering, so that a tie at the
# k-th place resolves to the lower key index unless more than this many keys share it.
_TIE_SLACK = 8
# Key columns per score tile: keys are searched in tiles so that a query block stays wide
# however many keys there are (at ~1M keys a full-width block would be a few queries, a
# skinny GEMM that reads all keys per block).
_KEY_TILE = 4096
# Columns per group in a tile's pre-selection (_tile_best).
_GROUP = 8


def knn(
    queries: np.ndarray,
    keys: np.ndarray,
    k: int,
    dev: Any = None,
    index: str = EXACT,
    nprobe: int = 1,
    block_bytes: int | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The k best keys of each query by inner product: (scores, key indices), each of shape
    (len(queries), min(k, len(keys))), best first, ties in faiss's order. Exact search runs
    on ``dev`` when it is a GPU (``device_knn``), else on CPU with faiss (``flat_knn``);
    ``block_bytes`` sizes the GPU search's tiles."""
    queries, keys = _as_matrix(queries, "queries"), _as_matrix(keys, "keys")
    if queries.shape[1] != keys.shape[1]:
        raise InputError(f"queries have dimension {queries.shape[1]}, keys {keys.shape[1]}")
    if k < 1 or len(keys) == 0:
        raise InputError(f"nearest-neighbour search needs k >= 1 and keys, got k={k} and {len(keys)} keys")
    k = min(k, len(keys))
    if index != EXACT:
        return faiss_knn(queries, keys, k, index, nprobe, seed)
    if _is_cpu(dev):
        return flat_knn(queries, keys, k)
    return device_knn(queries, keys, k, dev, block_bytes)


def flat_knn(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """faiss's exact search, bit for bit as ``IndexFlatIP(d).add(keys); search(queries, k)``
    gives it at the same thread count, without the index's copy of the keys."""
    import faiss

    k = min(k, len(keys))
    scores = np.empty((len(queries), k), dtype=np.float32)
    found = np.empty((len(queries), k), dtype=np.int64)
    with _faiss_threads_as_torchs(), _search_progress(len(queries), len(keys)) as bar:
        for start, end in query_chunks(len(queries), queries.shape[1]):
            scores[start:end], found[start:end] = faiss.knn(queries[start:end], keys, k, faiss.METRIC_INNER_PRODUCT)
            bar.update(end - start)
    return scores, found


def query_chunks(n_queries: int, dimension: int) -> list[tuple[int, int]]:
    """(start, end) of the query chunks a CPU search takes one by one, for its progress lines.

    A chunk is whole faiss query blocks (``distance_compute_blas_query_bs`` queries), and a
    chunk is never smaller than faiss's threshold for its BLAS search (queries x dimension),
    unless the whole search is: faiss then runs the same GEMMs on the same blocks as for all
    queries at once, so every score, neighbour and tie comes out as from one search."""
    import faiss

    block = faiss.cvar.distance_compute_blas_query_bs
    threshold = faiss.cvar.distance_compute_blas_threshold
    size = block * max(1, -(-threshold // (block * max(1, dimension))))
    starts = list(range(0, n_queries, size))
    if len(starts) > 1 and (n_queries - starts[-1]) * dimension < threshold:
        starts.pop()  # a short last chunk would take faiss's sequential scan: it joins the one before
    return list(zip(starts, [*starts[1:], n_queries]))


def _search_progress(n_queries: int, n_keys: int):
    return progress(total=n_queries, desc=f"searching {n_keys} keys", unit="query")


def device_knn(
    queries: np.ndarray, keys: np.ndarray, k: int, dev: Any = None, block_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The own tiled search on ``dev`` (any torch device), in faiss's tie order. Bit-identical
    key vectors are searched once and expanded to all their indices: their scores are then
    equal by construction, where a blocked GEMM could give two copies scores 1 ulp apart
    depending on their column position."""
    k = min(k, len(keys))
    groups = duplicate_groups(keys)
    if groups is None:
        scores, found = tiled_knn(queries, keys, k, dev, block_bytes)
        order = np.lexsort((-found, -scores), axis=1)  # equal scores: highest index first
        return np.take_along_axis(scores, order, 1), np.take_along_axis(found, order, 1)
    representatives, members = groups
    scores, found = tiled_knn(queries, keys[representatives], min(k, len(representatives)), dev, block_bytes)
    return _expanded(scores, found, members, k)


def faiss_kept(values: np.ndarray, indices: np.ndarray, k: int) -> np.ndarray:
    """Which of one query's candidates (scores ``values`` of keys ``indices``) faiss's heap
    search returns, as positions into them in faiss's output order. Every key scoring at
    least the k-th best score must be among the candidates.

    faiss reads keys in index order into a heap of k: a key enters when it scores strictly
    above the heap's lowest score and evicts the lowest (value, index). Of the keys tied at
    the k-th best score, those that entered are the ones read while fewer than k keys
    scoring at least as high had been read; the highest-indexed of them stay. (At k = 1 that
    is the lowest-indexed best key, faiss's rule outside its SIMD scan.)"""
    by_rank = np.lexsort((indices, -values))
    if len(by_rank) > k:
        kth = values[by_rank[k - 1]]
        above = np.flatnonzero(values > kth)
        tied = np.flatnonzero(values == kth)
        tied = tied[np.argsort(indices[tied], kind="stable")]
        as_high = np.sort(indices[values >= kth])
        entered = tied[np.searchsorted(as_high, indices[tied]) < k]
        by_rank = np.concatenate([above, entered[len(entered) - (k - len(above)) :]])
    return by_rank[np.lexsort((-indices[by_rank], -values[by_rank]))]


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
            hashes[b : b + (1 << 14)] = (keys[b : b + (1 << 14)].view(np.uint32).astype(np.uint64) * multipliers).sum(
                axis=1
            )
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


def _expanded(
    scores: np.ndarray, found: np.ndarray, members: list[np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Results over distinct vectors expanded to every index carrying them, the k faiss keeps
    in faiss's order (``faiss_kept``)."""
    out_scores = np.empty((len(found), k), dtype=np.float32)
    out_found = np.empty((len(found), k), dtype=np.int64)
    for row in range(len(found)):
        indices = np.concatenate([members[g] for g in found[row]])
        values = np.concatenate(
            [np.full(len(members[g]), scores[row, j], dtype=np.float32) for j, g in enumerate(found[row])]
        )
        kept = faiss_kept(values, indices, k)
        out_scores[row], out_found[row] = values[kept], indices[kept]
    return out_scores, out_found


def tiled_knn(
    queries: np.ndarray, keys: np.ndarray, k: int, dev: Any = None, block_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact search tile by tile on a torch device (CPU by default): a tile is (query rows) x
    (key columns) of float32 scores, at most ``block_bytes``. The first tile of a query
    block gives each row its best ``k + slack``; every later tile only adds the scores that
    reach a row's current worst kept score. Rows whose order the float32 rounding could
    decide are scored again in float64 (``_rescored``). Ordered by score descending, equal
    scores lowest index first."""
    import torch

    dev = torch.device("cpu") if dev is None else torch.device(dev)
    if block_bytes is None:
        block_bytes = DEFAULT_BLOCK_BYTES if dev.type == "cpu" else DEVICE_BLOCK_BYTES
    width = min(len(keys), k + _TIE_SLACK)
    rows, cols = tile_shape(len(queries), len(keys), block_bytes, width)
    kept: list[Any] = [None] * -(-len(queries) // rows)
    tiles = progress(
        _score_tiles(queries, keys, rows, cols, dev),
        total=len(kept) * -(-len(keys) // cols),
        desc=f"searching {len(keys)} keys for {len(queries)} queries",
        unit="tile",
    )
    for offset, block, tile in tiles:
        kept[block] = _tile_best(tile, width) if kept[block] is None else _merged(*kept[block], tile, offset)
    values = torch.cat([values for values, _ in kept]).cpu().numpy()
    found = torch.cat([found for _, found in kept]).cpu().numpy()
    return _rescored(queries, keys, values, found, k)


def _score_tiles(
    queries: np.ndarray, keys: np.ndarray, rows: int, cols: int, dev: Any
) -> Iterator[tuple[int, int, Any]]:
    """(first key index, query block index, score tile) for every tile, key tiles outermost so
    that each key tile is moved once; the products in full fp32 (TF32 off on a GPU)."""
    import torch

    with _full_fp32_matmul():
        blocks = [torch.from_numpy(queries[a : a + rows]).to(dev) for a in range(0, len(queries), rows)]
        keys_d = torch.from_numpy(keys).to(dev)
        for j in range(0, len(keys), cols):
            tile_keys = keys_d[j : j + cols].T
            for b, block in enumerate(blocks):
                yield j, b, block @ tile_keys


def _rescored(
    queries: np.ndarray, keys: np.ndarray, values: np.ndarray, found: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each row's kept candidates, by score descending then key index.

    Where two of a row's first k + 1 float32 scores lie within twice the worst-case error of
    a float32 dot product (Higham's gamma_d = d u, times |q| max|k|), the GEMM's rounding
    could decide their order or which of them is k-th; those rows' candidates are scored
    again in float64 and ordered by that. So the neighbours are those of the exact product,
    whatever the device, the BLAS or the tile shape."""
    order = np.lexsort((found, -values), axis=1)
    values, found = np.take_along_axis(values, order, 1), np.take_along_axis(found, order, 1)
    first = min(k + 1, found.shape[1])
    key_norm = max(
        float(np.sqrt(np.einsum("ij,ij->i", keys[b : b + 65536], keys[b : b + 65536]).max()))
        for b in range(0, len(keys), 65536)
    )
    error = (keys.shape[1] + 2) * 2.0**-24 * np.linalg.norm(queries, axis=1) * key_norm
    unsure = np.flatnonzero((values[:, : first - 1] - values[:, 1:first] <= 2 * error[:, None]).any(axis=1))
    for a in range(0, len(unsure), 1024):
        rows = unsure[a : a + 1024]
        exact = np.matmul(keys[found[rows]].astype(np.float64), queries[rows, :, None].astype(np.float64))[..., 0]
        order = np.lexsort((found[rows], -exact), axis=1)
        values[rows] = np.take_along_axis(exact, order, 1)
        found[rows] = np.take_along_axis(found[rows], order, 1)
    return values[:, :k], found[:, :k]


def tile_shape(n_queries: int, n_keys: int, block_bytes: int, width: int = 1) -> tuple[int, int]:
    """(query rows, key columns) of one score tile: the keys cut into equal tiles of at most
    ``_KEY_TILE`` columns (and at least ``width``, the first tile's selection), then as many
    query rows as ``block_bytes`` holds."""
    tiles = -(-n_keys // _KEY_TILE)
    cols = max(min(n_keys, width), 1, min(-(-n_keys // tiles), block_bytes // 4))
    cols = min(n_keys, -(-cols // _GROUP) * _GROUP)  # whole groups but in the last tile
    rows = max(1, min(n_queries, block_bytes // (4 * cols)))
    return rows, cols


def _tile_best(tile: Any, width: int) -> tuple[Any, Any]:
    """The ``width`` largest scores of each row of ``tile`` and their columns (any order).

    The ``width``-th largest group maximum (see ``_merged``) is a floor that at least
    ``width`` scores of the row reach, so the top-k only runs over the scores that reach it."""
    import torch

    n_rows, n_cols = tile.shape
    n_groups = n_cols // _GROUP
    if n_cols % _GROUP or n_groups < 2 * width:
        return torch.topk(tile, width, dim=1, sorted=False)
    maxima = tile.view(n_rows, _GROUP, n_groups).amax(dim=1)
    floor = torch.topk(maxima, width, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    empty = torch.empty((n_rows, 0), dtype=tile.dtype, device=tile.device)
    return _merged(empty, empty.long(), tile, 0, floor, width)


def _merged(
    values: Any, found: Any, tile: Any, offset: int, floor: Any = None, width: int | None = None
) -> tuple[Any, Any]:
    """Each row's kept (values, key indices) updated with the scores of ``tile`` (whose first
    column is key ``offset``) that reach the row's floor (by default its lowest kept score),
    keeping the best ``width`` (by default as many as now).

    Columns are grouped (column c in group c mod n_groups, so the group maxima are an
    elementwise max over contiguous slabs, a memory pass); only groups whose maximum reaches
    the floor are read again. After the first few tiles of a block almost none do."""
    import torch

    n_rows, n_cols = tile.shape
    floor = values.amin(dim=1, keepdim=True) if floor is None else floor
    width = values.shape[1] if width is None else width
    n_groups = n_cols // _GROUP
    if n_groups and n_cols % _GROUP == 0:
        maxima = tile.view(n_rows, _GROUP, n_groups).amax(dim=1)
        hits = torch.nonzero((maxima >= floor).view(-1)).squeeze(1)  # flat (row, group) positions
        if len(hits) == 0:
            return values, found
        rows = hits // n_groups
        members = (
            (hits + rows * (n_cols - n_groups)).unsqueeze(1) + torch.arange(0, n_cols, n_groups, device=tile.device)
        ).view(-1)  # flat tile positions
        scores = torch.take(tile, members)
        rows = rows.repeat_interleave(_GROUP)
        keep = torch.nonzero(scores >= floor.view(-1)[rows]).squeeze(1)
        members, scores, rows = members[keep], scores[keep], rows[keep]
        columns = members - rows * n_cols
    else:  # a last tile of odd width: compared elementwise
        rows, columns = torch.nonzero(tile >= floor, as_tuple=True)
        scores = tile[rows, columns]
    if len(rows) == 0:
        return values, found
    # Rows with new scores: their kept entries and new ones side by side (padded with -inf),
    # the best ``width`` of them kept. ``rows`` comes sorted (nonzero is row-major).
    touched, counts = torch.unique_consecutive(rows, return_counts=True)
    slot = torch.arange(len(rows), device=tile.device) - torch.repeat_interleave(
        torch.cumsum(counts, 0) - counts, counts
    )
    slot_row = torch.repeat_interleave(torch.arange(len(touched), device=tile.device), counts)
    new_values = torch.full((len(touched), int(counts.max())), -torch.inf, dtype=values.dtype, device=values.device)
    new_found = torch.zeros(new_values.shape, dtype=found.dtype, device=found.device)
    new_values[slot_row, slot] = scores
    new_found[slot_row, slot] = columns + offset
    side_values = torch.cat([values[touched], new_values], dim=1)
    side_found = torch.cat([found[touched], new_found], dim=1)
    best, at = torch.topk(side_values, width, dim=1, sorted=False)
    if values.shape[1] != width:  # the first tile: every row is touched
        return best, torch.gather(side_found, 1, at)
    values[touched], found[touched] = best, torch.gather(side_found, 1, at)  # the caller's arrays, updated in place
    return values, found


def faiss_knn(
    queries: np.ndarray, keys: np.ndarray, k: int, factory: str, nprobe: int, seed: int
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
    scores = np.empty((len(queries), k), dtype=np.float32)
    indices = np.empty((len(queries), k), dtype=np.int64)
    with _faiss_threads_as_torchs(), _search_progress(len(queries), len(keys)) as bar:
        for start, end in query_chunks(len(queries), queries.shape[1]):
            scores[start:end], indices[start:end] = index.search(queries[start:end], k)
            bar.update(end - start)
    return scores, indices


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


def _is_cpu(dev: Any) -> bool:
    return dev is None or str(dev).split(":")[0] == "cpu"


@contextlib.contextmanager
def _faiss_threads_as_torchs():
    """faiss's OpenMP threads (its own runtime, all the cores the process may use unless
    told) set to torch's, the job's ``threads`` (common.configure_torch), for one search:
    the thread count can change a score's last bit, so it is the job's, not the node's."""
    import faiss
    import torch

    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(torch.get_num_threads())
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


@contextlib.contextmanager
def _full_fp32_matmul():
    import torch

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
