"""The statistic over seeds is named once (workflow_scripts/reporting/seeds.py): no other
reporting module computes a median of its own, and the two helpers agree with each other."""

from __future__ import annotations

import ast

import pandas as pd
import pytest

from conftest import REPO
from workflow_scripts.reporting import seeds

pytestmark = pytest.mark.unit

REPORTING = REPO / "workflow_scripts" / "reporting"


def _statistics_named(path) -> list[str]:
    """Where ``path`` computes a median itself: a ``.median(...)`` call, ``statistics.median``,
    or a pandas named aggregation ``("column", "median")`` (a column called ``median`` in a
    written table is a label, not a computation)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == seeds.SEED_STATISTIC:
            found.append(f"{path.name}:{node.lineno}")
        named_aggregation = isinstance(node, ast.Tuple) and len(node.elts) == 2  # ("column", "median")
        if named_aggregation and isinstance(node.elts[1], ast.Constant) and node.elts[1].value == seeds.SEED_STATISTIC:
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_only_the_seeds_module_names_the_statistic_over_seeds():
    found = [
        hit for path in sorted(REPORTING.glob("*.py")) if path.name != "seeds.py" for hit in _statistics_named(path)
    ]
    assert found == []


def test_the_pandas_and_plain_helpers_give_the_same_number():
    values = [71.5, 64.0, 69.25, 80.0]
    frame = pd.DataFrame({"config": ["a"] * 4, "value": values})
    assert seeds.of_seeds(values) == seeds.over_seeds(pd.Series(values)) == 70.375
    assert seeds.over_seeds(frame.groupby("config")["value"]).loc["a"] == 70.375
