"""Bad input stops the workflow before any job runs, naming the key; an interrupted job
never leaves an output that looks complete."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import copy_repo, snakemake
from workflow_scripts.common import atomic_path


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
    ("unknown task", "intermediate.mnli.tasks", ["mnli", "hellaswg"], "intermediate.mnli.tasks[1]: unknown task 'hellaswg'"),
    ("unknown target", "targets", ["xnli", "xquadd"], "targets[1]: unknown task 'xquadd'"),
    ("misspelled key", "training.target.learning_rat", 1e-4, "training.target: Additional properties are not allowed ('learning_rat'"),
    ("wrong type", "tasks.xnli.batch_size", "sixteen", "tasks.xnli.batch_size: 'sixteen' is not of type 'integer'"),
    ("empty seed list", "seeds", [], "seeds: [] should be non-empty"),
    ("target without its training task", "tasks.squad", KeyError, "task 'squad' has no entry under 'tasks'"),
    ("translation without a translator", "intermediate.squad_de.language", "ru", "no translator for 'ru'"),
    ("baseline with tasks", "tables.baseline", "mnli", "tables.baseline: 'mnli' has tasks"),
    ("missing UD release", "tasks.udpos.options.ud_release", "data/ud-treebanks-v2.5",
     "tasks.udpos.options.ud_release: 'data/ud-treebanks-v2.5' is neither a URL nor an existing archive"),
    ("unknown BUCC duplicate convention", "retrieval.bucc_duplicates", "first",
     "retrieval.bucc_duplicates: 'first' is not one of ['drop', 'all_ids']"),
    ("unknown transfer setting", "transfer.settings.translate_tset", {},
     "transfer.settings: 'translate_tset' does not match"),
    ("translate setting on a tagging target", "transfer.settings.translate_train.targets", ["udpos"],
     "transfer.settings.translate_train.targets[0]: translate_train does not apply to udpos"),
    ("training runtime shorter than its checkpoint signal", "resources.train_target",
     {"runtime": 12, "expected_runtime": 100},
     "resources.train_target.runtime: runtime 12 min leaves no time to train"),
    ("translate-test without a translator", "models.translators_to_en", {},
     "transfer.settings.translate_test: xnli in 'de' needs a translator: models.translators_to_en has no 'de'"),
    ("unknown backbone family", "backbones.xlmr_tiny.family", "encodr",
     "backbones.xlmr_tiny.family: 'encodr' is not one of ['encoder', 'seq2seq_encoder', 'decoder']"),
    ("backbone grid without the baseline config", "backbones.llama_tiny.grid", {"intermediate": ["mnli"]},
     "backbones.llama_tiny.grid.intermediate: lacks the baseline config 'none'"),
    ("backbone grid naming an unknown target", "backbones.llama_tiny.grid", {"targets": ["pawsx"]},
     "backbones.llama_tiny.grid.targets: ['pawsx'] not in the config's targets"),
    ("QLoRA in the CPU demo", "backbones.llama_tiny.method", "qlora",
     "backbones.llama_tiny.method: qlora needs a CUDA GPU"),
    ("a seq2seq backbone in the demo", "backbones.xlmr_tiny.family", "seq2seq_encoder",
     "backbones.xlmr_tiny.family: the demo builds encoder and decoder backbones, not seq2seq_encoder"),
    ("a backbone too large for the GPUs it asks for", "backbones.xlmr_tiny",
     {"family": "encoder", "parameters": 1.07e10, "gpus": {"per_node": 2, "memory_gb": 80},
      "architecture": {"hidden_size": 4096, "num_layers": 48, "num_attention_heads": 32, "vocab_size": 250880,
                       "intermediate_size": 16384}},
     "backbones.xlmr_tiny.gpus: full fine-tuning of 10.7B parameters needs"),
]


@pytest.mark.parametrize("name,key,value,message", CASES, ids=[c[0] for c in CASES])
def test_bad_config_fails_before_any_job_naming_the_key(repo, name, key, value, message):
    config = edit(yaml.safe_load((repo / "config.yaml").read_text()), key, value)
    path = repo / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(repo, "--cores", "1", "--configfile", str(path))
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert not (repo / "results" / "demo" / "data").exists(), "no job may run on a bad config"


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


def test_killed_training_leaves_no_output(tmp_path, demo_data, demo_encoder_dir):
    settings = {"dropout": 0.1, "dev_examples": 50, "eval_batch_size": 32, "eval_every": 10_000,
                "learning_rate": 1e-4, "max_grad_norm": 1.0, "max_micro_batch": 32, "multitask_cap": 131072,
                "multitask_epochs": 1, "patience": 30, "warmup_ratio": 0.1, "weight_decay": 0.0,
                "tasks": {"xnli": {"batch_size": 2, "epochs": 50, "max_length": 64, "select_language": "en"}}}
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    output = tmp_path / "model"
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "workflow_scripts.training.train", "target", "--encoder",
                             str(demo_encoder_dir), "--data", json.dumps(data), "--settings", json.dumps(settings),
                             "--seed", "1", "--output", str(output)], stdout=log, stderr=log)
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
