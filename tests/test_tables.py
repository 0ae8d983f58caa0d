"""Table aggregation on hand-made metric files: medians over seeds, differences to the
baseline, QA cells, the XTREME average, best models and the translated-data table."""

import json

import pytest

from workflow_scripts.tables import best_models, load_runs, main_table, render_main, translated_table

SETTINGS = {"baseline": "none", "decimals": 1, "targets": ["xnli", "xquad"], "intermediate": ["none", "mnli", "mnli_de"],
            "seeds": [1, 2, 3], "target_languages": {"xnli": ["en", "de"], "xquad": ["en", "de"]},
            "translated": {"mnli_de": {"language": "de", "english": "mnli"}}}


def metric_file(tmp_path, inter, target, seed, per_lang, selection):
    m = {"run": {"intermediate": inter, "target": target, "seed": seed},
         "scores": {"test": per_lang}, "average": {"test": {k: sum(v[k] for v in per_lang.values()) / len(per_lang)
                                                           for k in next(iter(per_lang.values()))}},
         "selection": {"score": selection}}
    path = tmp_path / f"{inter}-{target}-{seed}.json"
    path.write_text(json.dumps(m))
    return str(path)


@pytest.fixture
def runs(tmp_path):
    files = []
    acc = {"none": (60, 62, 70), "mnli": (64, 66, 90), "mnli_de": (65, 61, 63)}  # en scores per seed
    for inter, values in acc.items():
        for seed, v in zip((1, 2, 3), values):
            files.append(metric_file(tmp_path, inter, "xnli", seed, {"en": {"accuracy": v}, "de": {"accuracy": v - 10}},
                                     selection=v))
            files.append(metric_file(tmp_path, inter, "xquad", seed,
                                     {"en": {"f1": v, "exact_match": v - 20}, "de": {"f1": v - 4, "exact_match": v - 24}},
                                     selection=v))
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
