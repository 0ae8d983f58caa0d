"""Where a training job's hyperparameters come from (workflow/hyperparameters.py): each
source of the learning rate, removed from the top down, hands the value to the one below it,
through the grid's own builders; and the configuration reference prints the order."""

from __future__ import annotations

import copy

import pytest

from conftest import REPO, validated_config
from workflow_scripts.workflow import config_reference, grid_settings, hyperparameters

pytestmark = pytest.mark.unit

BACKBONE = "xlmr_tiny"


@pytest.fixture(scope="module")
def demo_config():
    return validated_config(REPO / "config.yaml")


def _every_source_set(demo_config) -> dict:
    """The demo config with every learning-rate source of both phases set to its own value."""
    config = copy.deepcopy(demo_config)
    config["training"]["intermediate"].update(learning_rate=1e-5, learning_rate_with_mlm=2e-5)
    config["intermediate"]["mnli"]["learning_rate"] = 3e-5
    config["intermediate"]["mnli_mlm"] = {"tasks": ["mnli"], "mlm": True, "learning_rate": 4e-5}
    config["tasks"]["mlm"] = {**config["tasks"]["mnli"], "hub": {"path": "wikimedia/wikipedia"}}
    own = {"intermediate": {"learning_rate": 5e-5, "learning_rate_with_mlm": 6e-5}, "target": {"learning_rate": 7e-5}}
    config["backbones"][BACKBONE]["training"] = own
    config["training"]["target"]["learning_rate"] = 8e-5
    config["tasks"]["xnli"]["learning_rate"] = 9e-5
    return config


def _peel(config: dict, *keys: tuple[str, ...]) -> dict:
    """``config`` without the keys at each of the dotted paths ``keys``."""
    config = copy.deepcopy(config)
    for path in keys:
        node = config
        for part in path[:-1]:
            node = node[part]
        node.pop(path[-1])
    return config


def test_each_learning_rate_source_wins_over_the_ones_before_it(demo_config):
    config = _every_source_set(demo_config)
    own = ("backbones", BACKBONE, "training")

    def intermediate(cfg, name):
        return grid_settings.intermediate_settings(cfg, BACKBONE, name).learning_rate

    def target(cfg):
        return grid_settings.target_settings(cfg, BACKBONE, "xnli").learning_rate

    # intermediate, without MLM: the backbone's own rate, then the config's, then the phase's
    assert intermediate(config, "mnli") == 5e-5
    assert intermediate(_peel(config, (*own, "intermediate", "learning_rate")), "mnli") == 3e-5
    assert (
        intermediate(
            _peel(config, (*own, "intermediate", "learning_rate"), ("intermediate", "mnli", "learning_rate")), "mnli"
        )
        == 1e-5
    )
    # with MLM: the backbone's MLM rate, the config's own, the phase's MLM rate, never the plain ones
    assert intermediate(config, "mnli_mlm") == 6e-5
    without_own_mlm = _peel(config, (*own, "intermediate", "learning_rate_with_mlm"))
    assert intermediate(without_own_mlm, "mnli_mlm") == 5e-5  # the backbone's plain rate still comes after
    no_backbone = _peel(config, (*own,))
    assert intermediate(no_backbone, "mnli_mlm") == 4e-5
    assert intermediate(_peel(no_backbone, ("intermediate", "mnli_mlm", "learning_rate")), "mnli_mlm") == 2e-5
    # target: the backbone's own, the task's, the phase's
    assert target(config) == 7e-5
    assert target(_peel(config, (*own, "target"))) == 9e-5
    assert target(_peel(config, (*own, "target"), ("tasks", "xnli", "learning_rate"))) == 8e-5


def test_the_reference_prints_every_source_in_its_order():
    page = config_reference.PAGE.read_text()
    section = page[page.index("## Where a training hyperparameter comes from") :]
    for phase, sources in hyperparameters.SOURCES.items():
        positions = [section.index(f"`{s.where}`", section.index(f"**{phase} phase**")) for s in sources]
        assert positions == sorted(positions), phase
