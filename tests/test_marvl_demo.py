"""MaRVL as a zero-shot target end to end (tests/configs/marvl_demo.yaml): the demo encoder
trained on the demo's English NLVR2 with both images of a pair, its visual branch saved, and
scored on the demo's MaRVL release in de, ru and sw, each language with its own images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import run_config_from_scratch

pytestmark = pytest.mark.integration

CONFIG = "tests/configs/marvl_demo.yaml"
RESULTS = "results/marvl_demo"
LANGS = ["de", "ru", "sw"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return run_config_from_scratch(tmp_path_factory, CONFIG) / RESULTS


def test_marvl_is_trained_on_nlvr2_pairs_and_scored_with_each_languages_images(run):
    model = run / "target/xlmr_tiny/none/marvl/en.dev-en/seed1/model"
    log = json.loads((model / "train_log.json").read_text())
    assert log["visual"]["saved"] is True
    assert log["visual"]["tasks"]["marvl"]["images"] == f"{RESULTS}/data/images/nlvr2"
    heads = torch.load(model / "heads.pt", weights_only=True)
    assert heads["marvl.slots"].shape[0] == 2  # a slot vector for the left and the right image
    metrics = json.loads((run / "metrics/xlmr_tiny/zero_shot/none/marvl/seed1.json").read_text())
    assert metrics["languages"] == LANGS
    # 12 pairs per language, two statements each, one true and one false
    assert metrics["visual"]["rows_with_images"] == {"test": dict.fromkeys(LANGS, 24)}
    assert metrics["visual"]["images"] == f"{RESULTS}/data/images/marvl" and metrics["visual"]["bank_images"] == 72
    main = (run / "tables/xlmr_tiny/main.md").read_text()
    assert "| Intermediate task | marvl | Avg |" in main
