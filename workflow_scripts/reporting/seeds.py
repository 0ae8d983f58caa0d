"""How a cell's seeds become one number: the median over seeds (docs/protocol.md §5), named
once here. Every table, figure and report of the grid reads its seeds through these two
functions, so that the statistic is one declaration, not one per module.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

# The statistic over seeds, as pandas names it (a Series, DataFrame or groupby method, and a
# named aggregation in ``DataFrame.agg``/``groupby.agg``).
SEED_STATISTIC = "median"


def over_seeds(values: Any) -> Any:
    """The statistic over seeds of a pandas Series, DataFrame or groupby (per group)."""
    return getattr(values, SEED_STATISTIC)()


def of_seeds(values: Iterable[float]) -> float:
    """The statistic over seeds of plain numbers (a JSON-read list): the standard library's
    function of the same name."""
    return getattr(statistics, SEED_STATISTIC)(list(values))
