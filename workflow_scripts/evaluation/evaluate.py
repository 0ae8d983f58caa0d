"""Evaluation of one run: per-language scores on every evaluation split.

Trained targets load the target-phase model (encoder + head); retrieval targets embed with
the encoder that left the intermediate phase (or the pretrained one for the baseline).
A transfer setting (transfer.py) may score each language with its own model
(translate-train, in-language) or on other data (translate-test): each language is then
scored with the model its language maps to, on the files that name it.
``evaluate_run`` gives the content of one metric file per (setting, intermediate config,
target, seed): per-language scores for each split, their unweighted mean, the metric names,
the model and selection dev data of each language, the resolved settings and their hash,
library versions and wall time. ``workflow_scripts.evaluation.metric_file`` (the
evaluate_target rule's CLI) adds the run and the backbone and writes it; training imports
this module to select its models, so what only the metric file needs lives there.
"""

from __future__ import annotations

import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from workflow_scripts.common import configure_torch, device, read_json, seed_everything, settings_hash
from workflow_scripts.data.features import Encoded, collate, decode_spans, encode, merge_tags, sorted_batches
from workflow_scripts.data.prepare import provenance, read_table
from workflow_scripts.data.ranking_inputs import QUERY
from workflow_scripts.evaluation import pool_ranking
from workflow_scripts.evaluation.metrics import (
    accuracy,
    iglue_accuracy,
    mean,
    mlqa,
    seqeval_f1,
    seqeval_version,
    squad_v1,
    squad_v2,
)
from workflow_scripts.evaluation.neighbours import EXACT
from workflow_scripts.evaluation.ranking import LAREQA, convention_of
from workflow_scripts.evaluation.retrieval import (
    BUCC_DUPLICATES,
    LAYER_CONVENTION,
    choose_threshold,
    embed,
    expand_to_ids,
    margin_candidates,
    mined_pairs,
    prf,
    score_caption_image_embeddings,
    tatoeba_nearest,
    tatoeba_score,
    unique_texts,
)
from workflow_scripts.models import compiled, dual_encoder, packing
from workflow_scripts.models.adapters import (
    Method,
    has_adapter,
    load_adapter_model,
    load_backbone,
    load_kwargs,
    method_of,
)
from workflow_scripts.models.backbones import family_of
from workflow_scripts.models.compiled import DEFAULT_COMPILE, CompileMode
from workflow_scripts.models.heads import MultiHeadModel, forward, load_encoder, load_tokenizer, make_head
from workflow_scripts.models.packing import DEFAULT_PADDING_FREE, PACKED_KEYS, PaddingFreeMode
from workflow_scripts.precision import Precision
from workflow_scripts.progress import progress
from workflow_scripts.spec import paths
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.evaluation_settings import EvaluationSettings
from workflow_scripts.spec.formats import get_format, head_kind
from workflow_scripts.spec.result_files import TrainLog
from workflow_scripts.spec.task_options import ScoringOptions
from workflow_scripts.spec.tasks import (
    CLASSIFICATION,
    RANKING,
    RETRIEVAL,
    SPAN,
    TAGGING,
    VISUAL_ANSWER,
    VISUAL_RETRIEVAL,
    Task,
    get_task,
    primary_metric,
    qa_answer_score,
)

TASK_SCORE_CONVENTION = {
    True: "(F1 + EM) / 2 of the language averages, as XTREME and XTREME-R average QA",
    False: "the primary metric's language average",
}


def predict_logits(
    model, task: Task, encoded: Encoded, batch_size: int, pad_id: int, dev, precision: Precision
) -> list[Any]:
    """Logits per feature, in feature order; batches sorted by length to minimise padding;
    computed as the backbone's precision policy says."""
    import torch

    out: list[Any] = [None] * len(encoded.features)
    per_token = get_format(task.format).per_token
    model.eval()
    # no_grad, not inference_mode: a sharded (FSDP2) model allocates its gathered parameters
    # at its first forward, which is the dev evaluation before the first training step; made
    # in inference mode they could not take part in the training forwards that follow.
    with torch.no_grad():
        with progress(total=len(encoded.features), desc=f"predicting {task.name}", unit="feature") as bar:
            for idx in sorted_batches(encoded.features, batch_size):
                feats = encoded.features.take(idx)
                engine = compiled.current()
                cpu_batch = collate(feats, task.format, pad_id, pad_width=engine.pad_width, pack=engine.pack)
                packing.PREDICTIONS.add(cpu_batch)  # counted on the host: no device sync
                batch = {
                    k: v.to(dev)
                    for k, v in cpu_batch.items()
                    if k in ("input_ids", "attention_mask", "image_index", *PACKED_KEYS)
                }
                with precision.autocast(dev):
                    logits, _ = forward(model, task.format, task.name, batch)
                logits = logits.float().cpu().numpy()
                for k, f, row in zip(idx, feats, logits):
                    n = len(f["input_ids"]) if per_token else None
                    out[k] = row[:n] if n is not None else row
                bar.update(len(idx))
    return out


def score_rows(
    model, task: Task, tokenizer, rows: list[dict[str, Any]], opts: ScoringOptions, dev, metric: str | None = None
) -> dict[str, float]:
    """Score one set of rows (one language of one split) with the task's metric."""
    return predict_and_score_rows(model, task, tokenizer, rows, opts, dev, metric)[0]


def predict_and_score_rows(
    model, task: Task, tokenizer, rows: list[dict[str, Any]], opts: ScoringOptions, dev, metric: str | None = None
) -> tuple[dict[str, float], Any]:
    """score_rows, with the predictions (see predict_and_score)."""
    return predict_and_score(
        model, task, encode(task, tokenizer, rows, opts, train=False), tokenizer.pad_token_id, opts, dev, metric
    )


def score_encoded(
    model, task: Task, encoded: Encoded, pad_id: int, opts: ScoringOptions, dev, metric: str | None = None
) -> dict[str, float]:
    """score_rows on rows already encoded (training re-scores one dev subset many times)."""
    return predict_and_score(model, task, encoded, pad_id, opts, dev, metric)[0]


def predict_and_score(
    model, task: Task, encoded: Encoded, pad_id: int, opts: ScoringOptions, dev, metric: str | None = None
) -> tuple[dict[str, float], Any]:
    """(scores, predictions): label indices (classification), {id: answer} (QA), or tags per
    sentence (tagging), in the rows' order."""
    metric = metric or task.metric
    rows = encoded.rows
    logits = predict_logits(model, task, encoded, opts.eval_batch_size, pad_id, dev, Precision(opts.precision))
    scorer = get_format(task.format).scorer  # spec/formats/: TaskFormat.scorer
    if scorer == RANKING:  # one embedding per row (pool_ranking.py)
        return pool_ranking.score(rows, logits, task.name, dev=dev)
    if scorer == VISUAL_RETRIEVAL:  # every caption against every image of the split, both directions
        import numpy as np

        return score_caption_image_embeddings(np.stack(logits), [r["images"][0] for r in rows])
    if scorer == VISUAL_ANSWER:  # VQA accuracy of the best answer of the vocabulary
        from workflow_scripts.data.vqa_answers import vqa_accuracy

        answers = [task.labels[int(l.argmax())] for l in logits]
        score = sum(vqa_accuracy(a, list(r["answers"])) for a, r in zip(answers, rows)) / max(1, len(rows))
        return {"accuracy": 100.0 * score}, answers
    if scorer == CLASSIFICATION:  # the argmax's accuracy (multiple choice: the best choice's)
        labels = [int(l.argmax()) for l in logits]
        if metric == "iglue_accuracy":  # the release's rows without a gold label count as wrong
            return iglue_accuracy(labels, [r["label"] for r in rows], opts.unlabelled), labels
        return accuracy(labels, [r["label"] for r in rows]), labels
    if scorer == SPAN:
        preds = decode_spans(
            encoded, [l[:, 0] for l in logits], [l[:, 1] for l in logits], opts, allow_null=(metric == "squad_v2")
        )
        golds = {r["id"]: list(r["answer_texts"]) for r in rows}
        if metric == "mlqa":  # translate-test rows keep their language label but hold English text
            return mlqa(preds, golds, opts.text_language or rows[0]["lang"]), preds
        return (squad_v2 if metric == "squad_v2" else squad_v1)(preds, golds), preds
    if scorer == TAGGING:
        pred_tags = merge_tags(encoded, logits, task.labels)
        gold_tags = [list(r["tags"]) for r in rows]
        if metric == "accuracy":  # CCG supertagging: per-word accuracy
            flat = [(p, g) for ps, gs in zip(pred_tags, gold_tags) for p, g in zip(ps, gs)]
            return {"accuracy": 100.0 * sum(p == g for p, g in flat) / len(flat)}, pred_tags
        return seqeval_f1(pred_tags, gold_tags), pred_tags
    raise InputError(f"task {task.name}: cannot score format {task.format}")


def rows_by_language(path: str | Path, fmt: str, languages: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Rows per language; every language must have rows (a missing one would shrink the average)."""
    rows = read_table(path, fmt).to_pylist()
    grouped: dict[str, list[dict[str, Any]]] = {lang: [] for lang in languages}
    for r in rows:
        if r["lang"] in grouped:
            grouped[r["lang"]].append(r)
    empty = [lang for lang, rs in grouped.items() if not rs]
    if empty:
        raise InputError(f"{path}: no examples for languages {empty}; refusing to shrink the average")
    return grouped


def average(
    per_lang: dict[str, dict[str, float]],
    excludes: tuple[str, ...] | list[str] = (),
    weights: dict[str, int] | None = None,
) -> dict[str, float]:
    """The mean over languages, leaving out ``excludes`` (IGLUE's English) unless nothing else
    is left; unweighted, or weighted by ``weights`` (LAReQA: each language's question count)."""
    kept = {lang: scores for lang, scores in per_lang.items() if lang not in excludes} or per_lang
    keys = next(iter(kept.values())).keys()
    if weights is None:
        return {k: mean(scores[k] for scores in kept.values()) for k in keys}
    total = sum(weights[lang] for lang in kept)
    return {k: sum(scores[k] * weights[lang] for lang, scores in kept.items()) / total for k in keys}


def language_weights(task: Task, splits) -> dict[str, dict[str, int]] | None:
    """Per split, each language's question count where the reference averages over every
    question of every language at once (LAReQA: ``utils_lareqa.mean_avg_prec_at_k``); None
    where it averages the languages' scores (every other target, Mewsli-X included)."""
    if get_format(task.format).scorer != RANKING or convention_of(task.name) != LAREQA:
        return None
    return {
        split: {lang: sum(r["side"] == QUERY for r in rows) for lang, rows in by_lang.items()}
        for split, by_lang in splits.items()
    }


def unlabelled_rows(path: str | Path) -> dict[str, int]:
    """Rows per language the loader dropped for want of a gold label (XVNLI's ``-``), from the
    data file's load report: IGLUE's accuracy counts them as wrong answers."""
    counts = provenance(path).get("report", {}).get("load_counts", {})
    return {key.split(":", 1)[0]: int(value) for key, value in counts.items() if key.endswith(":no_gold_label")}


def attach_images(rows: list[dict[str, Any]], bank, where: str) -> list[dict[str, Any]]:
    """Rows of an image target with the rows of the feature bank their images are in
    (``image_index``). Every row must have its images: a test row left out would change the
    score, so a missing image fails the evaluation, naming it."""
    import pyarrow as pa

    table = pa.Table.from_pylist(rows)
    attached = bank.attach(table, where)
    if attached.num_rows != table.num_rows:
        missing = sorted({n for r in rows for n in r["images"] if n not in bank.index})
        raise InputError(
            f"{where}: {table.num_rows - attached.num_rows} rows have no image features "
            f"({len(missing)} images, e.g. {', '.join(missing[:5])}; the embed step's report says why)"
        )
    return attached.to_pylist()


Sources = dict[str, list[tuple[str, list[str] | None]]]  # split -> (file, languages taken or None: all)


def evaluate_run(
    target: str,
    models: dict[str, Path],
    data: Sources,
    settings: EvaluationSettings,
    seed: int,
    threads: int,
    images: Path | None = None,
    compile: CompileMode = DEFAULT_COMPILE,
    padding_free: PaddingFreeMode = DEFAULT_PADDING_FREE,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Score every (split, language) of ``data`` with the model ``models`` maps the language
    to (key "*": every language): (metric file content, test predictions per language).
    An image target (XVNLI) reads each row's images from ``images``, the feature bank of its
    own test images, through the visual branch its target phase saved."""
    started = time.time()
    configure_torch(threads)
    seed_everything(seed)
    task = get_task(target)
    dev = device()
    precision = Precision(settings.precision)
    precision.check_device(dev, f"evaluating {target}")
    splits = read_splits(task, data, settings)
    bank = None
    if task.visual:
        bank, splits = _with_images(task, splits, images)
    unlabelled = _unlabelled_rows(data) if task.metric == "iglue_accuracy" else {}
    languages = [l for l in settings.languages if any(l in by_lang for by_lang in splits.values())]
    model_of = {lang: models.get(lang, models.get("*")) for lang in languages}
    unassigned = [lang for lang, m in model_of.items() if m is None]
    if unassigned:
        raise InputError(f"--model names no model for languages {unassigned}")
    # The precision policy that ran (every model of one evaluation has its backbone's method).
    extra: dict[str, Any] = {"precision": precision.record(dev, method_of(next(iter(model_of.values()))).name)}
    if task.is_retrieval:
        (model_dir,) = set(model_of.values())
        # the backbone the intermediate phase left (adapters merged in memory)
        encoder = load_backbone(model_dir, method_of(model_dir)).to(dev)
        settings = with_family_pooling(settings, model_dir)
        scores, found, predictions = evaluate_retrieval(
            task, encoder, load_tokenizer(model_dir), splits, settings, dev, seed
        )
        extra.update(found)
        extra["retrieval"]["encoder_path"] = str(model_dir)  # the intermediate phase's, or a target model's
    else:
        run = _ModelScoring(task, settings, splits, model_of, unlabelled, dev, bank, images, (compile, padding_free))
        packing.PREDICTIONS.reset()
        scores, predictions = run.score_every_model()
        extra.update(run.extra)
        # the share of the positions the forwards computed that were padding
        extra["padding_share"] = packing.PREDICTIONS.share()
    scores = {split: {l: per[l] for l in languages if l in per} for split, per in scores.items()}
    if settings.average_excludes:  # the benchmark's convention (IGLUE: English scored, not averaged)
        extra["average_excludes"] = list(settings.average_excludes)
    if unlabelled:
        extra["unlabelled_rows"] = unlabelled
    # Every metric file names the scorer versions and retrieval settings (null: not a retrieval target).
    extra.setdefault("retrieval", None)
    record = metric_record(task, settings, languages, splits, scores, data, seed)

    record["wall_time_s"] = round(time.time() - started, 3)
    return {**record, **extra}, {lang: predictions[lang] for lang in languages if lang in predictions}


def read_splits(task: Task, data: Sources, settings: EvaluationSettings) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every split's rows per language, read (and checked) before any prediction work starts."""
    expected = list(settings.transfer.data) if settings.transfer is not None else list(task.eval_splits)
    missing = [split for split in expected if split not in data]
    if missing:
        raise InputError(f"--data lacks the evaluation split(s) {missing} of {task.name}")
    splits: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for split, sources in data.items():
        splits[split] = {}
        for path, langs in sources:
            langs = langs or [l for l in settings.languages if split != "dev" or l not in task.dev_missing]
            if get_format(task.format).scorer == RANKING:  # each language's queries with the file's whole pool
                rows = read_table(path, task.format).to_pylist()
                splits[split].update(pool_ranking.rows_by_language(rows, langs, str(path)))
            else:
                splits[split].update(rows_by_language(path, task.format, langs))
    return splits


def _with_images(task: Task, splits, images: Path | None):
    """The test images' feature bank, and every row with its images' features attached."""
    from workflow_scripts.multimodal.bank import FeatureBank

    if images is None:
        raise InputError(f"{task.name} reads images: --images must name its test images' features (embed_images)")
    bank = FeatureBank.load(images)
    return bank, {
        split: {lang: attach_images(rows, bank, f"{task.name} {split} {lang}") for lang, rows in by_lang.items()}
        for split, by_lang in splits.items()
    }


def _unlabelled_rows(data: Sources) -> dict[str, dict[str, int]]:
    """Per split and language, the release's rows without a gold label (IGLUE counts them wrong)."""
    unlabelled: dict[str, dict[str, int]] = {}
    for split, sources in data.items():
        for path, _ in sources:
            unlabelled.setdefault(split, {}).update(unlabelled_rows(path))
    return unlabelled


class _ModelScoring:
    """Scores each language's rows with the target model that language is assigned, one model
    loaded at a time; ``extra`` collects what the metric file records of the models."""

    def __init__(self, task, settings, splits, model_of, unlabelled, dev, bank, images, engine) -> None:
        self.task, self.settings, self.splits, self.model_of = task, settings, splits, model_of
        self.unlabelled, self.dev, self.bank, self.images = unlabelled, dev, bank, images
        self.compile, self.padding_free = engine  # resources.evaluate_target's compile and padding_free
        self.extra: dict[str, Any] = {}
        self.selections: dict[str, Any] = {}

    def score_every_model(self) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, Any]]:
        scores: dict[str, dict[str, dict[str, float]]] = {split: {} for split in self.splits}
        predictions: dict[str, Any] = {}  # test predictions per language, for the leaderboard files
        for model_dir in sorted(set(self.model_of.values())):
            self._score_model(model_dir, scores, predictions)
        transfer = self.settings.transfer
        # Which model (and so which training and selection data) scored each language.
        self.extra["models"] = {
            lang: {
                "path": str(m),
                "selection": self.selections[str(m)],
                **(transfer.models[lang].to_dict() if transfer is not None and lang in transfer.models else {}),
            }
            for lang, m in self.model_of.items()
        }
        if len(self.selections) == 1:
            self.extra["selection"] = next(iter(self.selections.values()))
        return scores, predictions

    def _score_model(self, model_dir: Path, scores, predictions) -> None:
        task, dev = self.task, self.dev
        model, tokenizer = _load_target_model(task, model_dir, dev, self.bank)
        # the engine for this model's size (compiled.py: auto compiles models of 100M and up)
        # and family (packing.py: padding-free encoder batches)
        packed = packing.configure(model, self.padding_free, dev.type, self.settings.precision, training=False)
        parameters = sum(p.numel() for p in model.parameters())
        engine = compiled.configure(self.compile, dev.type, parameters=parameters, packing=packed)
        self.extra["engine"] = engine.record()
        if head_kind(task.format) == RANKING:  # read sequences as training did
            dual_encoder.configure_head(model.heads[task.name], self.settings)
        self._record_model(model_dir)
        # ranking: the candidate pool is embedded once, not once per language
        pool = (
            pool_ranking.PoolScorer(model, task, tokenizer, self.settings.scoring(), dev)
            if get_format(task.format).scorer == RANKING
            else None
        )
        for split, by_lang in self.splits.items():
            for lang, rows in by_lang.items():
                if self.model_of[lang] != model_dir:
                    continue
                if pool is not None:
                    scores[split][lang], found = pool.score(rows)
                else:
                    opts = self.settings.scoring(unlabelled=self.unlabelled.get(split, {}).get(lang, 0))
                    scores[split][lang], found = predict_and_score_rows(model, task, tokenizer, rows, opts, dev)
                if split == "test":
                    predictions[lang] = found
        del model

    def _record_model(self, model_dir: Path) -> None:
        """What the model's training left beside it: its selection, a sweep's choice, the
        image task it followed, and (an image target) the visual branch that scored."""
        train_log = TrainLog.beside(model_dir)
        self.selections[str(model_dir)] = train_log.best.to_dict()
        if (model_dir / paths.SWEEP_SELECTION_FILE).is_file():  # a sweep's winner: which point, among which
            self.extra.setdefault("sweep", {})[str(model_dir)] = read_json(model_dir / paths.SWEEP_SELECTION_FILE)
        if train_log.intermediate_visual:  # trained after an image task: text-only, and how
            self.extra["intermediate_visual"] = train_log.intermediate_visual
        if train_log.intermediate_recipe:  # the image arm's recipe (spec/arm_recipe.py)
            self.extra["arm_recipe"] = train_log.intermediate_recipe
        if self.bank is not None:  # what scored the images: the saved branch and the test features
            self.extra["visual"] = visual_record(self.task, model_dir, train_log, self.bank, self.images, self.splits)


def metric_record(task: Task, settings: EvaluationSettings, languages, splits, scores, data: Sources, seed: int):
    """The metric file's scores, averages and provenance (the models' part is added to it)."""
    excluded = settings.average_excludes or ()
    weights = language_weights(task, splits)
    averages = {
        split: average(per, excluded, None if weights is None else weights[split]) for split, per in scores.items()
    }
    return {
        "target": task.name,
        "metric": task.metric,
        "primary": primary_metric(task.metric),
        "languages": languages,
        "splits": list(splits),
        "setting": settings.setting,
        "scores": scores,
        "average": averages,
        # LAReQA: the mean over every question of every language (its languages weighted by
        # their question counts, which are recorded); the other targets: over the languages.
        **({"average_weights": weights} if weights is not None else {}),
        # The one number per split the benchmark averages (tasks.qa_answer_score), and how.
        "task_score": {split: qa_answer_score(task.metric, averages[split]) for split, per in scores.items() if per},
        "task_score_convention": TASK_SCORE_CONVENTION[task.format == SPAN],
        # Where each evaluation file came from (e.g. UD-POS from the UD v2.5 release or the
        # Hub) and what its loader repaired, as recorded in the data file.
        "data_provenance": {
            split: [{"path": str(path), "languages": langs, "provenance": provenance(path)} for path, langs in sources]
            for split, sources in data.items()
        },
        "seed": seed,
        "settings": settings.to_dict(),
        "settings_hash": settings_hash(settings.to_dict()),
        "seqeval_version": seqeval_version(),
        "versions": {p: version(p) for p in ("torch", "transformers", "seqeval", "faiss-cpu", "numpy")},
    }


def with_family_pooling(settings: EvaluationSettings, model_dir: Path) -> EvaluationSettings:
    """``retrieval.pooling: family`` resolved to the backbone family's pooling (a decoder's
    last token); the metric file records the pooling that ran."""
    ret = settings.retrieval
    if ret.pooling != "family":
        return settings
    return settings.replace(retrieval=ret.replace(pooling=family_of(model_dir).retrieval_pooling))


def visual_record(task: Task, model_dir: Path, train_log: TrainLog, bank, images, splits) -> dict[str, Any]:
    """The metric file's ``visual``: the test images' feature bank (encoder, feature kind),
    the rows scored with their images per split and language, and the visual branch the
    target phase trained (on which task's features) and saved with the model."""
    trained = (train_log.visual or {}).get("tasks", {}).get(task.name, {})
    return {
        "images": str(images),
        "encoder": bank.report.get("encoder"),
        "kind": bank.report.get("kind"),
        "bank_images": len(bank.index),
        "rows_with_images": {split: {lang: len(rows) for lang, rows in by.items()} for split, by in splits.items()},
        "trained_on": trained.get("images"),
        "branch": (train_log.visual or {}).get("where"),
    }


def _load_target_model(task: Task, model_dir: Path, dev, bank=None):
    """The target model a training phase wrote: a full backbone with heads.pt, or (adapters)
    the base with its adapters and the heads saved with its own (adapters.py). An image
    target's head is its visual branch (projector and classifier) over ``bank``, the test
    images' features."""
    if task.visual:
        return _load_visual_target_model(task, model_dir, dev, bank)
    if has_adapter(model_dir):
        model = load_adapter_model(model_dir, dev)
        if task.name not in model.heads:
            raise InputError(f"{model_dir}: the adapter holds no head for {task.name} (heads: {sorted(model.heads)})")
        return model.to(dev), load_tokenizer(model_dir)
    encoder = load_encoder(model_dir, **load_kwargs(Method(name="full")))  # its fp32 weights (precision.py)
    head = make_head(task.format, encoder.config.hidden_size, task.num_labels, 0.0, 0.02)
    model = MultiHeadModel(encoder, {task.name: head}, family_of(model_dir).name)
    model.heads.load_state_dict(_load_heads(model_dir))
    return model.to(dev), load_tokenizer(model_dir)


def _load_visual_target_model(task: Task, model_dir: Path, dev, bank):
    """A full backbone with the visual branch heads.pt holds, reading ``bank``'s features."""
    from workflow_scripts.models.heads import visual_classifier
    from workflow_scripts.multimodal.prefix import VisualClassificationHead

    if bank is None:
        raise InputError(f"{task.name} reads images: its evaluation needs its test images' features")
    train_log = TrainLog.beside(model_dir)
    if not (train_log.visual or {}).get("saved"):
        raise InputError(f"{model_dir}: its training saved no visual branch for {task.name} (train_log.json: visual)")
    if has_adapter(model_dir):  # the branch was saved with the adapter (modules_to_save) over a placeholder bank
        model = load_adapter_model(model_dir, dev)
        if task.name not in model.heads:
            raise InputError(f"{model_dir}: the adapter holds no head for {task.name} (heads: {sorted(model.heads)})")
        features = bank.tensor()
        for module in model.heads[task.name].modules():  # peft's wrapper holds the trained copy
            if isinstance(module, VisualClassificationHead):
                if module.projector[0].in_features != features.shape[-1]:
                    raise InputError(
                        f"{model_dir}: its visual branch reads features of width "
                        f"{module.projector[0].in_features}, the test images' have {features.shape[-1]}"
                    )
                module.bank = features if features.dim() == 3 else features[:, None, :]
        return model.to(dev), load_tokenizer(model_dir)
    encoder = load_encoder(model_dir, **load_kwargs(Method(name="full")))  # its fp32 weights (precision.py)
    hidden = encoder.config.hidden_size
    classifier = visual_classifier(task.format, hidden, task.num_labels, 0.0, 0.02)
    head = VisualClassificationHead(bank.tensor(), hidden, classifier, 0.02, task.images_per_example)
    model = MultiHeadModel(encoder, {task.name: head}, family_of(model_dir).name)
    try:
        model.heads.load_state_dict(_load_heads(model_dir))  # the bank is not saved (a non-persistent buffer)
    except RuntimeError as err:
        raise InputError(
            f"{model_dir}: its visual branch does not fit the test images' features "
            f"({bank.features.shape[1]} tokens of width {bank.features.shape[2]}): {err}"
        ) from None
    return model.to(dev), load_tokenizer(model_dir)


def evaluate_retrieval(
    task: Task,
    encoder,
    tokenizer,
    splits: dict[str, dict[str, list[dict[str, Any]]]],
    settings: EvaluationSettings,
    dev,
    seed: int,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Tatoeba: 1-NN accuracy per language. BUCC: margin mining; the threshold is chosen on
    each language's dev gold and applied to its test candidates. Also returns the test
    predictions: Tatoeba's nearest foreign index per English sentence, BUCC's mined pairs."""
    ret = settings.retrieval
    args = (ret.layer, ret.pooling, settings.eval_batch_size, settings.max_length, dev, Precision(settings.precision))
    # Exact search unless the config names a faiss index; the metric file says which.
    search = {"index": ret.index, "nprobe": 1 if ret.nprobe is None else ret.nprobe, "dev": dev, "seed": seed}
    extra: dict[str, Any] = {
        "retrieval": {
            "layer": ret.layer,
            "pooling": ret.pooling,
            "layer_convention": LAYER_CONVENTION,
            "index": search["index"],
        }
    }
    if search["index"] != EXACT:
        extra["retrieval"]["nprobe"] = search["nprobe"]
    scores: dict[str, dict[str, dict[str, float]]] = {split: {} for split in splits}
    predictions: dict[str, Any] = {}
    if task.format == RETRIEVAL:
        for split, by_lang in splits.items():
            for lang, rows in by_lang.items():
                foreign = embed(
                    encoder, tokenizer, [r["source"] for r in rows], *args, what=f"{split} {lang} sentences"
                )
                english = embed(encoder, tokenizer, [r["target"] for r in rows], *args, what=f"{split} en sentences")
                nearest = tatoeba_nearest(foreign, english, **search)
                scores[split][lang] = tatoeba_score(nearest)
                if split == "test":
                    predictions[lang] = nearest.tolist()
        return scores, extra, predictions
    k = 4 if ret.bucc_k is None else ret.bucc_k
    duplicates = ret.bucc_duplicates or "drop"
    candidates: dict[str, dict[str, Any]] = {split: {} for split in splits}
    repeated: dict[str, dict[str, dict[str, int]]] = {split: {} for split in splits}
    for split, by_lang in splits.items():
        for lang, rows in by_lang.items():
            src = [r for r in rows if r["side"] == "source"]
            eng = [r for r in rows if r["side"] == "en"]
            src_texts, src_ids = unique_texts([r["id"] for r in src], [r["text"] for r in src], duplicates)
            eng_texts, eng_ids = unique_texts([r["id"] for r in eng], [r["text"] for r in eng], duplicates)
            repeated[split][lang] = {
                side: len(rs) - len(texts) for side, rs, texts in (("source", src, src_texts), ("en", eng, eng_texts))
            }
            found = margin_candidates(
                embed(encoder, tokenizer, src_texts, *args, what=f"{split} {lang} sentences"),
                embed(encoder, tokenizer, eng_texts, *args, what=f"{split} en sentences"),
                k,
                **search,
            )
            gold = {(r["id"], e) for r in src for e in r["gold"]}
            candidates[split][lang] = (expand_to_ids(found, src_ids, eng_ids), gold)
    thresholds = {}
    for lang, (dev_cands, dev_gold) in candidates["dev"].items():
        thresholds[lang] = choose_threshold(dev_cands, dev_gold)
        for split in splits:
            cands, gold = candidates[split][lang]
            mined = mined_pairs(cands, thresholds[lang])
            scores[split][lang] = prf(mined, gold)
            if split == "test":
                predictions[lang] = sorted(mined)
    # Every BUCC metric file states the duplicate convention and how many sentences it touched.
    extra["retrieval"].update(
        {
            "bucc_k": k,
            "thresholds_from_dev": thresholds,
            "bucc_duplicates": duplicates,
            "bucc_duplicates_convention": BUCC_DUPLICATES[duplicates],
            "bucc_repeated_sentences": repeated,
        }
    )
    return scores, extra, predictions


def _load_heads(model_dir: Path):
    import torch

    path = model_dir / "heads.pt"
    if not path.is_file():
        raise InputError(f"model directory {model_dir} has no heads.pt (incomplete target training?)")
    return torch.load(path, map_location="cpu", weights_only=True)
