"""Behaviours of the official XTREME scorers, pinned with the values the official scripts give.

The expected numbers below were produced by running google-research/xtreme's
third_party/utils_retrieve.py (mine_bitext + bucc_eval), its evaluate.py accuracy (commit
838c13b69daafb9328785d16caae2711e4012123) and SQuAD's evaluate-v2.0 logic on exactly these
inputs; our code must give the same. The ranking metrics (Mewsli-X, LAReQA) are pinned in
test_ranking_metrics.py.
"""

import numpy as np
import pytest

from workflow_scripts.evaluation.metrics import accuracy, squad_v2
from workflow_scripts.evaluation.retrieval import (
    BUCC_DUPLICATES,
    choose_threshold,
    expand_to_ids,
    margin_candidates,
    mined_pairs,
    prf,
    unique_texts,
)

pytestmark = pytest.mark.unit


def test_accuracy_as_evaluate_py_scores_xnli_pawsx_tatoeba_and_xcopa():
    # Official: evaluate.accuracy(labels=[0, 1, 1, 0, 1], predictions=[0, 1, 0, 0, 0]) -> {'accuracy': 60.0}
    assert accuracy([0, 1, 0, 0, 0], [0, 1, 1, 0, 1]) == {"accuracy": 60.0}


@pytest.mark.parametrize(
    "prediction,golds,expected",
    [
        ("", ["the", "cat"], 0.0),  # "the" normalises to nothing and is dropped: "" vs "cat"
        ("cat", ["the", "cat"], 100.0),
        ("", ["the", "an"], 100.0),  # no gold left: the question is unanswerable, "" matches
        ("a cat", ["the"], 0.0),
        ("", [], 100.0),
    ],
)
def test_squad_v2_drops_golds_that_normalise_to_nothing(prediction, golds, expected):
    scores = squad_v2({"q": prediction}, {"q": golds})
    assert scores["exact_match"] == expected and scores["f1"] == expected


# Source side: "X" occurs twice (de-1, de-3); V is a distractor aligned to nothing.
TRG = {"x": [1, 0, 0, 0], "y": [0, 1, 0, 0], "z": [0, 0, 1, 0], "w": [0, 0, 0, 1]}
SRC = {"X": [0.9, 0.1, 0.0, 0.1], "Y": [0.1, 0.9, 0.1, 0.0], "Z": [0.0, 0.2, 0.9, 0.1], "V": [0.3, 0.3, 0.3, 0.5]}
SRC_LINES = [("de-1", "X"), ("de-2", "Y"), ("de-3", "X"), ("de-4", "Z"), ("de-5", "V")]
TRG_LINES = [("en-1", "x"), ("en-2", "y"), ("en-3", "z"), ("en-4", "w")]
GOLD = {("de-1", "en-1"), ("de-2", "en-2"), ("de-4", "en-3")}


def _mine(duplicates, gold=GOLD):
    src_texts, src_ids = unique_texts([i for i, _ in SRC_LINES], [t for _, t in SRC_LINES], duplicates)
    trg_texts, trg_ids = unique_texts([i for i, _ in TRG_LINES], [t for _, t in TRG_LINES], duplicates)
    found = margin_candidates(
        np.array([SRC[t] for t in src_texts], np.float32), np.array([TRG[t] for t in trg_texts], np.float32), k=2
    )
    cands = expand_to_ids(found, src_ids, trg_ids)
    threshold = choose_threshold(cands, gold)
    return cands, threshold, prf(mined_pairs(cands, threshold), gold)


def test_bucc_official_reader_drops_texts_repeated_on_a_side():
    cands, threshold, scores = _mine("drop")
    # Official: best-threshold 1.47954523563385, precision 100, recall 66.67, F1 80.0.
    assert {pair for _, pair in cands} == {("de-2", "en-2"), ("de-4", "en-3"), ("de-5", "en-4")}
    assert threshold == pytest.approx(1.47954523563385, abs=1e-6)
    assert scores == pytest.approx({"precision": 100.0, "recall": 200 / 3, "f1": 80.0})


def test_bucc_all_ids_convention_credits_every_id_of_a_repeated_text():
    cands, _, scores = _mine("all_ids")
    assert ("de-1", "en-1") in {p for _, p in cands} and ("de-3", "en-1") in {p for _, p in cands}
    assert scores == pytest.approx({"precision": 75.0, "recall": 100.0, "f1": 600 / 7})
    assert set(BUCC_DUPLICATES) == {"drop", "all_ids"}


def test_bucc_threshold_is_zero_and_mines_everything_when_no_dev_candidate_is_correct():
    cands, threshold, scores = _mine("drop", gold={("de-5", "en-1")})
    # Official: best-threshold 0 (every candidate kept), precision = recall = F1 = 0.
    assert threshold == 0.0
    assert mined_pairs(cands, threshold) == {pair for _, pair in cands}
    assert scores == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_bucc_best_f1_at_the_last_candidate_keeps_every_candidate():
    # The official bucc_optimize indexes past the end here and crashes; we keep all candidates.
    cands, threshold, scores = _mine("drop", gold={("de-2", "en-2"), ("de-4", "en-3"), ("de-5", "en-4")})
    assert threshold == pytest.approx(min(s for s, _ in cands))
    assert scores["f1"] == 100.0


def test_bucc_miner_writes_only_candidates_with_a_positive_margin():
    src = np.array([[0.03, 1.36], [1.22, -0.51], [-0.3, -0.53]], np.float32)
    trg = np.array([[0.57, -0.06], [0.75, -1.85], [1.57, -0.1]], np.float32)
    # Greedy one-to-one gives (2, 1), (1, 0) and then (0, 2) with margin -0.18: source 0 and
    # target 2 are claimed, but the official miner writes only scores above 0.
    cands = margin_candidates(src, trg, k=2)
    assert [(i, j) for _, i, j in cands] == [(2, 1), (1, 0)]
    assert all(s > 0 for s, _, _ in cands)
