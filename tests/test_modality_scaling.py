"""The image-vs-text differences across backbone sizes (reporting/modality_scaling.py) and the
modality-by-size preset (config/modality_scaling.yaml)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workflow_scripts.planning import memory_plan
from workflow_scripts.reporting import modality_scaling
from workflow_scripts.reporting.modality import modality_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import ModalityScalingSettings, ModalitySettings
from workflow_scripts.workflow import config_layers

PAIRS = [
    {"visual": "snli_ve", "control": "snli_caption", "task": "snli_ve", "control_task": "snli_caption"},
    {"visual": "snli_ve", "control": "hypothesis_only", "task": "snli_ve", "control_task": "hypothesis_only"},
]


def _runs(gain: float, seeds=(1, 2, 3), languages=("en", "de", "ru", "sw"), noise: int = 0) -> pd.DataFrame:
    """Zero-shot XNLI test scores where the image arm beats the caption arm by ``gain`` and
    hypothesis-only by twice that, plus seeded noise."""
    rng = np.random.default_rng(noise)
    rows = []
    for seed in seeds:
        for lang in languages:
            base = 60 + rng.normal(0, 1)
            for config, value in (("snli_ve", base + gain), ("snli_caption", base), ("hypothesis_only", base - gain)):
                rows.append(("zero_shot", config, "xnli", "test", lang, seed, "accuracy", value))
    return pd.DataFrame.from_records(
        rows, columns=["setting", "intermediate", "target", "split", "language", "seed", "metric", "value"]
    )


def _write_backbone(tables, name: str, gain: float, noise: int) -> None:
    settings = ModalitySettings.parse({"targets": ["xnli"], "seeds": [1, 2, 3], "pairs": PAIRS})
    (tables / name).mkdir(parents=True)
    modality_table(_runs(gain, noise=noise), settings).to_csv(tables / name / "modality.csv", index=False)


def _backbone(name: str, family: str, parameters: float, contaminated=()) -> dict:
    return {
        "name": name,
        "family": family,
        "source": "demo",
        "method": "full",
        "precision": "fp32",
        "parameters": parameters,
        "contaminated_targets": list(contaminated),
    }


BACKBONES = {  # listed out of size order on purpose: the table orders by family, then size
    "enc_large": _backbone("enc_large", "encoder", 5.6e8),
    "dec_small": _backbone("dec_small", "decoder", 5.59e8, contaminated=["xnli"]),
    "enc_base": _backbone("enc_base", "encoder", 2.78e8),
}


def _settings(backbones: dict = BACKBONES) -> ModalityScalingSettings:
    return ModalityScalingSettings.parse(
        {
            "decimals": 1,
            "targets": ["xnli"],
            "seeds": [1, 2, 3],
            # Families in the config's order (the settings' JSON sorts the backbones' keys).
            "order": ["enc_large", "dec_small", "enc_base"],
            "backbones": backbones,
        }
    )


@pytest.mark.unit
def test_the_scaling_frame_stacks_each_backbones_differences_by_family_then_size(tmp_path):
    for i, (name, gain) in enumerate((("enc_base", 1.0), ("enc_large", 3.0), ("dec_small", 2.0))):
        _write_backbone(tmp_path, name, gain, noise=i)
    frame = modality_scaling.scaling_frame(_settings(), tmp_path, tmp_path / "models")
    assert list(dict.fromkeys(frame["backbone"])) == ["enc_base", "enc_large", "dec_small"]
    caption = frame[(frame["control"] == "snli_caption") & (frame["group"] == "all")].set_index("backbone")
    # The differences are each backbone's own: the planted gains come back exactly (the noise
    # is shared by the arms of one seed and language, and pairing removes it).
    assert caption["mean_difference"].to_dict() == pytest.approx({"enc_base": 1.0, "enc_large": 3.0, "dec_small": 2.0})
    none = frame[(frame["control"] == "hypothesis_only") & (frame["group"] == "zero-shot")].set_index("backbone")
    assert none["mean_difference"].to_dict() == pytest.approx({"enc_base": 2.0, "enc_large": 6.0, "dec_small": 4.0})
    assert (caption["ci_low"] <= caption["mean_difference"]).all()
    assert frame.set_index("backbone")["contaminated"].groupby(level=0).all().to_dict() == {
        "dec_small": True,
        "enc_base": False,
        "enc_large": False,
    }
    text = modality_scaling.render(frame, _settings())
    header = next(line for line in text.splitlines() if line.startswith("| image config"))
    assert header.index("enc_base (encoder, 278M)") < header.index("enc_large") < header.index("dec_small")
    assert "dec_small (decoder, 559M) ‡" in header and "not zero-shot" in text
    row = next(line for line in text.splitlines() if "caption premise | all languages" in line)
    assert "+1.0" in row and "+3.0" in row and "[" in row
    modality_scaling.figure(frame, _settings(), tmp_path / "fig")
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.svg").is_file()


@pytest.mark.unit
def test_a_backbone_without_image_pairs_is_left_out_and_a_missing_table_is_named(tmp_path):
    _write_backbone(tmp_path, "enc_base", 1.0, noise=0)
    (tmp_path / "enc_large").mkdir()
    pd.DataFrame(columns=modality_scaling.MODALITY_COLUMNS).to_csv(tmp_path / "enc_large/modality.csv", index=False)
    without_dec_small = _settings({n: b for n, b in BACKBONES.items() if n != "dec_small"})
    frame = modality_scaling.scaling_frame(without_dec_small, tmp_path, tmp_path)
    assert set(frame["backbone"]) == {"enc_base"}
    settings = _settings()
    with pytest.raises(InputError, match=r"dec_small/modality\.csv: missing"):
        modality_scaling.scaling_frame(settings, tmp_path, tmp_path)
    empty = modality_scaling.scaling_frame(_settings({}), tmp_path, tmp_path)
    assert "No backbone has a pair" in modality_scaling.render(empty, settings)


@pytest.mark.unit
def test_the_memory_planner_plans_each_backbone_on_its_own_part_of_the_grid():
    """A decoder runs no MLM config (no masked-LM head): its intermediate plan must not be sized
    by the MLM logits of configs it never trains."""
    config = config_layers.load(["config/modality_scaling.yaml"])
    plans = {(p.backbone, p.phase): p for p in memory_plan.plan_config(config)}
    assert plans[("xlmr_xl", "intermediate")].task == "mlm"
    for backbone in ("bloom_560m", "bloom_7b1", "bloom_176b"):
        assert plans[(backbone, "intermediate")].task != "mlm"
        assert not plans[(backbone, "intermediate")].with_mlm_logits
        assert plans[(backbone, "intermediate")].fits and plans[(backbone, "target")].fits
    # bloom_176b trains the three arms and the baseline only: its peak is the image arm, whose
    # sequence is its text plus the image's 50 visual tokens (CLIP ViT-B/32).
    assert plans[("bloom_176b", "intermediate")].task == "snli_ve"
    assert plans[("bloom_176b", "intermediate")].seq_len == config["tasks"]["snli_ve"]["max_length"] + 50


@pytest.mark.unit
def test_the_modality_by_size_preset_crosses_the_arms_with_two_backbone_ladders():
    config = config_layers.load(["config/modality_scaling.yaml"])
    families = {}
    for entry in config["backbones"].values():
        families.setdefault(entry["family"], []).append(entry["parameters"])
    assert set(families) == {"encoder", "decoder"}
    assert max(families["decoder"]) > 1e11 and len(families["encoder"]) >= 4 and len(families["decoder"]) >= 4
    arms = {"none", "mnli", "snli", "snli_ve", "snli_caption", "hypothesis_only"}
    assert arms <= set(config["intermediate"])
    assert {"snli_ve_mlm", "snli_caption_mlm", "hypothesis_only_mlm"} <= set(config["intermediate"])
    assert config["seeds"] == [1, 2, 3] and config["benchmark"] == "xtreme_r"
    # BLOOM, not BLOOMZ (xP3 holds XNLI and XCOPA)
    assert all("bloomz" not in e.get("hub_id", "") for e in config["backbones"].values())


@pytest.mark.unit
def test_a_backbones_own_training_settings_win_over_the_phase_config_and_task_rates(monkeypatch):
    """LoRA backbones train every task at their adapter rate; the others keep the config's
    rates, XCOPA's own 3e-5 included."""
    from snakemake.utils import validate

    from conftest import use_config_catalogues
    from workflow_scripts.workflow import config_check, grid_settings

    config = config_layers.load(["config/modality_scaling.yaml"])
    validate(config, str(config_check.schema_for_validation()))
    use_config_catalogues(config, monkeypatch)
    phase = config["training"]["intermediate"]
    assert grid_settings.intermediate_settings(config, "xlmr_large", "snli_ve").learning_rate == phase["learning_rate"]
    assert (
        grid_settings.intermediate_settings(config, "xlmr_large", "snli_ve_mlm").learning_rate
        == (phase["learning_rate_with_mlm"])
    )
    for lora in ("xlmr_xl", "bloom_7b1", "bloom_176b"):
        assert config["backbones"][lora]["method"] == "lora"
        assert grid_settings.intermediate_settings(config, lora, "snli_ve").learning_rate == 2.0e-4
        assert grid_settings.target_settings(config, lora, "xcopa", "siqa").learning_rate == 2.0e-4
    assert grid_settings.intermediate_settings(config, "xlmr_xl", "snli_ve_mlm").learning_rate == 2.0e-4
    assert grid_settings.target_settings(config, "xlmr_large", "xcopa", "siqa").learning_rate == 3.0e-5
    # the other settings stay the phase's
    assert grid_settings.intermediate_settings(config, "xlmr_xl", "snli_ve").eval_every == phase["eval_every"]
