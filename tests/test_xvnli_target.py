"""IGLUE's XVNLI as a zero-shot target with its images: the grid that trains it on SNLI-VE's
English rows with their image features and scores each language with its own test images
(workflow/grid.py, benchmark.py), and the evaluation of a saved visual branch on the real
release rows (tests/real_data/xvnli) through a feature bank (evaluation/evaluate.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, train_log_record, validated_config
from workflow_scripts.data.prepare import prepare, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.evaluation_settings import EvaluationSettings

REAL = REPO / "tests" / "real_data" / "xvnli"
CONFIG = REPO / "tests" / "configs" / "xvnli_demo.yaml"
FEATURE_WIDTH, VISUAL_TOKENS = 8, 3


def xvnli_config() -> dict:
    return validated_config(CONFIG)


# ----- the grid --------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_xvnli_config_trains_on_snli_ve_features_and_scores_with_the_targets_own_images():
    from workflow_scripts.workflow import grid, grid_checks, grid_settings

    config = xvnli_config()
    grid_checks.check_config(config)
    # SNLI-VE's images train (and select) the image arm; XVNLI's own test images score it; the
    # few-shot pool's images (its shots' and its translated dev's) train its 5-shot models
    assert grid.visual_tasks(config) == ["snli_ve", "xvnli", "xvnli_few_shot"]
    data = grid.target_data(config, "xvnli", "en.dev-en")["xvnli"]
    assert data.images.endswith("/data/images/snli_ve")
    assert {ref.path.split("/")[-2] for ref in data.train + data.dev} == {"snli_ve"}
    run = grid.evaluation(config, "xlmr_tiny", "zero_shot", "snli_ve", "xvnli", 1)
    assert run["images"].endswith("/data/images/xvnli")
    # the text arms: ordinary classification targets on their SNLI-VE arm, no images
    assert grid.target_data(config, "xvnli_caption", "en.dev-en")["xvnli_caption"].images is None
    assert "images" not in grid.evaluation(config, "xlmr_tiny", "zero_shot", "none", "xvnli_caption", 1)
    # IGLUE's averages leave English out
    assert grid_settings.eval_settings(config, "xlmr_tiny", "xvnli").average_excludes == ("en",)


@pytest.mark.unit
@pytest.mark.parametrize(
    "change, key, message",
    [
        (lambda c: c.update(benchmark="xtreme"), "targets[0]", "'xvnli' is not a XTREME target"),
    ],
)
def test_the_config_check_names_what_keeps_an_image_target_from_running(change, key, message):
    """(xFlickr&CO's: tests/test_xflickrco_target.py.)"""
    from workflow_scripts.workflow import grid, grid_checks

    config = xvnli_config()
    change(config)
    with pytest.raises(grid.ConfigError) as err:
        grid_checks.check_config(config)
    assert f"config key {key}" in str(err.value) and message in str(err.value)


@pytest.mark.unit
def test_an_image_target_trains_on_english_only():
    """Translate-train and in-language data do not exist for an image target; translate-test
    reads IGLUE's published translations (tests/test_iglue_translate_test.py)."""
    from workflow_scripts.workflow import grid_checks, transfer

    config = xvnli_config()
    config["transfer"] = {"settings": {"zero_shot": {}, "translate_train": {"targets": ["xvnli"]}}}
    with pytest.raises(transfer.TransferError, match="xvnli reads images .* only zero_shot and translate_test"):
        grid_checks.check_transfer(config)


# ----- evaluation on the real rows -------------------------------------------------------------


def real_rows(tmp_path: Path, langs: list[str], task: str = "xvnli") -> Path:
    out = tmp_path / f"{task}_test.parquet"
    options = {"path": str(REAL.parent / task)}
    settings = DataSettings.parse(
        {"source": "local", "hub": {"path": f"floschne/{task}"}, "languages": langs, "options": options}
    )
    prepare(task, "test", settings, out)
    return out


def fake_bank(tmp_path: Path, names: list[str]) -> Path:
    """A feature bank of the named images (seeded random patch features), as embed_images writes it."""
    from workflow_scripts.multimodal.bank import write_bank

    rng = np.random.default_rng(0)
    features = {n: rng.standard_normal((VISUAL_TOKENS, FEATURE_WIDTH)).astype(np.float32) for n in names}
    out = tmp_path / "bank"
    write_bank(out, features, {"encoder": "fake", "kind": "patches"})
    return out


def visual_target_model(tmp_path: Path, encoder_dir: Path, target: str = "xvnli") -> Path:
    """A target model as train_target writes one for an image target: the backbone, its
    tokenizer, heads.pt holding the visual branch, and a train log saying it was saved."""
    from workflow_scripts.models.heads import load_encoder, visual_classifier
    from workflow_scripts.multimodal.prefix import VisualClassificationHead
    from workflow_scripts.spec.tasks import get_task

    model_dir = tmp_path / "model"
    shutil.copytree(encoder_dir, model_dir)
    hidden = load_encoder(model_dir).config.hidden_size
    torch.manual_seed(0)
    task = get_task(target)
    head = VisualClassificationHead(
        torch.zeros(1, VISUAL_TOKENS, FEATURE_WIDTH),
        hidden,
        visual_classifier(task.format, hidden, task.num_labels, 0.0, 0.02),
        0.02,
        task.images_per_example,
    )
    torch.save(torch.nn.ModuleDict({target: head}).state_dict(), model_dir / "heads.pt")
    log = train_log_record(
        best={"score": 50.0, "step": 10},
        visual={
            "tasks": {target: {"images": f"results/x/data/images/{task.train_from}"}},
            "saved": True,
            "where": "heads.pt: projector, slot vectors, classifier",
        },
    )
    (model_dir / "train_log.json").write_text(json.dumps(log))
    return model_dir


@pytest.mark.unit
def test_the_real_xvnli_rows_are_scored_with_their_images_and_iglues_accuracy(tmp_path, demo_encoder_dir):
    from workflow_scripts.evaluation.evaluate import evaluate_run

    langs = ["en", "ar", "es"]
    data = real_rows(tmp_path, langs)
    rows = read_table(data).to_pylist()
    names = sorted({n for r in rows for n in r["images"]})
    bank = fake_bank(tmp_path, names)
    model = visual_target_model(tmp_path, demo_encoder_dir)
    settings = EvaluationSettings(
        languages=tuple(langs), max_length=64, eval_batch_size=8, precision="fp32", average_excludes=("en",)
    )
    result, predictions = evaluate_run("xvnli", {"*": model}, {"test": [(str(data), None)]}, settings, 1, 1, bank)

    visual = result["visual"]
    labelled = {lang: sum(r["lang"] == lang for r in rows) for lang in langs}
    assert visual["rows_with_images"]["test"] == labelled and visual["bank_images"] == len(names)
    assert visual["kind"] == "patches" and visual["branch"].startswith("heads.pt")
    # each release file has one row without a gold label: IGLUE counts it as a wrong answer
    assert result["unlabelled_rows"]["test"] == dict.fromkeys(langs, 1)
    for lang in langs:
        correct = sum(int(p == r["label"]) for p, r in zip(predictions[lang], [r for r in rows if r["lang"] == lang]))
        assert result["scores"]["test"][lang]["accuracy"] == pytest.approx(100 * correct / (labelled[lang] + 1))
    # the average leaves English out, as IGLUE's tables do
    others = [result["scores"]["test"][lang]["accuracy"] for lang in ("ar", "es")]
    assert result["average"]["test"]["accuracy"] == pytest.approx(sum(others) / 2)
    assert result["average_excludes"] == ["en"]


@pytest.mark.unit
def test_an_image_target_refuses_to_score_rows_whose_image_has_no_features(tmp_path, demo_encoder_dir):
    from workflow_scripts.evaluation.evaluate import evaluate_run

    data = real_rows(tmp_path, ["fr"])
    names = sorted({n for r in read_table(data).to_pylist() for n in r["images"]})
    model = visual_target_model(tmp_path, demo_encoder_dir)
    settings = EvaluationSettings(languages=("fr",), max_length=64, eval_batch_size=8, precision="fp32")
    with pytest.raises(InputError, match=rf"xvnli test fr: \d+ rows have no image features .*{names[0]}"):
        evaluate_run(
            "xvnli", {"*": model}, {"test": [(str(data), None)]}, settings, 1, 1, fake_bank(tmp_path, names[1:])
        )
    with pytest.raises(InputError, match="--images must name its test images' features"):
        evaluate_run("xvnli", {"*": model}, {"test": [(str(data), None)]}, settings, 1, 1, None)


@pytest.mark.unit
def test_the_real_marvl_rows_are_scored_with_both_their_images(tmp_path, demo_encoder_dir):
    from workflow_scripts.evaluation.evaluate import evaluate_run

    langs = ["sw", "zh"]
    data = real_rows(tmp_path, langs, "marvl")
    rows = read_table(data).to_pylist()
    assert {len(r["images"]) for r in rows} == {2}  # the left and the right image
    names = sorted({n for r in rows for n in r["images"]})
    model = visual_target_model(tmp_path, demo_encoder_dir, "marvl")
    settings = EvaluationSettings(
        languages=tuple(langs), max_length=64, eval_batch_size=8, precision="fp32", average_excludes=("en",)
    )
    result, predictions = evaluate_run(
        "marvl", {"*": model}, {"test": [(str(data), None)]}, settings, 1, 1, fake_bank(tmp_path, names)
    )
    assert result["visual"]["rows_with_images"]["test"] == {
        lang: sum(r["lang"] == lang for r in rows) for lang in langs
    }
    assert "unlabelled_rows" not in result  # MaRVL's accuracy is the plain one
    for lang in langs:
        gold = [r["label"] for r in rows if r["lang"] == lang]
        correct = sum(int(p == g) for p, g in zip(predictions[lang], gold))
        assert result["scores"]["test"][lang]["accuracy"] == pytest.approx(100 * correct / len(gold))
