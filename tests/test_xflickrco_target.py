"""IGLUE's xFlickr&CO as a zero-shot target: the grid that trains it on Flickr30k's English
Karpathy split with its image features and scores each language with the test images'
(workflow/grid.py, transfer.py), and the evaluation of a saved visual branch on the real
release rows (tests/real_data/xflickrco, xflickrco_empty_captions) through a feature bank:
every caption against every image, Recall@1/5/10 both ways and their mean
(evaluation/evaluate.py, retrieval.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, train_log_record, validated_config
from workflow_scripts.data.prepare import prepare, read_table
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.evaluation_settings import EvaluationSettings

REAL = REPO / "tests" / "real_data"
CONFIG = REPO / "tests" / "configs" / "xflickrco_demo.yaml"
KS = (1, 5, 10)
# The planted branch reads two feature columns: a planted score and a constant (see planted_bank).
FEATURE_WIDTH, VISUAL_TOKENS = 2, 3


def xflickrco_config() -> dict:
    return validated_config(CONFIG)


# ----- the grid --------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_config_check_accepts_xflickrco_trained_on_flickr30k_and_scored_with_its_own_images():
    from workflow_scripts.workflow import grid, grid_checks, grid_settings

    config = xflickrco_config()
    grid_checks.check_config(config)
    # Flickr30k's images train (and select) the branch; xFlickr&CO's own test images score it
    assert grid.visual_tasks(config) == ["flickr30k", "xflickrco"]
    data = grid.target_data(config, "xflickrco", "en.dev-en")["xflickrco"]
    assert data.images.endswith("/data/images/flickr30k")
    assert [ref.path.split("/")[-2:] for ref in data.train + data.dev] == [
        ["flickr30k", "train.parquet"],
        ["flickr30k", "dev.parquet"],
    ]
    assert {lang for ref in data.train + data.dev for lang in ref.languages} == {"en"}
    run = grid.evaluation(config, "xlmr_tiny", "zero_shot", "none", "xflickrco", 1)
    assert run["images"].endswith("/data/images/xflickrco")
    assert [ref["path"].split("/")[-2:] for ref in run["data"]["test"]] == [["xflickrco", "test.parquet"]]
    # IGLUE's averages leave English out
    assert grid_settings.eval_settings(config, "xlmr_tiny", "xflickrco").average_excludes == ("en",)


@pytest.mark.unit
def test_only_zero_shot_applies_to_xflickrco_and_the_refusal_names_the_key():
    from workflow_scripts.workflow import grid, grid_checks

    config = xflickrco_config()
    config["transfer"] = {"settings": {"zero_shot": {}, "translate_train": {"targets": ["xflickrco"]}}}
    with pytest.raises(grid.ConfigError) as err:
        grid_checks.check_config(config)
    message = str(err.value)
    assert "config key transfer.settings.translate_train.targets[0]" in message
    assert "xflickrco reads images" in message and "only zero_shot and translate_test" in message


def without_images_from_the_hub(config: dict, task: str) -> None:
    """Data from the Hub (the demo's sw, which xFlickr&CO lacks, dropped) and no image folder for ``task``."""
    config["data"]["source"] = "hub"
    config["tasks"]["xflickrco"]["languages"] = ["en", "de", "ru"]
    del config["tasks"][task]["images"]


@pytest.mark.unit
@pytest.mark.parametrize(
    "change, key, message",
    [
        (lambda c: c["tasks"].pop("flickr30k"), "targets[0] (trains on / selects with 'flickr30k')", "no entry"),
        (
            lambda c: without_images_from_the_hub(c, "xflickrco"),
            "tasks.xflickrco.images",
            "the directory of xflickrco's images is needed",
        ),
        (lambda c: c.update(benchmark="xtreme"), "targets[0]", "'xflickrco' is not a XTREME target"),
    ],
)
def test_the_config_check_names_what_keeps_xflickrco_from_running(change, key, message):
    from workflow_scripts.workflow import grid, grid_checks

    config = xflickrco_config()
    change(config)
    with pytest.raises(grid.ConfigError) as err:
        grid_checks.check_config(config)
    assert f"config key {key}" in str(err.value) and message in str(err.value)


# ----- evaluation on the real rows -------------------------------------------------------------


def real_rows(tmp_path: Path, folder: str, langs: list[str]) -> Path:
    """The committed release lines of ``folder`` prepared as the test split's data file."""
    out = tmp_path / f"{folder}_test.parquet"
    options = {"path": str(REAL / folder)}
    settings = DataSettings.parse(
        {"source": "local", "hub": {"path": "floschne/xflickrco"}, "languages": langs, "options": options}
    )
    prepare("xflickrco", "test", settings, out)
    return out


def release_images(data: Path) -> list[str]:
    """The distinct images of the data file in the order of their first row (the release's)."""
    return list(dict.fromkeys(r["images"][0] for r in read_table(data).to_pylist()))


def planted_bank(tmp_path: Path, planted: dict[str, float]) -> Path:
    """A feature bank whose image ``name`` has every visual token ``(planted[name], 1)``."""
    from workflow_scripts.multimodal.bank import write_bank

    features = {n: np.tile(np.float32([score, 1.0]), (VISUAL_TOKENS, 1)) for n, score in planted.items()}
    out = tmp_path / "bank"
    write_bank(out, features, {"encoder": "planted", "kind": "patches"})
    return out


def planted_branch(hidden: int):
    """A retrieval branch whose similarities are planted: the caption side is the constant
    unit vector e0 (zero weights, bias e0), so every caption ranks the images alike; the
    image side passes the two feature columns to dimensions 0 and 1 through GELU, so an image
    with tokens (s, 1) has the cosine GELU(s) / |(GELU(s), GELU(1))| with every caption,
    which grows with s > 0."""
    from torch import nn

    from workflow_scripts.multimodal.prefix import VisualClassificationHead

    text = nn.Linear(hidden, hidden)
    head = VisualClassificationHead(torch.zeros(1, VISUAL_TOKENS, FEATURE_WIDTH), hidden, text, 0.02, 1)
    with torch.no_grad():
        for module in (*head.projector[::2], text):
            module.weight.zero_()
            module.bias.zero_()
        head.projector[0].weight[:FEATURE_WIDTH, :FEATURE_WIDTH] = torch.eye(FEATURE_WIDTH)
        head.projector[2].weight.copy_(torch.eye(hidden))
        head.slots.zero_()
        text.bias[0] = 1.0
    return head


def saved_target_model(tmp_path: Path, encoder_dir: Path, head) -> Path:
    """A target model as train_target writes one for xFlickr&CO: the backbone, its tokenizer,
    heads.pt holding the visual branch, and a train log saying it was saved."""
    model_dir = tmp_path / "model"
    shutil.copytree(encoder_dir, model_dir)
    torch.save(torch.nn.ModuleDict({"xflickrco": head}).state_dict(), model_dir / "heads.pt")
    log = train_log_record(
        best={"score": 1.0, "step": 10},
        visual={
            "tasks": {"xflickrco": {"images": "results/x/data/images/flickr30k"}},
            "saved": True,
            "where": "heads.pt: projector, slot vectors, classifier",
        },
    )
    (model_dir / "train_log.json").write_text(json.dumps(log))
    return model_dir


def evaluate(data: Path, langs: list[str], model: Path, bank: Path):
    from workflow_scripts.evaluation.evaluate import evaluate_run

    settings = EvaluationSettings(
        languages=tuple(langs), max_length=64, eval_batch_size=8, precision="fp32", average_excludes=("en",)
    )
    return evaluate_run("xflickrco", {"*": model}, {"test": [(str(data), None)]}, settings, 1, 1, bank)


def hidden_size(encoder_dir: Path) -> int:
    return json.loads((encoder_dir / "config.json").read_text())["hidden_size"]


@pytest.mark.unit
def test_planted_similarities_score_every_caption_against_every_image_both_ways(tmp_path, demo_encoder_dir):
    """Every caption shares one planted ranking of the images, the release's last image
    first. A caption's gold image then ranks where its planted score puts it, and each image
    is one caption's gold, so text to image Recall@k is k of the 40 captions; image to text,
    every caption ties on an image and the tie goes to the release's first line, so it is k
    of the 40 images (the first k). The score counts all 40 of each language."""
    langs = ["en", "de", "ja", "zh"]
    data = real_rows(tmp_path, "xflickrco", langs)
    images = release_images(data)
    assert len(images) == 40
    bank = planted_bank(tmp_path, {name: 1.0 + 0.1 * k for k, name in enumerate(images)})
    model = saved_target_model(tmp_path, demo_encoder_dir, planted_branch(hidden_size(demo_encoder_dir)))
    result, predictions = evaluate(data, langs, model, bank)

    expected = {}
    for k in KS:
        expected |= {f"ir_recall_at_{k}": 100 * k / 40, f"tr_recall_at_{k}": 100 * k / 40}
        expected[f"mean_recall_at_{k}"] = 100 * k / 40
    expected["recall_at_1"] = expected["ir_recall_at_1"]
    for lang in langs:
        assert result["scores"]["test"][lang] == pytest.approx(expected)
        assert predictions[lang] == [images[-1]] * 40  # the planted top image, for every caption
    assert result["visual"]["rows_with_images"]["test"] == dict.fromkeys(langs, 40)
    assert result["visual"]["bank_images"] == 40 and result["visual"]["trained_on"].endswith("images/flickr30k")
    assert result["average_excludes"] == ["en"] and result["metric"] == result["primary"] == "recall_at_1"


@pytest.mark.unit
def test_the_empty_captions_are_scored_with_their_images(tmp_path, demo_encoder_dir):
    """German line 1,960 and Indonesian line 901 have an empty caption: it stays a row, so
    each language is scored 3 captions x 3 images. With the first image planted on top, text
    to image R@1 is the one caption of that image (1 of 3); image to text, the captions
    tie and the first line takes every image's first place (1 of 3); every gold is within 5."""
    langs = ["de", "id"]
    data = real_rows(tmp_path, "xflickrco_empty_captions", langs)
    rows = read_table(data).to_pylist()
    assert sorted(r["lang"] for r in rows if r["text_a"] == "") == langs
    planted = {}
    for lang in langs:  # each language's first image on top
        own = dict.fromkeys(r["images"][0] for r in rows if r["lang"] == lang)
        planted |= {name: 2.0 - 0.5 * k for k, name in enumerate(own)}
    bank = planted_bank(tmp_path, planted)
    model = saved_target_model(tmp_path, demo_encoder_dir, planted_branch(hidden_size(demo_encoder_dir)))
    result, predictions = evaluate(data, langs, model, bank)
    assert result["visual"]["rows_with_images"]["test"] == {"de": 3, "id": 3}
    for lang in langs:
        scores = result["scores"]["test"][lang]
        assert scores["ir_recall_at_1"] == scores["tr_recall_at_1"] == pytest.approx(100 / 3)
        assert scores["ir_recall_at_5"] == scores["tr_recall_at_5"] == scores["mean_recall_at_10"] == 100.0
        first = next(r["images"][0] for r in rows if r["lang"] == lang)
        assert predictions[lang] == [first] * 3
    # no English in the rows: the average is over both languages
    assert result["average"]["test"]["recall_at_1"] == pytest.approx(100 / 3)


def rank_with_ties_to_the_lower_index(scores: np.ndarray, gold: int) -> int:
    """The 0-based place of ``scores[gold]`` when higher scores come first and equal ones by index."""
    return int((scores > scores[gold]).sum() + (scores[:gold] == scores[gold]).sum())


def branch_vectors(model_dir: Path, bank: Path, data: Path, lang: str, pooled: list | None = None) -> np.ndarray:
    """Each row's caption and image vectors side by side, as the saved branch computes them in
    evaluation (the text projection's inputs, the pooled captions, appended to ``pooled``)."""
    from workflow_scripts.data.features import encode
    from workflow_scripts.evaluation.evaluate import _load_target_model, attach_images, predict_logits
    from workflow_scripts.multimodal.bank import FeatureBank
    from workflow_scripts.precision import Precision
    from workflow_scripts.spec.task_options import ScoringOptions
    from workflow_scripts.spec.tasks import get_task

    task, loaded, cpu = get_task("xflickrco"), FeatureBank.load(bank), torch.device("cpu")
    model, tokenizer = _load_target_model(task, model_dir, cpu, loaded)
    if pooled is not None:
        model.heads["xflickrco"].classifier.register_forward_hook(lambda m, args, out: pooled.append(args[0]))
    rows = attach_images([r for r in read_table(data).to_pylist() if r["lang"] == lang], loaded, lang)
    encoded = encode(task, tokenizer, rows, ScoringOptions(max_length=64, eval_batch_size=8, precision="fp32"), False)
    vectors = predict_logits(model, task, encoded, 8, tokenizer.pad_token_id, cpu, Precision("fp32"))
    return np.stack(vectors).astype(np.float64)


def random_branch_spreading_the_captions(tmp_path: Path, encoder_dir: Path, bank: Path, data: Path) -> Path:
    """A saved branch with random weights whose text projection subtracts the captions' mean
    pooled state: the untrained encoder's first token barely reads the caption, and centring
    spreads the captions' vectors apart so that the ranks are not ties."""
    from workflow_scripts.models.heads import visual_classifier
    from workflow_scripts.multimodal.prefix import VisualClassificationHead
    from workflow_scripts.spec.tasks import VISUAL_RETRIEVAL

    hidden = hidden_size(encoder_dir)
    torch.manual_seed(0)
    text = visual_classifier(VISUAL_RETRIEVAL, hidden, 0, 0.0, 1.0)
    head = VisualClassificationHead(torch.zeros(1, VISUAL_TOKENS, FEATURE_WIDTH), hidden, text, 1.0, 1)
    model_dir = saved_target_model(tmp_path, encoder_dir, head)
    pooled: list = []
    branch_vectors(model_dir, bank, data, "en", pooled)
    with torch.no_grad():
        text.bias.copy_(-text.weight @ torch.cat(pooled).mean(0))
    torch.save(torch.nn.ModuleDict({"xflickrco": head}).state_dict(), model_dir / "heads.pt")
    return model_dir


@pytest.mark.unit
def test_the_scores_of_a_random_branch_agree_with_a_count_over_its_own_vectors(tmp_path, demo_encoder_dir):
    """A branch with random weights over random image features: each Recall@k equals the
    count, over the model's own caption and image vectors (one image per release line, in
    the release's order), of captions whose image is within the first k of its row, and of
    images whose caption is within the first k of its column, ties to the lower index."""
    data = real_rows(tmp_path, "xflickrco", ["en"])
    rng = np.random.default_rng(0)
    bank = planted_bank(tmp_path, {name: float(rng.uniform(0.5, 3.0)) for name in release_images(data)})
    model_dir = random_branch_spreading_the_captions(tmp_path, demo_encoder_dir, bank, data)
    result, _ = evaluate(data, ["en"], model_dir, bank)

    vectors = branch_vectors(model_dir, bank, data, "en")
    half = vectors.shape[1] // 2
    similarity = vectors[:, :half] @ vectors[:, half:].T  # caption i's image is image i
    assert len(np.unique(similarity)) > 0.9 * similarity.size  # hardly a tie: the captions have their own vectors
    to_image = [rank_with_ties_to_the_lower_index(similarity[i], i) for i in range(40)]
    to_text = [rank_with_ties_to_the_lower_index(similarity[:, j], j) for j in range(40)]
    scores = result["scores"]["test"]["en"]
    for k in KS:
        assert scores[f"ir_recall_at_{k}"] == pytest.approx(100 * sum(r < k for r in to_image) / 40)
        assert scores[f"tr_recall_at_{k}"] == pytest.approx(100 * sum(r < k for r in to_text) / 40)
        mean = (scores[f"ir_recall_at_{k}"] + scores[f"tr_recall_at_{k}"]) / 2
        assert scores[f"mean_recall_at_{k}"] == pytest.approx(mean)
