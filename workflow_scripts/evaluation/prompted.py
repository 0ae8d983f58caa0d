"""The prompted arm (docs/prompted.md): one decoder model prompted on one task through
lm-evaluation-harness's Python API, in every language, at every shot count.

The rows are the pipeline's prepared test split, the ones the fine-tuned arm scores, written
as lm-eval documents (``spec/prompted.py``: NLI's premise/hypothesis/label, a sentence
pair's sentence1/sentence2/label, QA's context/question/answers) into the job's work folder. Each language gets a local task config
that includes lm-eval's own task file of that language (its prompt, choices, generation and
metrics, as installed) and only points its dataset at those files: ``test`` the rows scored,
``shots`` the rows k-shot prompts draw from (the English dev rows the fine-tuned arm selects
on, or the language's own: ``shots_from``), drawn by lm-eval's sampler with the recorded seed.

The model is the phase's: the pretrained causal LM with its backbone replaced by the phase's
(adapters merged as evaluation merges them, ``adapters.load_backbone``); its output layer is
the pretrained one, tied to the phase's embeddings where the checkpoint ties them.

CLI: ``python -m workflow_scripts.evaluation.prompted --settings JSON --run JSON --model DIR
--base DIR --test FILE --shots FILE --work DIR --threads N --output FILE``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from workflow_scripts.common import configure_torch, device, seed_everything, setup_logging, write_json
from workflow_scripts.data.prepare import provenance, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.prompted import LM_EVAL_TASKS, LM_EVAL_VERSION, LmEvalTask, PromptedSettings
from workflow_scripts.spec.run_identity import PromptedIdentity

# lm-eval's per-document scores are fractions; tables show percent, as the fine-tuned arm's.
PERCENT = 100.0


# ----- documents ------------------------------------------------------------------------------


def document(row: dict[str, Any], spec: LmEvalTask, lang: str, where: str) -> dict[str, Any]:
    """One prepared row as a document of lm-eval's task."""
    if spec.document == "nli":
        return {"premise": row["text_a"], "hypothesis": row["text_b"], "label": int(row["label"])}
    if spec.document == "pair":
        return {"sentence1": row["text_a"], "sentence2": row["text_b"], "label": int(row["label"])}
    if spec.document == "copa":
        return copa_document(row, where)
    if not row["answer_texts"]:
        raise InputError(f"{where}: row {row['id']} has no answer; lm-eval's QA tasks score against the first")
    prefix = spec.id_prefix(lang)
    return {
        # TyDiQA's ids carry the language's name already (english-...); lm-eval keeps a
        # language's documents by it
        "id": row["id"] if row["id"].startswith(prefix) else f"{prefix}{row['id']}",
        "title": "",
        "context": row["context"],
        "question": row["question"],
        "answers": {"text": list(row["answer_texts"]), "answer_start": list(row["answer_starts"])},
    }


# The inverse of data/loaders/xcopa.copa_context: the premise and the question it was built from.
COPA_CONTEXT = re.compile(r"(?s)(?P<premise>.*) What was the (?P<question>cause|effect)\?")


def copa_document(row: dict[str, Any], where: str) -> dict[str, Any]:
    """A (X)COPA row as lm-eval's xcopa document: premise, question, the two choices, label."""
    found = COPA_CONTEXT.fullmatch(row["context"])
    if found is None or len(row["choices"]) != 2:
        raise InputError(
            f"{where}: row {row['id']} is not a prepared COPA row (context '<premise> What was the "
            f"cause|effect?' and two choices): {row['context']!r}"
        )
    return {
        "premise": found["premise"],
        "question": found["question"],
        "choice1": row["choices"][0],
        "choice2": row["choices"][1],
        "label": int(row["label"]),
    }


def rows_by_language(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """A prepared file's rows, grouped by language in file order (read once per job)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in read_table(path, None).to_pylist():
        grouped.setdefault(row["lang"], []).append(row)
    return grouped


def documents(rows: list[dict[str, Any]], spec: LmEvalTask, lang: str, where: str) -> list[dict[str, Any]]:
    """Prepared rows as lm-eval documents of ``lang``'s task, in file order. English shots of
    another language's task carry that language's id prefix: lm-eval's TyDiQA keeps a
    language's shots by it as it keeps its test documents."""
    return [document(r, spec, lang, where) for r in rows]


def write_jsonl(path: Path, docs: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")


# ----- local task configs -----------------------------------------------------------------------


def lm_eval_tasks_dir() -> Path:
    import lm_eval

    return Path(lm_eval.__file__).parent / "tasks"


def task_name(task: str, lang: str) -> str:
    return f"xstilts_{task}_{lang}"


def task_config(task: str, lang: str, test: Path, shots: Path) -> str:
    """A local task config: lm-eval's own task file of the language, its data our files."""
    included = lm_eval_tasks_dir() / LM_EVAL_TASKS[task].file_of(lang)
    if not included.is_file():
        raise InputError(f"lm-eval {LM_EVAL_VERSION} has no task file {included} ({task}, language {lang})")
    lines = [
        f"include: {json.dumps(str(included))}",
        f"task: {task_name(task, lang)}",
        "tag: null",
        "dataset_path: json",
        "dataset_name: null",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {json.dumps(str(test))}",
        f"    shots: {json.dumps(str(shots))}",
        "test_split: test",
        "validation_split: null",
        "training_split: null",
        "fewshot_split: shots",
    ]
    return "\n".join(lines) + "\n"


def write_tasks(settings: PromptedSettings, test_file: Path, shots_file: Path, work: Path) -> dict[str, int]:
    """Every language's documents and task config under ``work``; the rows scored per language."""
    spec = LM_EVAL_TASKS[settings.task]
    tests, shots = rows_by_language(test_file), rows_by_language(shots_file)
    rows = {}
    for lang in settings.languages:
        test_docs = documents(tests.get(lang, []), spec, lang, str(test_file))
        if not test_docs:
            raise InputError(f"{test_file}: no rows of language {lang!r} (prompted, task {settings.task})")
        source = "en" if settings.shots_from == "english" else lang
        shot_docs = documents(shots.get(source, []), spec, lang, str(shots_file))
        if max(settings.shots) and len(shot_docs) < max(settings.shots):
            raise InputError(
                f"{shots_file}: {len(shot_docs)} rows to draw {max(settings.shots)} shots from "
                f"({settings.shots_from} rows, language {lang}; prompted.shots, prompted.shots_from)"
            )
        data, config = work / "data" / lang, work / "tasks" / f"{task_name(settings.task, lang)}.yaml"
        write_jsonl(data / "test.jsonl", test_docs)
        write_jsonl(data / "shots.jsonl", shot_docs)
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(task_config(settings.task, lang, data / "test.jsonl", data / "shots.jsonl"), encoding="utf-8")
        rows[lang] = len(test_docs)
    return rows


# ----- the model --------------------------------------------------------------------------------


def causal_lm(model_dir: Path, base_dir: Path, settings: PromptedSettings, dev):
    """The pretrained causal LM with the phase's backbone (``model_dir``) in it."""
    from transformers import AutoModelForCausalLM

    from workflow_scripts.models.adapters import Method, check_available, load_backbone, load_kwargs

    method = Method.from_settings(settings.method)
    check_available(method, dev)
    causal = AutoModelForCausalLM.from_pretrained(str(base_dir), **load_kwargs(method))
    if model_dir.resolve() != base_dir.resolve():
        causal.model = load_backbone(model_dir, method)
        if getattr(causal.config, "tie_word_embeddings", False):
            causal.lm_head.weight = causal.model.get_input_embeddings().weight
    return place(causal, dev).eval()


def place(model, dev):
    """The model on ``dev``; with several GPUs visible (a backbone whose weights need them,
    ``workflow/prompted.gpus``), split layer-wise over them by accelerate's device map, as
    transformers' ``device_map="auto"`` splits a checkpoint."""
    import torch

    if dev.type != "cuda" or torch.cuda.device_count() < 2:
        return model.to(dev)
    from accelerate import dispatch_model, infer_auto_device_map

    no_split = getattr(model, "_no_split_modules", None)
    return dispatch_model(model, device_map=infer_auto_device_map(model, no_split_module_classes=no_split))


# ----- running lm-eval --------------------------------------------------------------------------


def _named(value: Any) -> str:
    """A function of a task config (``!function utils.process_results_de``) by its name: its
    code is in the task folder's digest the rule's params carry."""
    func = getattr(value, "func", value)  # functools.partial: the function it binds
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def config_digest(config: dict[str, Any]) -> str:
    """The resolved task config lm-eval ran, without where it was read from."""
    kept = {k: v for k, v in config.items() if k not in ("metadata", "dataset_kwargs")}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=_named)
    return hashlib.sha256(text.encode()).hexdigest()


def scores_of(result: dict[str, Any]) -> dict[str, float]:
    """A task's aggregated metrics in percent (lm-eval's ``<metric>,none`` keys, stderr dropped)."""
    return {
        key.split(",")[0]: round(float(value) * PERCENT, 4)
        for key, value in result.items()
        if key.endswith(",none") and "_stderr" not in key and isinstance(value, int | float)
    }


def evaluate(model, tokenizer, settings: PromptedSettings, work: Path) -> dict[str, Any]:
    """lm-eval's scores at every shot count: {shots: {lang: {metric: percent}}}, and each
    language's resolved task config digest."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(work / "tasks"), include_defaults=False)
    names = {task_name(settings.task, lang): lang for lang in settings.languages}
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size)
    by_shots: dict[str, Any] = {}
    digests: dict[str, str] = {}
    scored: dict[str, int] = {}
    for shots in settings.shots:
        out = lm_eval.simple_evaluate(
            model=lm,
            tasks=list(names),
            task_manager=manager,
            num_fewshot=shots,
            random_seed=settings.seed,
            numpy_random_seed=settings.seed,
            torch_random_seed=settings.seed,
            fewshot_random_seed=settings.seed,
            log_samples=False,
        )
        by_shots[str(shots)] = {names[n]: scores_of(out["results"][n]) for n in names}
        digests.update({names[n]: config_digest(out["configs"][n]) for n in names})
        scored.update({names[n]: int(out["results"][n]["sample_len"]) for n in names})
    return {"scores": by_shots, "task_config_sha256": digests, "scored": scored}


def check_scored(rows: dict[str, int], scored: dict[str, int], task: str) -> None:
    """Every document written was scored: a task whose own processing drops documents (TyDiQA
    keeps a language's by its id prefix) would otherwise score a subset."""
    for lang, count in rows.items():
        if scored.get(lang) != count:
            raise InputError(f"lm-eval scored {scored.get(lang)} of the {count} {task} documents of {lang}")


def run(args: argparse.Namespace, settings: PromptedSettings) -> dict[str, Any]:
    from importlib.metadata import version

    from workflow_scripts.models.heads import load_tokenizer

    installed = version("lm_eval")
    if installed != LM_EVAL_VERSION:
        raise InputError(
            f"lm_eval {installed} is installed; the prompted arm reads lm-eval {LM_EVAL_VERSION}'s task files "
            "(pip install -r requirements.txt)"
        )
    rows = write_tasks(settings, args.test, args.shots, args.work)
    dev = device()
    model = causal_lm(args.model, args.base, settings, dev)
    found = evaluate(model, load_tokenizer(args.base), settings, args.work)
    check_scored(rows, found["scored"], settings.task)
    spec = LM_EVAL_TASKS[settings.task]
    return {
        "model": str(args.model),
        "base": str(args.base),
        "lm_eval": {
            "version": installed,
            "task_files": {lang: spec.file_of(lang) for lang in settings.languages},
            "task_config_sha256": found["task_config_sha256"],
        },
        "rows": rows,  # written and scored, per language (check_scored)
        "scores": found["scores"],
        "data": {"test": {"file": str(args.test), "provenance": provenance(args.test)}, "shots": str(args.shots)},
        "versions": {p: version(p) for p in ("torch", "transformers", "datasets")},
    }


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", required=True, help="PromptedSettings JSON (workflow/prompted.py)")
    ap.add_argument("--run", required=True, help="the run's identity: PromptedIdentity JSON (spec/run_identity.py)")
    ap.add_argument("--model", required=True, type=Path, help="the model directory prompted")
    ap.add_argument("--base", required=True, type=Path, help="the pretrained backbone (its LM head, tokenizer)")
    ap.add_argument("--test", required=True, type=Path, help="the task's prepared test split")
    ap.add_argument("--shots", required=True, type=Path, help="the prepared split shots are drawn from")
    ap.add_argument("--work", required=True, type=Path, help="a folder for the documents and task configs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--output", required=True, type=Path)
    args = ap.parse_args(argv)
    started = time.time()
    try:
        settings = PromptedSettings.parse(args.settings, "--settings")
        identity = PromptedIdentity.parse(args.run, "--run")
        configure_torch(args.threads)
        seed_everything(settings.seed)
        # lm-eval reads the documents through `datasets`' json builder: its Arrow cache is the
        # job's own and goes with it (set before `datasets` is first imported)
        with tempfile.TemporaryDirectory(prefix="xstilts-prompted-") as cache:
            os.environ["HF_DATASETS_CACHE"] = cache
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            record = run(args, settings)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    record.update(run=identity.to_dict(), settings=settings.to_dict(), wall_time_s=round(time.time() - started, 3))
    write_json(args.output, record)


if __name__ == "__main__":
    main()
