"""IGLUE's in-language few-shot protocol (spec/few_shot.py): the few-shot pools read from real
samples of the release (tests/real_data/*_few_shot, nlvr2_dev, flickr30k_gmt), the
``few_shot:<N>`` setting's plan, and the settings its candidates train with."""

from __future__ import annotations

import copy
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from test_xvnli_target import xvnli_config

from conftest import REPO
from workflow_scripts.data.prepare import prepare, provenance, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.few_shot import FewShotError, FewShotProtocol, is_few_shot_recipe, shots_of
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.workflow import grid, grid_checks, grid_settings, transfer

pytestmark = pytest.mark.unit

REAL = REPO / "tests" / "real_data"


def load_pool(pool: str, split: str, langs: list[str], tmp_path: Path, path: Path, dev_path: Path | None = None):
    options = {"path": str(path)} | ({"dev_path": str(dev_path)} if dev_path else {})
    settings = DataSettings.parse(
        {
            "source": "local",
            "local_root": str(REPO / "demo/hub"),
            "hub": {"path": "e-bug/iglue"},
            "languages": langs,
            "options": options,
        }
    )
    out = tmp_path / f"{pool}_{split}.parquet"
    prepare(pool, split, settings, out)
    return read_table(out).to_pylist(), provenance(out)["report"]


# ----- the pools on the release's rows ------------------------------------------------------


def test_xvnli_shots_are_tagged_with_the_fewest_shots_holding_them(tmp_path):
    rows, report = load_pool("xvnli_few_shot", "train", ["ar"], tmp_path, REAL / "xvnli_few_shot")
    release = {n: (REAL / f"xvnli_few_shot/ar/train_{n}.jsonl").read_text().splitlines() for n in (1, 5, 48)}
    # every labelled row of the largest file once; the N-shot set is the rows tagged <= N
    labelled = [line for line in release[48] if '"gold_label": "-"' not in line]
    assert len(rows) == len(labelled) == 163
    assert sum(r["shots"] <= 1 for r in rows) == 3  # train_1: one image, three hypotheses
    assert sum(r["shots"] <= 5 for r in rows) == len([x for x in release[5] if '"gold_label": "-"' not in x])
    assert report["load_counts"]["ar:no_gold_label"] == 5
    assert report["release"]["files"] == [f"train_{n}.jsonl" for n in (1, 5, 10, 20, 25, 48)]
    first = rows[0]
    assert first["images"] == ["2487069642.jpg"] and first["id"] == "ar-2487069642.jpg#1r1e" and first["shots"] == 1
    # the text arms read the same rows, with the caption or nothing as premise
    caption, _ = load_pool("xvnli_caption_few_shot", "train", ["ar"], tmp_path, REAL / "xvnli_few_shot")
    assert [(r["id"], r["shots"]) for r in caption] == [(r["id"], r["shots"]) for r in rows]
    assert caption[0]["text_b"] == first["text_a"] and caption[0]["text_a"] != first["text_a"]


def test_marvl_shots_name_their_concept_folder_once_and_select_on_english_nlvr2(tmp_path):
    rows, _ = load_pool("marvl_few_shot", "train", ["id"], tmp_path, REAL / "marvl_few_shot")
    assert Counter(r["shots"] for r in rows) == {1: 4, 2: 4, 4: 8, 10: 24}
    # the few-shot files name "39-Panci/39-n-5.jpg", the test files "39-0.jpg": one layout
    assert rows[0]["images"] == ["id/images/39-Panci/39-n-5.jpg", "id/images/39-Panci/39-n-2.jpg"]
    # IGLUE's MaRVL scripts select on NLVR2's English dev split (selection: english)
    assert get_task("marvl").few_shot.selection == "english"
    dev, report = load_pool("marvl_few_shot", "dev", ["id"], tmp_path, REAL / "marvl_few_shot", REAL / "nlvr2_dev")
    assert len(dev) == 6 and {r["lang"] for r in dev} == {"en"} and dev[0]["shots"] is None
    assert dev[0]["images"] == ["dev/dev-850-0-img0.png", "dev/dev-850-0-img1.png"] and dev[0]["label"] == 0
    assert report["release"]["files"] == ["dev.jsonl"]
    config = copy.deepcopy(xvnli_config())
    config["targets"] = [*config["targets"], "marvl"]
    config["tasks"]["marvl"] = {"languages": ["de", "ru", "sw"]}
    config["tasks"]["marvl_few_shot"] = {"languages": ["de"]}
    config["transfer"] = {"settings": {"zero_shot": {}, "few_shot:4": {"targets": ["marvl"]}}}
    plan = transfer.plan(config, "few_shot:4", "marvl")
    assert plan.models["de"].name == "fs4-de.dev-en" and plan.models["de"].dev[0].languages == ("en",)
    assert "evaluated on ['de'] only" in plan.notes[-1]  # ru and sw have no shots


def test_xflickrco_shots_and_the_translated_flickr30k_validation_split(tmp_path):
    rows, _ = load_pool("xflickrco_few_shot", "train", ["de"], tmp_path, REAL / "xflickrco_few_shot")
    assert len(rows) == 100 and Counter(r["shots"] for r in rows)[1] == 1
    assert sum(r["shots"] <= 25 for r in rows) == 25 and rows[0]["images"] == ["flickr30k-images/3497238310.jpg"]
    dev, _ = load_pool(
        "xflickrco_few_shot", "dev", ["de"], tmp_path, REAL / "xflickrco_few_shot", REAL / "flickr30k_gmt"
    )
    assert len(dev) == 4 * 5  # five captions an image, the first one translated
    assert dev[0]["text_a"].startswith("Eine Gruppe") and dev[0]["images"] == ["flickr30k-images/1018148011.jpg"]


def test_shot_files_that_are_not_nested_stop_naming_both(tmp_path):
    folder = tmp_path / "release"
    shutil.copytree(REAL / "xvnli_few_shot", folder)
    one = {json.loads(line)["pairID"] for line in (folder / "ar/train_1.jsonl").read_text().splitlines()}
    five = folder / "ar/train_5.jsonl"
    kept = [line for line in five.read_text().splitlines(keepends=True) if json.loads(line)["pairID"] not in one]
    five.write_text("".join(kept))  # train_1's rows dropped
    with pytest.raises(InputError, match=r"train_5.jsonl: lacks 3 rows of .*train_1.jsonl.*nested"):
        load_pool("xvnli_few_shot", "train", ["ar"], tmp_path, folder)


def test_a_missing_shot_file_stops_naming_it(tmp_path):
    folder = tmp_path / "release"
    shutil.copytree(REAL / "xvnli_few_shot", folder)
    (folder / "ar/train_25.jsonl").unlink()
    with pytest.raises(InputError, match=r"train_25.jsonl does not exist"):
        load_pool("xvnli_few_shot", "train", ["ar"], tmp_path, folder)


def test_a_protocol_with_unordered_shots_or_a_missing_key_is_refused():
    good = {"task": "p", "shots": [1, 5], "epochs": 20, "batch_size": 16, "learning_rates": [1e-4], "warmup_ratio": 0.1}
    assert FewShotProtocol.parse(good, "e").shots == (1, 5)
    with pytest.raises(FewShotError, match="increasing"):
        FewShotProtocol.parse({**good, "shots": [5, 1]}, "e")
    with pytest.raises(FewShotError, match=r"lacks \['epochs'\]"):
        FewShotProtocol.parse({k: v for k, v in good.items() if k != "epochs"}, "e")


# ----- the setting --------------------------------------------------------------------------


def few_shot_config(setting: dict | None = None) -> dict:
    config = copy.deepcopy(xvnli_config())  # the XVNLI demo config: its pool is configured
    config["transfer"] = {"settings": {"zero_shot": {}, "few_shot:5": setting or {}}}
    return config


def test_each_language_continues_the_zero_shot_model_on_its_shots():
    config = few_shot_config()
    plan = transfer.plan(config, "few_shot:5", "xvnli")
    assert plan.models["en"].name == "en.dev-en"  # English keeps the zero-shot model
    for lang in ("de", "ru", "sw"):
        recipe = plan.models[lang]
        assert recipe.name == f"fs5-{lang}.dev-{lang}" and is_few_shot_recipe(recipe.name)
        (train,) = recipe.train
        (dev,) = recipe.dev
        assert train.path.endswith("/data/xvnli_few_shot/train.parquet") and train.shots == 5
        assert dev.path.endswith("/data/xvnli_few_shot/dev.parquet") and dev.kind == "published_mt"
        assert train.as_dict()["shots"] == 5 and "shots" not in dev.as_dict()
    assert plan.languages == ["de", "en", "ru", "sw"]
    # the targets it applies to by default: those with a 5-shot file (not the text arms
    # without their pools configured, and xvnli's protocol has 5 shots)
    assert transfer.targets(config, "few_shot:5") == ["xvnli", "xvnli_caption", "xvnli_hypothesis_only"]
    assert grid.few_shot_pools(few_shot_config({"targets": ["xvnli"]})) == ["xvnli_few_shot"]


def test_shot_counts_the_release_lacks_and_targets_without_a_protocol_are_refused():
    config = few_shot_config({"targets": ["xvnli"]})
    config["transfer"]["settings"]["few_shot:7"] = {"targets": ["xvnli"]}
    with pytest.raises(transfer.TransferError, match=r"few_shot:7.targets\[0\].*1, 5, 10, 20, 25, 48 shots, not 7"):
        grid_checks.check_transfer(config)
    assert (
        transfer.refusal_reason("few_shot:5", "xnli")
        == "xnli has no few-shot protocol (its catalogue entry's few_shot)"
    )
    assert shots_of("few_shot:0") is None and shots_of("few_shot:12") == 12
    config = few_shot_config({"targets": ["xvnli"]})
    config["transfer"]["settings"]["zero_shot"] = {"learning_rates": [1e-4]}
    with pytest.raises(transfer.TransferError, match="zero_shot.learning_rates: only few_shot"):
        grid_checks.check_transfer(config)


def test_a_pool_missing_from_tasks_is_named():
    config = few_shot_config({"targets": ["xvnli"]})
    del config["tasks"]["xvnli_few_shot"]
    with pytest.raises(transfer.TransferError, match=r"task 'xvnli_few_shot', which has no entry under 'tasks'"):
        transfer.plan(config, "few_shot:5", "xvnli")


def test_a_candidate_trains_as_the_protocol_says_from_the_zero_shot_head():
    config = few_shot_config({"targets": ["xvnli"], "learning_rates": [5.0e-4, 1.0e-4]})
    protocol = get_task("xvnli").few_shot
    rates = grid_settings.few_shot_learning_rates(config, "xvnli", "fs5-de.dev-de")
    assert rates == {"lr0.0005": 5.0e-4, "lr0.0001": 1.0e-4}
    settings = grid_settings.few_shot_settings(config, "xlmr_tiny", "xvnli", "fs5-de.dev-de", "lr0.0001")
    assert settings.learning_rate == 1.0e-4 and settings.warmup_ratio == protocol.warmup_ratio
    assert settings.tasks["xvnli"].epochs == 20 and settings.tasks["xvnli"].batch_size == 16
    assert settings.carried_head == ("xvnli", "xvnli") and settings.eval_each_epoch is True
    assert settings.patience > protocol.epochs  # every epoch runs; the best one is kept
    with pytest.raises(Exception, match="no learning rate 'lr0.001'"):
        grid_settings.few_shot_settings(config, "xlmr_tiny", "xvnli", "fs5-de.dev-de", "lr0.001")
    # without the setting's own rates, the protocol's three
    assert list(grid_settings.few_shot_learning_rates(few_shot_config(), "xvnli", "fs5-de.dev-de").values()) == list(
        protocol.learning_rates
    )
    data = grid_settings.few_shot_data(config, "xvnli", "fs5-de.dev-de")["xvnli"]
    assert data.images.endswith("/data/images/xvnli_few_shot")  # the pool's shots' and dev's images
    assert grid.zero_shot_model("xlmr_tiny", "none", "xvnli", 1).endswith("/xvnli/en.dev-en/seed1/model")


def test_the_training_keeps_the_rows_of_at_most_n_shots():
    import pyarrow as pa

    from workflow_scripts.spec.data_map import TaskFiles
    from workflow_scripts.training.phase_data import within_shots

    table = pa.table({"id": ["a", "b", "c"], "shots": [1, 5, 10]})
    recipe = TaskFiles.parse({"train": [{"path": "pool.parquet", "languages": ["de"], "kind": "few_shot", "shots": 5}]})
    assert within_shots(table, recipe.shots_of("pool.parquet"))["id"].to_pylist() == ["a", "b"]
    assert within_shots(table, TaskFiles(train="pool.parquet").shots_of("pool.parquet")).num_rows == 3
    with pytest.raises(InputError, match="'shots' column"):
        within_shots(pa.table({"id": ["a"]}), 5)


def test_the_few_shot_preset_plans_every_shot_count_of_every_image_target():
    from workflow_scripts.workflow import config_layers

    config = config_layers.load([REPO / "config/iglue_few_shot.yaml"])
    grid_checks.check_transfer(config)
    recipes = {
        (p.target, recipe.name)
        for p in transfer.plans(config)
        if shots_of(p.setting)
        for recipe in p.models.values()
        if is_few_shot_recipe(recipe.name)
    }
    per_target = Counter(target for target, _ in recipes)
    # every shot count of the release, in every language of its pool
    # (xFlickr&CO's one shot is one image: nothing to contrast it with in a batch)
    assert per_target == {"xvnli": 6 * 4, "marvl": 4 * 3, "xflickrco": 5 * 7}
    assert "contrastive loss over a batch of one is zero" in transfer.refusal_reason("few_shot:1", "xflickrco")
    assert grid.few_shot_pools(config) == ["marvl_few_shot", "xflickrco_few_shot", "xvnli_few_shot"]
