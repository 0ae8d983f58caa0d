"""Table aggregation on hand-made metric files: medians over seeds, differences to the
baseline, QA cells, the XTREME average, best models and the translated-data table."""

import json

import pytest

from conftest import metric_file_record
from workflow_scripts.reporting.tables import (
    best_models,
    load_runs,
    main_table,
    render_main,
    translated_table,
)
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.report_settings import BenchmarkDescription, TableSettings

pytestmark = pytest.mark.unit

SETTINGS = TableSettings.parse(
    {
        "baseline": "none",
        "decimals": 1,
        "targets": ["xnli", "xquad"],
        "intermediate": ["none", "mnli", "mnli_de"],
        "seeds": [1, 2, 3],
        "target_languages": {"xnli": ["en", "de"], "xquad": ["en", "de"]},
        "translated": {"mnli_de": {"language": "de", "english": "mnli"}},
    }
)


def metric_file(tmp_path, inter, target, seed, per_lang, selection):
    run = {"intermediate": inter, "target": target, "seed": seed}
    m = metric_file_record(run, {"test": per_lang}, selection={"step": 1, "score": selection, "scores": {}})
    path = tmp_path / f"{inter}-{target}-{seed}.json"
    path.write_text(json.dumps(m))
    return str(path)


@pytest.fixture
def runs(tmp_path):
    files = []
    acc = {"none": (60, 62, 70), "mnli": (64, 66, 90), "mnli_de": (65, 61, 63)}  # en scores per seed
    for inter, values in acc.items():
        for seed, v in zip((1, 2, 3), values):
            files.append(
                metric_file(
                    tmp_path, inter, "xnli", seed, {"en": {"accuracy": v}, "de": {"accuracy": v - 10}}, selection=v
                )
            )
            files.append(
                metric_file(
                    tmp_path,
                    inter,
                    "xquad",
                    seed,
                    {"en": {"f1": v, "exact_match": v - 20}, "de": {"f1": v - 4, "exact_match": v - 24}},
                    selection=v,
                )
            )
    return load_runs(files)


def test_medians_differences_and_xtreme_average(runs):
    absolute, shown = main_table(runs, SETTINGS)
    # none, xnli: per-seed language means 55, 57, 65 -> median 57.
    assert absolute.loc["none", "xnli"] == 57
    # mnli, xnli: 59, 61, 85 -> 61; shown as +4 over the baseline.
    assert shown.loc["mnli", "xnli"] == 4
    # xquad F1 per seed (en, de): none 58, 60, 68 -> 60; EM 38, 40, 48 -> 40.
    assert (absolute.loc["none", "xquad.f1"], absolute.loc["none", "xquad.exact_match"]) == (60, 40)
    # Avg = mean(xnli, (F1 + EM) / 2) = mean(57, 50) = 53.5.
    assert absolute.loc["none", "avg"] == 53.5
    text = render_main(shown, SETTINGS, best_models(runs, SETTINGS))
    assert "| none | 57.0 | 60.0 / 40.0 | 53.5 |" in text
    assert "| mnli | +4.0 | +4.0 / +4.0 | +4.0 |" in text


def test_best_models_pick_config_by_median_dev_then_best_seed(runs):
    best = best_models(runs, SETTINGS)
    row = best[best["target"] == "xnli"].iloc[0]
    # Median selection scores: none 62, mnli 66, mnli_de 63 -> mnli; its best seed is 3 (90).
    assert (row["intermediate"], row["seed"], row["value"]) == ("mnli", 3, 85.0)


def test_translated_table_compares_in_the_translation_language(runs):
    md, frame = translated_table(runs, SETTINGS)
    de = frame[(frame["target"] == "xnli")].set_index("intermediate")["median"]
    # de scores: mnli 54, 56, 80 -> 56; mnli_de 55, 51, 53 -> 53.
    assert (de["mnli"], de["mnli_de"]) == (56, 53)
    assert "| mnli | en | 56.0 |" in md and "| mnli_de | de | 53.0 |" in md


# ----- benchmarks: XTREME-R categories and overall score, footnotes ------------------------

XTREME_R_SCORES = {  # baseline "none"; config "mnli" adds 2 everywhere, 5 on LAReQA
    "xnli": {"accuracy": 80},
    "xcopa": {"accuracy": 60},
    "udpos": {"f1": 75},
    "panx": {"f1": 65},
    "xquad": {"f1": 70, "exact_match": 50},
    "mlqa": {"f1": 60, "exact_match": 40},
    "tydiqa": {"f1": 55, "exact_match": 45},
    "tatoeba": {"accuracy": 90},
    "mewslix": {"map_at_20": 40},
    "lareqa": {"map_at_20": 20},
}


def xtreme_r_settings(targets, languages=None) -> TableSettings:
    official = benchmark.XTREME_R.languages
    return TableSettings.parse(
        {
            "baseline": "none",
            "decimals": 1,
            "targets": list(targets),
            "intermediate": ["none", "mnli"],
            "seeds": [1],
            "target_languages": {t: list((languages or {}).get(t, official[t])) for t in targets},
            "benchmark": benchmark.XTREME_R.describe(),
        }
    )


@pytest.fixture
def xtreme_r_runs(tmp_path):
    files = []
    for inter, shift in (("none", 0), ("mnli", 2)):
        for target, scores in XTREME_R_SCORES.items():
            delta = 5 if (inter, target) == ("mnli", "lareqa") else shift
            per_lang = {lang: {m: v + delta for m, v in scores.items()} for lang in ("en", "de")}
            files.append(metric_file(tmp_path, inter, target, 1, per_lang, selection=50 + delta))
    return load_runs(files)


def test_xtreme_r_category_averages_and_overall_score(xtreme_r_runs):
    settings = xtreme_r_settings(XTREME_R_SCORES)
    absolute, shown = main_table(xtreme_r_runs, settings)
    none = absolute.loc["none"]
    assert none["classification"] == 70  # (80 + 60) / 2
    assert none["structured prediction"] == 70  # (75 + 65) / 2
    assert none["question answering"] == pytest.approx(160 / 3)  # QA as (F1 + EM) / 2: 60, 50, 50
    assert none["retrieval"] == 50  # (90 + 40 + 20) / 3
    assert none["overall"] == 59 == none["avg"]  # 590 / 10
    mnli = shown.loc["mnli"]  # differences to the baseline, as Avg
    assert (mnli["classification"], mnli["question answering"]) == (2, 2)
    assert mnli["retrieval"] == pytest.approx(3) and mnli["overall"] == pytest.approx(2.3)
    text = render_main(shown, settings)
    assert (
        "| Intermediate task | xnli | xcopa | udpos | panx | xquad | mlqa | tydiqa | tatoeba | mewslix | lareqa "
        "| Avg | Classification | Struct. pred. | QA | Retrieval | Overall |"
    ) in text
    assert (
        "| none | 80.0 | 60.0 | 75.0 | 65.0 | 70.0 / 50.0 | 60.0 / 40.0 | 55.0 / 45.0 | 90.0 | 40.0 | 20.0 "
        "| 59.0 | 70.0 | 70.0 | 53.3 | 50.0 | 59.0 |" in text
    )
    assert (
        "| mnli | +2.0 | +2.0 | +2.0 | +2.0 | +2.0 / +2.0 | +2.0 / +2.0 | +2.0 / +2.0 | +2.0 | +2.0 | +5.0 "
        "| +2.3 | +2.0 | +2.0 | +2.0 | +3.0 | +2.3 |" in text
    )
    assert "QA counts (F1 + EM) / 2 in the averages." in text
    # the benchmark's notes for the targets shown (Mewsli-X's data version, LAReQA's mAP@20)
    assert "mewslix: Mewsli-X data version 20220518_6 was re-sampled" in text
    assert "lareqa: mAP@20 as XTREME-R's code scores it" in text
    assert "averaged over" not in text and "this grid lacks" not in text, "full language lists, every task"


def test_a_category_without_all_its_targets_is_left_empty_with_a_footnote(xtreme_r_runs):
    settings = xtreme_r_settings(["xnli", "xcopa", "xquad", "mewslix"])
    absolute, shown = main_table(xtreme_r_runs, settings)
    assert absolute.loc["none", "classification"] == 70 and shown.loc["mnli", "classification"] == 2
    for column in ("structured prediction", "question answering", "retrieval", "overall"):
        assert absolute.loc[:, column].isna().all(), column
    assert absolute.loc["none", "avg"] == pytest.approx((80 + 60 + 60 + 40) / 4), "Avg: over the targets present"
    text = render_main(shown, settings, best_models(xtreme_r_runs, settings))
    assert "| none | 80.0 | 60.0 | 70.0 / 50.0 | 40.0 | 60.0 | 70.0 | – | – | – | – |" in text
    assert "| mnli | +2.0 | +2.0 | +2.0 / +2.0 | +2.0 | +2.0 | +2.0 | – | – | – | – |" in text
    assert (
        "– in Struct. pred., QA, Retrieval, Overall: this grid lacks tasks of theirs (Struct. pred.: udpos, "
        "panx; QA: mlqa, tydiqa; Retrieval: tatoeba, lareqa)"
    ) in text
    best_row = next(line for line in text.splitlines() if line.startswith("| best models"))
    assert best_row.count("|") == text.splitlines()[0].count("|"), "one cell per column"
    assert "lareqa:" not in text, "notes only for the targets shown"


def test_a_target_on_fewer_languages_than_the_benchmark_is_footnoted(xtreme_r_runs):
    settings = xtreme_r_settings(["xnli", "mewslix"], {"xnli": ["en", "de"], "mewslix": ["en", "de", "fr"]})
    _, shown = main_table(xtreme_r_runs, settings)
    text = render_main(shown, settings)
    assert "xnli: averaged over 2 of 15 languages: not comparable with published XTREME-R scores." in text
    assert (
        "mewslix: averaged over 2 of 11 languages and over fr, which XTREME-R does not evaluate mewslix in: not "
        "comparable with published XTREME-R scores."
    ) in text


def test_ranking_targets_show_map_at_20(xtreme_r_runs):
    from workflow_scripts.reporting.tables import metrics_shown, per_language

    assert metrics_shown("mewslix") == metrics_shown("lareqa") == ("map_at_20",)
    settings = xtreme_r_settings(["mewslix", "lareqa"])
    absolute, _ = main_table(xtreme_r_runs, settings)
    assert (absolute.loc["none", "mewslix"], absolute.loc["mnli", "lareqa"]) == (40, 25)
    md, frame = per_language(xtreme_r_runs, settings)
    assert "## mewslix (map_at_20, test, median over seeds)" in md
    assert set(frame[frame["target"] == "lareqa"]["metric"]) == {"map_at_20"}


def test_xtreme_tables_keep_their_layout():
    """Benchmark XTREME: targets + Avg, no category columns; with the targets' full language
    lists the notes are those of the tables before benchmarks; with fewer, one line each."""
    import pandas as pd

    full = SETTINGS.replace(
        target_languages={t: benchmark.XTREME.languages[t] for t in SETTINGS.targets},
        benchmark=BenchmarkDescription.of(benchmark.XTREME),
    )
    shown = pd.DataFrame(
        {"xnli": [57.0, 4.0], "xquad.f1": [60.0, 4.0], "xquad.exact_match": [40.0, 4.0], "avg": [53.5, 4.0]},
        index=["none", "mnli"],
    )
    text = render_main(shown, full)
    assert text.splitlines()[:4] == [
        "| Intermediate task | xnli | xquad | Avg |",
        "|---|---:|---:|---:|",
        "| none | 57.0 | 60.0 / 40.0 | 53.5 |",
        "| mnli | +4.0 | +4.0 / +4.0 | +4.0 |",
    ]
    assert text.rstrip("\n").endswith("F1 for QA."), "no benchmark notes"
    subset = render_main(shown, full.replace(target_languages=SETTINGS.target_languages))
    assert subset.splitlines()[:4] == text.splitlines()[:4]
    assert subset.splitlines()[-2:] == [
        "xnli: averaged over 2 of 15 languages: not comparable with published XTREME scores.",
        "xquad: averaged over 2 of 11 languages: not comparable with published XTREME scores.",
    ]


def test_xtreme_main_table_has_no_category_columns(runs):
    absolute, _ = main_table(runs, SETTINGS.replace(benchmark=BenchmarkDescription.of(benchmark.XTREME)))
    assert list(absolute.columns) == ["xnli", "xquad.f1", "xquad.exact_match", "avg"]


def test_a_run_whose_intermediate_data_overlap_the_targets_test_data_is_flagged_in_its_cell(tmp_path):
    files = []
    for inter in ("none", "mnli"):
        for seed in (1, 2, 3):
            files.append(metric_file(tmp_path, inter, "xnli", seed, {"en": {"accuracy": 60 + seed}}, selection=60))
            files.append(
                metric_file(tmp_path, inter, "xquad", seed, {"en": {"f1": 50.0, "exact_match": 40.0}}, selection=50)
            )
    path = next(f for f in files if f.endswith("mnli-xnli-1.json"))
    leaky = json.loads(open(path).read())
    assert leaky["run"] == {
        "backbone": "b",
        "setting": "zero_shot",
        "intermediate": "mnli",
        "target": "xnli",
        "seed": 1,
    }
    leaky["leakage"] = [
        {"task": "mnli", "target": "xnli", "images": 0, "texts": 7, "rows_affected": 9, "target_rows": 120}
    ]
    open(path, "w").write(json.dumps(leaky))
    from workflow_scripts.reporting.tables import LEAKED, leaked_runs

    leaked = leaked_runs(files)
    assert list(leaked) == [("zero_shot", "mnli", "xnli")]
    _, shown = main_table(load_runs(files), SETTINGS.replace(intermediate=["none", "mnli"]))
    text = render_main(shown, SETTINGS, leaked={("mnli", "xnli"): leaked[("zero_shot", "mnli", "xnli")]})
    row = next(line for line in text.splitlines() if line.startswith("| mnli |"))
    cells = row.split("|")
    assert LEAKED in cells[2] and LEAKED not in cells[3]  # its xnli cell, not its xquad cell
    assert LEAKED not in next(line for line in text.splitlines() if line.startswith("| none |"))
    assert "mnli on xnli: mnli shares 0 images and 7 texts (9 of 120 test rows)" in text
