"""Bad input stops the workflow before any job runs, naming the key; an interrupted job
never leaves an output that looks complete."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import (
    REPO,
    copy_repo,
    paper_with_larger_backbones,
    paper_with_transfer_block,
    phase_settings,
    snakemake,
    use_config_catalogues,
)
from workflow_scripts.common import atomic_path
from workflow_scripts.workflow import config_check, config_layers, grid, grid_checks


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


def edit(config: dict, path: str, value) -> dict:
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    if value is KeyError:
        node.pop(last)
    else:
        node[last] = value
    return config


CASES = [
    (
        "unknown task",
        "intermediate.mnli.tasks",
        ["mnli", "hellaswg"],
        "intermediate.mnli.tasks[1]: unknown task 'hellaswg'",
    ),
    ("unknown target", "targets", ["xnli", "xquadd"], "targets[1]: unknown task 'xquadd' (did you mean 'xquad'"),
    (
        "unknown benchmark",
        "benchmark",
        "xtreme_rr",
        "config key benchmark: unknown benchmark 'xtreme_rr' (did you mean 'xtreme_r' or 'xtreme'?); known: xtreme, xtreme_r",
    ),
    (
        "misspelled key",
        "training.target.learning_rat",
        1e-4,
        "training.target: Additional properties are not allowed ('learning_rat'",
    ),
    ("wrong type", "tasks.xnli.batch_size", "sixteen", "tasks.xnli.batch_size: 'sixteen' is not of type 'integer'"),
    ("empty seed list", "seeds", [], "seeds: [] should be non-empty"),
    ("target without its training task", "tasks.squad", KeyError, "task 'squad' has no entry under 'tasks'"),
    ("translation without a translator", "intermediate.squad_de.language", "ru", "no translator for 'ru'"),
    ("baseline with tasks", "tables.baseline", "mnli", "tables.baseline: 'mnli' has tasks"),
    (
        "missing UD release",
        "tasks.udpos.options.ud_release",
        "data/ud-treebanks-v2.5",
        "tasks.udpos.options.ud_release: 'data/ud-treebanks-v2.5' is neither a URL nor an existing archive",
    ),
    (
        "unknown BUCC duplicate convention",
        "retrieval.bucc_duplicates",
        "first",
        "retrieval.bucc_duplicates: 'first' is not one of ['drop', 'all_ids']",
    ),
    (
        "unknown transfer setting",
        "transfer.settings.translate_tset",
        {},
        "transfer.settings: 'translate_tset' does not match",
    ),
    (
        "translate setting on a tagging target",
        "transfer.settings.translate_train.targets",
        ["udpos"],
        "transfer.settings.translate_train.targets[0]: translate_train does not apply to udpos",
    ),
    (
        "training runtime shorter than its checkpoint signal",
        "resources.train_target",
        {"runtime": 12, "expected_runtime": 100},
        "resources.train_target.runtime: runtime 12 min leaves no time to train",
    ),
    (
        "translate-test without a translator",
        "models.translators_to_en",
        {},
        "transfer.settings.translate_test: xnli in 'de' needs a translator: models.translators_to_en has no 'de'",
    ),
    (
        "unknown backbone family",
        "backbones.xlmr_tiny.family",
        "encodr",
        "backbones.xlmr_tiny.family: 'encodr' is not one of ['encoder', 'seq2seq_encoder', 'decoder']",
    ),
    (
        "backbone grid without the baseline config",
        "backbones.llama_tiny.grid",
        {"intermediate": ["mnli"]},
        "backbones.llama_tiny.grid.intermediate: lacks the baseline config 'none'",
    ),
    (
        "backbone grid naming an unknown target",
        "backbones.llama_tiny.grid",
        {"targets": ["pawsx"]},
        "backbones.llama_tiny.grid.targets: ['pawsx'] not in the config's targets",
    ),
    (
        "a seq2seq backbone in the demo",
        "backbones.xlmr_tiny.family",
        "seq2seq_encoder",
        "backbones.xlmr_tiny.family: the demo builds encoder and decoder backbones, not seq2seq_encoder",
    ),
    (
        "a backbone too large for the GPUs it asks for",
        "backbones.xlmr_tiny",
        {
            "family": "encoder",
            "parameters": 1.07e10,
            "gpus": {"per_node": 2, "memory_gb": 80},
            "architecture": {
                "hidden_size": 4096,
                "num_layers": 48,
                "num_attention_heads": 32,
                "vocab_size": 250880,
                "intermediate_size": 16384,
            },
        },
        "backbones.xlmr_tiny.gpus: full fine-tuning of 10.7B parameters needs",
    ),
    # Misspelt languages (ge for de), each named by its key with the codes it could be.
    (
        "misspelt target language",
        "tasks.xnli.languages",
        ["en", "de", "ru", "sw", "ge"],
        "config key tasks.xnli.languages[4]: unknown language 'ge' for xnli; known: ar, bg, de, el, en, es, fr, hi, "
        "ru, sw, th, tr, ur, vi, zh",
    ),
    (
        "misspelt transfer-setting language",
        "transfer.settings.translate_train.languages",
        ["ge"],
        "config key transfer.settings.translate_train.languages[0]: xquad is not evaluated in 'ge'; known "
        "(tasks.<target>.languages): de, en, ru",
    ),
    (
        "misspelt intermediate language",
        "intermediate.squad_de.language",
        "ge",
        "config key intermediate.squad_de.language: unknown language 'ge'; known: af, ar, az, bg",
    ),
    (
        "misspelt translator language",
        "models.translators.ge",
        {"hub_id": "Helsinki-NLP/opus-mt-en-de"},
        "config key models.translators.ge: unknown language 'ge'; known: af, ar",
    ),
    (
        "misspelt source language",
        "transfer.settings.source:ge",
        {"targets": ["xquad"]},
        "config key transfer.settings.source:ge: unknown language 'ge'; known: af, ar",
    ),
    (
        "language of an English task",
        "tasks.mnli.languages",
        ["de"],
        "config key tasks.mnli.languages[0]: unknown language 'de' for mnli; known: en",
    ),
]


@pytest.mark.integration
@pytest.mark.parametrize("name,key,value,message", CASES, ids=[c[0] for c in CASES])
def test_bad_config_fails_before_any_job_naming_the_key(repo, name, key, value, message):
    config = edit(yaml.safe_load((repo / "config.yaml").read_text()), key, value)
    path = repo / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(repo, "--cores", "1", "--configfile", str(path))
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert not (repo / "results" / "demo" / "data").exists(), "no job may run on a bad config"


def presets(repo: Path) -> list[Path]:
    """Every preset, and paper.yaml with each of its commented blocks switched on."""
    return [
        repo / "config.yaml",
        *sorted((repo / "config").glob("*.yaml")),
        paper_with_transfer_block(repo),
        paper_with_larger_backbones(repo),
    ]


@pytest.mark.unit
def test_every_preset_passes_the_config_check(repo, monkeypatch):
    from snakemake.utils import validate

    schema = str(config_check.schema_for_validation())  # the schema file with the records' values
    checked = []
    for path in presets(repo):
        config = config_layers.load([path])  # its layers (`extends`) resolved, as the Snakefile does
        grid_checks.check_schema(config, schema)
        validate(config, schema)  # fills in the defaults, as the Snakefile does
        use_config_catalogues(config, monkeypatch)
        grid_checks.check_config(config)
        checked.append(path.name)
    assert {
        "config.yaml",
        "paper.yaml",
        "xtreme_r.yaml",
        "xtreme_r_demo.yaml",
        "multimodal_demo.yaml",
        "xtreme_small.yaml",
    } <= set(checked)


@pytest.mark.unit
def test_the_resources_keys_are_the_rules_that_read_them():
    """`resources.<rule>` is allowed exactly for the rules whose directives read it (res(),
    training_retries(), training_slurm_extra(), shared_slurm_extra(), gpu_resources() in
    rules/*.smk): a key for any other rule
    would be accepted and silently set nothing."""
    import re

    from workflow_scripts.spec.schema import setting

    text = "\n".join(path.read_text() for path in sorted((REPO / "rules").glob("*.smk")))
    read = set(
        re.findall(r'\b(?:res|training_retries|training_slurm_extra|shared_slurm_extra|gpu_resources)\("(\w+)"', text)
    )
    allowed = set(setting("resources")["propertyNames"]["enum"]) - {"default"}
    assert allowed == read, (sorted(allowed - read), sorted(read - allowed))


@pytest.mark.unit
def test_the_loaders_language_lists_are_the_checked_ones():
    """The config check's languages of a target (the benchmarks' lists) are the codes its
    loader can read: the loaders' own lists may not drift from them."""
    from workflow_scripts.data.loaders import spans, udpos, xcopa, xtreme

    assert set(udpos.UD_LANGUAGE_NAMES) | set(udpos.XTREME_R_UD27_LANGUAGES) == set(
        grid_checks.target_languages("udpos")
    )
    assert set(xtreme.TATOEBA_CODES) | set(xtreme.TATOEBA_EXTRA_CODES) == set(grid_checks.target_languages("tatoeba"))
    assert xtreme.PANX_XTREME_LANGUAGES < set(grid_checks.target_languages("panx"))
    assert spans.XQUAD_XTREME_LANGUAGES < set(grid_checks.target_languages("xquad"))
    assert set(spans.TYDIQA_LANGUAGES.values()) == set(grid_checks.target_languages("tydiqa"))
    assert set(xcopa.XCOPA_LANGUAGES) == set(grid_checks.target_languages("xcopa"))


@pytest.mark.unit
def test_the_demo_languages_count_for_local_data_only():
    config = {"data": {"source": "local"}}
    assert {"de", "ru"} <= set(grid_checks.task_languages(config, "xcopa"))  # the demo mirror's synthetic XCOPA
    assert grid_checks.task_languages(config, "mnli") == ("en",)
    config["data"]["source"] = "hub"
    assert "de" not in grid_checks.task_languages(config, "xcopa")  # the real XCOPA has no German
    assert grid_checks.task_languages(config, "xnli_mt") == grid_checks.target_languages("xnli")
    # They are the languages the demo data generator writes: its mirror's XCOPA and Mewsli-X have them.
    spec = importlib.util.spec_from_file_location("make_demo_data", REPO / "demo" / "make_demo_data.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.LANGS is grid.DEMO_LANGUAGES
    for dataset in ("cambridgeltl/xcopa", "izhx/mewsli-x"):
        assert {p.name for p in (REPO / "demo" / "hub" / dataset).iterdir()} & {"de", "ru"} == {"de", "ru"}


@pytest.mark.unit
def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out" / "model"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "weights").write_text("half")
            raise RuntimeError("interrupted")
    assert not target.exists()
    assert list((tmp_path / "out").iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("done")
    assert target.read_text() == "done"


@pytest.mark.integration
def test_killed_training_leaves_no_output(tmp_path, demo_data, demo_encoder_dir):
    settings = phase_settings(
        {"xnli": {"batch_size": 2, "epochs": 50, "max_length": 64, "select_language": "en"}},
        dev_examples=50,
        eval_batch_size=32,
        eval_every=10_000,
        learning_rate=1e-4,
        multitask_epochs=1,
    )
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    output = tmp_path / "model"
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workflow_scripts.training.train",
            "target",
            "--encoder",
            str(demo_encoder_dir),
            "--data",
            json.dumps(data),
            "--settings",
            settings.to_json(),
            "--seed",
            "1",
            "--output",
            str(output),
        ],
        stdout=log,
        stderr=log,
    )
    deadline = time.time() + 120
    while "target training:" not in (tmp_path / "log").read_text() and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    assert proc.poll() is None, (tmp_path / "log").read_text()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not output.exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("log",)]
    assert leftovers == [], leftovers
