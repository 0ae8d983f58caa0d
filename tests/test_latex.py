"""LaTeX tables: booktabs, signed differences, the best value per column in bold, the
significance dagger, escaped names, one cell per column."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workflow_scripts.reporting import latex
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import BenchmarkDescription, TableSettings

pytestmark = pytest.mark.unit

SETTINGS = TableSettings.parse(
    {
        "baseline": "none",
        "baseline_setting": "zero_shot",
        "intermediate": ["none", "mnli", "hellaswag_de"],
        "seeds": [1, 2, 3],
        "targets": ["xnli", "xquad"],
        "decimals": 1,
        "target_languages": {"xnli": ["en", "de"], "xquad": ["en", "de"]},
    }
)
MAIN = pd.DataFrame(
    [
        {
            "setting": "zero_shot",
            "intermediate": "none",
            "xnli": 70.0,
            "xquad.f1": 60.0,
            "xquad.exact_match": 45.0,
            "avg": 61.25,
        },
        {
            "setting": "zero_shot",
            "intermediate": "mnli",
            "xnli": 2.5,
            "xquad.f1": -1.0,
            "xquad.exact_match": 0.5,
            "avg": 1.0,
        },
        {
            "setting": "zero_shot",
            "intermediate": "hellaswag_de",
            "xnli": -0.5,
            "xquad.f1": 1.25,
            "xquad.exact_match": -2.0,
            "avg": 0.0,
        },
        {
            "setting": "translate_train",
            "intermediate": "none",
            "xnli": 99.0,
            "xquad.f1": 99.0,
            "xquad.exact_match": 99.0,
            "avg": 99.0,
        },
    ]
)
SIGNIFICANCE = pd.DataFrame(
    [
        {"setting": "zero_shot", "intermediate": "mnli", "target": "xnli", "excludes_zero": True},
        {"setting": "zero_shot", "intermediate": "hellaswag_de", "target": "xquad", "excludes_zero": False},
        {"setting": "translate_train", "intermediate": "mnli", "target": "xquad", "excludes_zero": True},
    ]
)


def body_rows(tex: str) -> list[list[str]]:
    lines = tex.splitlines()
    start, end = lines.index(r"\midrule"), lines.index(r"\bottomrule")
    return [[cell.strip() for cell in line.removesuffix(r" \\").split(" & ")] for line in lines[start + 1 : end]]


def test_main_table_in_booktabs_with_signs_bold_best_and_dagger():
    tex = latex.main_tex(MAIN, SIGNIFICANCE, SETTINGS)
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    assert r"\begin{tabular}{lrrr}" in tex
    header = tex.splitlines()[tex.splitlines().index(r"\toprule") + 1]
    assert header == r"Intermediate task & xnli & xquad (F1 / EM) & Avg \\"
    rows = body_rows(tex)
    assert [len(r) for r in rows] == [4, 4, 4], "one cell per column"
    none, mnli, hellaswag = rows
    assert none == ["none", "70.0", "60.0 / 45.0", "61.2"]
    # mnli is the best xnli (72.5 absolute) and its difference is significant; best Avg too.
    assert mnli == ["mnli", r"\textbf{$+$2.5}\textsuperscript{\dag}", r"$-$1.0 / \textbf{$+$0.5}", r"\textbf{$+$1.0}"]
    assert hellaswag == [r"hellaswag\_de", "$-$0.5", r"\textbf{$+$1.2} / $-$2.0", "$+$0.0"]
    assert "99.0" not in tex, "only the baseline setting's block"


def test_per_language_table_shows_differences_per_language():
    per_language = pd.DataFrame(
        [
            {
                "setting": "zero_shot",
                "intermediate": "none",
                "en": 80.0,
                "de": 70.0,
                "avg": 75.0,
                "target": "xnli",
                "metric": "accuracy",
            },
            {
                "setting": "zero_shot",
                "intermediate": "mnli",
                "en": 79.0,
                "de": 73.0,
                "avg": 76.0,
                "target": "xnli",
                "metric": "accuracy",
            },
        ]
    )
    tex = latex.per_language_tex(per_language, SETTINGS.replace(intermediate=["none", "mnli"]), "xnli")
    assert body_rows(tex) == [
        ["none", r"\textbf{80.0}", "70.0", "75.0"],
        ["mnli", "$-$1.0", r"\textbf{$+$3.0}", r"\textbf{$+$1.0}"],
    ]
    assert r"Intermediate task & en & de & Avg \\" in tex


def test_missing_values_and_special_characters():
    assert latex.number(math.nan, 1, True) == "--"
    assert latex.escape("a_b & 50% #1") == r"a\_b \& 50\% \#1"


def test_a_table_without_the_baseline_config_is_refused():
    with pytest.raises(InputError, match="no row for the baseline config 'none'"):
        latex.main_tex(MAIN[MAIN["intermediate"] != "none"], SIGNIFICANCE, SETTINGS)


def test_xtreme_r_main_table_has_the_category_and_overall_columns():
    from workflow_scripts.spec import benchmark

    settings = SETTINGS.replace(
        intermediate=["none", "mnli"],
        targets=["xnli", "xcopa"],
        target_languages={"xnli": benchmark.XTREME_R.languages["xnli"], "xcopa": ["et", "ht"]},
        benchmark=BenchmarkDescription.of(benchmark.XTREME_R),
    )
    nan = math.nan
    main = pd.DataFrame(
        [
            {
                "setting": "zero_shot",
                "intermediate": "none",
                "xnli": 80.0,
                "xcopa": 60.0,
                "avg": 70.0,
                "classification": 70.0,
                "structured prediction": nan,
                "question answering": nan,
                "retrieval": nan,
                "overall": nan,
            },
            {
                "setting": "zero_shot",
                "intermediate": "mnli",
                "xnli": 2.0,
                "xcopa": -1.0,
                "avg": 0.5,
                "classification": 0.5,
                "structured prediction": nan,
                "question answering": nan,
                "retrieval": nan,
                "overall": nan,
            },
        ]
    )
    tex = latex.main_tex(main, SIGNIFICANCE.iloc[0:0], settings)
    header = tex.splitlines()[tex.splitlines().index(r"\toprule") + 1]
    assert header == (
        r"Intermediate task & xnli & xcopa & Avg & Classification & Struct. pred. & QA & Retrieval & "
        r"Overall \\"
    )
    # bold: best absolute per column (xcopa: the baseline's 60 beats 59); empty categories "--"
    assert body_rows(tex) == [
        ["none", "80.0", r"\textbf{60.0}", "70.0", "70.0", "--", "--", "--", "--"],
        ["mnli", r"\textbf{$+$2.0}", "$-$1.0", r"\textbf{$+$0.5}", r"\textbf{$+$0.5}", "--", "--", "--", "--"],
    ]
    assert "% xcopa: averaged over 2 of 11 languages: not comparable with published XTREME-R scores." in tex
    assert "% – in Struct. pred., QA, Retrieval, Overall: this grid lacks tasks of theirs" in tex
    with pytest.raises(InputError, match="no column 'classification'"):
        latex.main_tex(main.drop(columns="classification"), SIGNIFICANCE.iloc[0:0], settings)
