"""Metrics against hand-computed cases of the official scorers' rules."""

import pytest

from workflow_scripts.evaluation.metrics import (
    accuracy,
    mlqa,
    mlqa_tokens,
    seqeval_f1,
    seqeval_version,
    squad_normalize,
    squad_v1,
    squad_v2,
)
from workflow_scripts.spec.basics import InputError

pytestmark = pytest.mark.unit


def test_squad_normalisation_rules():
    assert squad_normalize("The  Cat, sat!") == "cat sat"
    assert squad_normalize("an apple a day") == "apple day"
    # Only ASCII punctuation is dropped by the SQuAD v1.1 scorer.
    assert squad_normalize("«Hund»") == "«hund»"
    # Articles are whole words only.
    assert squad_normalize("theater") == "theater"


def test_squad_em_f1_max_over_golds_and_mean_over_questions():
    preds = {"q1": "the cat", "q2": "big red cat", "q3": ""}
    golds = {"q1": ["Cat", "a dog"], "q2": ["dog", "red cat"], "q3": ["cat"]}
    scores = squad_v1(preds, golds)
    # q1: EM 1, F1 1. q2: vs "red cat" P=2/3 R=1 F1=0.8, EM 0. q3: empty prediction, 0 and 0.
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8 + 0) / 3)


def test_squad_v2_no_answer():
    golds = {"q1": [], "q2": [], "q3": ["red cat"]}
    preds = {"q1": "", "q2": "cat", "q3": ""}
    scores = squad_v2(preds, golds)
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 / 3)


def test_missing_prediction_ids_are_named():
    with pytest.raises(InputError, match="q2"):
        squad_v1({"q1": "x"}, {"q1": ["x"], "q2": ["y"]})


def test_mlqa_language_specific_articles():
    assert mlqa({"q": "der Hund"}, {"q": ["Hund"]}, "de")["exact_match"] == 100
    assert mlqa({"q": "der Hund"}, {"q": ["Hund"]}, "en")["exact_match"] == 0
    assert mlqa({"q": "el perro"}, {"q": ["perro"]}, "es")["exact_match"] == 100
    assert mlqa({"q": "của tôi"}, {"q": ["tôi"]}, "vi")["exact_match"] == 100
    assert mlqa({"q": "كتاب"}, {"q": ["الكتاب"]}, "ar")["exact_match"] == 100
    # Hindi has no article rule: "the" stays.
    assert mlqa_tokens("the घर", "hi") == ["the", "घर"]


def test_mlqa_unicode_punctuation_and_chinese_characters():
    assert mlqa_tokens("«Hund»—„gut“", "de") == ["hundgut"]
    assert mlqa_tokens("abc北京大学", "zh") == ["abc", "北", "京", "大", "学"]
    # "北京" vs "北京大学": 2 common characters, P = 1, R = 1/2.
    assert mlqa({"q": "北京"}, {"q": ["北京大学"]}, "zh")["f1"] == pytest.approx(100 * 2 / 3)
    with pytest.raises(InputError, match="xx"):
        mlqa_tokens("a", "xx")


def test_seqeval_f1_on_pos_chunks():
    # Contiguous equal tags form one chunk: gold has NOUN(0-1) VERB(2) ADJ(3); the prediction
    # gets two of three chunks right, so P = R = 2/3.
    gold = [["NOUN", "NOUN", "VERB", "ADJ"]]
    pred = [["NOUN", "NOUN", "VERB", "NOUN"]]
    assert seqeval_f1(pred, gold)["f1"] == pytest.approx(100 * 2 / 3)
    with pytest.raises(InputError, match="sentence 0"):
        seqeval_f1([["NOUN"]], gold)


def test_pinned_seqeval_scores_pos_tags_as_whole_types():
    # seqeval 0.0.12 (XTREME's): chunk types are whole tags, so gold VERB(0) X(1) vs predicted
    # SYM(0) X(1) shares one of two chunks: F1 = 0.5. seqeval 1.x strips the first character
    # ("X" loses its type) and scores this 0.
    assert seqeval_version() == "0.0.12"
    assert seqeval_f1([["SYM", "X"]], [["VERB", "X"]])["f1"] == pytest.approx(50.0)


def test_accuracy():
    assert accuracy([0, 1, 2, 2], [0, 1, 1, 2])["accuracy"] == 75
    with pytest.raises(InputError):
        accuracy([], [])
