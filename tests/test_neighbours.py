"""Blocked exact search gives faiss IndexFlatIP's neighbours and scores on every device and
block size; ties go to the lower key index; a faiss index stays available as an option."""

import numpy as np
import pytest

from workflow_scripts.common import InputError
from workflow_scripts.evaluation.neighbours import exact_knn, knn, l2_normalize

torch = pytest.importorskip("torch")
has_gpu = torch.cuda.is_available()


def embeddings(n_queries: int, n_keys: int, dim: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (l2_normalize(rng.standard_normal((n_queries, dim), dtype=np.float32)),
            l2_normalize(rng.standard_normal((n_keys, dim), dtype=np.float32)))


def faiss_reference(queries, keys, k):
    import faiss

    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    return index.search(queries, k)


@pytest.mark.parametrize("block_bytes", [4 * 300, 4 * 300 * 7, 1 << 30])  # 1 query, 7 queries, all at once
def test_exact_search_matches_faiss_flat_index_at_any_block_size(block_bytes):
    queries, keys = embeddings(50, 300)
    scores, found = exact_knn(queries, keys, 4, block_bytes=block_bytes)
    ref_scores, ref_found = faiss_reference(queries, keys, 4)
    assert np.array_equal(found, ref_found)
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first


def test_ties_go_to_the_lower_key_index_and_k_is_capped():
    keys = np.eye(3, dtype=np.float32)[[0, 1, 1, 2, 1]]  # key 1 repeated at indices 1, 2, 4
    query = np.array([[0.0, 1.0, 0.0]], dtype=np.float32)
    scores, found = knn(query, keys, 2)
    assert found.tolist() == [[1, 2]] and scores.tolist() == [[1.0, 1.0]]
    scores, found = knn(query, keys, 10)
    assert found.shape == (1, 5) and found[0, :3].tolist() == [1, 2, 4]


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
    cpu_scores, cpu_found = exact_knn(queries, keys, 4)
    gpu_scores, gpu_found = exact_knn(queries, keys, 4, dev="cuda", block_bytes=4 * 5000 * 64)
    assert np.array_equal(gpu_found, cpu_found)
    np.testing.assert_allclose(gpu_scores, cpu_scores, rtol=0, atol=1e-5)


@pytest.mark.parametrize("block_bytes", [4 * 7 * 3, 1 << 30])  # blocks of 3 queries, or one block
def test_bit_identical_candidates_tie_and_go_to_the_lower_index(block_bytes):
    """Copies of one vector at scattered positions (across blocks, at the k-th place) score
    alike and are returned lowest index first; the rest is as an exact float64 search."""
    queries, keys = embeddings(9, 40, dim=48, seed=5)
    copies = {3: [11, 27, 39], 8: [0, 20], 15: [16]}  # source -> positions overwritten with its vector
    for source, positions in copies.items():
        keys[positions] = keys[source]
    for k in (1, 2, 5, 12, 40):
        scores, found = knn(queries, keys, k, block_bytes=block_bytes)
        exact = queries.astype(np.float64) @ keys.astype(np.float64).T
        for row in range(len(queries)):
            expected = sorted(range(len(keys)), key=lambda j: (-exact[row, j], j))[:k]
            assert found[row].tolist() == expected, (k, row)
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


@pytest.mark.parametrize("onednn", [True, False])
def test_many_key_tiles_give_the_float64_ranking_with_either_cpu_gemm(onednn, monkeypatch):
    """Keys cut into many tiles (later tiles add only what reaches a row's floor, through the
    group maxima), on oneDNN's GEMM or numpy's BLAS: the neighbours and their order are
    those of a float64 search, near-copies included (their float32 scores can tie or swap;
    those rows are scored again in float64)."""
    if not onednn:
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    elif not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN: only the numpy BLAS path runs")
    queries, keys = embeddings(37, 5000, dim=32, seed=3)
    best = float64_ranking(queries, keys, 1)[:, 0]
    for step, (row, target) in enumerate(zip(range(0, 37, 3), range(4000, 5000, 80))):
        keys[target] = keys[best[row]]  # near-copies of some rows' best key, in a later tile
        keys[target, step % 32] += np.float32(1e-7) * (1 if step % 2 else -1)
    for k in (1, 7, 20):
        scores, found = exact_knn(queries, keys, k, block_bytes=4 * 8 * 256)  # 8 queries x 256 keys per tile
        assert found.tolist() == float64_ranking(queries, keys, k).tolist()
        expected = np.take_along_axis(queries.astype(np.float64) @ keys.astype(np.float64).T, found, 1)
        np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-6)


def test_tiles_are_cache_sized_and_whole_groups():
    from workflow_scripts.evaluation.neighbours import DEFAULT_BLOCK_BYTES, tile_shape

    rows, cols = tile_shape(15000, 1_000_000, DEFAULT_BLOCK_BYTES, 28)
    assert 4 * rows * cols <= DEFAULT_BLOCK_BYTES and cols % 8 == 0 and rows >= 1000
    assert tile_shape(3, 5, 1 << 30, 28) == (3, 5)  # fewer keys than the selection: one tile
    assert tile_shape(50, 300, 4 * 300) == (1, 300)  # a block of one query
