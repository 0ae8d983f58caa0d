"""The prompted arm (docs/prompted.md): lm-evaluation-harness on the rows the fine-tuned arm
scores (evaluation/prompted.py), its table (reporting/prompted.py) and its part of the grid
(workflow/prompted.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import planned_jobs
from workflow_scripts.evaluation import prompted as prompted_module
from workflow_scripts.reporting import prompted as table_module
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.prompted import (
    LM_EVAL_TASKS,
    LM_EVAL_VERSION,
    PromptedEntry,
    PromptedSettings,
    PromptedTableSettings,
)
from workflow_scripts.spec.schema_block import filled
from workflow_scripts.workflow import config_layers, grid
from workflow_scripts.workflow import prompted as prompted_grid

DEMO = "results/demo"


def _defaults() -> dict:
    return filled(PromptedEntry)


def _config(path: str = "config.yaml", **prompted) -> dict:
    config = config_layers.load([path])
    config["prompted"] = {**_defaults(), **config.get("prompted", {}), **prompted}
    return config


# ----- documents and task configs -------------------------------------------------------------------


@pytest.mark.unit
def test_an_nli_row_becomes_lm_evals_xnli_document_with_its_label_order():
    row = {"id": "x-1", "lang": "de", "text_a": "Er kam.", "text_b": "Er kam nie.", "label": 2}
    assert prompted_module.document(row, LM_EVAL_TASKS["xnli"], "de", "f") == {
        "premise": "Er kam.",
        "hypothesis": "Er kam nie.",
        "label": 2,
    }


@pytest.mark.unit
def test_a_paws_x_pair_becomes_lm_evals_document_with_its_label_order():
    row = {"id": "p-1", "lang": "ja", "text_a": "A.", "text_b": "B.", "label": 1}
    assert prompted_module.document(row, LM_EVAL_TASKS["pawsx"], "ja", "f") == {
        "sentence1": "A.",
        "sentence2": "B.",
        "label": 1,
    }
    stock = (prompted_module.lm_eval_tasks_dir() / "paws-x/paws_en.yaml").read_text()
    choices = next(line for line in stock.splitlines() if line.startswith("doc_to_choice:"))
    assert choices.index("No") < choices.index("Yes")  # label 1 is "Yes": paraphrase


@pytest.mark.unit
def test_a_qa_row_keeps_its_answers_and_tydiqa_ids_carry_lm_evals_language_prefix():
    row = {
        "id": "q7",
        "lang": "sw",
        "context": "Anna ...",
        "question": "Nani?",
        "answer_texts": ["Anna"],
        "answer_starts": [0],
    }
    doc = prompted_module.document(row, LM_EVAL_TASKS["tydiqa"], "sw", "f")
    assert doc["id"] == "swahili-q7" and doc["answers"] == {"text": ["Anna"], "answer_start": [0]}
    assert prompted_module.document(row, LM_EVAL_TASKS["mlqa"], "sw", "f")["id"] == "q7"
    with pytest.raises(InputError, match=r"f: row q7 has no answer"):
        prompted_module.document({**row, "answer_texts": []}, LM_EVAL_TASKS["mlqa"], "sw", "f")


@pytest.mark.unit
def test_a_copa_row_gives_back_the_premise_and_question_its_context_was_built_from():
    from workflow_scripts.data.loaders.xcopa import copa_context

    row = {
        "id": "c1",
        "lang": "sw",
        "context": copa_context("Mtu alivunja dirisha.", "cause"),
        "choices": ["A", "B"],
        "label": 1,
    }
    doc = prompted_module.document(row, LM_EVAL_TASKS["xcopa"], "sw", "f")
    assert doc == {"premise": "Mtu alivunja dirisha.", "question": "cause", "choice1": "A", "choice2": "B", "label": 1}
    with pytest.raises(InputError, match=r"f: row c1 is not a prepared COPA row"):
        prompted_module.document({**row, "context": "Mtu alivunja dirisha."}, LM_EVAL_TASKS["xcopa"], "sw", "f")


@pytest.mark.unit
def test_english_shots_come_from_the_split_the_fine_tuned_arm_selects_on():
    config = _config("config/xtreme_r.yaml", enabled=True)
    assert prompted_grid.data_files(config, "xcopa")["shots"].endswith("data/copa/dev.parquet")
    assert prompted_grid.data_files(config, "tydiqa")["shots"].endswith("data/squad/dev.parquet")
    assert prompted_grid.data_files(config, "xnli")["shots"].endswith("data/xnli/dev.parquet")
    config["prompted"]["shots_from"] = "own"
    assert prompted_grid.data_files(config, "xcopa")["shots"].endswith("data/xcopa/dev.parquet")
    assert prompted_grid.data_files(config, "tydiqa")["shots"].endswith("data/tydiqa/train.parquet")


@pytest.mark.unit
def test_a_local_task_config_includes_lm_evals_own_file_and_only_points_its_data_at_ours(tmp_path):
    text = prompted_module.task_config("xnli", "sw", tmp_path / "t.jsonl", tmp_path / "s.jsonl")
    config = yaml.safe_load(text)
    assert Path(config["include"]).parts[-3:] == ("tasks", "xnli", "xnli_sw.yaml") and Path(config["include"]).is_file()
    assert config["dataset_path"] == "json" and config["test_split"] == "test" and config["fewshot_split"] == "shots"
    assert config["dataset_kwargs"]["data_files"] == {
        "test": str(tmp_path / "t.jsonl"),
        "shots": str(tmp_path / "s.jsonl"),
    }
    assert "doc_to_choice" not in config  # the prompt is lm-eval's
    with pytest.raises(InputError, match=r"no task file .*xnli_qu\.yaml"):
        prompted_module.task_config("xnli", "qu", tmp_path / "t.jsonl", tmp_path / "s.jsonl")


def _settings(**changes) -> PromptedSettings:
    found = {
        "task": "xnli",
        "languages": ["en", "de"],
        "shots": [0, 3],
        "shots_from": "english",
        "seed": 7,
        "batch_size": 8,
        "family": "decoder",
        "method": {"name": "full", "precision": "fp32"},
    }
    return PromptedSettings.parse({**found, **changes})


@pytest.mark.unit
def test_shots_come_from_english_dev_rows_or_the_languages_own(demo_data, tmp_path):
    xnli = demo_data["xnli.dev"]  # the demo's parallel XNLI dev rows serve as both splits here
    dev = pd.read_parquet(xnli)
    for source, expected in (("english", "en"), ("own", "de")):
        work = tmp_path / source
        rows = prompted_module.write_tasks(_settings(shots_from=source), xnli, xnli, work)
        assert rows == {"en": (dev["lang"] == "en").sum(), "de": (dev["lang"] == "de").sum()}
        shots = [json.loads(line) for line in (work / "data/de/shots.jsonl").read_text().splitlines()]
        assert [s["premise"] for s in shots] == dev[dev["lang"] == expected]["text_a"].tolist()
    with pytest.raises(InputError, match=r"rows to draw 100000 shots"):
        prompted_module.write_tasks(_settings(shots=[100000]), xnli, xnli, tmp_path / "x")
    with pytest.raises(InputError, match=r"no rows of language 'fr'"):
        prompted_module.write_tasks(_settings(languages=["en", "fr"]), xnli, xnli, tmp_path / "y")


# Two rows per language of each task, in the prepared schema (data/prepare.py's columns).
def _prepared_rows(task: str, lang: str) -> list[dict]:
    from workflow_scripts.data.loaders.xcopa import copa_context

    rows = []
    for k in range(2):
        rid = f"{task}-{lang}-{k}"
        if task in ("xnli", "pawsx"):
            rows.append(
                {"id": rid, "lang": lang, "text_a": f"Anna sah {k} Hunde.", "text_b": "Anna sah Tiere.", "label": k}
            )
        elif task == "xcopa":
            context = copa_context(f"Der Ball fiel {k}.", ("cause", "effect")[k])
            rows.append(
                {"id": rid, "lang": lang, "context": context, "choices": ["Er rollte.", "Er flog."], "label": k}
            )
        else:
            context = f"Anna wohnt in Rom. Peter wohnt in Kiel {k}."
            rows.append({"id": rid, "lang": lang, "context": context, "question": "Wo wohnt Anna?",
                         "answer_texts": ["Rom"], "answer_starts": [context.index("Rom")]})  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def untrained_decoder(tmp_path_factory, demo_data) -> Path:
    from workflow_scripts.models.demo_models import build_demo_decoder
    from workflow_scripts.spec.model_settings import DemoDecoder

    decoder = DemoDecoder.defaults().replace(
        vocab_size=600, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, max_position_embeddings=512, seed=0,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("prompted") / "decoder"
    build_demo_decoder(
        decoder.replace(pretraining=decoder.pretraining.replace(steps=0)), [str(p) for p in demo_data.values()], out, []
    )
    return out


@pytest.mark.unit
@pytest.mark.parametrize("task", sorted(set(LM_EVAL_TASKS) - {"xnli"}))  # XNLI: the demo's, end to end
def test_every_prompted_tasks_documents_are_scored_whole_by_lm_eval(task, untrained_decoder, tmp_path):
    """lm-eval's own task files load our documents, score every one of them (TyDiQA keeps a
    language's by id) at 0 and 1 shots, and give the metric the table shows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from workflow_scripts.models.heads import load_tokenizer

    languages = [lang for lang in ("en", "sw", "de", "zh") if lang in LM_EVAL_TASKS[task].languages][:2]
    rows = [r for lang in dict.fromkeys(["en", *languages]) for r in _prepared_rows(task, lang)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    settings = _settings(task=task, languages=languages, shots=[0, 1])
    written = prompted_module.write_tasks(
        settings, tmp_path / "rows.parquet", tmp_path / "rows.parquet", tmp_path / "w"
    )
    model = prompted_module.causal_lm(untrained_decoder, untrained_decoder, settings, torch.device("cpu"))
    found = prompted_module.evaluate(model, load_tokenizer(untrained_decoder), settings, tmp_path / "w")
    prompted_module.check_scored(written, found["scored"], task)
    assert written == dict.fromkeys(languages, 2)
    for shots in ("0", "1"):
        assert set(found["scores"][shots]) == set(languages)
        assert all(LM_EVAL_TASKS[task].metric in scores for scores in found["scores"][shots].values())
    with pytest.raises(InputError, match=rf"lm-eval scored 1 of the 2 {task} documents of {languages[0]}"):
        prompted_module.check_scored(written, {**found["scored"], languages[0]: 1}, task)


# ----- the table --------------------------------------------------------------------------------------


def _prompted_file(path: Path, config: str, run: str, scores: dict) -> Path:
    path.write_text(
        json.dumps({"run": {"backbone": "b", "config": config, "run": run, "task": "xnli"}, "scores": scores})
    )
    return path


@pytest.mark.unit
def test_the_table_sets_medians_over_seeds_and_the_transfer_gap_beside_the_fine_tuned_arm(tmp_path):
    files = [
        _prompted_file(
            tmp_path / "p.json",
            "none",
            "pretrained",
            {"0": {"en": {"acc": 60.0}, "de": {"acc": 40.0}, "sw": {"acc": 30.0}}},
        ),
        _prompted_file(
            tmp_path / "s1.json",
            "mnli",
            "seed1",
            {"0": {"en": {"acc": 70.0}, "de": {"acc": 50.0}, "sw": {"acc": 40.0}}},
        ),
        _prompted_file(
            tmp_path / "s2.json",
            "mnli",
            "seed2",
            {"0": {"en": {"acc": 80.0}, "de": {"acc": 50.0}, "sw": {"acc": 60.0}}},
        ),
    ]
    runs = pd.DataFrame(
        [
            {"setting": "zero_shot", "intermediate": "mnli", "target": "xnli", "seed": seed, "split": "test",
             "language": lang, "metric": "accuracy", "value": value}
            for seed, values in ((1, {"en": 90.0, "de": 70.0}), (2, {"en": 80.0, "de": 80.0}))
            for lang, value in values.items()
        ]
    )  # fmt: skip
    settings = PromptedTableSettings.parse(
        {"backbone": "b", "baseline": "none", "intermediate": ["none", "mnli"], "seeds": [1, 2], "shots": [0],
         "targets": ["xnli", "udpos"], "prompted": ["xnli"], "why_not": {"udpos": "lm-eval has no task for it"}}
    )  # fmt: skip
    found = table_module.table(
        table_module.prompted_rows(files) + table_module.fine_tuned_rows(runs, settings), settings
    )

    def cell(arm, config, lang):
        return found[(found["arm"] == arm) & (found["config"] == config) & (found["language"] == lang)]["value"].item()

    assert cell("prompted", "mnli", "en") == 75.0 and cell("prompted", "mnli", "sw") == 50.0
    # the gap per seed first (70 - 45 = 25, 80 - 55 = 25), then the median
    assert cell("prompted", "mnli", "gap") == 25.0 and cell("prompted", "none", "gap") == 25.0
    assert cell("fine-tuned", "mnli", "gap") == pytest.approx(10.0)  # median of 20 and 0
    text = table_module.render(found, settings)
    assert "| prompted, 0-shot | none (pretrained) |" in text and "- udpos: lm-eval has no task for it" in text


# ----- the grid ----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_demo_prompts_its_decoder_once_pretrained_and_after_each_seeds_intermediate_phase():
    config = _config()
    assert prompted_grid.backbones(config) == ["llama_tiny"]
    assert prompted_grid.tasks(config, "llama_tiny") == ["xnli"]
    config["backbones"]["llama_tiny"]["grid"]["seeds"] = [1, 2]  # the demo's decoder runs seed 1 only
    assert prompted_grid.runs(config, "llama_tiny") == [("none", "pretrained"), ("mnli", "seed1"), ("mnli", "seed2")]
    assert prompted_grid.model_dir(config, "llama_tiny", "none", "pretrained").endswith("models/backbones/llama_tiny")
    assert prompted_grid.model_dir(config, "llama_tiny", "mnli", "seed2").endswith(
        "intermediate/llama_tiny/mnli/seed2/encoder"
    )
    assert set(prompted_grid.why_not(config, "llama_tiny")) == {"udpos", "tatoeba"}
    settings = prompted_grid.settings(config, "llama_tiny", "xnli")
    assert settings.languages == ("en", "de", "ru", "sw") and PromptedSettings.parse(settings.to_json()) == settings


@pytest.mark.unit
def test_a_prompted_job_asks_for_the_gpus_that_hold_its_weights():
    config = _config("config/modality_scaling.yaml", enabled=True)
    assert prompted_grid.gpus(config, "bloom_560m", 1) == 1
    assert prompted_grid.gpus(config, "bloom_176b", 1) == 6  # 176B x 2 bytes x 1.2 over 0.95 x 80 GB
    assert prompted_grid.gpus(_config(), "llama_tiny", 1) == 1  # a demo model: the rule's resources


@pytest.mark.unit
@pytest.mark.parametrize(
    ("prompted", "match"),
    [
        ({"backbones": ["xlmr_tiny"]}, r"prompted\.backbones\[0\]: 'xlmr_tiny' is not a decoder"),
        (
            {"tasks": ["xquad"]},
            r"prompted\.tasks\[0\]: 'xquad' is not prompted \(lm-eval 0\.4\.13's xquad task imports",
        ),
        ({"tasks": ["udpos"]}, r"prompted\.tasks\[0\]: 'udpos' is not prompted \(lm-eval has no task"),
        ({"shots": [0, 5, 0]}, r"prompted\.shots: \[0, 5, 0\] names a count twice"),
    ],
)
def test_a_prompted_block_that_cannot_run_is_named_by_its_key(prompted, match):
    with pytest.raises(grid.ConfigError, match=match):
        prompted_grid.check(_config(**prompted))


@pytest.mark.unit
def test_a_backbone_whose_weights_need_more_gpus_than_a_node_has_is_refused():
    config = _config("config/modality_scaling.yaml", enabled=True)
    config["backbones"]["bloom_176b"]["gpus"] = {"per_node": 4, "nodes": 4, "memory_gb": 80}
    with pytest.raises(grid.ConfigError, match=r"backbones\.bloom_176b\.gpus\.per_node: .* need 6 and a node has 4"):
        prompted_grid.check(config)


# ----- the demo ----------------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_demo_writes_the_fine_tuned_versus_prompted_table_and_complete_prompted_files(demo_checkout):
    root = demo_checkout / DEMO
    table = pd.read_csv(root / "tables/llama_tiny/prompted.csv")
    assert set(table["arm"]) == {"fine-tuned", "prompted"}
    assert set(table[table["arm"] == "prompted"]["shots"]) == {0, 3}
    assert {"en", "de", "ru", "sw", "avg", "gap"} <= set(table["language"])
    assert "## xnli" in (root / "tables/llama_tiny/prompted.md").read_text()
    scaling = pd.read_csv(root / "tables/prompted_scaling.csv")
    assert set(scaling["arm"]) == {"fine-tuned, zero-shot", "prompted, 0-shot", "prompted, 3-shot"}
    assert set(scaling["backbone"]) == {"llama_tiny"} and scaling["parameters"].gt(0).all()
    assert (root / "figures/prompted_scaling.png").stat().st_size > 0
    record = json.loads((root / "prompted/llama_tiny/mnli/seed1/xnli.json").read_text())
    assert record["lm_eval"]["version"] == LM_EVAL_VERSION
    assert set(record["lm_eval"]["task_config_sha256"]) == {"en", "de", "ru", "sw"}
    assert record["settings"]["shots"] == [0, 3] and record["settings"]["seed"] == 1234
    assert record["rows"] == dict.fromkeys(["en", "de", "ru", "sw"], 60)
    assert record["run"] == {"backbone": "llama_tiny", "config": "mnli", "run": "seed1", "task": "xnli"}


@pytest.mark.integration
def test_lm_eval_run_directly_on_the_demo_decoder_gives_the_pipelines_scores(demo_checkout, tmp_path):
    """lm-eval's own command line, its stock XNLI task file and the HF model directory: the same
    rows give the same 3-shot accuracy as the pipeline's file (the shots drawn by lm-eval's
    sampler with the same seed from the same English dev rows)."""
    root = demo_checkout / DEMO
    rows = pd.read_parquet(root / "data/xnli/test.parquet")
    dev = pd.read_parquet(root / "data/xnli/dev.parquet")

    def jsonl(path: Path, frame) -> None:
        docs = [{"premise": r.text_a, "hypothesis": r.text_b, "label": int(r.label)} for r in frame.itertuples()]
        path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))

    jsonl(tmp_path / "test.jsonl", rows[rows["lang"] == "de"])
    jsonl(tmp_path / "shots.jsonl", dev[dev["lang"] == "en"])
    (tmp_path / "tasks").mkdir()
    stock = Path(prompted_module.lm_eval_tasks_dir()) / "xnli/xnli_de.yaml"
    (tmp_path / "tasks/direct_xnli_de.yaml").write_text(
        yaml.safe_dump(
            {"include": str(stock), "task": "direct_xnli_de", "dataset_path": "json",
             "dataset_kwargs": {"data_files": {"test": str(tmp_path / "test.jsonl"), "shots": str(tmp_path / "shots.jsonl")}},
             "test_split": "test", "validation_split": None, "training_split": None, "fewshot_split": "shots"}
        )
    )  # fmt: skip
    pipeline = json.loads((root / "prompted/llama_tiny/none/pretrained/xnli.json").read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf",
         "--model_args", f"pretrained={root / 'models/backbones/llama_tiny'},dtype=float32",
         "--tasks", "direct_xnli_de", "--include_path", str(tmp_path / "tasks"), "--num_fewshot", "3",
         "--batch_size", "8", "--seed", "1234,1234,1234,1234", "--device", "cpu", "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (written,) = (tmp_path / "out").rglob("results_*.json")
    direct = json.loads(written.read_text())["results"]["direct_xnli_de"]["acc,none"] * 100
    assert direct == pytest.approx(pipeline["scores"]["3"]["de"]["acc"], abs=1e-3)


@pytest.mark.integration
def test_changing_the_shots_reruns_only_the_prompted_jobs_and_their_table(demo_checkout):
    config = yaml.safe_load((demo_checkout / "config.yaml").read_text())
    config["experiment"] = "demo"
    config["prompted"]["shots"] = [0, 2]
    (demo_checkout / "prompted_shots.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = planned_jobs(demo_checkout, "--configfile", "prompted_shots.yaml")
    assert {rule for rule, _ in jobs} == {"evaluate_prompted", "tabulate_prompted", "compare_prompted", "all"}
    # every prompted model of the demo's decoder: pretrained, and after each seed's MNLI phase
    runs = prompted_grid.runs(config_layers.load([str(demo_checkout / "prompted_shots.yaml")]), "llama_tiny")
    assert len([1 for rule, _ in jobs if rule == "evaluate_prompted"]) == len(runs) == 2
