"""The significance marker: a paired bootstrap over (seed, language) differences."""

from __future__ import annotations

import pandas as pd
import pytest

from workflow_scripts.reporting import significance
from workflow_scripts.reporting.tables import main_table, render_main
from workflow_scripts.spec.report_settings import TableSettings

pytestmark = pytest.mark.unit

SETTINGS = TableSettings.parse(
    {
        "baseline": "none",
        "intermediate": ["none", "mnli", "noisy"],
        "targets": ["xnli"],
        "seeds": [1, 2, 3],
        "decimals": 1,
    }
)
LANGS = ("en", "de", "ru", "sw")


def runs_frame(scores: dict[str, dict[int, list[float]]]):
    """xnli test accuracy per config, seed and language (plus each run's average row)."""
    rows = []
    for config, by_seed in scores.items():
        for seed, values in by_seed.items():
            rows += [(config, "xnli", seed, "test", lang, "accuracy", v) for lang, v in zip(LANGS, values)]
            rows.append((config, "xnli", seed, "test", "avg", "accuracy", sum(values) / len(values)))
    return pd.DataFrame.from_records(
        rows, columns=["intermediate", "target", "seed", "split", "language", "metric", "value"]
    )


BASE = {1: [80.0, 70.0, 65.0, 60.0], 2: [81.0, 69.0, 66.0, 58.0], 3: [79.0, 71.0, 64.0, 61.0]}
RUNS = runs_frame(
    {
        "none": BASE,
        # +3 everywhere, +-0.5 jitter: a real improvement
        "mnli": {s: [v + 3 + (0.5 if k % 2 else -0.5) for k, v in enumerate(vals)] for s, vals in BASE.items()},
        # differences of both signs around 0: noise
        "noisy": {s: [v + d for v, d in zip(vals, (2.0, -2.5, 1.5, -1.0))] for s, vals in BASE.items()},
    }
)


def test_differences_are_paired_by_seed_and_language():
    diffs = significance.paired_differences(RUNS, "noisy", "none", "xnli", "accuracy")
    assert diffs.shape == (3, 4)  # seeds x languages (columns in language order: de, en, ru, sw)
    assert diffs.tolist() == [[-2.5, 2.0, 1.5, -1.0]] * 3


def test_a_consistent_gain_is_marked_and_noise_is_not():
    table = significance.significance(RUNS, SETTINGS, "zero_shot").set_index("intermediate")
    assert (table.loc["mnli", "seeds"], table.loc["mnli", "languages"]) == (3, 4) and table.loc[
        "mnli", "mean_difference"
    ] == pytest.approx(3.0)
    assert table.loc["mnli", "ci_low"] > 2 and table.loc["mnli", "excludes_zero"]
    assert table.loc["noisy", "ci_low"] < 0 < table.loc["noisy", "ci_high"] and not table.loc["noisy", "excludes_zero"]
    again = significance.significance(RUNS, SETTINGS, "zero_shot").set_index("intermediate")
    assert again.equals(table), "the bootstrap is seeded"


def test_main_table_marks_the_significant_cell_and_states_the_method():
    _, shown = main_table(RUNS, SETTINGS)
    marks = significance.marked(significance.significance(RUNS, SETTINGS, "zero_shot"))
    md = render_main(shown, SETTINGS, marks=marks)
    assert "| mnli | +3.0 † | +3.0 |" in md
    assert "| noisy | -0.0 |" in md or "| noisy | +0.0 |" in md
    assert "paired bootstrap interval" in md and "10,000 resamples of the seeds" in md


def test_one_lucky_seed_is_not_significant():
    """Languages of one run move together: a gain from one seed alone is not a finding, however
    many languages repeat it."""
    lucky = runs_frame({"none": BASE, "mnli": {1: [v + 10 for v in BASE[1]], 2: BASE[2], 3: BASE[3]}})
    table = significance.significance(lucky, SETTINGS, "zero_shot").set_index("intermediate")
    assert table.loc["mnli", "mean_difference"] == pytest.approx(10 / 3)
    assert table.loc["mnli", "ci_low"] <= 0 and not table.loc["mnli", "excludes_zero"]


def test_no_pairs_gives_no_row():
    only_baseline = RUNS[RUNS["intermediate"] == "none"]
    assert significance.significance(only_baseline, SETTINGS, "zero_shot").empty
