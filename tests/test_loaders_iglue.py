"""IGLUE's multimodal targets (loaders/iglue.py) on samples of the release's own files
(tests/real_data/{xvnli,marvl,xflickrco}, see its README), their official scores
(evaluation/metrics.py, evaluation/retrieval.py), and the config check that keeps xFlickr&CO
out of the grid until its target phase is built."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from workflow_scripts.data.prepare import prepare, provenance, read_table
from workflow_scripts.evaluation.metrics import average_without_english, iglue_accuracy
from workflow_scripts.evaluation.retrieval import caption_image_index, image_text_recall, retrieval_ranks
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.tasks import NLI_LABELS, get_task

REAL = REPO / "tests" / "real_data"
XVNLI_LANGS = ["en", "ar", "es", "fr", "ru"]
MARVL_LANGS = ["id", "sw", "ta", "tr", "zh"]
XFLICKRCO_LANGS = ["en", "de", "ja", "zh"]


def release(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load(task: str, langs: list[str], tmp_path: Path, folder: str | None = None) -> tuple[list[dict], dict]:
    settings = DataSettings.parse(
        {
            "source": "local",
            "local_root": str(REPO / "demo" / "hub"),
            "hub": {"path": f"floschne/{task.split('_')[0]}"},
            "languages": langs,
            "options": {"path": str(REAL / (folder or task.split("_")[0]))},
        }
    )
    out = tmp_path / f"{task}.parquet"
    prepare(task, "test", settings, out)
    return read_table(out).to_pylist(), provenance(out)["report"]


# ----- loaders on the real rows -------------------------------------------------------------


@pytest.mark.unit
def test_xvnli_gives_three_arms_per_language_that_differ_in_the_premise_only(tmp_path):
    image, report = load("xvnli", XVNLI_LANGS, tmp_path)
    caption, _ = load("xvnli_caption", XVNLI_LANGS, tmp_path)
    alone, _ = load("xvnli_hypothesis_only", XVNLI_LANGS, tmp_path)
    # 30 rows per language, one without a gold label (2424111022.jpg#4r1c, "-") dropped
    assert len(image) == len(caption) == len(alone) == 5 * 29
    assert [(r["id"], r["label"]) for r in image] == [(r["id"], r["label"]) for r in caption]
    assert [(r["id"], r["label"], r["text_a"]) for r in image] == [(r["id"], r["label"], r["text_a"]) for r in alone]
    assert not any(r["text_b"] for r in alone)
    assert report["load_counts"]["ar:no_gold_label"] == 1
    assert report["release"]["files"] == [f"{lang}/test.jsonl" for lang in XVNLI_LANGS]
    for lang in XVNLI_LANGS:
        raw = [r for r in release(REAL / "xvnli" / lang / "test.jsonl") if r["gold_label"] != "-"]
        mine = [r for r in image if r["lang"] == lang]
        texts = [(r["text_a"], r["text_b"]) for r in caption if r["lang"] == lang]
        assert [r["id"] for r in mine] == [f"{lang}-{r['pairID']}" for r in raw]
        assert [r["label"] for r in mine] == [NLI_LABELS.index(r["gold_label"]) for r in raw]
        assert [r["images"] for r in mine] == [[f"{r['Flikr30kID']}.jpg"] for r in raw]
        # the caption is the release's own, in the row's language
        assert texts == [(r["sentence1"].strip(), r["sentence2"].strip()) for r in raw]
    # the languages are parallel: same pairs, labels and images, other text
    by_lang = {lang: [r for r in image if r["lang"] == lang] for lang in XVNLI_LANGS}
    for lang in XVNLI_LANGS[1:]:
        assert [(r["id"][3:], r["label"], r["images"]) for r in by_lang[lang]] == [
            (r["id"][3:], r["label"], r["images"]) for r in by_lang["en"]
        ]
    en, ar = by_lang["en"][0], by_lang["ar"][0]
    assert en["text_a"] == "He is wearing the newspaper on his head." and en["text_a"] != ar["text_a"]
    assert by_lang["en"][0]["images"] == ["759822302.jpg"] and len({r["images"][0] for r in by_lang["en"]}) == 10
    assert {NLI_LABELS[r["label"]] for r in by_lang["fr"]} == set(NLI_LABELS)


@pytest.mark.unit
def test_marvl_rows_are_nlvr2s_schema_with_marvl_image_paths(tmp_path):
    rows, report = load("marvl", MARVL_LANGS, tmp_path)
    assert len(rows) == 5 * 20 and {r["lang"] for r in rows} == set(MARVL_LANGS)
    assert get_task("marvl").labels == get_task("nlvr2").labels == ("False", "True")
    first = rows[0]
    assert first == {
        "id": "id-0",
        "lang": "id",
        "text_a": "Panci di salah satu foto berada di atas kompor yang tidak menyala, sedangkan di foto lainnya, "
        "api di bawah panci menyala.",
        "images": ["id/images/39-Panci/39-0.jpg", "id/images/39-Panci/39-11.jpg"],
        "label": 1,
    }
    for lang in MARVL_LANGS:
        raw = release(REAL / "marvl" / f"marvl-{lang}.jsonl")
        mine = [r for r in rows if r["lang"] == lang]
        assert [r["id"] for r in mine] == [r["id"] for r in raw] and all(r["id"].startswith(f"{lang}-") for r in mine)
        assert [r["label"] for r in mine] == [int(r["label"]) for r in raw]
        assert [r["images"][1].split("/")[-1] for r in mine] == [r["right_img"] for r in raw]
        assert report["load_counts"][f"{lang}:True"] == report["load_counts"][f"{lang}:False"] == 10


@pytest.mark.unit
def test_xflickrco_rows_name_flickr30k_and_coco_images_in_the_release_order(tmp_path):
    rows, report = load("xflickrco", XFLICKRCO_LANGS, tmp_path)
    assert len(rows) == 4 * 40
    for lang in XFLICKRCO_LANGS:
        mine = [r for r in rows if r["lang"] == lang]
        raw = release(REAL / "xflickrco" / lang / "test.jsonl")
        assert [r["text_a"] for r in mine] == [r["sentences"][0].strip() for r in raw]
        images, gold = caption_image_index([r["images"][0] for r in mine])
        assert len(images) == 40 and gold.tolist() == list(range(40))
        assert images[0] == "flickr30k-images/1007129816.jpg"
        assert images[20] == "coco-images/val2014/COCO_val2014_000000391895.jpg"
        assert report["load_counts"][f"{lang}:images"] == report["load_counts"][f"{lang}:captions"] == 40
    # the same 40 images in every language, in the same order
    order = {lang: [r["images"][0] for r in rows if r["lang"] == lang] for lang in XFLICKRCO_LANGS}
    assert all(order[lang] == order["en"] for lang in XFLICKRCO_LANGS)


@pytest.mark.unit
def test_an_empty_xflickrco_caption_is_kept_with_its_image_as_iglue_scores_it(tmp_path):
    """German line 1,960 and Indonesian line 901 of IGLUE's test files have an empty caption;
    IGLUE scores 2,000 captions against 2,000 images in both, so the row stays (its text
    empty, counted) and its image stays in the similarity matrix."""
    rows, report = load("xflickrco", ["de", "id"], tmp_path, folder="xflickrco_empty_captions")
    for lang, image in (
        ("de", "coco-images/val2014/COCO_val2014_000000122239.jpg"),
        ("id", "flickr30k-images/6312211170.jpg"),
    ):
        mine = [r for r in rows if r["lang"] == lang]
        assert [r["text_a"] == "" for r in mine] == [False, True, False]
        assert mine[1]["images"] == [image]
        images, gold = caption_image_index([r["images"][0] for r in mine])
        assert len(images) == 3 and gold.tolist() == [0, 1, 2]
        assert report["load_counts"][f"{lang}:empty_caption"] == 1
        assert report["load_counts"][f"{lang}:captions"] == report["load_counts"][f"{lang}:images"] == 3


@pytest.mark.unit
def test_missing_release_files_and_other_splits_are_refused_by_name(tmp_path):
    with pytest.raises(InputError, match=r"marvl release file .*marvl-ta\.jsonl does not exist"):
        load("marvl", ["ta"], tmp_path, folder="xvnli")
    with pytest.raises(InputError, match="tasks.<task>.options.path"):
        settings = DataSettings.parse({"source": "local", "hub": {"path": "floschne/xvnli"}, "languages": ["ar"]})
        prepare("xvnli", "test", settings, tmp_path / "x")
    with pytest.raises(InputError, match="no split 'dev'"):
        prepare(
            "xflickrco",
            "dev",
            DataSettings.parse({"source": "local", "hub": {"path": "floschne/xflickrco"}}),
            tmp_path / "x",
        )


# ----- official scores ------------------------------------------------------------------------


@pytest.mark.unit
def test_iglue_accuracy_counts_the_unlabelled_rows_as_wrong():
    assert iglue_accuracy([0, 1, 2, 2], [0, 1, 2, 0]) == {"accuracy": 75.0}
    assert iglue_accuracy([0, 1, 2, 2], [0, 1, 2, 0], unlabelled=1) == {"accuracy": 60.0}
    # IGLUE's published English XVNLI accuracy of mUNITER (results/xvnli/XVNLI_0.csv: 76.375) is
    # 889 correct of all 1,164 rows, the 14 without a gold label among the denominator
    assert round(iglue_accuracy([0] * 889 + [1] * 261, [0] * 1150, unlabelled=14)["accuracy"], 3) == 76.375
    with pytest.raises(InputError):
        iglue_accuracy([0], [0, 1])


@pytest.mark.unit
def test_iglue_average_leaves_english_out():
    # results/xvnli/XVNLI_0.csv, mUNITER: en 76.375, ar 46.735, es 56.959, fr 59.364, ru 51.718, avg 53.694
    row = {"en": 76.375, "ar": 46.735, "es": 56.959, "fr": 59.364, "ru": 51.718}
    assert average_without_english(row) == pytest.approx(53.694)
    # results/marvl/MaRVL_0.csv, mUNITER: id sw ta tr zh, avg 53.7228
    marvl = {"en": 71.91, "id": 54.787, "sw": 51.173, "ta": 52.657, "tr": 54.661, "zh": 55.336}
    assert average_without_english(marvl) == pytest.approx(53.7228)
    with pytest.raises(InputError, match="no language other than English"):
        average_without_english({"en": 50.0})


@pytest.mark.unit
def test_recall_at_1_both_ways_on_a_hand_computed_matrix():
    # 4 captions x 3 images; captions 1 and 2 describe image 1
    similarity = np.array(
        [
            [0.9, 0.1, 0.2],  # caption 0 -> image 0 (gold 0): rank 0
            [0.5, 0.6, 0.1],  # caption 1 -> image 1 (gold 1): rank 0
            [0.3, 0.2, 0.7],  # caption 2 -> image 2 (gold 1, below 0.7 and 0.3): rank 2
            [0.1, 0.2, 0.3],  # caption 3 -> image 2 (gold 2): rank 0
        ]
    )
    gold = [0, 1, 1, 2]
    to_image, to_text = retrieval_ranks(similarity, gold)
    assert to_image.tolist() == [0, 0, 2, 0]
    # image 0: caption 0 first; image 1: caption 1 first; image 2: caption 2 first, its gold
    # caption 3 second
    assert to_text.tolist() == [0, 0, 1]
    scores = image_text_recall(similarity, gold, ks=(1, 2, 3))
    assert scores["ir_recall_at_1"] == scores["recall_at_1"] == scores["ir_recall_at_2"] == 75.0
    assert scores["tr_recall_at_1"] == pytest.approx(200 / 3)
    assert scores["tr_recall_at_2"] == scores["ir_recall_at_3"] == 100.0
    # ties go to the lower index
    assert retrieval_ranks(np.ones((2, 2)), [0, 1])[0].tolist() == [0, 1]
    with pytest.raises(InputError, match="without a caption"):
        retrieval_ranks(np.ones((2, 3)), [0, 1])


@pytest.mark.unit
def test_the_ranks_agree_with_a_brute_force_count():
    rng = np.random.default_rng(0)
    gold = np.concatenate([np.arange(12), rng.integers(0, 12, 18)])
    similarity = rng.integers(0, 5, size=(30, 12)).astype(float)  # many ties
    to_image, to_text = retrieval_ranks(similarity, gold)
    for c, g in enumerate(gold):
        row = similarity[c]
        assert to_image[c] == sum(row[j] > row[g] or (row[j] == row[g] and j < g) for j in range(12))
    for i in range(12):
        col = similarity[:, i]
        ranks = [
            sum(col[d] > col[c] or (col[d] == col[c] and d < c) for d in range(30)) for c in np.where(gold == i)[0]
        ]
        assert to_text[i] == min(ranks)


@pytest.mark.unit
def test_xflickrco_real_rows_score_100_with_a_planted_match_and_0_when_permuted(tmp_path):
    rows, _ = load("xflickrco", ["de"], tmp_path)
    images, gold = caption_image_index([r["images"][0] for r in rows])
    perfect = np.eye(len(rows))[:, : len(images)] + 0.01
    assert image_text_recall(perfect, gold) == {"ir_recall_at_1": 100.0, "tr_recall_at_1": 100.0, "recall_at_1": 100.0}
    shifted = np.roll(perfect, 1, axis=1)  # every caption's best image is the next one
    assert image_text_recall(shifted, gold)["ir_recall_at_1"] == image_text_recall(shifted, gold)["tr_recall_at_1"] == 0
    # the first 10 Flickr30k captions swapped with the first 10 COCO captions: 20 of 40 keep their image
    swap = np.arange(len(rows))
    swap[:10], swap[20:30] = np.arange(20, 30), np.arange(10)
    mixed = perfect[swap]
    scores = image_text_recall(mixed, gold)
    assert scores["ir_recall_at_1"] == scores["tr_recall_at_1"] == 50.0


@pytest.mark.unit
def test_accuracy_on_the_real_xvnli_and_marvl_rows(tmp_path):
    rows, _ = load("xvnli", ["es"], tmp_path)
    labels = [r["label"] for r in rows]
    assert iglue_accuracy(labels, labels, unlabelled=1)["accuracy"] == pytest.approx(100 * 29 / 30)
    rotated = [(y + 1) % 3 for y in labels]
    assert iglue_accuracy(rotated, labels, unlabelled=1)["accuracy"] == 0.0
    marvl, _ = load("marvl", ["tr"], tmp_path)
    gold = [r["label"] for r in marvl]
    assert iglue_accuracy([1] * len(gold), gold)["accuracy"] == 50.0  # balanced: 10 true, 10 false


# ----- config check ---------------------------------------------------------------------------


def demo_config(extra_target: str) -> dict:
    from snakemake.utils import validate

    from workflow_scripts.workflow import config_check, config_layers, grid_checks

    config = config_layers.load([REPO / "config.yaml"])
    config["targets"] = [*config["targets"], extra_target]
    family = extra_target.split("_")[0]
    config["tasks"][extra_target] = {
        "hub": {"path": f"floschne/{family}"},
        "languages": ["ar"] if family == "xvnli" else ["de"],
        "options": {"path": f"tests/real_data/{family}"},
    }
    schema = str(config_check.schema_for_validation())
    grid_checks.check_schema(config, schema)
    validate(config, schema)
    return config


@pytest.mark.unit
@pytest.mark.parametrize(
    "target, message",
    [
        # XVNLI, its arms, MaRVL and xFlickr&CO run as targets of the IGLUE benchmark
        # (tests/test_xvnli_target.py, tests/test_xflickrco_target.py)
        ("xflickrco", "'xflickrco' is not a XTREME target (benchmark: xtreme"),
        ("xvnli", "'xvnli' is not a XTREME target (benchmark: xtreme"),
        ("marvl", "'marvl' is not a XTREME target"),
        ("xvnli_caption", "'xvnli_caption' is not a XTREME target"),
    ],
)
def test_the_config_check_refuses_iglue_targets_naming_the_key(target, message):
    from workflow_scripts.workflow import grid, grid_checks

    config = demo_config(target)
    with pytest.raises(grid.ConfigError) as err:
        grid_checks.check_config(config)
    index = len(config["targets"]) - 1
    assert f"config key targets[{index}]: {message}" in str(err.value)
