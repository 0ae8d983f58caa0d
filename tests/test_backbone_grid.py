"""The backbone axis of the grid: each backbone's part of the grid, paths and settings, and the
config errors that name a backbone's key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workflow_scripts.workflow import backbone_grid, config_check, grid, grid_settings

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def config() -> dict:
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(config_check.schema_for_validation()))  # fills in the defaults (the records' blocks too)
    return config


def test_a_backbone_runs_its_part_of_the_grid(config):
    part = backbone_grid.grid_of(config, "llama_tiny")
    assert part["intermediate"] == ["none", "mnli"] and part["targets"] == ["xnli", "udpos", "tatoeba"]
    assert config["seeds"] == [1, 2] and part["seeds"] == [1] and part["settings"] == ["zero_shot"]
    plans = backbone_grid.plans(config, "llama_tiny")
    assert {(p.setting, p.target) for p in plans} == {("zero_shot", t) for t in part["targets"]}
    assert all(set(p.intermediate) == {"none", "mnli"} and p.seeds == (1,) for p in plans)
    # the encoder runs everything
    assert backbone_grid.grid_of(config, "xlmr_tiny")["targets"] == config["targets"]
    files = grid.metric_files(config, "llama_tiny")
    assert len(files) == 3 * 2 * 1 and all(f.startswith("results/demo/metrics/llama_tiny/zero_shot/") for f in files)


def test_entries_of_one_model_share_its_prepared_directory(config):
    """A LoRA-rank or method variant of a backbone loads the first entry's prepared model (no
    second download or pre-training); another model, or another family, gets its own."""
    config["backbones"]["llama_r4"] = {**config["backbones"]["llama_tiny"], "lora": {"rank": 4, "alpha": 8}}
    config["backbones"]["llama_full"] = {**config["backbones"]["llama_tiny"], "method": "full"}
    wider = {**config["backbones"]["llama_tiny"]["demo"], "hidden_size": 128}
    config["backbones"]["llama_wide"] = {**config["backbones"]["llama_tiny"], "demo": wider}
    shared = ["xlmr_tiny", "llama_tiny", "llama_tiny", "llama_tiny", "llama_wide"]
    assert [backbone_grid.prepared_as(config, b) for b in config["backbones"]] == shared
    assert backbone_grid.base_dir(config, "llama_r4") == "results/demo/models/backbones/llama_tiny"
    assert backbone_grid.base_dirs(config, list(config["backbones"])) == [
        f"results/demo/models/backbones/{b}" for b in ("xlmr_tiny", "llama_tiny", "llama_wide")
    ]
    # what a phase starts from and what an evaluation loads
    assert grid.intermediate_encoder(config, "llama_r4", "none", 1) == "results/demo/models/backbones/llama_tiny"
    assert backbone_grid.describe(config, "llama_r4")["prepared_as"] == "llama_tiny"
    assert "prepared_as" not in backbone_grid.describe(config, "llama_tiny")  # its tables' settings are unchanged
    config["models"]["source"] = "hub"
    for name, hub_id in (
        ("xlmr_tiny", "org/a"),
        ("llama_tiny", "org/b"),
        ("llama_r4", "org/b"),
        ("llama_full", "org/b"),
    ):
        config["backbones"][name].update(hub_id=hub_id, revision="main")
    config["backbones"]["llama_wide"].update(hub_id="org/b", revision="v2")  # another revision: another snapshot
    assert [backbone_grid.prepared_as(config, b) for b in config["backbones"]] == shared


def test_paths_and_settings_name_the_backbone(config):
    assert grid.intermediate_encoder(config, "llama_tiny", "none", 1) == "results/demo/models/backbones/llama_tiny"
    assert (
        grid.intermediate_encoder(config, "llama_tiny", "mnli", 1)
        == "results/demo/intermediate/llama_tiny/mnli/seed1/encoder"
    )
    evaluation = grid.evaluation(config, "llama_tiny", "zero_shot", "mnli", "xnli", 1)
    assert set(evaluation["models"].values()) == {"results/demo/target/llama_tiny/mnli/xnli/en.dev-en/seed1/model"}
    assert grid_settings.target_settings(config, "llama_tiny", "xnli").method.to_dict() == {
        "name": "lora",
        "precision": "fp32",
        "rank": 8,
        "alpha": 16,
        "dropout": 0.0,
    }
    assert grid_settings.intermediate_settings(config, "xlmr_tiny", "mnli").method.to_dict() == {
        "name": "full",
        "precision": "fp32",
    }
    # retrieval: the decoder's own layer and pooling, the encoder the top-level ones
    assert grid_settings.eval_settings(config, "llama_tiny", "tatoeba").retrieval.pooling == "family"
    assert (
        grid_settings.eval_settings(config, "xlmr_tiny", "tatoeba").retrieval.pooling == config["retrieval"]["pooling"]
    )
    tables = grid_settings.table_settings(config, "llama_tiny")
    assert tables.targets == ("xnli", "udpos", "tatoeba") and tables.backbone.family == "decoder"
    assert list(tables.output_targets) == config["targets"]


def test_a_backbones_provenance_is_what_its_metric_files_and_tables_record(config):
    """Metric files (evaluate_target's params) and tables read one description of how a
    backbone trains: method_settings, which its training jobs get."""
    assert backbone_grid.provenance(config, "xlmr_tiny").to_dict() == {
        "name": "xlmr_tiny",
        "family": "encoder",
        "source": "demo",
        "method": "full",
        "precision": "fp32",
    }
    method = grid_settings.target_settings(config, "llama_tiny", "xnli").method
    provenance = backbone_grid.provenance(config, "llama_tiny")
    assert provenance.lora is not None
    assert provenance.lora.to_dict() == {"rank": method.rank, "alpha": method.alpha, "dropout": method.dropout}
    assert provenance.method == method.name and provenance.precision == method.precision
    config["backbones"]["llama_tiny"].update(contaminated_targets=["xnli"], contamination_source="xP3")
    described = backbone_grid.describe(config, "llama_tiny")
    assert described == {**provenance.to_dict(), "contaminated_targets": ["xnli"], "contamination_source": "xP3"}
    config["models"]["source"] = "hub"
    config["backbones"]["llama_tiny"].update(hub_id="bigscience/bloomz-7b1", revision="main")
    assert backbone_grid.provenance(config, "llama_tiny").hub_id == "bigscience/bloomz-7b1"


def test_an_encoder_settings_change_leaves_the_decoders_jobs_alone(config):
    before = {t: grid_settings.target_settings(config, "llama_tiny", t) for t in ("xnli", "udpos")}
    config["backbones"]["xlmr_tiny"]["method"] = "lora"
    assert {t: grid_settings.target_settings(config, "llama_tiny", t) for t in ("xnli", "udpos")} == before
    assert grid_settings.target_settings(config, "xlmr_tiny", "xnli").method.name == "lora"


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            lambda c: c["backbones"]["llama_tiny"]["grid"].update(intermediate=["none", "mlm_only"]),
            "backbones.llama_tiny.grid.intermediate: ['mlm_only'] not in the config's intermediate",
        ),
        (
            lambda c: c["intermediate"].update(mlm_only={"tasks": [], "mlm": True}),
            "backbones.llama_tiny.grid.intermediate: 'mlm_only' mixes in MLM, and a decoder backbone has no masked-LM head",
        ),
        (
            lambda c: c["backbones"]["xlmr_tiny"].update(contaminated_targets=["mnli"]),
            "backbones.xlmr_tiny.contaminated_targets[0]: 'mnli' is not a target task",
        ),
        (
            lambda c: c["backbones"]["llama_tiny"]["grid"].update(settings=["translate_test"]),
            "backbones.llama_tiny.grid.settings: lacks the baseline setting 'zero_shot'",
        ),
        (lambda c: c["models"].update(source="hub"), "backbones.xlmr_tiny.hub_id: required when models.source is hub"),
        (
            lambda c: (
                c["models"].update(source="hub"),
                c["backbones"]["xlmr_tiny"].update(
                    hub_id="FacebookAI/xlm-roberta-base", revision="e73636d", method="qlora", gpus={"per_node": 4}
                ),
            ),
            "backbones.xlmr_tiny.gpus: qlora trains on one GPU; across 4 GPUs",
        ),
    ],
)
def test_backbone_errors_name_the_key(config, edit, message):
    if "mlm_only' mixes" in message:  # the decoder's grid names it, which only the check refuses
        config["intermediate"]["mlm_only"] = {"tasks": [], "mlm": True}
        config["backbones"]["llama_tiny"]["grid"]["intermediate"] = ["none", "mnli", "mlm_only"]
    else:
        edit(config)
    with pytest.raises(backbone_grid.BackboneError) as err:
        backbone_grid.check(config)
    assert f"config key {message}" in str(err.value)


def test_the_comparison_names_every_backbone_and_its_contamination(config):
    config["backbones"]["llama_tiny"]["contaminated_targets"] = ["xnli"]
    settings = grid_settings.comparison_settings(config)
    assert list(settings.backbones) == ["xlmr_tiny", "llama_tiny"]
    assert settings.backbones["llama_tiny"].contaminated_targets == ("xnli",)
    assert grid_settings.table_settings(config, "llama_tiny").backbone.contaminated_targets == ("xnli",)
