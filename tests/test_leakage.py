"""Leakage between stages (data/leakage.py) on real rows: SNLI-VE's dev pairs against XVNLI's
test pairs (tests/real_data), with overlaps planted in copies of the intermediate rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import REPO
from workflow_scripts.data import leakage
from workflow_scripts.data.prepare import prepare, read_table
from workflow_scripts.spec.data_settings import DataSettings, LeakageSettings

REAL = REPO / "tests" / "real_data"
XVNLI_LANGS = ["en", "ar", "es", "fr", "ru"]


def _prepare(task: str, split: str, settings: DataSettings, out: Path) -> Path:
    prepare(task, split, settings, out)
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("leakage")
    release = out / "snli_ve"
    release.mkdir()
    shutil.copy(REAL / "snli_ve" / "snli_ve_dev.jsonl", release / "snli_ve_dev.jsonl")
    snli_ve = DataSettings.parse(
        {"source": "hub", "hub": {"path": "HuggingFaceM4/SNLI-VE"}, "options": {"path": str(release)}}
    )
    xvnli = DataSettings.parse(
        {
            "source": "local",
            "local_root": str(REPO / "demo" / "hub"),
            "hub": {"path": "floschne/xvnli"},
            "languages": XVNLI_LANGS,
            "options": {"path": str(REAL / "xvnli")},
        }
    )
    return {
        "snli_ve": _prepare("snli_ve", "dev", snli_ve, out / "snli_ve.parquet"),
        "snli_caption": _prepare("snli_caption", "dev", snli_ve, out / "snli_caption.parquet"),
        "xvnli": _prepare("xvnli", "test", xvnli, out / "xvnli.parquet"),
        "xvnli_caption": _prepare("xvnli_caption", "test", xvnli, out / "xvnli_caption.parquet"),
    }


def _report(intermediate, target, **settings):
    return leakage.overlap_report([intermediate], [target], LeakageSettings(**settings), "t", "x")


@pytest.mark.unit
def test_image_names_reduce_to_the_datasets_own_ids():
    assert {leakage.image_key(n) for n in ("flickr30k-images/123.jpg", "123.jpg#2", "123", "123.JPG")} == {"123"}
    assert leakage.image_key("coco-images/val2014/COCO_val2014_000000391895.jpg") == "coco:391895"
    assert leakage.image_key("COCO_train2014_000000391895.jpg") == "coco:391895"  # one COCO image, any split
    assert leakage.image_key("id/images/1-Ikan/1-1.jpg") == "1-1"
    assert leakage.text_key("  A  Man sleeps. ") == leakage.text_key("a man sleeps") == "a man sleeps"


@pytest.mark.unit
def test_snli_ve_dev_shares_nothing_with_xvnli_test(tables):
    """SNLI-VE's splits are image-disjoint and XVNLI's test set is built on SNLI-VE's test
    split: the real dev rows share neither image nor text with it."""
    for task, target in (("snli_ve", "xvnli"), ("snli_caption", "xvnli_caption")):
        report = _report(read_table(tables[task]), read_table(tables[target]))
        assert not report["overlap"] and report["rows_affected"] == 0
        assert report["intermediate_rows"] == 16 and report["target_rows"] == 5 * 29


@pytest.mark.unit
def test_a_planted_image_is_found_in_every_language_that_tests_on_it(tables):
    target = read_table(tables["xvnli"])
    planted_image = target.column("images")[0].as_py()[0]  # 759822302.jpg, the first English row's
    same_image = sum(1 for names in target.column("images").to_pylist() if names == [planted_image])
    intermediate = read_table(tables["snli_ve"])
    images = intermediate.column("images").to_pylist()
    images[3] = [f"flickr30k-images/{planted_image}"]  # spelt as a Karpathy split names it
    planted = intermediate.set_column(intermediate.schema.get_field_index("images"), "images", pa.array(images))
    report = _report(planted, target)
    assert report["overlap"] and report["images"]["shared"] == 1 and report["texts"]["shared"] == 0
    assert report["images"]["examples"] == [leakage.image_key(planted_image)]
    # the image is the premise of a few pairs in each of the five languages: translated rows
    # share their image, not their text
    assert report["rows_affected"] == same_image and same_image >= 5
    assert set(report["rows_affected_by_language"]) == set(XVNLI_LANGS)
    assert all(n == same_image // 5 for n in report["rows_affected_by_language"].values())
    assert "1 of the target's" in leakage.describe(report) and f"{same_image} of 145 test rows" in leakage.describe(
        report
    )


@pytest.mark.unit
def test_a_planted_caption_is_found_and_short_stock_sentences_are_not(tables):
    target = read_table(tables["xvnli_caption"])
    english = [r for r in target.to_pylist() if r["lang"] == "en"]
    caption = english[0]["text_a"]
    intermediate = read_table(tables["snli_caption"])
    texts = intermediate.column("text_a").to_pylist()
    texts[0] = caption.upper() + "  "  # case and spacing do not hide it
    planted = intermediate.set_column(intermediate.schema.get_field_index("text_a"), "text_a", pa.array(texts))
    report = _report(planted, target)
    assert report["texts"]["shared"] == 1 and report["images"]["shared"] == 0
    assert report["rows_affected_by_language"]["en"] == sum(1 for r in english if r["text_a"] == caption)
    assert report["rows_affected_by_language"]["ar"] == 0  # its caption is Arabic
    # a sentence shorter than min_words is not compared
    assert not _report(planted, target, min_words=len(caption.split()) + 1)["overlap"]


@pytest.mark.unit
def test_refuse_stops_the_check_naming_the_pair_and_the_key_and_writes_no_report(tables, tmp_path):
    target = read_table(tables["xvnli"])
    intermediate = read_table(tables["snli_ve"])
    images = intermediate.column("images").to_pylist()
    images[0] = target.column("images")[0].as_py()
    planted = tmp_path / "planted.parquet"
    import pyarrow.parquet as pq

    pq.write_table(
        intermediate.set_column(intermediate.schema.get_field_index("images"), "images", pa.array(images)), planted
    )
    args = ["--task", "snli_ve", "--target", "xvnli", "--intermediate-data", str(planted)]
    args += ["--target-data", str(tables["xvnli"])]
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as err:
        leakage.main([*args, "--settings", json.dumps({"on_overlap": "refuse"}), "--output", str(out)])
    assert "intermediate task snli_ve holds 1 of the target's" in str(err.value)
    assert "leakage.on_overlap is 'refuse'" in str(err.value) and not out.exists()
    leakage.main([*args, "--settings", json.dumps({"on_overlap": "flag"}), "--output", str(out)])
    report = json.loads(out.read_text())
    assert report["overlap"] and leakage.summary([report]) == [
        {
            "task": "snli_ve",
            "target": "xvnli",
            "images": 1,
            "texts": 0,
            "rows_affected": report["rows_affected"],
            "target_rows": 145,
        }
    ]
