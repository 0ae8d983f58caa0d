"""results/README.md is the layout the rules declare today (written by workflow.layout)."""

import pytest

from conftest import REPO
from workflow_scripts.workflow import layout

pytestmark = pytest.mark.unit


def test_results_readme_is_the_layout_of_todays_rules():
    rules = layout.rule_layout()
    assert {r["rule"] for r in rules} >= {
        "prepare_task_data",
        "train_intermediate",
        "train_target",
        "evaluate_target",
        "aggregate_tables",
        "tabulate_cost",
    }
    assert all(o.startswith("results/<experiment>/") for r in rules for o in r["outputs"])
    assert all(r["doc"] for r in rules), "every rule says what it makes"
    assert (REPO / "results/README.md").read_text() == layout.render(rules), (
        "regenerate: python -m workflow_scripts.workflow.layout --output results/README.md"
    )
