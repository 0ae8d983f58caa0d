"""The reporting steps' records (spec/report_settings.py): what the grid builds is what the
jobs read, key for key and byte for byte, and a key the record does not declare, or one it
needs and lacks, stops the job naming the key."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import REPO
from workflow_scripts.spec import availability, benchmark
from workflow_scripts.spec.basics import InputError, canonical_json
from workflow_scripts.spec.codehash import import_closure
from workflow_scripts.spec.report_settings import (
    ArmPair,
    BackboneDescription,
    BenchmarkDescription,
    ComparisonSettings,
    FigureSettings,
    LatexSettings,
    ModalityScalingSettings,
    ModalitySettings,
    TableSettings,
)
from workflow_scripts.workflow import backbone_grid, config_check, grid_settings

pytestmark = pytest.mark.unit

MINIMAL_TABLE = {"baseline": "none", "targets": ["xnli"], "intermediate": ["none", "mnli"], "seeds": [1, 2]}


@pytest.fixture
def config() -> dict:
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(config_check.schema_for_validation()))  # fills in the defaults (the records' blocks too)
    return config


def test_an_unknown_table_settings_key_is_named():
    with pytest.raises(InputError, match=r"--settings: unknown settings key 'decimal'.*decimals"):
        TableSettings.parse({**MINIMAL_TABLE, "decimal": 2}, "--settings")


def test_a_missing_table_settings_key_is_named():
    partial = {k: v for k, v in MINIMAL_TABLE.items() if k != "seeds"}
    with pytest.raises(InputError, match=r"settings key 'seeds' is missing \(TableSettings needs it\)"):
        TableSettings.parse(json.dumps(partial), "--settings")


def test_a_nested_backbone_description_names_its_own_missing_key(config):
    described = backbone_grid.describe(config, "llama_tiny")
    del described["precision"]
    with pytest.raises(InputError, match=r"'precision' is missing \(BackboneDescription needs it\)"):
        ComparisonSettings.parse({**grid_settings.comparison_settings(config).to_dict(), "backbones": {"b": described}})


def test_a_mistyped_arm_pair_is_named():
    bad = {
        "targets": ["xnli"],
        "seeds": [1],
        "pairs": [{"visual": "ve", "control": 3, "task": "t", "control_task": "c"}],
    }
    with pytest.raises(InputError, match=r"pairs\[0\]\.control: expected str, got 3"):
        ModalitySettings.parse(bad, "--settings")


@pytest.mark.parametrize("backbone", ["xlmr_tiny", "llama_tiny"])
def test_the_table_settings_json_is_the_builders_dict_and_reads_back_unchanged(config, backbone):
    built = grid_settings.table_settings(config, backbone)
    # the JSON the jobs had before the record: the builder's plain mapping
    part = backbone_grid.grid_of(config, backbone)
    assert json.loads(built.to_json())["backbone"] == backbone_grid.describe(config, backbone)
    assert json.loads(built.to_json())["benchmark"] == benchmark.of_config(config).describe()
    assert list(json.loads(built.to_json())["intermediate"]) == part["intermediate"]
    again = TableSettings.parse(built.to_json(), "--settings")
    assert again == built and again.to_json() == built.to_json()
    # the figures and the LaTeX tables read the same JSON through their own steps' records
    for record in (FigureSettings, LatexSettings):
        assert record.parse(built.to_json(), "--settings").to_json() == built.to_json()


def test_every_reporting_cli_that_takes_settings_has_its_steps_record():
    records = (TableSettings, FigureSettings, LatexSettings, ModalitySettings, ModalityScalingSettings)
    steps = {r.step for r in (*records, ComparisonSettings)}
    assert steps == {
        f"reporting.{m}" for m in ("tables", "plots", "latex", "modality", "modality_scaling", "compare_backbones")
    }


def test_every_reporting_builder_round_trips(config):
    for built in (
        grid_settings.modality_settings(config, "xlmr_tiny"),
        grid_settings.modality_scaling_settings(config),
        grid_settings.comparison_settings(config),
    ):
        assert type(built).parse(built.to_json()).to_json() == built.to_json()
        assert built.to_json() == canonical_json(json.loads(built.to_json()))


def test_a_translated_config_without_an_english_counterpart_keeps_its_null():
    settings = TableSettings.parse({**MINIMAL_TABLE, "translated": {"mnli_sw": {"language": "sw", "english": None}}})
    assert settings.translated["mnli_sw"].english is None
    assert '"translated":{"mnli_sw":{"english":null,"language":"sw"}}' in settings.to_json()


def test_a_backbones_parameter_count_stays_as_the_config_wrote_it():
    base = {"name": "b", "family": "encoder", "source": "demo", "method": "full", "precision": "fp32"}
    for count, text in ((5.6e8, '"parameters":560000000.0'), (560000000, '"parameters":560000000')):
        described = BackboneDescription.parse({**base, "contaminated_targets": [], "parameters": count})
        assert text in described.to_json()


def test_the_benchmarks_categories_come_back_in_the_papers_order():
    described = TableSettings.parse(MINIMAL_TABLE).benchmark  # XTREME unless named
    read_back = BenchmarkDescription.parse(described.to_json())
    assert list(read_back.categories) == sorted(benchmark.XTREME.categories), "the JSON sorts them"
    assert list(read_back.categories_in_order()) == list(benchmark.XTREME.categories)


def test_families_rank_by_their_first_backbone_in_the_configs_order(config):
    settings = grid_settings.modality_scaling_settings(config)
    read_back = ModalityScalingSettings.parse(settings.to_json())
    families = [read_back.backbones[b].family for b in read_back.order]
    assert list(read_back.family_rank()) == list(dict.fromkeys(families))


def test_figures_without_data_say_why():
    settings = TableSettings.parse(MINIMAL_TABLE)
    assert availability.main_deltas(settings) is None
    assert "does not run target udpos" in availability.per_language(settings, "udpos")
    assert "this backbone" in availability.training_curves(settings, "qqp"), "no backbone named"
    assert (
        availability.modality([ArmPair(visual="ve", control="cap", task="snli_ve", control_task="snli_caption")])
        is None
    )


def test_availability_is_read_at_parse_time_and_job_time_so_imports_only_spec():
    assert all(m.startswith("workflow_scripts.spec") for m in import_closure("workflow_scripts.spec.availability"))
