"""xFlickr&CO as a zero-shot target end to end (tests/configs/xflickrco_demo.yaml): the demo
encoder trained contrastively on the demo's English Flickr30k with its visual branch saved,
selected on Flickr30k's English dev split, and scored on the demo's xFlickr&CO release in en,
de, ru and sw: every caption of a language against every test image, both directions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_config_from_scratch

pytestmark = pytest.mark.integration

CONFIG = "tests/configs/xflickrco_demo.yaml"
RESULTS = "results/xflickrco_demo"
LANGS = ["en", "de", "ru", "sw"]
IMAGES = 24  # one caption per image in every language (demo/make_iglue_demo.py)
MODEL = "target/xlmr_tiny/none/xflickrco/en.dev-en/seed1/model"
METRICS = "metrics/xlmr_tiny/zero_shot/none/xflickrco/seed1.json"
RELEASE = REPO / "demo/hub/e-bug/iglue/datasets/xFlickrCO/annotations"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return run_config_from_scratch(tmp_path_factory, CONFIG) / RESULTS


def test_every_caption_of_every_language_is_scored_against_every_image_both_ways(run):
    metrics = json.loads((run / METRICS).read_text())
    assert metrics["languages"] == LANGS and metrics["metric"] == metrics["primary"] == "recall_at_1"
    visual = metrics["visual"]
    assert visual["images"] == f"{RESULTS}/data/images/xflickrco" and visual["bank_images"] == IMAGES
    assert visual["rows_with_images"] == {"test": dict.fromkeys(LANGS, IMAGES)}
    # the release's empty German caption is a scored row, counted in the load report
    report = metrics["data_provenance"]["test"][0]["provenance"]["report"]["load_counts"]
    assert report["de:empty_caption"] == 1 and report["de:captions"] == IMAGES
    for lang in LANGS:
        scores = metrics["scores"]["test"][lang]
        assert scores["recall_at_1"] == scores["ir_recall_at_1"]
        for direction in ("ir", "tr"):
            recalls = [scores[f"{direction}_recall_at_{k}"] for k in (1, 5, 10)]
            assert recalls == sorted(recalls)  # a gold within the first k is within any more
            for value in recalls:  # a count out of every caption (image), none left out
                assert value * IMAGES / 100 == pytest.approx(round(value * IMAGES / 100))
        for k in (1, 5, 10):
            mean = (scores[f"ir_recall_at_{k}"] + scores[f"tr_recall_at_{k}"]) / 2
            assert scores[f"mean_recall_at_{k}"] == pytest.approx(mean)
    # IGLUE's average leaves English out
    others = [metrics["scores"]["test"][lang]["tr_recall_at_5"] for lang in LANGS if lang != "en"]
    assert metrics["average"]["test"]["tr_recall_at_5"] == pytest.approx(sum(others) / len(others))
    assert metrics["average_excludes"] == ["en"]


def test_each_captions_top_image_is_written_in_the_release_order(run):
    bank = json.loads((run / METRICS).read_text())["visual"]["bank_images"]
    folder = run / METRICS.replace(".json", ".predictions")
    for lang in LANGS:
        predicted = (folder / f"test-{lang}.tsv").read_text().splitlines()
        release = (RELEASE / lang / "test.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(predicted) == len(release) == bank
        assert all(name.startswith(("flickr30k-images/", "coco-images/val2014/")) for name in predicted)


def test_the_model_trains_on_flickr30k_and_saves_its_visual_branch(run):
    log = json.loads((run / MODEL / "train_log.json").read_text())
    assert log["visual"]["saved"] is True
    assert log["visual"]["tasks"]["xflickrco"]["images"] == f"{RESULTS}/data/images/flickr30k"
    heads = torch.load(run / MODEL / "heads.pt", weights_only=True)
    assert any(key.startswith("xflickrco.projector.") for key in heads)
    hidden = heads["xflickrco.classifier.weight"].shape[0]
    assert heads["xflickrco.classifier.weight"].shape == (hidden, hidden)  # the caption's projection
    assert not any("bank" in key for key in heads)  # the features are never saved
    models = json.loads((run / METRICS).read_text())["models"]
    for lang in LANGS:  # one English model for every language, selected on Flickr30k's dev split
        assert [ref["path"] for ref in models[lang]["train"]] == [f"{RESULTS}/data/flickr30k/train.parquet"]
        assert [ref["path"] for ref in models[lang]["dev"]] == [f"{RESULTS}/data/flickr30k/dev.parquet"]
        assert models[lang]["selection"]["score"] == models[lang]["selection"]["scores"]["xflickrco"]["recall_at_1"]


def test_the_tables_have_the_xflickrco_column(run):
    main = (run / "tables/xlmr_tiny/main.md").read_text()
    assert "| Intermediate task | xflickrco | Avg |" in main
    assert "Every average leaves out en, as IGLUE averages" in main
    per_language = (run / "tables/xlmr_tiny/per_language.md").read_text()
    assert "## xflickrco (recall_at_1, test" in per_language
