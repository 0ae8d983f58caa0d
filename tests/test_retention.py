"""The retention probe (evaluation/retention.py), its table (reporting/retention.py) and its
part of the grid (workflow/retention.py): docs/multimodal.md, "Forgetting"."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from workflow_scripts.evaluation import retention as probe_module
from workflow_scripts.reporting import retention as table_module
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.retention_settings import RetentionProbeSettings, RetentionTableSettings
from workflow_scripts.workflow import config_layers, grid, grid_checks
from workflow_scripts.workflow import retention as retention_grid

pytestmark = pytest.mark.unit

LANGUAGES = ["en", "de", "ru", "sw"]


def _settings(family: str = "encoder", text_format: str = "classification", **changes) -> RetentionProbeSettings:
    found = {
        "family": family,
        "method": {"name": "full", "precision": "fp32"},
        "text": {"task": "xnli", "split": "dev", "format": text_format, "languages": LANGUAGES, "sentences": 12},
        "alignment": {"layer": 1, "pooling": "mean"},
        "mask_probability": 0.15,
        "seed": 0,
        "batch_size": 8,
        "max_length": 48,
    }
    return RetentionProbeSettings.parse({**found, **changes})


# ----- the held-out sample ------------------------------------------------------------------------


def test_a_parallel_classification_file_gives_the_same_rows_of_every_language(demo_data):
    settings = _settings()
    sample = probe_module.read_sample(demo_data["xnli.dev"], settings.text, seed=3)
    assert list(sample.sentences) == LANGUAGES
    assert {len(s) for s in sample.sentences.values()} == {settings.text.sentences}
    for lang in LANGUAGES[1:]:
        assert [english for _, english in sample.pairs[lang]] == sample.sentences["en"]
        assert [own for own, _ in sample.pairs[lang]] == sample.sentences[lang]
    assert probe_module.read_sample(demo_data["xnli.dev"], settings.text, seed=3) == sample
    assert probe_module.read_sample(demo_data["xnli.dev"], settings.text, seed=4) != sample


def test_a_tatoeba_file_pairs_each_language_with_its_english_side(demo_data):
    text = _settings(text_format="retrieval").text.replace(task="tatoeba", split="test")
    sample = probe_module.read_sample(demo_data["tatoeba.test"], text, seed=0)
    assert list(sample.sentences) == LANGUAGES and set(sample.pairs) == set(LANGUAGES[1:])
    english = {e for lang in LANGUAGES[1:] for _, e in sample.pairs[lang]}
    assert set(sample.sentences["en"]) <= english and len(sample.sentences["en"]) == text.sentences
    with pytest.raises(InputError, match=r"no rows of language 'fr'"):
        probe_module.read_sample(demo_data["tatoeba.test"], text.replace(languages=["en", "fr"]), seed=0)


def test_a_classification_file_whose_languages_differ_in_rows_is_refused_naming_it(demo_data, tmp_path):
    import pyarrow.parquet as pq

    table = pq.read_table(demo_data["xnli.dev"]).to_pandas()
    uneven = tmp_path / "uneven.parquet"
    table.drop(index=table[table["lang"] == "de"].index[0]).to_parquet(uneven)
    with pytest.raises(InputError, match=r"uneven\.parquet: .*parallel rows"):
        probe_module.read_sample(uneven, _settings().text, seed=0)


# ----- masking --------------------------------------------------------------------------------------


def test_masking_is_seeded_and_identical_at_every_stage(tokenizer, demo_data):
    settings = _settings()
    sentences = probe_module.read_sample(demo_data["xnli.dev"], settings.text, 0).sentences["de"]
    first = probe_module.encode_language(tokenizer, sentences, "de", settings, masked=True)
    again = probe_module.encode_language(tokenizer, sentences, "de", settings, masked=True)
    assert first == again and first.digest() == again.digest()
    other = probe_module.encode_language(tokenizer, sentences, "de", settings.replace(seed=1), masked=True)
    assert other.masked != first.masked and other.ids == first.ids
    specials = set(tokenizer.all_special_ids)
    maskable = sum(sum(1 for t in ids if t not in specials) for ids in first.ids)
    masked = sum(len(p) for p in first.masked)
    assert all(first.masked) and all(ids[p] not in specials for ids, ps in zip(first.ids, first.masked) for p in ps)
    assert masked >= settings.mask_probability * maskable  # a share, rounded, and at least one per sentence


def test_a_masked_share_rounds_and_never_masks_nothing():
    rng = random.Random(0)
    assert probe_module.masked_positions(range(1, 21), 0.15, rng) != []
    assert len(probe_module.masked_positions(range(1, 21), 0.15, random.Random(0))) == round(0.15 * 20)
    assert len(probe_module.masked_positions([5], 0.15, rng)) == 1
    assert probe_module.masked_positions([], 0.15, rng) == []


# ----- the loss: the model the text came from against a perturbed copy -----------------------------------


def _fit(model, tokenizer, sentences: list[str], loss_of, steps: int) -> None:
    """A few steps of the model's own objective on ``sentences``: the text comes from it then."""
    torch.manual_seed(0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    for _ in range(steps):
        optimiser.zero_grad()
        loss_of(model, batch).backward()
        optimiser.step()


def _masked_lm_objective(tokenizer):
    generator = torch.Generator().manual_seed(0)

    def loss_of(model, batch):
        from workflow_scripts.data.features import mask_tokens

        special = list(tokenizer.all_special_ids)
        masked, labels = mask_tokens(
            batch["input_ids"], batch["attention_mask"], tokenizer.mask_token_id, len(tokenizer), special, generator
        )
        return model(input_ids=masked, attention_mask=batch["attention_mask"], labels=labels).loss

    return loss_of


def _next_token_objective(model, batch):
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss


def _perturbed_copy(model, out: Path, tokenizer) -> Path:
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embeddings" not in name and "embed_tokens" not in name and parameter.dim() == 2:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * parameter.std())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _probe_pair(tmp_path, model, tokenizer, settings, text_file, fit_steps, loss_of) -> tuple[dict, dict]:
    sentences = [s for lang_sentences in probe_module.read_sample(text_file, settings.text, 0).sentences.values()
                 for s in lang_sentences]  # fmt: skip
    _fit(model, tokenizer, sentences, loss_of, fit_steps)
    trained = tmp_path / "trained"
    model.save_pretrained(trained)
    tokenizer.save_pretrained(trained)
    perturbed = _perturbed_copy(model, tmp_path / "perturbed", tokenizer)
    cpu = torch.device("cpu")
    return (
        probe_module.probe(trained, trained, text_file, settings, cpu),
        probe_module.probe(perturbed, trained, text_file, settings, cpu),
    )


def test_the_masked_lm_loss_is_lower_for_the_model_the_text_came_from(demo_encoder_dir, tokenizer, demo_data, tmp_path):
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(str(demo_encoder_dir))
    settings = _settings()
    own, other = _probe_pair(
        tmp_path, model, tokenizer, settings, demo_data["xnli.dev"], 150, _masked_lm_objective(tokenizer)
    )
    assert own["objective"] == "masked-LM" and "tied" in own["lm_head"]
    for lang in LANGUAGES:
        assert own["languages"][lang]["loss"] < other["languages"][lang]["loss"], lang
        # the same inputs, the same masked tokens: only the weights differ
        assert own["languages"][lang]["inputs_sha256"] == other["languages"][lang]["inputs_sha256"]
        assert own["languages"][lang]["tokens"] == other["languages"][lang]["tokens"] > 0
    assert set(own["languages"]["de"]["alignment"]) == {"en_to_x", "x_to_en", "mean", "pairs"}
    assert "alignment" not in own["languages"]["en"]
    assert own["lineage"] == {"base": str(tmp_path / "trained"), "merged": [], "own": False}


def test_the_next_token_loss_is_lower_for_the_decoder_the_text_came_from(tokenizer, demo_data, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    settings = _settings(family="decoder", alignment={"layer": 2, "pooling": "family"})
    own, other = _probe_pair(
        tmp_path, LlamaForCausalLM(config), tokenizer, settings, demo_data["xnli.dev"], 40, _next_token_objective
    )
    assert own["objective"] == "next-token" and "untied" in own["lm_head"]
    for lang in LANGUAGES:
        assert own["languages"][lang]["loss"] < other["languages"][lang]["loss"], lang
        assert own["languages"][lang]["inputs_sha256"] == other["languages"][lang]["inputs_sha256"]


# ----- alignment ------------------------------------------------------------------------------------


def test_alignment_finds_a_planted_translation_in_each_direction(monkeypatch):
    """English: four orthogonal vectors. The last foreign sentence sits between the third and
    the fourth English ones, nearer the third: each English query still finds its own foreign
    sentence (100%), but that foreign sentence finds the third English one (3 of 4)."""
    english = np.eye(4, dtype=np.float32)
    foreign = english.copy()
    foreign[3] = 0.9 * english[2] + 0.1 * english[3]
    planted = {"probe sentences": foreign, "their English translations": english}
    monkeypatch.setattr(probe_module, "embed", lambda *args, what: planted[what])
    pairs = [(f"x{i}", f"e{i}") for i in range(4)]
    found = probe_module.alignment(None, None, pairs, _settings(), torch.device("cpu"))
    assert found == {"en_to_x": 100.0, "x_to_en": 75.0, "mean": 87.5, "pairs": 4}


# ----- the table ------------------------------------------------------------------------------------

CONFIGS = ("none", "snli_ve", "snli_caption")
PAIRS = [{"visual": "snli_ve", "control": "snli_caption", "task": "snli_ve", "control_task": "snli_caption"}]
BEFORE = {"en": 3.0, "de": 3.5, "ru": 4.0, "sw": 4.5}
ALIGNED = {"de": 90.0, "ru": 80.0, "sw": 70.0}
# Planted loss changes per (config, stage, seed): the image arm forgets more than its twin.
FORGETTING = {
    ("snli_ve", "intermediate"): {1: 0.5, 2: 0.7},
    ("snli_caption", "intermediate"): {1: 0.2, 2: 0.3},
    ("none", "target"): {1: 0.1, 2: 0.1},
    ("snli_ve", "target"): {1: 0.6, 2: 0.9},
    ("snli_caption", "target"): {1: 0.3, 2: 0.4},
}
TRANSFER = {"snli_ve": 60.0, "snli_caption": 62.0, "none": 55.0}


def _probe_file(path: Path, stage: str, config: str | None, seed: int | None, change: float, digest: str = "") -> str:
    identity = {"backbone": "enc", "stage": stage}
    if config is not None:
        identity.update(config=config, seed=seed)
    if stage == "target":
        identity["target"] = "xnli"
    languages = {
        lang: {
            "loss": BEFORE[lang] + change,
            "tokens": 100,
            "sentences": 10,
            "inputs_sha256": digest or f"digest-{lang}",
            **({"alignment": {"mean": ALIGNED[lang] - 10 * change}} if lang != "en" else {}),
        }
        for lang in BEFORE
    }
    path.write_text(json.dumps({"probe": identity, "languages": languages}))
    return str(path)


def _probe_files(tmp_path: Path) -> list[str]:
    files = [_probe_file(tmp_path / "before.json", "before", None, None, 0.0)]
    for (config, stage), by_seed in FORGETTING.items():
        for seed, change in by_seed.items():
            files.append(_probe_file(tmp_path / f"{config}-{stage}-{seed}.json", stage, config, seed, change))
    return files


def _runs() -> pd.DataFrame:
    rows = [
        ("zero_shot", config, "xnli", seed, "test", lang, "accuracy", score + seed + (lang == "en"))
        for config, score in TRANSFER.items()
        for seed in (1, 2)
        for lang in BEFORE
    ]
    return pd.DataFrame.from_records(
        rows, columns=["setting", "intermediate", "target", "seed", "split", "language", "metric", "value"]
    )


def _table_settings(**changes) -> RetentionTableSettings:
    found = {
        "backbone": "enc",
        "family": "encoder",
        "intermediate": list(CONFIGS),
        "targets": ["xnli"],
        "seeds": [1, 2],
        "languages": list(BEFORE),
        "pairs": PAIRS,
        "objective": "masked-LM",
    }
    return RetentionTableSettings.parse({**found, **changes})


def test_the_table_gives_each_arms_median_change_by_stage_and_language(tmp_path):
    settings = _table_settings()
    table = table_module.retention_table(table_module.probe_frame(_probe_files(tmp_path)), settings)
    assert list(dict.fromkeys(zip(table["config"], table["stage"]))) == [
        ("none", "target:xnli"),
        ("snli_ve", "intermediate"),
        ("snli_ve", "target:xnli"),
        ("snli_caption", "intermediate"),
        ("snli_caption", "target:xnli"),
    ]  # the baseline has no intermediate phase
    for (config, stage), by_seed in FORGETTING.items():
        stage_name = "intermediate" if stage == "intermediate" else "target:xnli"
        rows = table[(table["config"] == config) & (table["stage"] == stage_name)].set_index("language")
        median = float(np.median(list(by_seed.values())))
        assert rows["loss_change"].to_dict() == pytest.approx(dict.fromkeys([*BEFORE, "avg"], median))
        assert rows.loc["de", "loss_before"] == BEFORE["de"] and rows.loc["de", "seeds"] == len(by_seed)
        assert rows.loc["de", "alignment_change"] == pytest.approx(-10 * median)
        assert math.isnan(rows.loc["en", "alignment_change"])


def test_the_pairs_set_the_image_arms_extra_forgetting_beside_its_transfer_difference(tmp_path):
    frame = table_module.probe_frame(_probe_files(tmp_path))
    pairs = table_module.pairs_table(frame, _runs(), _table_settings()).set_index("language")
    for stage in ("intermediate", "target"):
        visual, control = FORGETTING[("snli_ve", stage)], FORGETTING[("snli_caption", stage)]
        expected = float(np.median([visual[s] - control[s] for s in visual]))
        assert pairs[f"loss_change_difference_{stage}"].to_dict() == pytest.approx(dict.fromkeys(pairs.index, expected))
    transfer = TRANSFER["snli_ve"] - TRANSFER["snli_caption"]
    assert pairs["transfer_difference"].to_dict() == pytest.approx(dict.fromkeys(pairs.index, transfer))
    assert set(pairs["metric"]) == {"accuracy"}


def test_the_table_renders_and_draws_its_figure(tmp_path):
    settings = _table_settings()
    frame = table_module.probe_frame(_probe_files(tmp_path))
    table, pairs = table_module.retention_table(frame, settings), table_module.pairs_table(frame, _runs(), settings)
    text = table_module.render(table, pairs, settings, settings.objective)
    assert "## masked-LM loss change" in text and "| (pretrained) | before |" in text
    assert "| snli_ve | snli_caption | xnli (accuracy) | avg |" in text
    table_module.figure(table, pairs, settings, settings.objective, tmp_path / "fig")
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.svg").is_file()


def test_a_probe_on_other_inputs_than_the_before_probe_is_named(tmp_path):
    files = _probe_files(tmp_path)
    odd = _probe_file(tmp_path / "odd.json", "intermediate", "snli_ve", 3, 0.5, digest="another draw")
    with pytest.raises(InputError, match=r"odd\.json: language en was probed on other inputs"):
        table_module.probe_frame([*files, odd])
    with pytest.raises(InputError, match="no 'before' probe"):
        table_module.probe_frame(files[1:])


# ----- the grid -------------------------------------------------------------------------------------


def test_the_multimodal_demo_probes_every_stage_of_both_backbones():
    config = config_layers.load(["config/multimodal_demo.yaml"])
    grid_checks.check_config(config)
    config["retention"] = {**_retention_defaults(), **config["retention"]}
    for backbone in config["backbones"]:
        part = config["backbones"][backbone].get("grid", {}).get("intermediate") or list(config["intermediate"])
        files = retention_grid.probe_files(config, backbone)
        trained = [name for name in part if not grid.is_baseline(config, name)]
        assert files[0].endswith(f"retention/{backbone}/before.json")
        assert sum(f.endswith("/intermediate.json") for f in files) == len(trained) * len(config["seeds"])
        assert sum(f.endswith("/target-xnli.json") for f in files) == len(part) * len(config["seeds"])
        settings = retention_grid.probe_settings(config, backbone)
        assert RetentionProbeSettings.parse(settings.to_json()) == settings
        assert settings.text.languages[0] == "en" and settings.text.format == "classification"


def _retention_defaults() -> dict:
    from workflow_scripts.spec.retention_settings import RetentionEntry
    from workflow_scripts.spec.schema_block import filled

    return filled(RetentionEntry)


def test_a_probe_text_the_config_cannot_give_is_named_by_its_key():
    config = config_layers.load(["config/multimodal_demo.yaml"])
    config["retention"] = {**_retention_defaults(), "probe": True, "text": {"task": "tatoeba", "split": "test"}}
    with pytest.raises(grid.ConfigError, match=r"retention\.text\.task: 'tatoeba' is not a task of this config"):
        retention_grid.check(config)
    config["retention"]["text"] = {"task": "snli_ve", "split": "test"}
    with pytest.raises(grid.ConfigError, match=r"retention\.text\.task: snli_ve is a visual_classification task"):
        retention_grid.check(config)
    config["retention"].update(text={"task": "xnli", "split": "test"}, targets=["tatoeba"])
    with pytest.raises(grid.ConfigError, match=r"retention\.targets\[0\]: 'tatoeba'"):
        retention_grid.check(config)
