"""SNLI-VE's text-only controls (loaders/multimodal.py) read from SNLI-VE's own rows: the arms
share ids, labels and splits and differ in the premise only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflow_scripts.data.prepare import prepare, provenance, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.tasks import NLI_LABELS

pytestmark = pytest.mark.unit

REAL = Path(__file__).parent / "real_data" / "snli_ve" / "snli_ve_dev.jsonl"


def mirror(tmp_path: Path, rows: list[dict], split: str = "validation") -> DataSettings:
    folder = tmp_path / "hub" / "necla-ml/SNLI-VE" / "default"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return DataSettings.parse(
        {"source": "local", "local_root": str(tmp_path / "hub"), "hub": {"path": "necla-ml/SNLI-VE"}}
    )


def load(task: str, settings: DataSettings, tmp_path: Path, split: str = "dev") -> tuple[list[dict], dict]:
    out = tmp_path / f"{task}-{split}.parquet"
    prepare(task, split, settings, out)
    return read_table(out).to_pylist(), provenance(out)["report"]


def test_real_snli_ve_rows_give_paired_arms_that_differ_in_the_premise_only(tmp_path):
    real = [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines()]
    settings = mirror(tmp_path, real)
    caption, caption_report = load("snli_caption", settings, tmp_path)
    alone, _ = load("hypothesis_only", settings, tmp_path)
    assert [r["id"] for r in caption] == [r["id"] for r in alone] == [r["pairID"] for r in real]
    assert (
        [r["label"] for r in caption]
        == [r["label"] for r in alone]
        == [NLI_LABELS.index(r["gold_label"]) for r in real]
    )
    assert [(r["text_a"], r["text_b"]) for r in caption] == [(r["sentence1"], r["sentence2"]) for r in real]
    assert [r["text_a"] for r in alone] == [r["sentence2"] for r in real] and not any(r["text_b"] for r in alone)
    # the image arm: the same ids, labels and hypotheses, the Flickr30k image as premise
    visual, _ = load("snli_ve", settings, tmp_path)
    assert [(r["id"], r["label"], r["text_a"]) for r in visual] == [(r["id"], r["label"], r["text_a"]) for r in alone]
    assert [r["images"] for r in visual] == [[f"{r['Flickr30K_ID']}.jpg"] for r in real]
    # the gold label decides, not the letter the pair id ends in
    row = next(r for r in caption if r["id"] == "2248275918.jpg#3r1c")
    assert NLI_LABELS[row["label"]] == "neutral"
    assert caption_report["load_counts"] == {"entailment": 6, "neutral": 6, "contradiction": 4}


def test_the_hub_schema_is_read_and_unlabelled_rows_are_dropped_and_counted(tmp_path):
    rows = [
        {"filename": "1.jpg", "premise": "A dog runs.", "hypothesis": "An animal moves.", "label": 0},
        {"filename": "1.jpg", "premise": "A dog runs.", "hypothesis": "A cat sleeps.", "label": -1},
        {"filename": "2.jpg", "premise": "Two men talk.", "hypothesis": "People are silent.", "label": 2},
    ]
    caption, report = load("snli_caption", mirror(tmp_path, rows, "train"), tmp_path, "train")
    assert [(r["id"], r["label"]) for r in caption] == [("snli_ve-train-0", 0), ("snli_ve-train-2", 2)]
    assert report["load_counts"]["no_gold_label"] == 1


def test_a_row_in_neither_schema_is_named(tmp_path):
    with pytest.raises(InputError, match="snli_ve dev row 0"):
        load("hypothesis_only", mirror(tmp_path, [{"text": "x"}]), tmp_path)


def test_the_release_files_are_read_from_a_folder_and_a_missing_one_says_how_to_build_it(tmp_path):
    from workflow_scripts.data.prepare import prepare, read_table

    release = tmp_path / "snli_ve"
    release.mkdir()
    (release / "snli_ve_dev.jsonl").write_text(REAL.read_text(encoding="utf-8"), encoding="utf-8")
    settings = DataSettings.parse(
        {"source": "hub", "hub": {"path": "HuggingFaceM4/SNLI-VE"}, "options": {"path": str(release)}}
    )
    n = prepare("snli_ve", "dev", settings, tmp_path / "dev.parquet")
    assert n == 16 and read_table(tmp_path / "dev.parquet").column("images").to_pylist()[0][0].endswith(".jpg")
    with pytest.raises(
        InputError, match="has neither snli_ve_train.jsonl nor IGLUE's train.jsonl: build the files with"
    ):
        prepare("snli_ve", "train", settings, tmp_path / "train.parquet")


REAL_IGLUE_EN = Path(__file__).parent / "real_data" / "xvnli" / "en" / "test.jsonl"


def test_iglues_english_files_spell_the_image_field_flikr30kid_and_a_row_without_it_is_refused(tmp_path):
    """IGLUE's copy of the English SNLI-VE files (datasets/XVNLI/annotations/en/<split>.jsonl)
    names the image Flikr30kID (its real English XVNLI rows, which share that layout, stand in
    for a split here); read as the release, every image is named from it, and a row with
    neither spelling stops the step naming the file, the row and the field."""
    release = tmp_path / "iglue_en"
    release.mkdir()
    (release / "dev.jsonl").write_text(REAL_IGLUE_EN.read_text(encoding="utf-8"), encoding="utf-8")
    real = [json.loads(line) for line in REAL_IGLUE_EN.read_text(encoding="utf-8").splitlines()]
    settings = DataSettings.parse(
        {"source": "hub", "hub": {"path": "HuggingFaceM4/SNLI-VE"}, "options": {"path": str(release)}}
    )
    prepare("snli_ve", "dev", settings, tmp_path / "dev.parquet")
    images = [r["images"][0] for r in read_table(tmp_path / "dev.parquet").to_pylist()]
    labelled = [r for r in real if r["gold_label"] not in ("-", "")]
    assert images == [f"{r['Flikr30kID']}.jpg" for r in labelled] and "None.jpg" not in images
    del real[2]["Flikr30kID"]
    (release / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in real), encoding="utf-8")
    with pytest.raises(InputError, match=r"dev\.jsonl row 2: no image id \(field Flickr30K_ID or Flikr30kID\)"):
        prepare("snli_ve", "dev", settings, tmp_path / "again.parquet")


REAL_NLVR2 = Path(__file__).parent / "real_data" / "nlvr2" / "dev.json"


def test_real_nlvr2_rows_give_the_statement_its_two_images_and_the_label(tmp_path):
    from workflow_scripts.data.prepare import prepare, read_table

    settings = DataSettings.parse(
        {"source": "hub", "hub": {"path": "lil-lab/nlvr"}, "options": {"path": str(REAL_NLVR2.parent)}}
    )
    n = prepare("nlvr2", "dev", settings, tmp_path / "dev.parquet")
    rows = read_table(tmp_path / "dev.parquet").to_pylist()
    real = [json.loads(line) for line in REAL_NLVR2.read_text(encoding="utf-8").splitlines()]
    assert n == len(real) == 30
    first = rows[0]
    assert first["id"] == "dev-850-0-0" and first["label"] == 0  # "False"
    assert first["images"] == ["dev/dev-850-0-img0.png", "dev/dev-850-0-img1.png"]
    assert [r["label"] for r in rows] == [("False", "True").index(r["label"]) for r in real]


def test_nlvr2_train_images_sit_in_their_bucket_folder_and_a_bad_row_is_dropped_and_counted(tmp_path):
    from workflow_scripts.data.loaders.multimodal import nlvr2_images

    assert nlvr2_images({"identifier": "train-10171-0-1", "directory": 37}, "row") == [
        "train/37/train-10171-0-img0.png",
        "train/37/train-10171-0-img1.png",
    ]
    with pytest.raises(InputError, match="identifier 'x-1'"):
        nlvr2_images({"identifier": "x-1"}, "row")
    from workflow_scripts.data.prepare import prepare, provenance

    (tmp_path / "dev.json").write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"identifier": "dev-1-0-0", "sentence": "Both images show dogs.", "label": "True"},
                {"identifier": "dev-1-0-1", "sentence": "", "label": "False"},
                {"identifier": "dev-2-0-0", "sentence": "The left image shows a cat.", "label": "maybe"},
            ]
        )
        + "\n"
    )
    settings = DataSettings.parse(
        {"source": "hub", "hub": {"path": "lil-lab/nlvr"}, "options": {"path": str(tmp_path)}}
    )
    assert prepare("nlvr2", "dev", settings, tmp_path / "dev.parquet") == 1
    assert provenance(tmp_path / "dev.parquet")["report"]["load_counts"] == {"True": 1, "no_label_or_sentence": 2}


REAL_VQA = Path(__file__).parent / "real_data" / "vqa_v2"


def test_real_vqa_v2_questions_meet_their_ten_normalised_answers_and_coco_image(tmp_path):
    from workflow_scripts.data.prepare import prepare, read_table
    from workflow_scripts.data.vqa_answers import vqa_accuracy

    settings = DataSettings.parse(
        {"source": "hub", "hub": {"path": "visualqa/vqa_v2"}, "options": {"path": str(REAL_VQA)}}
    )
    assert prepare("vqa_v2", "train", settings, tmp_path / "train.parquet") == 3
    rows = read_table(tmp_path / "train.parquet").to_pylist()
    first = rows[0]
    assert first["id"] == "458752000" and first["text_a"] == "What is this photo taken looking through?"
    assert first["images"] == ["train2014/COCO_train2014_000000458752.jpg"] and len(first["answers"]) == 10
    assert vqa_accuracy("net", first["answers"]) == 1.0 and vqa_accuracy("mesh", first["answers"]) == pytest.approx(0.3)
    with pytest.raises(InputError, match="v2_OpenEnded_mscoco_val2014_questions.json does not exist"):
        prepare("vqa_v2", "dev", settings, tmp_path / "dev.parquet")
