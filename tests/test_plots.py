"""The figures show what their captions say: differences to the baseline config (or setting)
in the cells, one point per seed, span shares that add up to 100%."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workflow_scripts.reporting import plots
from workflow_scripts.spec.report_settings import TableSettings

pytestmark = pytest.mark.unit

SETTINGS = TableSettings.parse(
    {
        "baseline": "none",
        "baseline_setting": "zero_shot",
        "intermediate": ["none", "mnli", "multitask"],
        "seeds": [1, 2, 3],
        "targets": ["xnli", "udpos"],
        "settings": ["zero_shot", "translate_train"],
        "target_languages": {"xnli": ["en", "de", "sw"], "udpos": ["en", "de"]},
    }
)


@pytest.fixture
def drawn(monkeypatch):
    """Figures by file stem instead of files on disk."""
    figures = {}

    def keep(fig, stem):
        figures[str(stem)] = fig

    monkeypatch.setattr(plots, "save", keep)
    return figures


def cell_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_per_language_cells_are_differences_to_the_baseline(drawn, tmp_path):
    per_language = pd.DataFrame(
        [
            {
                "setting": "zero_shot",
                "intermediate": "none",
                "en": 80.0,
                "de": 70.0,
                "sw": 60.0,
                "avg": 70.0,
                "target": "xnli",
                "metric": "accuracy",
            },
            {
                "setting": "zero_shot",
                "intermediate": "mnli",
                "en": 82.5,
                "de": 69.0,
                "sw": math.nan,
                "avg": 75.75,
                "target": "xnli",
                "metric": "accuracy",
            },
        ]
    )
    plots.per_language_deltas(per_language, SETTINGS, "xnli", tmp_path)
    ax = drawn[str(tmp_path / "per_language" / "xnli")].axes[0]
    assert cell_texts(ax) == ["+2.5", "-1.0", "–", "+5.8"]  # en, de, sw (missing), avg
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mnli"]
    image = ax.images[0]
    assert image.norm.vmin == -image.norm.vmax, "the colour map is centred on 0"


def test_main_heatmap_rows_are_the_configs_besides_the_baseline(drawn, tmp_path):
    main = pd.DataFrame(
        [
            {"setting": "zero_shot", "intermediate": "none", "xnli": 70.0, "udpos": 80.0, "avg": 75.0},
            {"setting": "zero_shot", "intermediate": "mnli", "xnli": 1.5, "udpos": -0.25, "avg": 0.625},
            {"setting": "zero_shot", "intermediate": "multitask", "xnli": -3.0, "udpos": 0.0, "avg": -1.5},
            {"setting": "translate_train", "intermediate": "none", "xnli": 72.0, "udpos": math.nan, "avg": 72.0},
        ]
    )
    plots.main_deltas(main, SETTINGS, tmp_path)
    ax = drawn[str(tmp_path / "main_deltas")].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mnli", "multitask"]
    assert cell_texts(ax) == ["+1.5", "-0.2", "+0.6", "-3.0", "+0.0", "-1.5"]


def test_seed_spread_draws_one_point_per_seed_and_the_median(drawn, tmp_path):
    rows = [
        {
            "setting": "zero_shot",
            "intermediate": config,
            "target": "xnli",
            "seed": seed,
            "split": "test",
            "language": "avg",
            "metric": "accuracy",
            "value": value,
        }
        for config, values in (("none", [60.0, 70.0, 65.0]), ("mnli", [71.0, 72.0, 90.0]))
        for seed, value in zip((1, 2, 3), values)
    ]
    rows.append({**rows[0], "split": "dev", "value": 99.0})  # dev scores are not shown
    plots.seed_spread(pd.DataFrame(rows), SETTINGS.replace(targets=["xnli"]), tmp_path)
    ax = drawn[str(tmp_path / "seed_spread")].axes[0]
    points = [
        sorted(c.get_offsets()[:, 1].tolist())
        for c in ax.collections
        if c.get_offsets().shape[1] == 2 and len(c.get_offsets()) == 3
    ]
    assert points == [[60.0, 65.0, 70.0], [71.0, 72.0, 90.0]]
    medians = sorted(seg[0][1] for c in ax.collections if hasattr(c, "get_segments") for seg in c.get_segments())
    assert medians == [65.0, 72.0]


def test_setting_heatmap_compares_each_language_with_the_baseline_setting(drawn, tmp_path):
    per_language = pd.DataFrame(
        [
            {
                "setting": "zero_shot",
                "intermediate": "none",
                "en": 80.0,
                "de": 70.0,
                "sw": 60.0,
                "avg": 70.0,
                "target": "xnli",
                "metric": "accuracy",
            },
            {
                "setting": "translate_train",
                "intermediate": "none",
                "en": 79.0,
                "de": 74.0,
                "sw": math.nan,
                "avg": 76.5,
                "target": "xnli",
                "metric": "accuracy",
            },
        ]
    )
    plots.setting_deltas(per_language, SETTINGS, "translate_train", tmp_path)
    ax = drawn[str(tmp_path / "settings" / "translate_train")].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["en", "de", "sw"]
    assert cell_texts(ax) == ["-1.0", "+4.0", "–"]


def test_span_shares_add_up_to_all_examples(drawn, tmp_path):
    table = pd.DataFrame(
        [
            {
                "task": "squad",
                "direction": "en-de",
                "split": "train",
                "examples": 200,
                "by_markers": 120,
                "by_fuzzy_match": 50,
                "dropped": 30,
                "kind": "data",
                "bleu": math.nan,
                "chrf": math.nan,
            },
            {
                "task": "qqp",
                "direction": "en-de",
                "split": "train",
                "examples": 60,
                "by_markers": math.nan,
                "by_fuzzy_match": math.nan,
                "dropped": 0,
                "kind": "data",
                "bleu": math.nan,
                "chrf": math.nan,
            },
            {
                "task": math.nan,
                "direction": "en-de",
                "split": "test",
                "examples": math.nan,
                "by_markers": math.nan,
                "by_fuzzy_match": math.nan,
                "dropped": math.nan,
                "kind": "quality",
                "bleu": 31.0,
                "chrf": 58.0,
            },
        ]
    )
    plots.translation_figure(table, tmp_path)
    spans, quality = drawn[str(tmp_path / "translation")].axes[:2]
    heights = [round(p.get_height(), 6) for p in spans.patches]
    assert heights == [60.0, 25.0, 15.0], "one bar per span task, markers + fuzzy + dropped = 100%"
    assert sorted(round(p.get_height(), 6) for p in quality.patches) == [31.0, 58.0]


def test_missing_table_names_the_file(tmp_path):
    with pytest.raises(plots.InputError, match="main.csv: run aggregate_tables first"):
        plots.plot_results(tmp_path, SETTINGS, tmp_path / "figures")
