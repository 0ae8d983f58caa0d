"""mAP@k of the ranking targets (Mewsli-X, LAReQA) pinned to XTREME-R's official scorers.

Every expected number below was produced by running the official functions of
google-research/xtreme at commit 838c13b69daafb9328785d16caae2711e4012123 on exactly these
inputs: ``third_party/utils_lareqa.py`` ``average_precision_at_k`` (called, as
``mean_avg_prec_at_k`` calls it, with numpy arrays of candidate positions) and
``mean_avg_prec_at_k`` itself on hand-made encodings; ``third_party/utils_mewslix.py``
``evaluate`` and ``evaluate.py`` ``mewslix_map20``. Our code must give the same.
"""

from __future__ import annotations

import pytest

from workflow_scripts.evaluation.ranking import (
    LAREQA,
    MEWSLIX,
    average_precision_at_k,
    convention_of,
    map_at_k,
    metric_key,
)
from workflow_scripts.spec.basics import InputError

pytestmark = pytest.mark.unit

X = [f"x{i}" for i in range(30)]  # distractors
G11 = [f"g{i}" for i in range(11)]  # LAReQA: 11 gold answers per question

# name: (ranking, gold ids, k, official LAReQA AP@k, official Mewsli-X reciprocal rank @k)
CASES = {
    "perfect": (["g"] + X[:19], ["g"], 20, 1.0, 1.0),
    "gold at rank 3": (X[:2] + ["g"] + X[2:19], ["g"], 20, 1 / 3, 1 / 3),
    "3 of 4 golds, at ranks 1, 3, 6": (
        ["g1", "x0", "g2", "x1", "x2", "g3"] + X[3:17],
        ["g1", "g2", "g3", "g4"],
        20,
        0.5416666666666666,
        1.0,
    ),
    "gold at rank 21": (X[:20] + ["g"], ["g"], 20, 0.0, 0.0),
    "gold at rank 6, k 5": (X[:5] + ["g"], ["g"], 5, 0.0, 0.0),
    "11 golds, k 5, top 5 all gold": (G11[:5] + X[:15], G11, 5, 1.0, 1.0),
    "11 golds, k 5, golds at 1, 3, 4": (["g0", "x0", "g1", "g2", "x1"] + G11[3:], G11, 5, 0.4833333333333333, 1.0),
    "11 golds in the top 11, k 20": (G11 + X[:9], G11, 20, 1.0, 1.0),
    "a gold repeated": (["g1", "g1", "g2"], ["g1", "g2"], 20, 0.8333333333333333, 1.0),
    "a distractor repeated": (["x0", "x0", "g"], ["g"], 20, 1 / 3, 1 / 3),
    "the only gold repeated": (["x0", "g", "g"], ["g"], 20, 0.5, 0.5),
    "fewer predictions than k": (["x0", "g"], ["g", "h"], 20, 0.25, 0.5),
    "Mewsli-X counts the first gold only": (["a", "b"], ["b", "a"], 20, 1.0, 0.5),
    "no predictions": ([], ["g"], 20, 0.0, 0.0),
}


@pytest.mark.parametrize("name", CASES)
def test_average_precision_matches_the_official_functions(name):
    ranked, gold, k, lareqa, mewslix = CASES[name]
    assert average_precision_at_k(ranked, gold, k) == pytest.approx(lareqa, abs=1e-12)
    assert average_precision_at_k(ranked, gold, k, convention=LAREQA) == pytest.approx(lareqa, abs=1e-12)
    assert average_precision_at_k(ranked, gold, k, convention=MEWSLIX) == pytest.approx(mewslix, abs=1e-12)


def test_the_conventions_agree_with_one_gold_per_query():
    for ranked, gold, k, lareqa, mewslix in CASES.values():
        if len(gold) == 1:
            assert lareqa == mewslix
            assert average_precision_at_k(ranked, gold, k, LAREQA) == average_precision_at_k(ranked, gold, k, MEWSLIX)


def test_mewslix_map20_as_evaluate_py_reports_it():
    gold = {"q1": ["Q1"], "q2": [" Q2 "], "q3": ["Q3"], "q4": ["Q4"]}
    pred = {"q1": ["Q1", "Q9"], "q2": ["Q7", "Q8", "Q9", "Q2"], "q3": ["Q9"] * 20 + ["Q3"], "q5": ["Q5"]}
    # Official: mewslix_map20 -> {'map@20': 31.25}; utils_mewslix.evaluate(return_count_diff=True)
    # -> (0.3125, 1 missing, 1 unexpected). The missing q4 scores 0; the unexpected q5 is ignored.
    assert map_at_k(pred, gold, 20, MEWSLIX, strict=False) == {"map_at_20": pytest.approx(31.25)}
    with pytest.raises(InputError, match=r"no ranking for 1 of 4 queries, e.g. \['q4'\]"):
        map_at_k(pred, gold, 20, MEWSLIX)
    with pytest.raises(InputError, match=r"rankings for 1 queries without gold ids, e.g. \['q5'\]"):
        map_at_k({**pred, "q4": []}, gold, 20, MEWSLIX)
    # with every query ranked: q1 1, q2 1/4 (gold stripped), q3 0 (rank 21), q4 0
    assert map_at_k({q: pred.get(q, []) for q in gold}, gold, 20, MEWSLIX) == {"map_at_20": pytest.approx(31.25)}


def test_lareqa_map_matches_mean_avg_prec_at_k_on_a_pooled_candidate_set():
    # The official mean_avg_prec_at_k, on 3 questions (xling ids a: en, de; b: en) and 5
    # candidates with hand-made encodings, ranked these candidates (argsort()[::-1] of the
    # dot products) and printed "sentences_and_contexts: 0.4166666666666667" for k = 2 and
    # "sentences_and_contexts: 0.6777777777777777" for k = 20.
    ranked = {
        "a_en": ["c0_0", "c4_0", "c2_0", "c1_0", "c3_0"],
        "a_de": ["c1_0", "c4_0", "c3_0", "c2_0", "c0_0"],
        "b_en": ["c4_0", "c2_0", "c3_0", "c1_0", "c0_0"],
    }
    gold = {"a_en": {"c0_0", "c1_0"}, "a_de": {"c0_0", "c1_0"}, "b_en": {"c2_0", "c3_0"}}
    assert map_at_k(ranked, gold, k=2) == {"map_at_2": pytest.approx(41.66666666666667)}
    assert map_at_k(ranked, gold) == {"map_at_20": pytest.approx(67.77777777777777)}


def test_metric_key_and_target_conventions():
    assert metric_key(20) == "map_at_20"
    assert list(map_at_k({"q": ["g"]}, {"q": ["g"]})) == ["map_at_20"]
    assert map_at_k({"q": ["g"]}, {"q": ["g"]}) == {"map_at_20": 100.0}
    assert (convention_of("mewslix"), convention_of("lareqa")) == (MEWSLIX, LAREQA)
    with pytest.raises(KeyError, match="not a ranking target"):
        convention_of("xnli")


@pytest.mark.parametrize(
    "ranked,gold,k,convention,message",
    [
        ({"q": ["g"]}, {"q": []}, 20, LAREQA, "query 'q': a query without gold ids"),
        ({"q": ["g"]}, {"q": []}, 20, MEWSLIX, "query 'q': a query without gold ids"),
        ({"q": ["g"]}, {"q": "g"}, 20, LAREQA, "gold ids must be a collection of ids"),
        ({"q": "g"}, {"q": ["g"]}, 20, LAREQA, "the ranking must be a sequence of candidate ids"),
        ({"q": ["g"]}, {"q": {"g", "h"}}, 20, MEWSLIX, "first gold id only"),
        ({"q": ["g"]}, {"q": ["g"]}, 0, LAREQA, "k must be a positive integer"),
        ({"q": ["g"]}, {"q": ["g"]}, 20, "trec", "unknown mAP convention 'trec'"),
        ({}, {}, 20, LAREQA, "no queries to score"),
    ],
)
def test_bad_input_is_refused_naming_it(ranked, gold, k, convention, message):
    with pytest.raises(InputError, match=message):
        map_at_k(ranked, gold, k, convention)


def test_lareqas_average_pools_every_question_of_every_language_as_the_reference_does():
    """``utils_lareqa.mean_avg_prec_at_k`` averages over all questions of all languages at
    once: a language that lost a question weighs less. The metric file's average is that
    pooled mean (the languages weighted by their question counts); Mewsli-X's stays the mean
    over languages."""
    from workflow_scripts.evaluation.evaluate import average, language_weights
    from workflow_scripts.spec.tasks import get_task

    predictions = {"de-0": ["g0"], "de-1": ["x0", "g1"], "de-2": X[:20], "el-0": ["x0", "x1", "g3"]}
    golds = {"de-0": ["g0"], "de-1": ["g1"], "de-2": ["g2"], "el-0": ["g3"]}
    langs = {"de": ["de-0", "de-1", "de-2"], "el": ["el-0"]}
    per_lang = {
        lang: map_at_k({q: predictions[q] for q in ids}, {q: golds[q] for q in ids}, 20, LAREQA)
        for lang, ids in langs.items()
    }
    pooled = map_at_k(predictions, golds, 20, LAREQA)["map_at_20"]
    assert pooled == pytest.approx(100 * (1 + 1 / 2 + 0 + 1 / 3) / 4)
    candidates = [{"side": "candidate"}] * 5
    splits = {"test": {lang: [{"side": "query"} for _ in ids] + candidates for lang, ids in langs.items()}}
    weights = language_weights(get_task("lareqa"), splits)
    assert weights == {"test": {"de": 3, "el": 1}}
    assert average(per_lang, (), weights["test"])["map_at_20"] == pytest.approx(pooled)
    assert average(per_lang)["map_at_20"] != pytest.approx(pooled)  # the mean over languages differs
    assert language_weights(get_task("mewslix"), splits) is None
