"""Transfer settings (docs/protocol.md §7): what each setting trains, selects on and scores, the
errors that stop a bad setting before any job, and the Turc et al. and XTREME-baselines
tables checked against hand computations."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from conftest import metric_file_record
from workflow_scripts.evaluation.metric_file import parse_data, parse_models
from workflow_scripts.reporting.tables import load_runs, settings_table, source_language_table
from workflow_scripts.spec.report_settings import TableSettings
from workflow_scripts.spec.tasks import TASKS
from workflow_scripts.workflow import transfer
from workflow_scripts.workflow.grid import ConfigError
from workflow_scripts.workflow.grid_checks import check_config

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def config() -> dict:
    """The demo config with a wider grid than the demo runs: a target of each kind the
    settings treat differently (PAN-X: tagging with training data in other languages) and
    the settings on two targets each."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["targets"] = ["xnli", "xquad", "udpos", "panx", "bucc", "tatoeba"]
    baseline_only = {"intermediate": ["none"], "seeds": [1]}
    config["transfer"]["settings"] = {
        "zero_shot": {},
        "translate_train": {"targets": ["xnli", "xquad"], "languages": ["de"], **baseline_only},
        "translate_train_all": {"targets": ["xnli"], "languages": ["de"], **baseline_only},
        "translate_test": {"targets": ["xnli"], "languages": ["de"], **baseline_only},
        "in_language": {"targets": ["panx"], "languages": ["de"], **baseline_only},
        "in_language_all": {"targets": ["panx"], **baseline_only},
        "source:de": {"targets": ["xnli", "xquad"], **baseline_only},
    }
    return config


def recipe_of(config, setting, target, lang):
    return transfer.plan(config, setting, target).models[lang]


def test_zero_shot_trains_on_english_and_selects_on_english_dev(config):
    p = transfer.plan(config, "zero_shot", "xnli")
    assert set(p.models) == {"en", "de", "ru", "sw"} and len(p.recipes()) == 1
    (recipe,) = p.recipes()
    assert recipe.name == "en.dev-en"
    assert [(r.path, r.languages, r.kind) for r in recipe.train] == [
        ("results/demo/data/mnli/train.parquet", ("en",), "english")
    ]
    assert [(r.path, r.languages) for r in recipe.dev] == [("results/demo/data/xnli/dev.parquet", ("en",))]
    assert p.eval_data["test"][0].languages == ("en", "de", "ru", "sw")


def test_translate_train_uses_published_translations_and_target_dev(config):
    de = recipe_of(config, "translate_train", "xnli", "de")
    assert de.name == "mt-de.dev-de"
    # XNLI's own machine-translated MNLI, not our MT; selected on XNLI's human de dev.
    assert [(r.path, r.languages, r.kind) for r in de.train] == [
        ("results/demo/data/xnli_mt/train.parquet", ("de",), "published_mt")
    ]
    assert [(r.path, r.languages, r.kind) for r in de.dev] == [("results/demo/data/xnli/dev.parquet", ("de",), "human")]
    # English keeps the English model; only the chosen languages are scored.
    p = transfer.plan(config, "translate_train", "xnli")
    assert p.models["en"].name == "en.dev-en" and set(p.models) == {"en", "de"}
    assert p.eval_data["test"][0].languages == ("en", "de") and p.notes


def test_translate_train_for_qa_uses_our_translation_of_squad_train_and_dev(config):
    de = recipe_of(config, "translate_train", "xquad", "de")
    assert [(r.path, r.kind) for r in de.train] == [("results/demo/data_mt/squad/de/train.parquet", "pipeline_mt")]
    assert [(r.path, r.kind) for r in de.dev] == [("results/demo/data_mt/squad/de/dev.parquet", "pipeline_mt")]


def test_source_language_shares_the_translate_train_model_and_scores_every_language(config):
    p = transfer.plan(config, "source:de", "xnli")
    assert {r.name for r in p.recipes()} == {"mt-de.dev-de"}
    assert set(p.models) == {"en", "de", "ru", "sw"}
    assert recipe_of(config, "translate_train", "xnli", "de") == p.models["en"]


def test_translate_train_all_trains_one_model_on_english_and_every_translation(config):
    (recipe,) = transfer.plan(config, "translate_train_all", "xnli").recipes()
    assert recipe.name == "mt-all.dev-all"
    assert [(r.path, r.languages) for r in recipe.train] == [
        ("results/demo/data/mnli/train.parquet", ("en",)),
        ("results/demo/data/xnli_mt/train.parquet", ("de",)),
    ]
    # One selection file holding both languages: the selection score averages them.
    assert [(r.path, r.languages) for r in recipe.dev] == [("results/demo/data/xnli/dev.parquet", ("en", "de"))]


def test_in_language_settings_train_on_the_targets_own_data(config):
    de = recipe_of(config, "in_language", "panx", "de")
    assert de.name == "il-de.dev-de"
    assert [(r.path, r.languages, r.kind) for r in de.train] == [
        ("results/demo/data/panx/train.parquet", ("de",), "in_language")
    ]
    (everything,) = transfer.plan(config, "in_language_all", "panx").recipes()
    assert [(r.path, r.languages) for r in everything.train] == [
        ("results/demo/data/panx/train.parquet", ("en", "de", "ru"))
    ]


def test_translate_test_scores_translated_test_data_with_the_english_model(config):
    p = transfer.plan(config, "translate_test", "xnli")
    assert {r.name for r in p.recipes()} == {"en.dev-en"} and p.text_language == "en"
    assert list(p.eval_data) == ["test"]
    assert [(r.path, r.languages, r.kind) for r in p.eval_data["test"]] == [
        ("results/demo/data/xnli/test.parquet", ("en",), "human"),
        ("results/demo/translate_test/xnli/de/test.parquet", ("de",), "translate_test"),
    ]


def test_a_setting_may_run_a_subset_of_the_seeds(config):
    config["transfer"]["settings"]["source:de"]["seeds"] = [2]
    assert transfer.plan(config, "source:de", "xnli").seeds == (2,)
    assert transfer.plan(config, "zero_shot", "xnli").seeds == tuple(config["seeds"])
    config["transfer"]["settings"]["source:de"]["seeds"] = [7]
    with pytest.raises(
        ConfigError, match=r"transfer.settings.source:de.seeds\[0\]: 7 is not one of the config's seeds"
    ):
        check_config(config)


def test_a_language_without_dev_data_selects_on_english_and_says_so(config, monkeypatch):
    # As if UD-POS had no German dev split: the German in-language model selects on English dev.
    monkeypatch.setitem(TASKS, "udpos", dataclasses.replace(TASKS["udpos"], dev_missing=frozenset({"de"})))
    config["transfer"]["settings"]["in_language"]["targets"] = ["udpos"]
    de = recipe_of(config, "in_language", "udpos", "de")
    assert de.name == "il-de.dev-en"
    assert [(r.path, r.languages, r.kind) for r in de.dev] == [
        ("results/demo/data/udpos/dev.parquet", ("en",), "english")
    ]


def test_model_selection_option_changes_the_recipe(config):
    config["transfer"]["settings"]["translate_train"]["model_selection"] = "en"
    de = recipe_of(config, "translate_train", "xnli", "de")
    assert de.name == "mt-de.dev-en" and de.dev[0].languages == ("en",)


def test_only_what_a_setting_needs_is_translated(config):
    assert transfer.pipeline_translations(config) == [("squad", "de", "dev"), ("squad", "de", "train")]
    assert transfer.test_translations(config) == [("xnli", "de")]
    config["transfer"]["settings"] = {"zero_shot": {}}
    assert transfer.pipeline_translations(config) == [] and transfer.test_translations(config) == []


def test_without_a_transfer_block_the_grid_is_zero_shot(config):
    del config["transfer"]
    assert {p.setting for p in transfer.plans(config)} == {"zero_shot"}
    assert {p.target for p in transfer.plans(config)} == set(config["targets"])


def test_settings_apply_to_the_targets_they_can_by_default(config):
    config["transfer"]["settings"] = {"zero_shot": {}, "translate_train": {}, "in_language": {}}
    assert transfer.targets(config, "translate_train") == ["xnli", "xquad"]  # no tagging, no retrieval
    assert transfer.targets(config, "in_language") == ["udpos", "panx"]


BAD = [
    ("unknown setting", {"translate_tset": {}}, "transfer.settings.translate_tset: unknown transfer setting"),
    (
        "tagging target under translate-train",
        {"translate_train": {"targets": ["udpos"]}},
        "transfer.settings.translate_train.targets[0]: translate_train does not apply to udpos",
    ),
    (
        "retrieval target under a source language",
        {"source:de": {"targets": ["bucc"]}},
        "transfer.settings.source:de.targets[0]: source:de does not apply to bucc",
    ),
    (
        "language the target has no data in",
        {"in_language": {"targets": ["panx"], "languages": ["sw"]}},
        "transfer.settings.in_language.languages[0]: panx is not evaluated in 'sw'",
    ),
    (
        "source language without a published translation",
        {"source:ru": {"targets": ["xnli"]}},
        "no published xnli training translation in 'ru': tasks.xnli_mt.languages lacks it",
    ),
    (
        "translate-train without a translator",
        {"translate_train": {"targets": ["xquad"], "languages": ["ru"]}},
        "xquad in 'ru' needs a translator: models.translators has no 'ru'",
    ),
    (
        "unknown intermediate config",
        {"source:de": {"intermediate": ["mnlii"]}},
        "transfer.settings.source:de.intermediate[0]: 'mnlii' is not an intermediate config",
    ),
]


@pytest.mark.parametrize("name,settings,message", BAD, ids=[b[0] for b in BAD])
def test_bad_settings_are_named_config_errors(config, name, settings, message):
    config["transfer"]["settings"] = {"zero_shot": {}, **settings}
    with pytest.raises(ConfigError, match="config key") as err:
        check_config(config)
    assert message in str(err.value)


def test_translate_test_needs_a_translator_into_english(config):
    config["models"]["translators_to_en"] = {}
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert "transfer.settings.translate_test: xnli in 'de' needs a translator: models.translators_to_en" in str(
        err.value
    )


def test_baseline_setting_must_be_one_of_the_settings(config):
    config["transfer"]["baseline"] = "translate_tset"
    with pytest.raises(ConfigError, match="transfer.baseline: 'translate_tset' is not one of transfer.settings"):
        check_config(config)


def test_targets_read_their_train_split_in_every_language_that_has_one(config):
    from workflow_scripts.workflow.grid_settings import data_settings

    assert data_settings(config, "panx", "train").languages == ("en", "de", "ru")
    assert data_settings(config, "panx", "test").languages == ("en", "de", "ru")
    config["tasks"]["udpos"]["languages"] = ["en", "de", "th", "yo"]  # UD v2.5 has no th, yo train
    assert data_settings(config, "udpos", "train").languages == ("en", "de")
    # ... whatever the settings: switching one on never rewrites the zero-shot runs' data.
    before = data_settings(config, "panx", "train")
    config["transfer"]["settings"] = {"zero_shot": {}}
    assert data_settings(config, "panx", "train") == before
    assert data_settings(config, "mnli", "train").languages == ("en",)


def test_evaluate_cli_maps_languages_to_models_and_files():
    assert parse_models(["m"]) == {"*": Path("m")}
    assert parse_models(["en=a", "de=b"]) == {"en": Path("a"), "de": Path("b")}
    assert parse_data(["test:en=x.parquet", "test:de,ru=y.parquet", "dev=z.parquet"]) == {
        "test": [("x.parquet", ["en"]), ("y.parquet", ["de", "ru"])],
        "dev": [("z.parquet", None)],
    }


# ----- tables -----------------------------------------------------------------------------

# Test accuracies per (setting, seed, language): E(M^S, T) for the Turc et al. table.
SCORES = {
    "zero_shot": {
        1: {"en": 80, "de": 70, "ru": 60},
        2: {"en": 84, "de": 72, "ru": 64},
        3: {"en": 82, "de": 71, "ru": 62},
    },
    "source:de": {
        1: {"en": 74, "de": 76, "ru": 63},
        2: {"en": 76, "de": 78, "ru": 65},
        3: {"en": 75, "de": 80, "ru": 61},
    },
    "translate_train": {
        1: {"en": 80, "de": 76, "ru": 66},
        2: {"en": 84, "de": 78, "ru": 68},
        3: {"en": 82, "de": 80, "ru": 70},
    },
}
TABLE_SETTINGS = TableSettings.parse(
    {
        "baseline": "none",
        "decimals": 1,
        "targets": ["xnli"],
        "intermediate": ["none"],
        "seeds": [1, 2, 3],
        "target_languages": {"xnli": ["en", "de", "ru"]},
        "translated": {},
        "settings": ["zero_shot", "translate_train", "source:de"],
        "baseline_setting": "zero_shot",
    }
)


@pytest.fixture
def transfer_runs(tmp_path):
    files = []
    for setting, seeds in SCORES.items():
        for seed, per_lang in seeds.items():
            scores = {lang: {"accuracy": float(v)} for lang, v in per_lang.items()}
            run = {"setting": setting, "intermediate": "none", "target": "xnli", "seed": seed}
            m = metric_file_record(run, {"test": scores})
            path = tmp_path / f"{transfer.path_token(setting)}-{seed}.json"
            path.write_text(json.dumps(m))
            files.append(str(path))
    return load_runs(files)


def median(values):
    return sorted(values)[len(values) // 2]


def test_turc_z_and_advantage_match_a_hand_computation(transfer_runs):
    md, frame = source_language_table(transfer_runs, TABLE_SETTINGS)
    e = {
        (src, lang): median([SCORES[setting][s][lang] for s in (1, 2, 3)])
        for setting, src in (("zero_shot", "en"), ("source:de", "de"))
        for lang in ("en", "de", "ru")
    }
    # By hand: E(en, en) = 82, E(en, de) = 71, E(en, ru) = 62; E(de, en) = 75, E(de, de) = 78, E(de, ru) = 63.
    assert e == {
        ("en", "en"): 82,
        ("en", "de"): 71,
        ("en", "ru"): 62,
        ("de", "en"): 75,
        ("de", "de"): 78,
        ("de", "ru"): 63,
    }
    z = frame.set_index(["source", "language"])["z"]
    assert z[("en", "en")] == pytest.approx(100) and z[("de", "de")] == pytest.approx(100)
    assert z[("de", "en")] == pytest.approx(100 * 75 / 82)  # Z(de -> en) = E(de, en) / E(en, en)
    assert z[("en", "de")] == pytest.approx(100 * 71 / 78)  # Z(en -> de) = E(en, de) / E(de, de)
    # No model was trained on ru: the unnormalised E(S, ru), flagged.
    assert z[("de", "ru")] == 63 and z[("en", "ru")] == 62
    assert not frame.set_index(["source", "language"])["normalised"][("de", "ru")]
    advantage = frame.set_index(["source", "language"])["advantage"]
    assert advantage[("de", "de")] == pytest.approx(100 - 100 * 71 / 78)
    assert advantage[("de", "ru")] == pytest.approx(63 - 62)
    # Averages over the target's languages, and the advantage of the averages.
    z_de_avg = (100 * 75 / 82 + 100 + 63) / 3
    z_en_avg = (100 + 100 * 71 / 78 + 62) / 3
    assert z[("de", "avg")] == pytest.approx(z_de_avg)
    assert advantage[("de", "avg")] == pytest.approx(z_de_avg - z_en_avg)
    assert f"| de | {100 * 75 / 82:.1f} | 100.0 | 63.0* | {z_de_avg:.1f}* |" in md
    assert f"| de | {100 * 75 / 82 - 100:+.1f} | {100 - 100 * 71 / 78:+.1f} | +1.0 | {z_de_avg - z_en_avg:+.1f} |" in md


def test_settings_table_lists_every_setting_with_the_xtreme_average(transfer_runs):
    md, frame = settings_table(transfer_runs, TABLE_SETTINGS)
    avg = frame[frame["metric"] == "xtreme_score"].set_index("setting")["median"]
    # Per-seed language means: zero_shot 70, 73.33, 71.67 -> 71.67; translate_train 74, 76.67, 77.33 -> 76.67.
    assert avg["zero_shot"] == pytest.approx(215 / 3) and avg["translate_train"] == pytest.approx(230 / 3)
    lines = md.splitlines()
    assert lines.index(next(l for l in lines if l.startswith("| zero_shot"))) < lines.index(
        next(l for l in lines if l.startswith("| translate_train"))
    )
    assert f"| translate_train | 1,2,3 | {230 / 3:.1f} | {230 / 3:.1f} | +5.0 |" in md


def test_results_tables_have_a_block_per_setting(tmp_path, transfer_runs):
    from workflow_scripts.reporting.tables import main

    files = sorted(str(p) for p in tmp_path.glob("*.json"))
    out = {
        name: tmp_path / "tables" / name
        for name in (
            "main.md",
            "main.csv",
            "best.csv",
            "pl.md",
            "pl.csv",
            "tr.md",
            "tr.csv",
            "runs.csv",
            "settings.md",
            "settings.csv",
            "source.md",
            "source.csv",
            "significance.csv",
        )
    }
    settings = TABLE_SETTINGS.replace(target_languages={"xnli": ["en", "de", "ru", "sw"]})
    main(
        [
            "results",
            "--settings",
            settings.to_json(),
            "--metrics",
            *files,
            "--main-md",
            str(out["main.md"]),
            "--main-csv",
            str(out["main.csv"]),
            "--best-csv",
            str(out["best.csv"]),
            "--per-language-md",
            str(out["pl.md"]),
            "--per-language-csv",
            str(out["pl.csv"]),
            "--translated-md",
            str(out["tr.md"]),
            "--translated-csv",
            str(out["tr.csv"]),
            "--runs-csv",
            str(out["runs.csv"]),
            "--settings-md",
            str(out["settings.md"]),
            "--settings-csv",
            str(out["settings.csv"]),
            "--source-md",
            str(out["source.md"]),
            "--source-csv",
            str(out["source.csv"]),
            "--significance-csv",
            str(out["significance.csv"]),
        ]
    )
    main_md = out["main.md"].read_text()
    blocks = [line for line in main_md.splitlines() if line.startswith("## ")]
    assert blocks == ["## zero_shot (baseline setting)", "## translate_train", "## source:de"]
    # The runs cover en, de, ru of a target configured with sw too: the block says so.
    assert "xnli is scored in en, de, ru only" in main_md
    assert out["main.csv"].read_text().splitlines()[0].startswith("setting,intermediate,xnli")
    assert {"# zero_shot", "# translate_train", "# source:de"} <= set(out["pl.md"].read_text().splitlines())
    assert "Z(S -> T)" in out["source.md"].read_text()


def test_settings_table_compares_a_row_with_the_baseline_over_the_same_languages(tmp_path):
    files = []
    for setting, seeds in SCORES.items():
        if setting == "source:de":
            continue
        for seed, per_lang in seeds.items():
            if setting == "translate_train":  # scored in en and de only
                per_lang = {k: v for k, v in per_lang.items() if k != "ru"}
            run = {"setting": setting, "intermediate": "none", "target": "xnli", "seed": seed}
            m = metric_file_record(run, {"test": {lang: {"accuracy": float(v)} for lang, v in per_lang.items()}})
            path = tmp_path / f"{transfer.path_token(setting)}-{seed}.json"
            path.write_text(json.dumps(m))
            files.append(str(path))
    md, _ = settings_table(load_runs(files), TABLE_SETTINGS)
    # translate_train (en, de) per seed: 78, 81, 81 -> 81; zero_shot over en, de: 75, 78, 76.5 -> 76.5.
    assert "| translate_train | 1,2,3 | 81.0 | 81.0 | +4.5 |" in md
    assert f"| zero_shot | 1,2,3 | {215 / 3:.1f} | {215 / 3:.1f} |  |" in md
