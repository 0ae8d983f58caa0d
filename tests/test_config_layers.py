"""Layered configs (workflow_scripts/workflow/config_layers.py): `extends` resolves bases in
order under the file, a null removes an inherited key, --config wins over every layer, and
errors name the file and the key. The presets, rewritten as layers over config/base/, resolve
to exactly the configs they were written out in full (tests/frozen_presets.json), so their
DAGs and rerun rules are the ones the preset tests check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, paper_with_larger_backbones, paper_with_transfer_block, snakemake, use_config_catalogues
from workflow_scripts.spec import paths
from workflow_scripts.workflow import config_check, config_layers, grid_checks

FROZEN = REPO / "tests" / "frozen_presets.json"
PRESETS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "config").glob("*.yaml"))


def write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.unit
def test_layers_merge_in_order_under_the_file(tmp_path):
    write(tmp_path / "a.yaml", {"seeds": [1], "tables": {"baseline": "none", "decimals": 1}, "targets": ["xnli"]})
    write(tmp_path / "b.yaml", {"seeds": [2, 3], "tables": {"decimals": 2}})
    top = write(
        tmp_path / "top.yaml",
        {
            "extends": [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")],
            "tables": {"decimals": 3},
            "targets": ["udpos"],
        },
    )
    config = config_layers.load([top])
    assert config == {"seeds": [2, 3], "tables": {"baseline": "none", "decimals": 3}, "targets": ["udpos"]}


@pytest.mark.unit
def test_a_base_may_extend_another_and_paths_are_relative_to_the_repository(tmp_path):
    write(tmp_path / "grand.yaml", {"seeds": [1], "data": {"source": "hub"}})
    write(tmp_path / "parent.yaml", {"extends": str(tmp_path / "grand.yaml"), "data": {"local_root": "x"}})
    top = write(tmp_path / "top.yaml", {"extends": str(tmp_path / "parent.yaml")})
    assert config_layers.load([top]) == {"seeds": [1], "data": {"source": "hub", "local_root": "x"}}
    # a relative path under `extends` is the repository's, wherever the run starts
    top = write(tmp_path / "rel.yaml", {"extends": "config/base/demo.yaml", "seeds": [5]})
    config = config_layers.load([top])
    assert config["seeds"] == [5] and config["data"]["local_root"] == "demo/hub"


@pytest.mark.unit
def test_a_null_removes_an_inherited_key_and_is_kept_where_nothing_is_inherited(tmp_path):
    write(tmp_path / "base.yaml", {"tasks": {"mnli": {"batch_size": 8}, "bucc": {"max_length": 512}}})
    top = write(
        tmp_path / "top.yaml",
        {
            "extends": str(tmp_path / "base.yaml"),
            "tasks": {"bucc": None},
            "transfer": {"settings": {"zero_shot": None}},
        },
    )
    config = config_layers.load([top])
    assert config["tasks"] == {"mnli": {"batch_size": 8}}
    assert config["transfer"] == {"settings": {"zero_shot": None}}


@pytest.mark.unit
def test_command_line_config_wins_over_every_layer(tmp_path):
    write(tmp_path / "base.yaml", {"seeds": [1], "tables": {"decimals": 1, "baseline": "none"}})
    top = write(tmp_path / "top.yaml", {"extends": str(tmp_path / "base.yaml"), "seeds": [2]})
    config = config_layers.load([top], {"seeds": [7], "tables": {"decimals": 4}})
    assert config == {"seeds": [7], "tables": {"decimals": 4, "baseline": "none"}}
    # later --configfile files over earlier ones, each resolved first
    other = write(tmp_path / "other.yaml", {"extends": str(tmp_path / "base.yaml"), "seeds": [3]})
    assert config_layers.load([top, other])["seeds"] == [3]


@pytest.mark.unit
def test_the_experiment_is_the_named_files_never_a_bases(tmp_path):
    write(tmp_path / "base.yaml", {"experiment": "base_run", "seeds": [1]})
    top = write(tmp_path / "mine.yaml", {"extends": str(tmp_path / "base.yaml")})
    config = config_layers.load([top])
    assert "experiment" not in config
    assert paths.experiment_name(config, [top]) == "mine"
    named = write(tmp_path / "named.yaml", {"extends": str(tmp_path / "base.yaml"), "experiment": "own"})
    assert paths.experiment_name(config_layers.load([named]), [named]) == "own"


@pytest.mark.unit
def test_a_missing_base_names_the_file_that_extends_it(tmp_path):
    top = write(tmp_path / "top.yaml", {"extends": "config/base/nope.yaml"})
    with pytest.raises(
        config_layers.ConfigLayerError, match=r"top\.yaml: key extends: config file .*nope\.yaml does not exist"
    ):
        config_layers.load([top])
    with pytest.raises(config_layers.ConfigLayerError, match="absent.yaml does not exist"):
        config_layers.load([tmp_path / "absent.yaml"])


@pytest.mark.unit
def test_a_cycle_names_the_chain(tmp_path):
    write(tmp_path / "a.yaml", {"extends": str(tmp_path / "b.yaml")})
    write(tmp_path / "b.yaml", {"extends": str(tmp_path / "a.yaml")})
    top = write(tmp_path / "top.yaml", {"extends": str(tmp_path / "a.yaml")})
    with pytest.raises(config_layers.ConfigLayerError) as err:
        config_layers.load([top])
    assert "b.yaml: key extends: a cycle: " in str(err.value)
    assert f"{tmp_path / 'a.yaml'} -> {tmp_path / 'b.yaml'} -> {tmp_path / 'a.yaml'}" in str(err.value)


@pytest.mark.parametrize("value", [3, {"path": "x"}, [1], [""], ""])
@pytest.mark.unit
def test_extends_of_a_wrong_type_names_the_file_and_the_key(tmp_path, value):
    top = write(tmp_path / "top.yaml", {"extends": value})
    with pytest.raises(
        config_layers.ConfigLayerError, match=r"top\.yaml: key extends: .* is neither a path nor a list"
    ):
        config_layers.load([top])


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.unit
def test_every_preset_resolves_to_its_frozen_config_and_validates(preset, monkeypatch):
    """Each preset resolves to the config it held when written out in full: the schema, the
    checks and every rule see what they saw, so its DAG and rerun rules are unchanged. A
    deliberate change to a preset updates tests/frozen_presets.json with it."""
    from snakemake.utils import validate

    config = config_layers.load([REPO / preset])
    assert config == json.loads(FROZEN.read_text()).get(preset), (
        f"{preset} no longer resolves to its config in {FROZEN.name}; after a deliberate change,"
        " refreeze it with `PYTHONPATH=. python tests/test_config_layers.py --refreeze`"
    )
    grid_checks.check_schema(config, str(config_check.schema_for_validation()))
    validate(config, str(config_check.schema_for_validation()))
    use_config_catalogues(config, monkeypatch)
    grid_checks.check_config(config)


@pytest.mark.unit
def test_the_papers_commented_blocks_still_switch_on_what_they_did(tmp_path):
    """conftest's helpers uncomment paper.yaml's larger backbones and transfer settings, as a
    user would; each resolves to the config it gave when paper.yaml was written out in full."""
    frozen = json.loads(FROZEN.read_text())
    repo = tmp_path
    (repo / "config").mkdir()
    (repo / "config/paper.yaml").write_text((REPO / "config/paper.yaml").read_text())
    for path in (paper_with_transfer_block(repo), paper_with_larger_backbones(repo)):
        assert config_layers.load([path]) == frozen[path.name], path.name


@pytest.mark.integration
def test_snakemake_plans_the_resolved_config_with_command_line_values_over_it(tmp_path):
    """Snakemake sees the resolved config: a file of one line over a demo preset plans that
    preset's grid, and a --config value wins over the file and its layers."""
    write(tmp_path / "mine.yaml", {"extends": "config/multimodal_demo.yaml", "experiment": "from_file"})
    proc = snakemake(
        REPO,
        "-n",
        "--forceall",
        "--configfile",
        str(tmp_path / "mine.yaml"),
        "--config",
        "experiment=from_command_line",
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "results/from_command_line/metrics/xlmr_tiny/zero_shot/snli_ve/xnli/seed1.json" in out
    assert "results/from_file/" not in out and "results/multimodal_demo/" not in out


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--refreeze"]:
        sys.exit(
            "usage: PYTHONPATH=. python tests/test_config_layers.py --refreeze  (rewrites tests/frozen_presets.json)"
        )
    import tempfile

    frozen = json.loads(FROZEN.read_text())
    frozen.update({preset: config_layers.load([REPO / preset]) for preset in PRESETS})
    with tempfile.TemporaryDirectory() as tmp:  # paper.yaml's commented blocks, switched on as the test does
        (Path(tmp) / "config").mkdir()
        (Path(tmp) / "config/paper.yaml").write_text((REPO / "config/paper.yaml").read_text())
        for path in (paper_with_transfer_block(Path(tmp)), paper_with_larger_backbones(Path(tmp))):
            frozen[path.name] = config_layers.load([path])
    FROZEN.write_text(
        "{\n"
        + ",\n".join(f"{json.dumps(name)}: {json.dumps(frozen[name], sort_keys=True)}" for name in sorted(frozen))
        + "\n}\n"
    )
    print(f"wrote {FROZEN.relative_to(REPO)}")
