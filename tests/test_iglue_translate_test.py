"""IGLUE's translate-test protocol: each language's test rows in IGLUE's own machine
translation into English (the release's *_gmt files, tasks/xvnli_gmt.yaml, marvl_gmt.yaml),
scored by the model trained on English, instead of the pipeline's translations. Loaded from
real samples of the release (tests/real_data/xvnli_gmt, marvl_gmt)."""

from __future__ import annotations

import copy

import pytest
from test_loaders_iglue import load
from test_xvnli_target import xvnli_config

from conftest import REPO
from workflow_scripts.workflow import transfer

pytestmark = pytest.mark.unit

REAL = REPO / "tests" / "real_data"


def test_the_translated_xvnli_rows_are_the_test_rows_in_english(tmp_path):
    langs = ["ar", "es", "fr", "ru"]
    original, _ = load("xvnli", langs, tmp_path)
    translated, report = load("xvnli_gmt", langs, tmp_path, folder="xvnli_gmt")
    # the same rows (the unlabelled one dropped alike), ids, labels, images and languages
    assert [(r["id"], r["lang"], r["label"], list(r["images"])) for r in translated] == [
        (r["id"], r["lang"], r["label"], list(r["images"])) for r in original
    ]
    # ... with the hypothesis in English: the Arabic row's text has no Arabic letters left
    first_ar = next(r for r in translated if r["lang"] == "ar")
    assert first_ar["text_a"] == "He wears newspaper on his head."
    assert report["release"]["files"][0] == "ar/test.jsonl"
    caption, _ = load("xvnli_caption_gmt", langs, tmp_path, folder="xvnli_gmt")
    assert caption[0]["text_a"].startswith("A man in a blue collar shirt") and caption[0]["id"] == first_ar["id"]


def test_the_translated_marvl_rows_keep_their_images_and_labels(tmp_path):
    langs = ["id", "sw", "ta", "tr", "zh"]
    original, _ = load("marvl", langs, tmp_path)
    translated, _ = load("marvl_gmt", langs, tmp_path, folder="marvl_gmt")
    assert [(r["id"], r["label"], list(r["images"])) for r in translated] == [
        (r["id"], r["label"], list(r["images"])) for r in original
    ]
    assert all(r["text_a"] != o["text_a"] for r, o in zip(translated, original))
    assert translated[0]["text_a"].startswith("The pot in one photo")


def iglue_translate_test_config(with_translations: bool = True) -> dict:
    config = copy.deepcopy(xvnli_config())
    config["transfer"] = {"settings": {"zero_shot": {}, "translate_test": {}}}
    others = [lang for lang in config["tasks"]["xvnli"]["languages"] if lang != "en"]
    config["tasks"].pop("xvnli_gmt", None)  # (the XVNLI demo config names the demo's)
    if with_translations:
        for task in ("xvnli_gmt", "xvnli_caption_gmt", "xvnli_hypothesis_only_gmt"):
            config["tasks"][task] = {
                "hub": {"path": "floschne/xvnli"},
                "options": {"path": "data/iglue/datasets/XVNLI/annotations_machine-translate"},
                "languages": others,
            }
    return config


def test_translate_test_of_an_iglue_target_reads_its_published_translations():
    config = iglue_translate_test_config()
    languages = [lang for lang in config["tasks"]["xvnli"]["languages"] if lang != "en"]
    for target in ("xvnli", "xvnli_caption", "xvnli_hypothesis_only"):
        plan = transfer.plan(config, "translate_test", target)
        refs = {lang: ref for ref in plan.eval_data["test"] for lang in ref.languages}
        assert refs["en"].path.endswith(f"/data/{target}/test.parquet")  # English: its own rows
        for lang in languages:  # the others: the published English translation, not the pipeline's
            assert refs[lang].path.endswith(f"/data/{target}_gmt/test.parquet") and refs[lang].kind == "published_mt"
        assert {r.name for r in plan.models.values()} == {"en.dev-en"}  # the zero-shot model scores them
    # no translator into English is needed, and nothing is machine-translated by the pipeline
    assert transfer.test_translations(config) == []


def test_translate_test_without_the_translations_entry_stops_naming_it():
    with pytest.raises(transfer.TransferError) as err:
        transfer.plan(iglue_translate_test_config(with_translations=False), "translate_test", "xvnli")
    assert "tasks.xvnli_gmt.options.path" in str(err.value) and "config key transfer.settings.translate_test" in str(
        err.value
    )


def test_the_translated_xflickrco_captions_keep_their_images_in_the_release_order(tmp_path):
    langs = ["de", "ja", "zh"]
    original, _ = load("xflickrco", langs, tmp_path)
    translated, _ = load("xflickrco_gmt", langs, tmp_path, folder="xflickrco_gmt")
    assert [(r["id"], list(r["images"])) for r in translated] == [(r["id"], list(r["images"])) for r in original]
    assert translated[0]["text_a"] == "The man is wearing an orange woolen hat."


def test_translate_test_of_xflickrco_reads_its_published_translations():
    from snakemake.utils import validate

    from workflow_scripts.workflow import config_check, config_layers, grid, grid_checks

    config = config_layers.load([REPO / "tests/configs/xflickrco_demo.yaml"])
    validate(config, str(config_check.schema_for_validation()))
    others = [lang for lang in config["tasks"]["xflickrco"]["languages"] if lang != "en"]
    config["tasks"]["xflickrco_gmt"] = {
        "hub": {"path": "floschne/xflickrco"},
        "languages": others,
        "options": {"path": "x"},
    }
    config["transfer"] = {"settings": {"zero_shot": {}, "translate_test": {}}}
    grid_checks.check_config(config)
    plan = transfer.plan(config, "translate_test", "xflickrco")
    refs = {lang: ref.path for ref in plan.eval_data["test"] for lang in ref.languages}
    assert all(refs[lang].endswith("/data/xflickrco_gmt/test.parquet") for lang in others)
    assert grid.evaluation(config, "xlmr_tiny", "translate_test", "none", "xflickrco", 1)["images"].endswith(
        "/data/images/xflickrco"
    )
