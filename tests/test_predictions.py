"""Prediction files in the XTREME leaderboard layout, read back with the rules of the
official evaluate.py (google-research/xtreme): one label per line; tags one per line with a
blank line after each sentence; QA a JSON object {question id: answer}; BUCC one
tab-separated pair per line; Tatoeba one index per line."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import read_label_file, read_tag_file
from workflow_scripts.evaluation import predictions
from workflow_scripts.reporting import submission
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.basics import InputError

pytestmark = pytest.mark.unit


def test_classification_labels_are_spelled_as_in_the_label_files(tmp_path):
    predictions.write_predictions("xnli", {"de": [0, 2, 1]}, tmp_path / "xnli")
    assert read_label_file(tmp_path / "xnli/test-de.tsv") == ["entailment", "contradiction", "neutral"]
    predictions.write_predictions("pawsx", {"fr": [1, 0]}, tmp_path / "pawsx")
    assert read_label_file(tmp_path / "pawsx/test-fr.tsv") == ["1", "0"]


def test_tags_one_per_line_and_a_blank_line_after_each_sentence(tmp_path):
    tags = [["PROPN", "VERB", "PUNCT"], ["NOUN"], ["DET", "NOUN"]]
    predictions.write_predictions("udpos", {"en": tags}, tmp_path / "udpos")
    assert read_tag_file(tmp_path / "udpos/test-en.tsv") == tags
    assert (tmp_path / "udpos/test-en.tsv").read_text().endswith("NOUN\n\n")


def test_qa_answers_keyed_by_the_dataset_ids(tmp_path):
    predictions.write_predictions(
        "xquad", {"de": {"56be4db0acb8001400a502ec-de": "Denver Broncos", "q2-de": ""}}, tmp_path / "xquad"
    )
    assert json.loads((tmp_path / "xquad/test-de.json").read_text()) == {
        "56be4db0acb8001400a502ec": "Denver Broncos",
        "q2": "",
    }
    predictions.write_predictions("tydiqa", {"sw": {"swahili-123-0": "Nairobi"}}, tmp_path / "tydiqa")
    assert json.loads((tmp_path / "tydiqa/test-sw.json").read_text()) == {"swahili-123-0": "Nairobi"}


def test_retrieval_files(tmp_path):
    predictions.write_predictions(
        "bucc", {"de": [("de-000000004", "en-000000075"), ("de-1", "en-2")]}, tmp_path / "bucc"
    )
    assert [tuple(l.split("\t")) for l in read_label_file(tmp_path / "bucc/test-de.tsv")] == [
        ("de-000000004", "en-000000075"),
        ("de-1", "en-2"),
    ]
    predictions.write_predictions("tatoeba", {"sw": [3, 0, 1]}, tmp_path / "tatoeba")
    assert read_label_file(tmp_path / "tatoeba/test-sw.tsv") == ["3", "0", "1"]


def test_collect_takes_the_best_run_per_target_and_names_it(tmp_path):
    runs = {}
    for config, seed in (("none", 1), ("mnli", 2), ("mnli", 1)):
        for target, value in (("xnli", [0]), ("bucc", [("de-1", "en-1")]), ("tatoeba", [seed])):
            folder = tmp_path / "metrics" / config / target / f"seed{seed}.predictions"
            predictions.write_predictions(target, {"de": value}, folder)
            runs[f"{config}/{target}/seed{seed}"] = folder
    best = tmp_path / "best.csv"
    pd.DataFrame(
        [("xnli", "mnli", 2, "accuracy", 70.0), ("bucc", "mnli", 1, "f1", 40.0)],
        columns=["target", "intermediate", "seed", "metric", "value"],
    ).to_csv(best, index=False)
    manifest = submission.collect(best, ["xnli", "bucc", "tatoeba", "xquad"], runs, tmp_path / "submission")
    out = tmp_path / "submission"
    assert sorted(p.name for p in out.iterdir()) == ["bucc2018", "manifest.json", "tatoeba", "xnli"]
    assert manifest["tasks"]["xnli"]["source"] == str(runs["mnli/xnli/seed2"])
    assert (
        manifest["tasks"]["tatoeba"]["seed"] == 1 and "best model for bucc" in manifest["tasks"]["tatoeba"]["chosen_by"]
    )
    assert read_label_file(out / "tatoeba/test-de.tsv") == ["1"]
    assert manifest["missing"] == ["xquad"]
    assert json.loads((out / "manifest.json").read_text()) == manifest


def test_a_retrieval_target_without_dev_and_without_a_donor_takes_the_baseline(tmp_path):
    """A backbone whose grid has Tatoeba but no BUCC: the pretrained backbone's predictions
    (the baseline config; its lowest seed), named in the manifest."""
    runs = {}
    for config, seed in (("none", 2), ("none", 1), ("mnli", 1)):
        folder = tmp_path / "metrics" / config / "tatoeba" / f"seed{seed}.predictions"
        predictions.write_predictions("tatoeba", {"de": [seed]}, folder)
        runs[f"{config}/tatoeba/seed{seed}"] = folder
    best = tmp_path / "best.csv"
    pd.DataFrame(columns=["target", "intermediate", "seed", "metric", "value"]).to_csv(best, index=False)
    manifest = submission.collect(best, ["tatoeba"], runs, tmp_path / "submission", baseline="none")
    assert manifest["missing"] == []
    assert (manifest["tasks"]["tatoeba"]["intermediate"], manifest["tasks"]["tatoeba"]["seed"]) == ("none", 1)
    assert "baseline config 'none'" in manifest["tasks"]["tatoeba"]["chosen_by"]
    assert read_label_file(tmp_path / "submission/tatoeba/test-de.tsv") == ["1"]
    # without a baseline to fall back on, the target is reported missing, not guessed
    assert submission.collect(best, ["tatoeba"], runs, tmp_path / "other")["missing"] == ["tatoeba"]


def test_collect_refuses_a_best_run_without_predictions(tmp_path):
    best = tmp_path / "best.csv"
    pd.DataFrame(
        [("xnli", "mnli", 2, "accuracy", 70.0)], columns=["target", "intermediate", "seed", "metric", "value"]
    ).to_csv(best, index=False)
    with pytest.raises(InputError, match="no prediction folder for the best xnli run mnli/xnli/seed2"):
        submission.collect(best, ["xnli"], {}, tmp_path / "submission")
    assert not (tmp_path / "submission").exists(), "nothing half-written"


def test_xcopa_one_json_label_per_line_as_read_xcopa_reads_it(tmp_path):
    """evaluate.py's multi_choice group (XCOPA) takes test-<lang>.jsonl; read_xcopa keeps each
    line's "label" and accuracy compares it with == to the gold's integer label."""
    predictions.write_predictions("xcopa", {"et": [0, 1, 1], "ht": [1]}, tmp_path / "xcopa")
    assert predictions.suffix("xcopa") == "jsonl"
    assert sorted(p.name for p in (tmp_path / "xcopa").iterdir()) == ["test-et.jsonl", "test-ht.jsonl"]
    with open(tmp_path / "xcopa/test-et.jsonl") as f:
        labels = [json.loads(row)["label"] for row in f]
    assert labels == [0, 1, 1] and all(type(x) is int for x in labels)
    with pytest.raises(InputError, match="choice index 2 outside 0..1"):
        predictions.write_predictions("xcopa", {"et": [0, 2]}, tmp_path / "bad")


@pytest.mark.parametrize("target", ["mewslix", "lareqa"])
def test_ranking_targets_one_json_object_of_ranked_candidate_ids(tmp_path, target):
    """Mewsli-X: evaluate.py's read_squad loads the JSON object {example id: [entity ids]}
    and mewslix_map20 scores it; LAReQA (no official reader) takes the same layout."""
    from workflow_scripts.evaluation.ranking import MEWSLIX, map_at_k

    ranked = {"q1": ["Q5", "Q1"] + [f"Q{i}" for i in range(10, 28)], "q2": ["Q9", "Q2"], "q-ü": ["Qü"]}
    predictions.write_predictions(target, {"ar": ranked}, tmp_path / target)
    assert predictions.suffix(target) == "json"
    path = tmp_path / target / "test-ar.json"
    read = json.loads(path.read_text(encoding="utf-8"))
    assert read == ranked and "data" not in read and list(read) == list(ranked)
    assert len(path.read_text(encoding="utf-8").splitlines()) == 5, "one query per line"
    gold = {"q1": ["Q1"], "q2": ["Q3"], "q-ü": ["Qü"]}
    assert map_at_k(read, gold, 20, MEWSLIX) == {"map_at_20": pytest.approx(50.0)}  # (1/2 + 0 + 1) / 3


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"data": ["Q1"]}, "a query id 'data' cannot be written"),
        ({"q1": "Q1"}, "query 'q1': expected a list of candidate ids"),
        ({"q1": [1, 2]}, "query 'q1': expected a list of candidate ids"),
        ([["Q1"]], "ranking predictions must map query ids"),
    ],
)
def test_ranking_predictions_the_official_reader_would_misread_are_refused(tmp_path, bad, message):
    with pytest.raises(InputError, match=message):
        predictions.write_predictions("mewslix", {"ar": bad}, tmp_path / "mewslix")
    assert not (tmp_path / "mewslix").exists()


def test_collect_names_folders_as_the_benchmarks_leaderboard(tmp_path):
    runs = {}
    for target, value in (("xcopa", [1, 0]), ("mewslix", {"q1": ["Q1"]})):
        folder = tmp_path / "metrics" / "mnli" / target / "seed1.predictions"
        predictions.write_predictions(target, {"tr": value}, folder)
        runs[f"mnli/{target}/seed1"] = folder
    best = tmp_path / "best.csv"
    pd.DataFrame(
        [("xcopa", "mnli", 1, "accuracy", 60.0), ("mewslix", "mnli", 1, "map_at_20", 40.0)],
        columns=["target", "intermediate", "seed", "metric", "value"],
    ).to_csv(best, index=False)
    out = tmp_path / "submission" / "xtreme_r"
    manifest = submission.collect(best, ["xcopa", "mewslix", "lareqa"], runs, out, bench="xtreme_r")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "mewslix", "xcopa"]
    assert (out / "xcopa/test-tr.jsonl").read_text() == '{"label": 1}\n{"label": 0}\n'
    assert json.loads((out / "mewslix/test-tr.json").read_text()) == {"q1": ["Q1"]}
    assert manifest["benchmark"] == "xtreme_r" and manifest["layout"].startswith("XTREME-R leaderboard")
    assert manifest["missing"] == ["lareqa"]
    # XTREME's leaderboard calls BUCC bucc2018 (the default benchmark)
    assert benchmark.XTREME.leaderboard_names == {"bucc": "bucc2018"}


def test_a_format_without_a_leaderboard_file_is_named(tmp_path):
    """Every target format writes its files through one entry of LEADERBOARD_FILES; a task whose
    format has none (VQA's answers: no XTREME or IGLUE leaderboard) is refused naming it."""
    assert predictions.suffix("xnli") == "tsv" and predictions.suffix("xquad") == "json"
    with pytest.raises(InputError, match="vqa_v2: no leaderboard format for visual_answer"):
        predictions.write_predictions("vqa_v2", {"en": ["yes"]}, tmp_path / "out")
    assert not (tmp_path / "out").exists(), "nothing half-written"
