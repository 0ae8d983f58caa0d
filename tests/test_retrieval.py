"""Tatoeba 1-NN accuracy and BUCC margin mining on small constructed cases."""

import numpy as np
import pytest

from workflow_scripts.evaluation.retrieval import (
    choose_threshold,
    expand_to_ids,
    margin_candidates,
    mined_pairs,
    prf,
    tatoeba_accuracy,
    unique_texts,
)
from workflow_scripts.spec.basics import InputError

pytestmark = pytest.mark.unit


def test_tatoeba_counts_only_the_gold_index():
    english = np.eye(4, dtype=np.float32)
    foreign = english.copy()
    foreign[3] = foreign[2]  # two identical foreign sentences: the 4th English finds the 3rd first
    assert tatoeba_accuracy(foreign, english)["accuracy"] == 75.0
    with pytest.raises(InputError):
        tatoeba_accuracy(foreign[:2], english)


def test_unique_texts_embeds_every_text_and_credits_ids_by_convention():
    texts, ids = unique_texts(["a1", "a2", "a3"], ["x", "y", "x"])
    assert texts == ["x", "y"] and ids == [[], ["a2"]]  # official: a repeated text counts for no id
    texts, ids = unique_texts(["a1", "a2", "a3"], ["x", "y", "x"], "all_ids")
    assert texts == ["x", "y"] and ids == [["a1", "a3"], ["a2"]]
    with pytest.raises(InputError, match="bucc_duplicates"):
        unique_texts(["a1"], ["x"], "first")


def test_margin_candidates_are_one_to_one_and_scored_by_ratio_margin():
    rng = np.random.default_rng(0)
    trg = rng.normal(size=(6, 8)).astype(np.float32)
    src = trg[[2, 0, 1]] + 0.05 * rng.normal(size=(3, 8)).astype(np.float32)
    cands = margin_candidates(src, trg, k=2)
    assert {(i, j) for _, i, j in cands[:3]} == {(0, 2), (1, 0), (2, 1)}
    srcs, trgs = [i for _, i, _ in cands], [j for _, _, j in cands]
    assert len(set(srcs)) == len(srcs) and len(set(trgs)) == len(trgs)
    assert [s for s, _, _ in cands] == sorted([s for s, _, _ in cands], reverse=True)
    # Recompute one score by hand: cos / mean of the two k-NN averages.
    s_n = src / np.linalg.norm(src, axis=1, keepdims=True)
    t_n = trg / np.linalg.norm(trg, axis=1, keepdims=True)
    sims = s_n @ t_n.T
    score, i, j = cands[0]
    fwd = np.sort(sims[i])[::-1][:2].mean()
    bwd = np.sort(sims[:, j])[::-1][:2].mean()
    assert score == pytest.approx(sims[i, j] / ((fwd + bwd) / 2), rel=1e-5)


def test_threshold_is_the_midpoint_at_best_f1_and_applies_to_test():
    gold = {("s1", "e1"), ("s2", "e2"), ("s3", "e3")}
    cands = [
        (1.30, ("s1", "e1")),
        (1.20, ("s2", "e2")),
        (1.10, ("s9", "e9")),
        (1.05, ("s3", "e3")),
        (0.90, ("s8", "e8")),
    ]
    # F1 after each candidate: 0.5, 0.8, 0.667, 0.857, 0.75 -> best after the 4th (1.05).
    assert choose_threshold(cands, gold) == pytest.approx((1.05 + 0.90) / 2)
    predicted = mined_pairs(cands, choose_threshold(cands, gold))
    assert prf(predicted, gold) == pytest.approx({"precision": 75.0, "recall": 100.0, "f1": 100 * 6 / 7})


def test_duplicate_texts_expand_to_all_their_ids():
    cands = [(1.2, 0, 1)]
    assert expand_to_ids(cands, [["s1", "s4"]], [["e0"], ["e1", "e7"]]) == [
        (1.2, ("s1", "e1")),
        (1.2, ("s1", "e7")),
        (1.2, ("s4", "e1")),
        (1.2, ("s4", "e7")),
    ]


def test_mining_scores_and_threshold_are_plain_floats():
    rng = np.random.default_rng(1)
    trg = rng.normal(size=(5, 4)).astype(np.float32)
    cands = margin_candidates(trg + 0.01, trg, k=2)
    assert all(type(s) is float for s, _, _ in cands)  # they go into JSON metric files
    pairs = expand_to_ids(cands, [[f"s{i}"] for i in range(5)], [[f"e{j}"] for j in range(5)])
    assert type(choose_threshold(pairs, {("s0", "e0")})) is float
