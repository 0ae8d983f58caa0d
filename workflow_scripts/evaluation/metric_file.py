"""One run's metric file: its scores (evaluate.py), the run it belongs to, and how the scored
model was trained, so that a metric file read on its own says what it measured.

``backbone`` holds the backbone's provenance as the config gives it
(backbone_grid.provenance: name, family, Hub id and revision or a demo model, method,
precision and, for an adapter method, the LoRA settings) and what the prepared backbone
directory adds: the commit a Hub revision resolved to (``resolved_revision``, from the
source record models/prepare.py writes), or for a demo model, built locally, the sha256 of
its weights; LoRA's target modules resolved to the family's for the backbone's architecture
when the config names none.

This is the evaluate_target rule's CLI, apart from evaluate.py because training imports
evaluate.py to select its models: a field added here reruns the evaluations, not the
trainings (codehash.py reruns the rules whose modules changed).

CLI: ``python -m workflow_scripts.evaluation.metric_file --target T --model DIR|LANG=DIR ...
--data SPLIT=FILE|SPLIT:LANG,LANG=FILE ... --settings JSON --backbone DIR --backbone-settings JSON
--seed N --output FILE [--predictions DIR] [--run JSON] [--images DIR]
[--tracking off|TRACKERS --tracking-dir DIR]``.

With trackers on (training/tracking.py) the job is one tracker run: the run's identity, its
settings, and the metric file's scores as final metrics (``test/<lang>/<metric>``,
``test/avg/<metric>``, ``test/score``; the same for dev when scored).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, read_json, setup_logging, write_json
from workflow_scripts.data import leakage
from workflow_scripts.evaluation.evaluate import Sources, evaluate_run
from workflow_scripts.evaluation.predictions import write_predictions
from workflow_scripts.models.compiled import COMPILE_MODES, DEFAULT_COMPILE
from workflow_scripts.models.packing import DEFAULT_PADDING_FREE, PADDING_FREE_MODES
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.evaluation_settings import EvaluationSettings
from workflow_scripts.spec.model_settings import BackboneProvenance
from workflow_scripts.spec.result_files import MetricFile
from workflow_scripts.spec.run_identity import EvaluationIdentity
from workflow_scripts.training.tracking import TrackingError, open_trackers

# What models/prepare.py writes into a Hub snapshot it fetched: the Hub id, the revision
# asked for and the commit it resolved to (``resolved_sha``).
SOURCE_RECORD = "xstilts_source.json"


def weights_sha256(model_dir: Path) -> str:
    """One digest of a directory's weight files (name and content, in name order)."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise InputError(f"{model_dir}: no safetensors weights to take a digest of")
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def prepared_source(backbone_dir: Path, source: str) -> dict[str, Any]:
    """What the prepared backbone directory records of where it came from: a Hub snapshot's
    id, revision and resolved commit; a demo model's weights digest (it has no other name)."""
    if source == "demo":
        return {"built_locally": True, "weights_sha256": weights_sha256(backbone_dir)}
    fetched = read_json(backbone_dir / SOURCE_RECORD)
    return {"hub_id": fetched["hub_id"], "revision": fetched["revision"], "resolved_revision": fetched["resolved_sha"]}


def backbone_record(provenance: BackboneProvenance, backbone_dir: Path) -> dict[str, Any]:
    """The metric file's ``backbone``: the config's provenance completed from the prepared
    directory (see the module docstring)."""
    from workflow_scripts.models.adapters import Method, target_modules

    record = {**provenance.to_dict(), **prepared_source(backbone_dir, provenance.source)}
    lora = provenance.lora
    if lora is not None:  # the modules training adapts (adapters.attach), named even when by default
        from transformers import AutoConfig

        method = Method(name=provenance.method, target_modules=lora.target_modules or ())
        adapted = target_modules(method, provenance.family, AutoConfig.from_pretrained(backbone_dir))
        record["lora"] = {**lora.to_dict(), "target_modules": adapted}
    return record


def parse_models(items: list[str]) -> dict[str, Path]:
    """``DIR`` (every language) or ``LANG=DIR`` pairs."""
    if len(items) == 1 and "=" not in items[0]:
        return {"*": Path(items[0])}
    try:
        return {lang: Path(path) for lang, path in (item.split("=", 1) for item in items)}
    except ValueError:
        raise InputError(f"--model: expected one DIR or LANG=DIR pairs, got {items}") from None


def parse_data(items: list[str]) -> Sources:
    """``SPLIT=FILE`` (every configured language) or ``SPLIT:LANG,LANG=FILE``; repeated splits add files."""
    out: Sources = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--data: expected SPLIT=FILE or SPLIT:LANGS=FILE, got {item!r}")
        key, path = item.split("=", 1)
        split, _, langs = key.partition(":")
        out.setdefault(split, []).append((path, langs.split(",") if langs else None))
    return out


def final_metrics(result: dict[str, Any]) -> dict[str, float]:
    """A metric file's scores as tracker metrics: per language, the language average and the
    task score of each split, and the evaluation's wall time (numbers only)."""

    def numbers(tree: Any) -> dict[str, Any]:
        return {k: v for k, v in tree.items() if _is_number(v)} if isinstance(tree, dict) else {}

    out: dict[str, float] = {}
    for split, langs in result.get("scores", {}).items():
        for lang, metrics in (langs if isinstance(langs, dict) else {}).items():
            out.update({f"{split}/{lang}/{m}": v for m, v in numbers(metrics).items()})
    for split, metrics in result.get("average", {}).items():
        out.update({f"{split}/avg/{m}": v for m, v in numbers(metrics).items()})
    out.update({f"{split}/score": v for split, v in numbers(result.get("task_score")).items()})
    out.update(numbers({"wall_time_s": result.get("wall_time_s")}))
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Evaluate one run on every language of its target.")
    ap.add_argument("--target", required=True)
    ap.add_argument("--model", nargs="+", required=True, help="DIR, or LANG=DIR per language")
    ap.add_argument(
        "--data",
        nargs="+",
        required=True,
        help="SPLIT=FILE, or SPLIT:LANG,LANG=FILE for the languages taken from a file",
    )
    ap.add_argument("--settings", required=True)
    ap.add_argument("--backbone", required=True, type=Path, help="the prepared backbone directory")
    ap.add_argument(
        "--backbone-settings",
        required=True,
        help="JSON: the backbone's provenance as the config gives it (backbone_grid.provenance)",
    )
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--compile",
        choices=COMPILE_MODES,
        default=DEFAULT_COMPILE,
        help="auto (compiled on a GPU), always, graphs (compiled, CUDA graphs on a GPU) or never",
    )
    ap.add_argument(
        "--padding-free",
        choices=PADDING_FREE_MODES,
        default=DEFAULT_PADDING_FREE,
        help="auto (packed encoder batches where the varlen kernel runs), always or never",
    )
    ap.add_argument("--run", help="the run's identity: EvaluationIdentity JSON (spec/run_identity.py)")
    ap.add_argument("--output", required=True)
    ap.add_argument("--predictions", type=Path, help="folder for the test predictions in the XTREME leaderboard layout")
    ap.add_argument(
        "--images", type=Path, help="an image target's test images' features (the embed_images step's folder)"
    )
    ap.add_argument(
        "--tracking",
        default="off",
        help="off, or the trackers joined by + (tensorboard+mlflow+wandb); docs/tracking.md",
    )
    ap.add_argument(
        "--tracking-dir", type=Path, help="the experiment's tracking folder (results/<experiment>/tracking)"
    )
    args = ap.parse_args(argv)
    # opened first: a tracker that cannot open stops the job before the evaluation's work
    try:
        backbone = BackboneProvenance.parse(args.backbone_settings, "--backbone-settings")
        settings = {
            "settings": EvaluationSettings.parse(args.settings, "--settings").to_dict(),
            "backbone": backbone.to_dict(),
        }
        run = EvaluationIdentity.parse(args.run, "--run") if args.run else None
        trackers = open_trackers(args.tracking, args.tracking_dir, run and run.recorded(), settings, job="evaluate")
    except (InputError, TrackingError) as err:
        raise SystemExit(f"error: {err}") from None
    with trackers:
        result = _evaluate(args, run)
        trackers.finish(final_metrics(result))


def _evaluate(args: argparse.Namespace, run: EvaluationIdentity | None) -> dict[str, Any]:
    """The metric file (and the predictions) of ``run``, as ``args`` give it; returns its record."""
    try:
        provenance = BackboneProvenance.parse(args.backbone_settings, "--backbone-settings")
        backbone = backbone_record(provenance, args.backbone)
        result, predictions = evaluate_run(
            args.target,
            parse_models(args.model),
            parse_data(args.data),
            EvaluationSettings.parse(args.settings, "--settings"),
            args.seed,
            args.threads,
            args.images,
            args.compile,
            args.padding_free,
        )
        if run:
            result["run"] = run.recorded()
        result["backbone"] = backbone
        if run and run.leakage_reports:  # what the run's intermediate tasks share with the target's test data
            result["leakage"] = leakage.summary(leakage.read_reports(list(run.leakage_reports)))
        # checked against its record before anything is written
        checked = MetricFile.parse(result, f"the metric file {args.output}").to_dict()
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    if args.predictions:  # first: the metric file is what marks the run complete
        write_predictions(args.target, predictions, args.predictions)
    write_json(args.output, checked)
    LOG.info("%s: %s", args.output, json.dumps(result["average"]))
    return result


if __name__ == "__main__":
    main()
