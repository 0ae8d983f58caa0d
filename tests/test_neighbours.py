"""Exact search gives faiss IndexFlatIP's neighbours, scores and tie order: on CPU it is
faiss's own search (bit for bit), on a device the own tiled search (tested here on CPU, which
runs the same code) in faiss's tie order; expected orders come from faiss itself. A faiss
index stays available as an option."""

import contextlib

import numpy as np
import pytest

from workflow_scripts.evaluation.neighbours import (
    device_knn,
    faiss_kept,
    flat_knn,
    knn,
    l2_normalize,
    tiled_knn,
)
from workflow_scripts.spec.basics import InputError

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")
has_gpu = torch.cuda.is_available()


def embeddings(n_queries: int, n_keys: int, dim: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (
        l2_normalize(rng.standard_normal((n_queries, dim), dtype=np.float32)),
        l2_normalize(rng.standard_normal((n_keys, dim), dtype=np.float32)),
    )


def faiss_reference(queries, keys, k):
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    return index.search(queries, k)


def with_copies(keys, copies):
    """keys with some vectors copied, bit for bit, over others: {source: [positions]}."""
    keys = keys.copy()
    for source, positions in copies.items():
        keys[positions] = keys[source]
    return keys


@contextlib.contextmanager
def job_threads(n: int):
    """A job's thread count, as common.configure_torch sets it, and faiss's for the reference."""
    import faiss

    previous = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(n)
    torch.set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous[0])
        torch.set_num_threads(previous[1])


@pytest.mark.parametrize("n_queries, dim", [(50, 64), (200, 768), (4200, 64)])  # per-pair path, BLAS path, 2 chunks
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_search_is_faiss_flat_index_bit_for_bit_at_any_thread_count(n_queries, dim, threads):
    """The pipeline's CPU search: IndexFlatIP's scores and neighbours exactly at the same
    thread count (copies put exact ties at every rank, the k-th included). Across thread
    counts and CPUs faiss's own scores may differ in the last bit; that is not asserted."""
    queries, keys = embeddings(n_queries, 5000, dim=dim, seed=2)
    best = float64_ranking(queries[:10], keys, 3)
    keys = with_copies(
        keys, {int(j): [4999 - 7 * r - i, 2 * r + 1 + 13 * i] for r, row in enumerate(best) for i, j in enumerate(row)}
    )
    with job_threads(threads):
        for k in (1, 4, 20, 120):  # faiss's three searches: top-1 scan, heaps, reservoirs
            ref_scores, ref_found = faiss_reference(queries, keys, k)
            scores, found = flat_knn(queries, keys, k)
            assert np.array_equal(found, ref_found) and np.array_equal(scores, ref_scores)
            assert np.array_equal(knn(queries, keys, k)[1], ref_found)


def test_cpu_search_runs_faiss_on_the_jobs_threads_and_gives_faiss_back_its_own(monkeypatch):
    import faiss

    seen = []
    real_knn = faiss.knn
    monkeypatch.setattr(faiss, "knn", lambda *a: (seen.append(faiss.omp_get_max_threads()), real_knn(*a))[1])
    queries, keys = embeddings(30, 200)
    with job_threads(1):
        faiss.omp_set_num_threads(2)
        torch.set_num_threads(1)  # the job's threads, set last as configure_torch does
        own = faiss.omp_get_max_threads()  # 2 where faiss loaded its own OpenMP runtime, else 1
        flat_knn(queries, keys, 3)
        assert seen == [1] and faiss.omp_get_max_threads() == own


@pytest.mark.parametrize("block_bytes", [4 * 300, 4 * 300 * 7, 1 << 30])  # 1 query, 7 queries, all at once
def test_tiled_search_matches_faiss_flat_index_at_any_block_size(block_bytes):
    queries, keys = embeddings(50, 300)
    scores, found = tiled_knn(queries, keys, 4, block_bytes=block_bytes)
    ref_scores, ref_found = faiss_reference(queries, keys, 4)
    assert np.array_equal(found, ref_found)
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first


@pytest.mark.parametrize("search", [knn, lambda q, keys, k: device_knn(q, keys, k, "cpu")], ids=["cpu", "device"])
def test_ties_follow_faiss_and_k_is_capped(search):
    keys = np.eye(3, dtype=np.float32)[[0, 1, 1, 2, 1]]  # key 1 repeated at indices 1, 2, 4
    query = np.array([[0.0, 1.0, 0.0]], dtype=np.float32)
    for k in (1, 2, 3, 5):
        assert search(query, keys, k)[1].tolist() == faiss_reference(query, keys, k)[1].tolist(), k
    scores, found = search(query, keys, 10)
    assert found.tolist() == faiss_reference(query, keys, 5)[1].tolist() and scores[0, :3].tolist() == [1.0] * 3


@pytest.mark.parametrize("target", ["mewslix", "lareqa"])
def test_a_gold_entity_tied_with_a_copy_ranks_where_faiss_ranks_it(target):
    """Two entities with one description (bit-identical vectors) and a distractor: the gold's
    reciprocal rank is the one faiss's order gives (the copy after the gold takes rank 1)."""
    from workflow_scripts.evaluation.pool_ranking import rank
    from workflow_scripts.evaluation.ranking import convention_of, map_at_k

    description = l2_normalize(np.array([[1.0, 2.0, 0.5]], dtype=np.float32))[0]
    entities = np.stack([l2_normalize(np.array([[0.0, 1.0, 3.0]], dtype=np.float32))[0], description, description])
    ids = ["Q_other", "Q_gold", "Q_same_text"]
    query = (description + np.float32(0.1)).reshape(1, -1)
    expected = [ids[j] for j in faiss_reference(query, entities, 3)[1][0]]
    assert rank(query, entities, ids, 3) == [expected]
    gold_rank = expected.index("Q_gold") + 1
    score = map_at_k({"m": expected}, {"m": ["Q_gold"]}, 20, convention_of(target))["map_at_20"]
    assert score == pytest.approx(100 / gold_rank) and gold_rank == 2  # faiss puts the higher index first


def test_faiss_tie_rule_as_restated_matches_faiss():
    """faiss_kept, applied to all of a row's scores, picks faiss's k in faiss's order, with
    many-way ties at and above the k-th place, on faiss's per-pair path and its BLAS path
    (where k = 1 is a SIMD scan with its own tie rule, see neighbours.py)."""
    rng = np.random.default_rng(3)
    for n_queries, n_keys, dim, ks in (
        (1, 60, 16, (1, 2, 4, 20, 40)),
        (7, 3000, 16, (1, 2, 4, 20, 40)),
        (40, 3000, 4096, (2, 4, 20, 40)),
    ):
        queries = rng.standard_normal((n_queries, dim), dtype=np.float32)
        keys = rng.standard_normal((n_keys, dim), dtype=np.float32)
        for row in queries @ keys.T:
            for source in np.argsort(-row)[:3]:
                keys[rng.choice(n_keys, 6, replace=False)] = keys[source]
        all_scores, all_found = faiss_reference(queries, keys, n_keys)
        for k in ks:
            _, found = faiss_reference(queries, keys, k)
            for r in range(n_queries):
                assert all_found[r][faiss_kept(all_scores[r], all_found[r], k)].tolist() == found[r].tolist()


def test_bad_search_input_is_named():
    queries, keys = embeddings(2, 5)
    with pytest.raises(InputError, match="dimension"):
        knn(queries, keys[:, :10], 1)
    with pytest.raises(InputError, match="k >= 1"):
        knn(queries, keys, 0)
    with pytest.raises(InputError, match="index_factory"):
        knn(queries, keys, 1, index="NotAnIndex")


def test_a_faiss_index_is_an_option():
    queries, keys = embeddings(20, 400)
    exact = knn(queries, keys, 3)
    flat = knn(queries, keys, 3, index="Flat")  # faiss, exhaustive: the same neighbours
    assert np.array_equal(flat[1], exact[1])
    ivf = knn(queries, keys, 3, index="IVF4,Flat", nprobe=4, seed=1)  # every list probed: exact
    assert np.array_equal(ivf[1], exact[1])
    ivf_one = knn(queries, keys, 3, index="IVF4,Flat", nprobe=1, seed=1)  # approximate
    assert ivf_one[1].shape == (20, 3)


@pytest.mark.skipif(not has_gpu, reason="no CUDA GPU on this machine: the GPU search path is not run")
def test_gpu_search_gives_the_cpu_neighbours_and_scores():
    queries, keys = embeddings(500, 5000, dim=256)
    best = float64_ranking(queries[:50], keys, 1)[:, 0]
    keys = with_copies(keys, {int(j): [4000 + i, 17 * i] for i, j in enumerate(best)})  # exact ties at the top
    cpu_scores, cpu_found = knn(queries, keys, 4)
    gpu_scores, gpu_found = knn(queries, keys, 4, dev="cuda", block_bytes=4 * 5000 * 64)
    assert np.array_equal(gpu_found, cpu_found)
    np.testing.assert_allclose(gpu_scores, cpu_scores, rtol=0, atol=1e-5)


@pytest.mark.parametrize("block_bytes", [4 * 7 * 3, 1 << 30])  # blocks of 3 queries, or one block
def test_bit_identical_candidates_tie_in_faiss_order_on_a_device(block_bytes):
    """Copies of one vector at scattered positions (across blocks, at the k-th place) score
    alike and come in faiss's order and number; the rest is as an exact float64 search."""
    queries, keys = embeddings(9, 40, dim=48, seed=5)
    copies = {3: [11, 27, 39], 8: [0, 20], 15: [16]}  # source -> positions overwritten with its vector
    keys = with_copies(keys, copies)
    for k in (1, 2, 5, 12, 40):
        scores, found = device_knn(queries, keys, k, "cpu", block_bytes=block_bytes)
        assert found.tolist() == faiss_reference(queries, keys, k)[1].tolist(), k
        groups = [[source, *positions] for source, positions in copies.items()]
        for row in range(len(queries)):
            for group in groups:
                at = [np.where(found[row] == j)[0] for j in group]
                values = [scores[row, a[0]] for a in at if len(a)]
                assert len(set(values)) <= 1  # bit-identical vectors, one score


def test_keys_without_duplicates_take_the_plain_search():
    from workflow_scripts.evaluation.neighbours import duplicate_groups

    _, keys = embeddings(1, 100)
    assert duplicate_groups(keys) is None
    keys[7] = keys[3]
    representatives, members = duplicate_groups(keys)
    assert 7 not in representatives.tolist() and members[3].tolist() == [3, 7] and len(representatives) == 99


def float64_ranking(queries, keys, k):
    exact = queries.astype(np.float64) @ keys.astype(np.float64).T
    return np.array([sorted(range(len(keys)), key=lambda j: (-exact[r, j], j))[:k] for r in range(len(queries))])


def test_many_key_tiles_give_the_float64_ranking():
    """Keys cut into many tiles (later tiles add only what reaches a row's floor, through the
    group maxima): the neighbours and their order are those of a float64 search, near-copies
    included (their float32 scores can tie or swap; those rows are scored again in float64)."""
    queries, keys = embeddings(37, 5000, dim=32, seed=3)
    best = float64_ranking(queries, keys, 1)[:, 0]
    for step, (row, target) in enumerate(zip(range(0, 37, 3), range(4000, 5000, 80))):
        keys[target] = keys[best[row]]  # near-copies of some rows' best key, in a later tile
        keys[target, step % 32] += np.float32(1e-7) * (1 if step % 2 else -1)
    for k in (1, 7, 20):
        scores, found = tiled_knn(queries, keys, k, block_bytes=4 * 8 * 256)  # 8 queries x 256 keys per tile
        assert found.tolist() == float64_ranking(queries, keys, k).tolist()
        expected = np.take_along_axis(queries.astype(np.float64) @ keys.astype(np.float64).T, found, 1)
        np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-6)


def test_tiles_are_cache_sized_and_whole_groups():
    from workflow_scripts.evaluation.neighbours import DEFAULT_BLOCK_BYTES, tile_shape

    rows, cols = tile_shape(15000, 1_000_000, DEFAULT_BLOCK_BYTES, 28)
    assert 4 * rows * cols <= DEFAULT_BLOCK_BYTES and cols % 8 == 0 and rows >= 1000
    assert tile_shape(3, 5, 1 << 30, 28) == (3, 5)  # fewer keys than the selection: one tile
    assert tile_shape(50, 300, 4 * 300) == (1, 300)  # a block of one query
