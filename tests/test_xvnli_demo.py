"""XVNLI's three arms as zero-shot targets end to end (tests/configs/xvnli_demo.yaml): the demo
encoder trained on SNLI-VE's English arms, the image arm with its visual branch saved and
scored on the demo's XVNLI release with its own images, in every demo language."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import run_config_from_scratch

pytestmark = pytest.mark.integration

CONFIG = "tests/configs/xvnli_demo.yaml"
RESULTS = "results/xvnli_demo"
LANGS = ["en", "de", "ru", "sw"]
ARMS = ["xvnli", "xvnli_caption", "xvnli_hypothesis_only"]
CONFIGS = ["none", "snli_ve", "snli_caption"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return run_config_from_scratch(tmp_path_factory, CONFIG) / RESULTS


def test_every_arm_has_a_metric_file_scoring_every_language(run):
    for name in CONFIGS:
        for arm in ARMS:
            metrics = json.loads((run / f"metrics/xlmr_tiny/zero_shot/{name}/{arm}/seed1.json").read_text())
            assert metrics["languages"] == LANGS and sorted(metrics["scores"]["test"]) == sorted(LANGS)
            # one row per language has no gold label: IGLUE scores it as wrong
            assert metrics["unlabelled_rows"] == {"test": dict.fromkeys(LANGS, 1)}
            for scores in metrics["scores"]["test"].values():
                assert (scores["accuracy"] * 58 / 100) == pytest.approx(round(scores["accuracy"] * 58 / 100))
            # IGLUE's average leaves English out
            others = [metrics["scores"]["test"][lang]["accuracy"] for lang in LANGS if lang != "en"]
            assert metrics["average"]["test"]["accuracy"] == pytest.approx(sum(others) / len(others))
            assert ("visual" in metrics) == (arm == "xvnli")


def test_the_image_arm_saves_its_visual_branch_and_evaluation_reads_the_test_images(run):
    for name in CONFIGS:
        model = run / f"target/xlmr_tiny/{name}/xvnli/en.dev-en/seed1/model"
        log = json.loads((model / "train_log.json").read_text())
        assert log["visual"]["saved"] is True
        assert log["visual"]["tasks"]["xvnli"]["images"] == f"{RESULTS}/data/images/snli_ve"
        heads = torch.load(model / "heads.pt", weights_only=True)
        assert any(key.startswith("xvnli.projector.") for key in heads)
        assert not any("bank" in key for key in heads)  # the features are never saved
        visual = json.loads((run / f"metrics/xlmr_tiny/zero_shot/{name}/xvnli/seed1.json").read_text())["visual"]
        assert visual["images"] == f"{RESULTS}/data/images/xvnli" and visual["bank_images"] == 19
        assert visual["rows_with_images"] == {"test": dict.fromkeys(LANGS, 57)}
        assert visual["trained_on"] == f"{RESULTS}/data/images/snli_ve"
    # the text arms are text-only: no visual branch in their models
    log = json.loads((run / "target/xlmr_tiny/snli_ve/xvnli_caption/en.dev-en/seed1/model/train_log.json").read_text())
    assert log["visual"] is None and log["intermediate_visual"]["text_only"] is True


def test_the_tables_have_the_xvnli_columns_and_say_english_is_not_averaged(run):
    main = (run / "tables/xlmr_tiny/main.md").read_text()
    header = next(line for line in main.splitlines() if line.startswith("| Intermediate task"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [*ARMS, "Avg"]
    assert "Every average leaves out en, as IGLUE averages" in main
    per_language = (run / "tables/xlmr_tiny/per_language.md").read_text()
    for arm in ARMS:
        assert f"## {arm} (accuracy, test" in per_language
    assert (run / "submission/xlmr_tiny/iglue").is_dir()
    # the image-vs-text comparison pairs SNLI-VE's image and caption arms on XVNLI's arms
    modality = (run / "tables/xlmr_tiny/modality.md").read_text()
    assert "| snli_ve | snli_caption |" in modality


def test_the_leakage_check_flags_the_demo_worlds_shared_english_sentences(run):
    """The demo world writes every scene's sentences from the same templates (scene_world.py),
    so XVNLI's English test sentences recur in SNLI-VE's training rows, while its images and
    its translated rows do not: the check between stages finds exactly that, and the tables
    and metric files carry it."""
    for task in ("snli_ve", "snli_caption"):
        for arm in ARMS:
            report = json.loads((run / f"data/leakage/{task}/{arm}.json").read_text())
            assert report["overlap"] and report["images"]["shared"] == 0 and report["texts"]["shared"] > 0
            affected = report["rows_affected_by_language"]
            assert affected["en"] > 0 and all(affected[lang] == 0 for lang in ("de", "ru", "sw"))
            metric = json.loads((run / f"metrics/xlmr_tiny/zero_shot/{task}/{arm}/seed1.json").read_text())
            assert metric["leakage"] == [
                {
                    "task": task,
                    "target": arm,
                    "images": 0,
                    "texts": report["texts"]["shared"],
                    "rows_affected": report["rows_affected"],
                    "target_rows": report["target_rows"],
                }
            ]
    baseline = json.loads((run / "metrics/xlmr_tiny/zero_shot/none/xvnli/seed1.json").read_text())
    assert "leakage" not in baseline  # no intermediate task, nothing to share
    main = (run / "tables/xlmr_tiny/main.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in main.splitlines() if line.startswith("| ")}
    assert rows["snli_ve"].count("§") == 3 and "§" not in rows["none"]
    assert "snli_ve on xvnli: snli_ve shares 0 images and" in main


def test_translate_test_scores_the_releases_english_rows_with_the_zero_shot_model(run):
    """IGLUE's translate-test: the baseline's zero-shot XVNLI model scores the release's
    English copy of each language's rows (the demo's: the scene world's own sentences), with
    the same test images; English keeps its own rows."""
    translated = json.loads((run / "metrics/xlmr_tiny/translate_test/none/xvnli/seed1.json").read_text())
    zero_shot = json.loads((run / "metrics/xlmr_tiny/zero_shot/none/xvnli/seed1.json").read_text())
    assert sorted(translated["scores"]["test"]) == sorted(LANGS)
    assert translated["visual"]["images"] == f"{RESULTS}/data/images/xvnli"
    assert translated["visual"]["rows_with_images"] == {"test": dict.fromkeys(LANGS, 57)}
    assert translated["scores"]["test"]["en"] == zero_shot["scores"]["test"]["en"]
    assert {ref["path"].split("/")[-2] for ref in translated["settings"]["transfer"]["data"]["test"]} == {
        "xvnli",
        "xvnli_gmt",
    }
    # the demo's translations are the English sentences: every language scores as English does
    for lang in ("de", "ru", "sw"):
        assert translated["scores"]["test"][lang] == zero_shot["scores"]["test"]["en"]


def test_five_shots_continue_the_zero_shot_model_at_the_best_of_two_learning_rates(run):
    """IGLUE's few-shot protocol (few_shot:5): per language, the zero-shot model and its head
    trained on the 5-shot rows at each learning rate, the best on the translated dev kept."""
    metrics = json.loads((run / "metrics/xlmr_tiny/few_shot-5/none/xvnli/seed1.json").read_text())
    assert sorted(metrics["scores"]["test"]) == ["de", "en"]
    models = metrics["models"]
    assert models["en"]["recipe"] == "en.dev-en" and models["de"]["recipe"] == "fs5-de.dev-de"
    assert models["de"]["train"][0]["shots"] == 5 and models["de"]["dev"][0]["kind"] == "published_mt"
    logs = run.parent.parent / "logs/xvnli_demo"
    for lang in ("de",):
        recipe = f"fs5-{lang}.dev-{lang}"
        model = run / f"target/xlmr_tiny/none/xvnli/{recipe}/seed1/model"
        selection = json.loads((model / "sweep_selection.json").read_text())
        assert sorted(selection["scores"]) == ["lr0.0001", "lr0.0005"] and selection["selected_on"] == f"dev-{lang}"
        assert selection["selected"] == max(selection["scores"], key=selection["scores"].get)
        assert metrics["sweep"][str(model.relative_to(run.parent.parent))] == selection
        log = json.loads((model / "train_log.json").read_text())
        # 5 shots of the language (5 scenes x 3 hypotheses): one batch of 16 an epoch, 20
        # epochs, the model selected at the end of each
        assert log["total_steps"] == 20 and log["throughput"]["examples"] == 20 * 15
        assert [h["step"] for h in log["history"]] == list(range(1, 21))
        assert log["settings"]["continue_head"] == {"from": "xvnli", "to": "xvnli"}
        assert log["visual"]["tasks"]["xvnli"]["images"] == f"{RESULTS}/data/images/xvnli_few_shot"
        started = (logs / f"train_few_shot_candidate/xlmr_tiny/none/xvnli/{recipe}/seed1/lr0.0005.log").read_text()
        assert (
            "head xvnli continues from xvnli's in results/xvnli_demo/target/xlmr_tiny/none/xvnli/en.dev-en/seed1/model"
            in started
        )
    settings = (run / "tables/xlmr_tiny/settings.md").read_text()
    assert "| few_shot:5 | 1 |" in settings
