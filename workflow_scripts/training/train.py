"""One training engine for both phases (docs/protocol.md §2-3).

AdamW; linear warmup over ``warmup_ratio`` of the steps, then linear decay to zero; gradient
clipping; gradient accumulation when a task's batch exceeds ``max_micro_batch``; dynamic
padding with length-grouped batches. Heads are created fresh at the start of each phase.

Multi-task: at each step task m is drawn with probability
r_m = min(e_m, K) / sum_n min(e_n, K) (e_m = training examples, K = ``multitask_cap``),
by a sampler seeded from the run seed; MLM is one more task of the same sampler.

Early stopping: every ``eval_every`` steps the first ``dev_examples`` dev examples of each
task in each selection language are scored (MLM excluded); a task's score is the mean over
its languages and the selection score the mean over tasks (an MLM-only phase: minus the
mean training loss). After ``patience`` evaluations without improvement training stops,
and the best weights (kept on disk, not in memory: checkpoints.py) are restored.

Precision: the backbone's policy (precision.py) on every device: its autocast around the
forward, fp16's loss scaling around the backward and the step (step.py), fp32 master weights
for full fine-tuning. GPU: fused AdamW, SDPA attention (the encoder is loaded with it and the log
says which attention ran). The step never waits for the GPU: token counts come from the CPU
batch, the loss (the history's ``loss`` is the mean since the previous evaluation) is read
at evaluations, and each step's loss goes into the curve's window, read every ``log_every``
steps, before evaluations and before checkpoints, which stops the phase at a non-finite
loss (curves.py). The log's
``throughput`` gives examples/s and real (unpadded) tokens/s of the training steps alone.

Data: ``--data`` maps each task to its train and dev files, either as paths (the phase's
language is kept) or as lists of ``{"path", "languages"}`` (a transfer setting's recipe).

CLI: ``python -m workflow_scripts.training.train intermediate|target --encoder DIR --data JSON
--settings JSON --seed N --output DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from workflow_scripts.common import (
    LOG,
    atomic_path,
    configure_torch,
    load_settings,
    seed_everything,
    settings_hash,
    setup_logging,
)
from workflow_scripts.data.features import Encoded, collate, encode, length_grouped_batches
from workflow_scripts.data.prepare import read_table
from workflow_scripts.data.ranking_inputs import CANDIDATE
from workflow_scripts.evaluation import pool_ranking
from workflow_scripts.evaluation.evaluate import score_encoded
from workflow_scripts.models import dual_encoder
from workflow_scripts.models.adapters import Method, check_available, lineage, save_adapter_phase
from workflow_scripts.models.backbones import family_of
from workflow_scripts.models.heads import forward, load_mlm_head, load_saved_heads, load_tokenizer, make_head
from workflow_scripts.precision import Precision
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError, canonical_json
from workflow_scripts.spec.codehash import module_digest
from workflow_scripts.spec.formats import get_format, head_kind
from workflow_scripts.spec.task_options import ScoringOptions, TaskOptions
from workflow_scripts.spec.tasks import MLM, RANKING, TAGGING, Task, get_task, primary_metric
from workflow_scripts.training import runtime as training_runtime
from workflow_scripts.training import step as step_
from workflow_scripts.training.checkpoints import STOP_SIGNALS, Preempted, files_stamp, save_weights
from workflow_scripts.training.curves import (
    CURVE_FILE,
    CurveMeter,
    Diverged,
    publish_record,
    tracker_values,
    write_curve,
)
from workflow_scripts.training.distributed import any_rank, from_rank0, sum_over_ranks


class TaskSampler:
    """Capped examples-proportional sampling over tasks, seeded by the run seed."""

    def __init__(self, sizes: dict[str, int], cap: int, seed: int) -> None:
        if not sizes or any(n <= 0 for n in sizes.values()):
            raise InputError(f"every multi-task task needs training examples, got {sizes}")
        self.names = sorted(sizes)
        capped = [min(sizes[n], cap) for n in self.names]
        self.probabilities = {n: c / sum(capped) for n, c in zip(self.names, capped)}
        self.rng = random.Random(seed)

    def next(self) -> str:
        return self.rng.choices(self.names, weights=[self.probabilities[n] for n in self.names])[0]


class TaskStream:
    """Endless length-grouped batches of one task, reshuffled (seeded) at every pass."""

    def __init__(self, task: Task, encoded: Encoded, batch_size: int, seed: int) -> None:
        self.task, self.encoded, self.batch_size = task, encoded, batch_size
        self.rng = random.Random(f"{seed}-{task.name}")
        self.batches: list[list[int]] = []
        self.passes = 0

    def next(self) -> list[dict[str, Any]]:
        if not self.batches:
            # reversed: batches are popped from the end, the first batch is consumed first
            self.batches = length_grouped_batches(self.encoded.features, self.batch_size, self.rng)[::-1]
            self.passes += 1
        return self.encoded.features.take(self.batches.pop())


def linear_schedule(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: 0 -> 1 over ``warmup`` steps, then 1 -> 0 at ``total``
    (the convention of transformers' get_linear_schedule_with_warmup)."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


@dataclasses.dataclass
class PhaseData:
    """A phase's tasks (CCG's tag set filled in from its files), their encoded training sets,
    heads, and the encoded dev subsets that select the model."""

    tasks: dict[str, Task]
    train_sets: dict[str, Encoded]
    heads: dict[str, Any]
    dev_sets: dict[tuple[str, str], Encoded]
    dev_opts: dict[str, ScoringOptions]
    # Visual tasks: where their images' features came from and the projector's size. The
    # projector is part of the task's head: dropped with the heads after the intermediate
    # phase, saved with them (heads.pt) by the target phase of an image target (XVNLI).
    visual: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def load_phase_data(
    encoder_dir: Path,
    encoder,
    tokenizer,
    data: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    mlm_head=load_mlm_head,
) -> PhaseData:
    """``mlm_head``: how the masked-LM head is built from the base directory and the encoder
    (``sharded_loading.empty_mlm_head`` for a backbone on the meta device)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    task_opts: dict[str, dict[str, Any]] = settings["tasks"]
    tasks = {name: get_task(name) for name in task_opts}
    train_sets: dict[str, Encoded] = {}
    dev_rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    heads: dict[str, Any] = {}
    visual: dict[str, dict[str, Any]] = {}
    for name, task in tasks.items():
        opts = TaskOptions.parse(task_opts[name], f"--settings tasks.{name}")
        # Multilingual files (XNLI's translated MNLI, a target's own train split) hold several
        # languages: keep those the data map (or the phase's language) names.
        language = settings.get("language", "en")
        sources = data_sources(data[name]["train"], None if head_kind(task.format) == MLM else [language])
        train = pa.concat_tables(
            [_table_in(read_table(path, task.format), langs, task.format) for path, langs in sources],
            promote_options="permissive",
        )
        image_task = None
        if task.visual:  # rows meet their images' features (multimodal/phase.py)
            from workflow_scripts.multimodal.phase import prepare_image_task

            image_task = prepare_image_task(task, train, data[name], opts)
            task = tasks[name] = image_task.task  # VQA's: with the answer vocabulary
            train = image_task.train
        if not train.num_rows:
            wanted = ", ".join(sorted({l for _, langs in sources for l in langs or []}))
            raise InputError(f"{data[name]['train']}: no {wanted} training examples for task {name}")
        if head_kind(task.format) != MLM:  # masked-LM losses select nothing
            # a ranking task selects in a pool of candidates of every language (pool_ranking.py)
            subset = pool_ranking.selection_subset if get_format(task.format).scorer == RANKING else _dev_subset
            for path, langs in data_sources(data[name]["dev"], [opts.select_language or "en"]):
                dev_table = _table_in(read_table(path, task.format), langs, task.format)
                dev_file = (image_task.attach(dev_table, f"{name} dev") if image_task else dev_table).to_pylist()
                for lang in langs:
                    dev_rows[(name, lang)] = subset(dev_file, int(settings["dev_examples"]), lang, path)
        if task.format == TAGGING and not task.labels:
            # CCG's supertag set comes from the user's files (train and dev), not the catalogue.
            dev_tags = {t for (n, _), rs in dev_rows.items() if n == name for r in rs for t in r["tags"]}
            tags = sorted(set(pc.unique(pc.list_flatten(train["tags"])).to_pylist()) | dev_tags)
            task = tasks[name] = dataclasses.replace(task, labels=tuple(tags))
        train_sets[name] = encode(task, tokenizer, train, opts, train=True)
        if head_kind(task.format) == MLM:
            heads[name] = mlm_head(lineage(encoder_dir).base, encoder)
        elif image_task is not None:
            heads[name] = image_task.head(encoder.config, float(settings["dropout"]), initializer_range(encoder.config))
            visual[name] = image_task.describe(data[name]["images"], heads[name])
        else:
            heads[name] = make_head(
                task.format,
                encoder.config.hidden_size,
                task.num_labels,
                float(settings["dropout"]),
                initializer_range(encoder.config),
            )
            if head_kind(task.format) == RANKING:
                dual_encoder.configure_head(heads[name], opts)
    # The selection subsets never change: encode them once, not at every evaluation.
    precision = Method.from_settings(settings.get("method")).precision  # the dev scores' compute dtype too
    dev_opts = {
        n: ScoringOptions.parse(
            {
                **{k: v for k, v in task_opts[n].items() if k in ScoringOptions.keys()},
                "eval_batch_size": settings["eval_batch_size"],
                "precision": precision,
            }
        )
        for n in tasks
    }
    dev_sets = {
        key: encode(tasks[key[0]], tokenizer, rows, dev_opts[key[0]], train=False) for key, rows in dev_rows.items()
    }
    return PhaseData(tasks, train_sets, heads, dev_sets, dev_opts, visual)


def initializer_range(config) -> float:
    """The backbone's weight-init std for fresh heads (T5 configs name none: BERT's 0.02)."""
    return float(getattr(config, "initializer_range", 0.02))


def total_steps(settings: dict[str, Any], train_sets: dict[str, Encoded]) -> int:
    task_opts = settings["tasks"]
    if len(train_sets) == 1:
        (name,) = train_sets
        total = int(task_opts[name]["epochs"]) * math.ceil(
            len(train_sets[name].features) / int(task_opts[name]["batch_size"])
        )
    else:
        cap = int(settings["multitask_cap"])
        total = int(settings["multitask_epochs"]) * sum(
            math.ceil(min(len(s.features), cap) / int(task_opts[n]["batch_size"])) for n, s in train_sets.items()
        )
    if settings.get("max_steps"):
        total = min(total, int(settings["max_steps"]))
    return total


class StepMeter:
    """Loss and throughput counted without waiting for the GPU: token counts come from the
    CPU batch, the loss accumulates on the device and is read only at evaluations (one
    host-device synchronisation). Divergence is the curve's check (curves.CurveMeter)."""

    def __init__(self, dev, ctx=None) -> None:
        import torch

        # ctx: a sharded run's context; each rank holds its share of every loss and count,
        # and every read of them is agreed over the ranks (distributed.py)
        self.ctx = ctx if ctx is not None and ctx.distributed else None
        self.loss_sum = torch.zeros((), device=dev)
        self.steps_since_read = 0
        self.counts = {"examples": 0, "tokens": 0, "padded_tokens": 0}

    def totals(self) -> dict[str, int]:
        """The counts of every rank together (collective in a sharded run)."""
        if self.ctx is None:
            return dict(self.counts)
        import torch

        summed = sum_over_ranks(
            torch.tensor([self.counts[k] for k in sorted(self.counts)], dtype=torch.int64), self.ctx
        )
        return {k: int(v) for k, v in zip(sorted(self.counts), summed.tolist())}

    def add_batch(self, cpu_batch: dict[str, Any], examples: int) -> None:
        mask = cpu_batch["attention_mask"]
        self.counts["examples"] += examples
        self.counts["tokens"] += int(mask.sum())
        self.counts["padded_tokens"] += mask.numel()

    def add_step(self, step_loss) -> None:
        self.loss_sum += step_loss
        self.steps_since_read += 1

    def mean_loss(self) -> float:
        """The mean training loss since the last call (one synchronisation)."""
        total = self.loss_sum if self.ctx is None else sum_over_ranks(self.loss_sum.clone(), self.ctx)
        value = float(total) / max(1, self.steps_since_read)
        self.loss_sum.zero_()
        self.steps_since_read = 0
        return value


def _to_device(batch: dict[str, Any], dev) -> dict[str, Any]:
    if dev.type == "cuda":  # pinned host memory: the copy overlaps with the GPU's work
        return {k: v.pin_memory().to(dev, non_blocking=True) for k, v in batch.items()}
    return batch


def train_phase(
    phase: str,
    encoder_dir: Path,
    data: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    seed: int,
    threads: int,
    output: Path,
    checkpoint_dir: Path | None = None,
    checkpoint_every: int = 1000,
    keep_checkpoints: bool = False,
    log_every: int = 10,
    trackers=None,
) -> dict[str, Any]:
    """``trackers``: the job's experiment trackers (tracking.py), or None (tracking off)."""
    import torch

    started = time.time()
    inputs = [
        encoder_dir,
        *(
            path
            for entry in data.values()
            for split in ("train", "dev")
            if split in entry
            for path, _ in data_sources(entry[split], None)
        ),
        *(Path(entry["images"]) / "features.npy" for entry in data.values() if "images" in entry),
    ]
    # What this run is: a checkpoint of any other (settings, code, or an input rebuilt since) is discarded.
    fingerprint = {
        "phase": phase,
        "seed": seed,
        "settings_hash": settings_hash(settings),
        "encoder": str(encoder_dir),
        "data": canonical_json(data),
        "code": module_digest("training.train"),
        "inputs": files_stamp(inputs),
    }
    configure_torch(threads)
    seed_everything(seed)  # the same on every rank: each builds the same model and global batches
    method = Method.from_settings(settings.get("method"))
    precision = Precision(method.precision)
    # Under torchrun or srun: one rank of a sharded run (FSDP2); otherwise the single process.
    runtime = training_runtime.start(method)
    ctx, dev = runtime.ctx, runtime.device
    if ctx.distributed and precision.loss_scaling:  # also refused by the config check (backbone_grid)
        raise InputError("precision fp16 is not supported with sharded training (its loss scale is per rank); use bf16")
    checkpointer = runtime.checkpointer(checkpoint_dir, fingerprint, checkpoint_every)
    check_available(method, dev)
    tokenizer = load_tokenizer(encoder_dir)
    encoder = runtime.load_backbone(encoder_dir)
    phase_data = load_phase_data(encoder_dir, encoder, tokenizer, data, settings, mlm_head=runtime.mlm_head)
    tasks, task_opts = phase_data.tasks, settings["tasks"]
    if settings.get("continue_head"):  # a target's stage: its head goes on training (grid.target_settings)
        carry_head(encoder_dir, phase_data.heads, settings["continue_head"])
    family = family_of(encoder_dir)
    # Adapters: the heads train whole and are saved with the adapter (not the MLM head, which
    # predicts with the frozen embeddings).
    head_formats = {n: (t.format, t.num_labels) for n, t in tasks.items() if head_kind(t.format) != MLM}
    if hasattr(encoder.config, "use_cache"):
        # Training never decodes: a decoder's KV cache would only hold memory, and under
        # activation checkpointing the recomputed forward appends to the cache the first
        # forward filled (a shape error at the first backward).
        encoder.config.use_cache = False
    model, peft_model = runtime.build(encoder_dir, encoder, phase_data.heads, family.name, head_formats)
    total = total_steps(settings, phase_data.train_sets)
    warmup = int(float(settings["warmup_ratio"]) * total)
    sampler = TaskSampler(
        {n: len(s.features) for n, s in phase_data.train_sets.items()}, int(settings["multitask_cap"]), seed
    )
    streams = {n: TaskStream(tasks[n], phase_data.train_sets[n], int(task_opts[n]["batch_size"]), seed) for n in tasks}

    optimizer = step_.make_optimizer(model, float(settings["learning_rate"]), float(settings["weight_decay"]))
    scaler = precision.grad_scaler(dev)  # fp16's loss scaling; a pass-through otherwise
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_schedule(s, total, warmup))
    mlm_args = {
        "mask_id": tokenizer.mask_token_id,
        "vocab_size": len(tokenizer),
        "special_ids": list(tokenizer.all_special_ids),
        "generator": torch.Generator().manual_seed(seed),
    }
    micro = int(settings["max_micro_batch"])
    eval_every = int(settings["eval_every"])
    meter = StepMeter(dev, ctx=ctx)
    curve = CurveMeter(log_every, dev, ctx)
    trackers = trackers if ctx.is_main else None  # one record of a sharded run: rank 0's
    best = {"score": -math.inf, "step": 0, "scores": {}}
    # Without a checkpoint directory the best weights live in a scratch directory under $TMPDIR
    # (node-local on clusters; a killed process's leftovers are the system's to clean).
    scratch = (
        None
        if checkpoint_dir
        else Path(from_rank0(tempfile.mkdtemp(prefix="xstilts-best-weights-") if ctx.is_main else None, ctx))
    )
    best_dir = checkpoint_dir / "best" if checkpoint_dir else scratch
    best_weights = runtime.best_weights(best_dir)
    history, bad_evals, start, elapsed, train_seconds = [], 0, 0, 0.0, 0.0

    resumed = runtime.resume(checkpointer, model, optimizer)  # model, optimiser and RNG restored
    if resumed is not None:
        scheduler.load_state_dict(resumed["scheduler"])
        scaler.load_state_dict(resumed["scaler"])
        sampler.rng.setstate(resumed["sampler"])
        for n, st in resumed["streams"].items():
            streams[n].rng.setstate(st["rng"])
            streams[n].batches, streams[n].passes = st["batches"], st["passes"]
        mlm_args["generator"].set_state(resumed["mlm_generator"])
        best, bad_evals = resumed["best"], resumed["bad_evals"]
        if resumed.get("best_state") is not None:  # checkpoints written before the best weights moved to disk
            save_weights(resumed.pop("best_state"), best_weights.path(best["step"]))
        best_weights.checkpointed(best["step"] or None)  # drops bests found after the checkpoint
        history, start, elapsed = resumed["history"], resumed["step"], resumed["elapsed"]
        # (checkpoints written before throughput was counted resume with fresh counts)
        meter.counts = resumed.get("counts", meter.counts)
        train_seconds = resumed.get("train_seconds", 0.0)
        curve.load_state(resumed["curve"])

    def state(next_step: int) -> dict[str, Any]:
        return {
            "step": next_step,
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "sampler": sampler.rng.getstate(),
            "streams": {
                n: {"rng": st.rng.getstate(), "batches": st.batches, "passes": st.passes} for n, st in streams.items()
            },
            "mlm_generator": mlm_args["generator"].get_state(),
            "best": best,
            "bad_evals": bad_evals,
            "history": history,
            "curve": curve.state(),
            "counts": meter.counts,
            "train_seconds": train_seconds + time.time() - loop_started - eval_seconds,
            "elapsed": elapsed + time.time() - started,
        }

    def evaluate() -> tuple[dict[tuple[str, str], dict[str, float]], dict[str, dict[str, float]]]:
        by_language = {
            key: score_encoded(model, tasks[key[0]], enc, tokenizer.pad_token_id, phase_data.dev_opts[key[0]], dev)
            for key, enc in phase_data.dev_sets.items()
        }
        by_language = from_rank0(by_language, ctx)  # every rank takes the same early-stopping decisions
        return by_language, _task_scores(by_language)

    def record(rows: list[dict[str, Any]], step: int) -> None:
        if trackers is not None and rows:
            trackers.log(step, tracker_values(rows))

    if start == 0 and phase_data.dev_sets:
        # The dev score before any training: the curve's first point, and what a run that
        # never learnt is measured against (reporting/training_curves.py).
        _, initial_scores = evaluate()
        record(curve.eval_rows(0, initial_scores, _selection_score(tasks, initial_scores)), 0)

    # A stop signal (STOP_SIGNALS): checkpoint at the end of the current step, then stop.
    stop_signal: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stop_signal.append(signum)) for sig in STOP_SIGNALS}
    loop_started, eval_seconds = time.time(), 0.0
    stopped_early = False
    try:
        step = start
        for step in progress(
            range(start, total),
            desc=f"{phase} training",
            unit="step",
            initial=start,
            total=total,
            disable=not ctx.is_main,
        ):
            model.train()
            name = sampler.next()
            task = tasks[name]
            feats = streams[name].next()
            step_loss = torch.zeros((), device=dev)
            for chunk, weight in runtime.micro_batches(feats, micro):
                cpu_batch = collate(
                    chunk, task.format, tokenizer.pad_token_id, mlm_args if head_kind(task.format) == MLM else None
                )
                if weight != 0.0:  # not a stand-in that only keeps this rank in step with the others
                    meter.add_batch(cpu_batch, len(chunk))
                with precision.autocast(dev):
                    _, loss = forward(model, task.format, name, _to_device(cpu_batch, dev))
                if weight is None:  # one process: the chunk's share of the batch
                    loss = loss * len(chunk) / len(feats)
                    step_loss += loss.detach()
                else:  # a rank: its share of the global batch, averaged over the ranks (distributed.loss_weight)
                    loss = loss * weight
                    step_loss += loss.detach() / ctx.world_size
                step_.backward(loss, scaler)
            meter.add_step(step_loss)
            lr = optimizer.param_groups[0]["lr"]
            grad_norm = step_.optimizer_step(model, optimizer, scaler, float(settings["max_grad_norm"]))
            curve.add_step(step + 1, name, step_loss, grad_norm, lr)
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

            evaluate_now = (step + 1) % eval_every == 0 or step + 1 == total
            # a signal reaches the ranks at different steps: they stop together at the first that saw one
            stopping = any_rank(bool(stop_signal), ctx)
            saving = stopping or ((step + 1) % checkpointer.every == 0 and step + 1 < total)
            if curve.row_due(step + 1):  # reads the window: raises Diverged at a NaN loss
                record(curve.train_row(step + 1, meter.totals()["tokens"]), step + 1)
            if evaluate_now or saving:
                curve.check()  # never evaluate or checkpoint diverged weights
            if evaluate_now:
                eval_started = time.time()
                by_language, scores = evaluate()
                loss_value = meter.mean_loss()
                score = _selection_score(tasks, scores) if scores else -loss_value
                entry = {
                    "step": step + 1,
                    "loss": loss_value,
                    "score": score,
                    "scores": scores,
                    "lr": scheduler.get_last_lr()[0],
                }
                if len(by_language) > len(scores):  # several selection languages: keep each one's score
                    entry["scores_by_language"] = {f"{n}:{lang}": v for (n, lang), v in by_language.items()}
                history.append(entry)
                if scores:
                    record(curve.eval_rows(step + 1, scores, score), step + 1)
                LOG.info("step %d/%d: loss %.4f, dev score %.3f", step + 1, total, loss_value, score)
                if score > best["score"]:
                    best = {k: v for k, v in entry.items() if k not in ("loss", "lr")}
                    best_weights.save(model, step + 1)
                    bad_evals = 0
                else:
                    bad_evals += 1
                eval_seconds += time.time() - eval_started
                curve.excluded_seconds += time.time() - eval_started
                if bad_evals >= int(settings["patience"]):
                    LOG.info("early stopping at step %d (best step %d)", step + 1, best["step"])
                    stopped_early = True
                    break
            if stopping:  # (a rank that saw no signal itself stops on another's)
                signum = stop_signal[0] if stop_signal else signal.SIGTERM
                if ctx.is_main:
                    LOG.warning(
                        "%s: writing a checkpoint at step %d, then stopping",
                        f"{signal.Signals(signum).name} received"
                        if stop_signal
                        else "another rank received a stop signal",
                        step + 1,
                    )
            if saving:
                saving_started = time.time()
                runtime.save(checkpointer, model, optimizer, state(step + 1))
                curve.excluded_seconds += time.time() - saving_started
                best_weights.checkpointed(best["step"] or None)
            if stopping:
                raise Preempted(signum, step + 1, checkpointer.path)
        # The steps since the last row (an early stop's window, the final one, or those a
        # checkpoint taken at the very last step kept): their row.
        last_step = step + 1 if total > start else start
        record(curve.train_row(last_step, meter.totals()["tokens"]), last_step)
        if best["step"]:
            best_weights.restore(model, best["step"])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if scratch is not None and ctx.is_main:
            shutil.rmtree(scratch, ignore_errors=True)
    train_seconds += time.time() - loop_started - eval_seconds
    counts = meter.totals()
    log = {
        "phase": phase,
        "seed": seed,
        "total_steps": total,
        "warmup_steps": warmup,
        "best": best,
        "history": history,
        "task_probabilities": sampler.probabilities,
        "padding_share": 1 - counts["tokens"] / max(1, counts["padded_tokens"]),
        "throughput": {
            **counts,
            "train_seconds": round(train_seconds, 3),
            "examples_per_s": counts["examples"] / max(train_seconds, 1e-9),
            "tokens_per_s": counts["tokens"] / max(train_seconds, 1e-9),
            "device": dev.type,
            "attention": encoder.config._attn_implementation,
            "processes": ctx.world_size,
        },
        "backbone": {
            "family": family.name,
            "method": dataclasses.asdict(method),
            "precision": precision.record(dev, method.name),
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "parameters": sum(p.numel() for p in model.parameters()),
        },
        "settings": settings,
        "settings_hash": settings_hash(settings),
        "resumed_at_step": start or None,
        "stopped_early": stopped_early,
        "curve": {"file": CURVE_FILE, "log_every": log_every, "rows": len(curve.rows)},
        # An image task's visual branch: after the intermediate phase it is not in the saved
        # model (what follows is text-only); an image target saves its projector and classifier
        # in heads.pt, and evaluation reads them with the test images' features (the feature
        # bank itself is never saved).
        "visual": _visual_record(phase, phase_data.visual, method.adapters),
        # A model trained after an image task says so, down to the metric file (evaluate.py).
        "intermediate_visual": _visual_lineage(encoder_dir),
        "wall_time_s": round(elapsed + time.time() - started, 3),
    }
    # A sharded model is gathered whole on rank 0, which alone writes the output.
    full = runtime.gathered_state(model)
    if ctx.is_main and peft_model is not None:
        with atomic_path(output) as tmp:
            tmp.mkdir()
            save_adapter_phase(peft_model, tokenizer, tmp, encoder_dir, head_formats, method, family.name, full)
            (tmp / "train_log.json").write_text(json.dumps(log, indent=2, sort_keys=True) + "\n")
            write_curve(curve.rows, tmp / CURVE_FILE)
    elif ctx.is_main:
        _save(model, tokenizer, phase, log, output, full, curve.rows)
    if ctx.is_main:
        publish_record(output)
    if trackers is not None:
        trackers.finish(_final_metrics(log))
    if not keep_checkpoints:  # XLM-R large checkpoints are several GB each
        checkpointer.remove()
    runtime.finish()
    return log


def _visual_record(phase: str, visual: dict[str, dict[str, Any]], adapters: bool) -> dict[str, Any] | None:
    """The train log's ``visual``: the phase's image tasks and whether their visual branch
    (projector, slot vectors and classifier, not the feature bank) is saved with the model:
    in heads.pt, or with an adapter as one of its heads (modules_to_save)."""
    if not visual:
        return None
    if phase != "target":
        return {"tasks": visual, "saved": False}
    where = "the adapter's heads (modules_to_save)" if adapters else "heads.pt"
    return {"tasks": visual, "saved": True, "where": f"{where}: projector, slot vectors, classifier"}


def _visual_lineage(encoder_dir: Path) -> dict[str, Any] | None:
    """The image tasks of the phase that trained ``encoder_dir`` (or of one before it), and
    that their visual branch was not carried over: the model is text-only."""
    log_file = Path(encoder_dir) / "train_log.json"
    if not log_file.is_file():
        return None
    earlier = json.loads(log_file.read_text())
    found = earlier.get("intermediate_visual") or earlier.get("visual")
    if not found:
        return None
    return {
        "tasks": found["tasks"],
        "text_only": True,
        "how": "the intermediate phase's backbone weights; its projector and feature bank were dropped with its heads",
    }


def carry_head(model_dir: Path, heads: dict[str, Any], carried: dict[str, str]) -> None:
    """Load the head ``carried["from"]`` that ``model_dir``'s phase trained into this phase's
    head ``carried["to"]`` (same format, so the same shapes: XCOPA after SIQA)."""
    saved = load_saved_heads(model_dir)
    source, target = carried["from"], carried["to"]
    if source not in saved:
        raise InputError(f"{model_dir}: no trained head {source!r} to continue (it has {sorted(saved)})")
    try:
        heads[target].load_state_dict(saved[source])
    except RuntimeError as err:
        raise InputError(f"{model_dir}: head {source!r} does not fit {target!r}'s: {err}") from None
    LOG.info("head %s continues from %s's in %s", target, source, model_dir)


def data_sources(
    spec: str | list[dict[str, Any]], default_languages: list[str] | None
) -> list[tuple[str, list[str] | None]]:
    """(file, languages kept) of one data map entry: a path (the phase's language) or a list
    of {"path", "languages"} (a transfer setting's recipe, transfer.py)."""
    if isinstance(spec, str):
        return [(spec, default_languages)]
    return [(ref["path"], list(ref["languages"])) for ref in spec]


def _table_in(table, languages: list[str] | None, fmt: str | None = None):
    """The rows of the given languages, filtered in Arrow before any Python object is made
    (XNLI-MT train holds 5.5M rows in 14 languages; a model trains on one of them). A
    ranking file keeps its whole candidate pool: the language is the queries'."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if languages is not None:
        keep = pc.is_in(table["lang"], value_set=pa.array(languages, pa.string()))
        if fmt == RANKING:
            keep = pc.or_(keep, pc.equal(table["side"], CANDIDATE))
        table = table.filter(keep)
    return table


def _dev_subset(rows: list[dict[str, Any]], n: int, language: str, path: str) -> list[dict[str, Any]]:
    """The first ``n`` dev examples of the selection language (the setting's: English for
    zero-shot, so model selection never sees another language there)."""
    subset = [r for r in rows if r["lang"] == language][:n]
    if not subset:
        raise InputError(f"{path}: no {language} dev examples for model selection")
    return subset


def _task_scores(by_language: dict[tuple[str, str], dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each task's dev scores, the unweighted mean over its selection languages."""
    grouped: dict[str, list[dict[str, float]]] = {}
    for (name, _), scores in by_language.items():
        grouped.setdefault(name, []).append(scores)
    return {name: {k: sum(s[k] for s in group) / len(group) for k in group[0]} for name, group in grouped.items()}


def _selection_score(tasks: dict[str, Task], scores: dict[str, dict[str, float]]) -> float:
    return sum(scores[n][primary_metric(tasks[n].metric)] for n in scores) / len(scores)


def _final_metrics(log: dict[str, Any]) -> dict[str, float]:
    """A training job's final values for its tracker run."""
    return {
        "best/score": float(log["best"]["score"]),
        "best/step": float(log["best"]["step"]),
        "steps": float(log["history"][-1]["step"] if log["history"] else log["total_steps"]),
        "total_steps": float(log["total_steps"]),
        "stopped_early": float(log["stopped_early"]),
        "wall_time_s": float(log["wall_time_s"]),
    }


def _save(
    model,
    tokenizer,
    phase: str,
    log: dict[str, Any],
    output: Path,
    full: dict[str, Any] | None = None,
    curve_rows: list[dict[str, Any]] | None = None,
) -> None:
    """The phase's output directory; ``full``: a sharded model's weights gathered whole."""
    import torch

    def part(prefix: str) -> dict[str, Any]:
        return {k[len(prefix) :]: v for k, v in full.items() if k.startswith(prefix)}

    with atomic_path(output) as tmp:
        if full is None:
            model.encoder.save_pretrained(tmp)
        else:
            model.encoder.save_pretrained(tmp, state_dict=part("encoder."))
        tokenizer.save_pretrained(tmp)
        if phase == "target":  # the intermediate phase's heads are discarded by design
            torch.save(model.heads.state_dict() if full is None else part("heads."), tmp / "heads.pt")
        (tmp / "train_log.json").write_text(json.dumps(log, indent=2, sort_keys=True) + "\n")
        write_curve(curve_rows or [], tmp / CURVE_FILE)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    if int(os.environ.get("RANK", "0")) != 0:  # one log of a sharded run: rank 0's (and every rank's warnings)
        logging.getLogger().setLevel(logging.WARNING)
    ap = argparse.ArgumentParser(description="Train one phase (intermediate or target) of one run.")
    ap.add_argument("phase", choices=["intermediate", "target"])
    ap.add_argument("--encoder", required=True, type=Path)
    ap.add_argument("--data", required=True, help='JSON {"task": {"train": FILE, "dev": FILE}}')
    ap.add_argument("--settings", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--checkpoint-dir", type=Path, help="where resumable checkpoints live (none: no checkpoints)")
    ap.add_argument("--checkpoint-every", type=int, default=1000, help="steps between checkpoints")
    ap.add_argument(
        "--keep-checkpoints",
        type=int,
        choices=[0, 1],
        default=0,
        help="1: keep the checkpoint once the output exists (default: delete it)",
    )
    ap.add_argument("--log-every", type=int, default=10, help="steps between the rows of the curve (curve.csv)")
    ap.add_argument("--tracking", default="off", help='the trackers to log to, e.g. "tensorboard+mlflow" (tracking.py)')
    ap.add_argument("--tracking-dir", type=Path, help="where the trackers write (results/<experiment>/tracking)")
    # (not --run: under torchrun, whose own --run-path it would abbreviate, it is refused as ambiguous)
    ap.add_argument("--run-identity", help="the run's identity (JSON: backbone, setting, config, target, seed, ...)")
    args = ap.parse_args(argv)
    # Named in every error: the run's identity when the workflow gives it, else its output.
    run_name = _run_name(args.run_identity, args.output)
    trackers = None
    try:
        settings = load_settings(args.settings)  # (a bad settings file: an InputError, below)
        trackers = _open_trackers(args, settings)
        train_phase(
            args.phase,
            args.encoder,
            json.loads(args.data),
            settings,
            args.seed,
            args.threads,
            args.output,
            args.checkpoint_dir,
            args.checkpoint_every,
            bool(args.keep_checkpoints),
            args.log_every,
            trackers,
        )
    except InputError as err:
        _finish_failed(trackers, "FAILED")
        raise SystemExit(f"error: {err}") from None
    except Diverged as err:
        _finish_failed(trackers, "FAILED")
        raise SystemExit(
            f"error: {run_name}: training diverged: {err}, with learning rate {settings['learning_rate']};"
            " the phase stopped there and no model was written (a lower learning rate, or a smaller"
            " max_grad_norm, is the usual remedy)"
        ) from None
    except FloatingPointError as err:
        _finish_failed(trackers, "FAILED")
        raise SystemExit(f"error: {run_name}: training diverged: {err}; no model was written") from None
    except Preempted as err:
        _finish_failed(trackers, "KILLED")
        LOG.warning("%s", err)
        raise SystemExit(128 + err.signum) from None
    except KeyboardInterrupt:  # Ctrl-C outside the training steps (loading, writing the output)
        _finish_failed(trackers, "KILLED")
        LOG.warning(
            "stopped by SIGINT outside the training steps: no checkpoint written now; "
            "a rerun resumes from the last one, if there is one"
        )
        raise SystemExit(128 + signal.SIGINT) from None


def _run_name(run_json: str | None, output: Path) -> str:
    if not run_json:
        return str(output)
    run = json.loads(run_json)
    return "run " + ", ".join(f"{k}={v}" for k, v in run.items() if not isinstance(v, dict | list))


def _open_trackers(args: argparse.Namespace, settings: dict[str, Any]):
    """The job's trackers, or None: with tracking off no tracker library is even imported."""
    if args.tracking in (None, "", "off") or int(os.environ.get("RANK", "0")) != 0:
        return None  # (a sharded run's trackers are rank 0's)
    from workflow_scripts.training.tracking import open_trackers

    return open_trackers(args.tracking, args.tracking_dir, args.run_identity, settings, job=args.phase)


def _finish_failed(trackers, status: str) -> None:
    if trackers is not None:
        trackers.finish({}, status=status)


if __name__ == "__main__":
    main()
