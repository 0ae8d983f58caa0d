"""One training engine for both phases (docs/protocol.md §2-3), as one recipe over the typed
settings (``spec/phase_settings.PhaseSettings``): ``TrainingRecipe.run`` sets the phase up,
resumes it from its checkpoint, trains, evaluates, checkpoints and saves, each in a method
of its own; what watches it (the curve, the trackers, the progress bar) attaches as an
observer (observers.py).

AdamW; linear warmup over ``warmup_ratio`` of the steps, then linear decay to zero; gradient
clipping; gradient accumulation when a task's batch exceeds ``max_micro_batch``; dynamic
padding with length-grouped batches. Heads are created fresh at the start of each phase.
Multi-task phases draw each step's task with the capped sampler (sampling.py).

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
loss (curves.py). The log's ``throughput`` gives examples/s and real (unpadded) tokens/s of
the training steps alone.

Where the phase runs (one process, or one rank of a sharded job) is runtime.py's.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, configure_torch, seed_everything, settings_hash
from workflow_scripts.data.features import collate
from workflow_scripts.evaluation.evaluate import score_encoded
from workflow_scripts.models import compiled, packing
from workflow_scripts.models.adapters import Method, check_available, load_backbone, save_adapter_phase
from workflow_scripts.models.backbones import family_of
from workflow_scripts.models.compiled import DEFAULT_COMPILE, CompileMode
from workflow_scripts.models.heads import forward, load_tokenizer
from workflow_scripts.models.packing import DEFAULT_PADDING_FREE, PaddingFreeMode
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.codehash import module_digest
from workflow_scripts.spec.data_map import DataMap, data_map_json, parse_data_map
from workflow_scripts.spec.formats import head_kind
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.tasks import MLM, Task, primary_metric
from workflow_scripts.training import runtime as training_runtime
from workflow_scripts.training import step as step_
from workflow_scripts.training.arm_phase import freeze_for, merge_back_full, scale_adapter_updates
from workflow_scripts.training.checkpoints import STOP_SIGNALS, Preempted, files_stamp, save_weights
from workflow_scripts.training.curves import CURVE_FILE, CurveMeter, CurveObserver, publish_record, write_curve
from workflow_scripts.training.distributed import any_rank, from_rank0, sum_over_ranks
from workflow_scripts.training.observers import (
    Evaluation,
    Observers,
    ProgressBar,
    StepDone,
    TrackerObserver,
)
from workflow_scripts.training.outputs import (
    earlier_log,
    recipe_lineage,
    save_model,
    visual_lineage,
    visual_record,
    write_log,
)
from workflow_scripts.training.phase_data import carry_head, input_files, load_phase_data
from workflow_scripts.training.sampling import (
    TaskSampler,
    TaskStream,
    epoch_steps,
    linear_schedule,
    total_steps,
    warmup_steps,
)

DevScores = dict[tuple[str, str], dict[str, float]]


@dataclasses.dataclass(frozen=True)
class PhaseJob:
    """What one training job is asked to do (train.py's arguments)."""

    phase: str  # intermediate | target
    encoder_dir: Path  # the model the phase starts from
    data: DataMap  # each task's train and dev files (phase_data.py)
    settings: PhaseSettings
    seed: int
    output: Path
    threads: int = 1
    checkpoint_dir: Path | None = None  # none: no checkpoints, the best weights in a scratch folder
    checkpoint_every: int = 1000
    keep_checkpoints: bool = False
    log_every: int = 10  # steps between the curve's train rows
    compile: CompileMode = DEFAULT_COMPILE  # eager or compiled forwards (models/compiled.py)
    padding_free: PaddingFreeMode = DEFAULT_PADDING_FREE  # packed encoder batches (models/packing.py)


@dataclasses.dataclass
class LoopState:
    """Where the loop stands: what a checkpoint keeps of it and a resumed run starts from."""

    start: int = 0  # the first step this attempt trains
    best: dict[str, Any] = dataclasses.field(default_factory=lambda: {"score": -math.inf, "step": 0, "scores": {}})
    bad_evals: int = 0
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    elapsed: float = 0.0  # wall time of the earlier attempts
    train_seconds: float = 0.0  # time in training steps (evaluations left out), all attempts
    stopped_early: bool = False


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
        tokens, computed = packing.positions(cpu_batch)  # computed: the padded block, or the packed stream
        self.counts["examples"] += examples
        self.counts["tokens"] += tokens
        self.counts["padded_tokens"] += computed

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


class TrainingRecipe:
    """One training phase, from its settings to its saved model and log. ``trackers``: the
    job's experiment trackers (tracking.py), or None (tracking off)."""

    def __init__(self, job: PhaseJob, trackers=None) -> None:
        self.job, self.settings, self.trackers = job, job.settings, trackers
        self.state = LoopState()
        self.observers = Observers()
        self.stop_signal: list[int] = []  # the stop signals received (STOP_SIGNALS)
        self.started = self.loop_started = time.time()
        self.eval_seconds = 0.0

    def run(self) -> dict[str, Any]:
        """Train the phase and write its output; returns the train log. A stop signal ends
        it with a checkpoint (Preempted), a non-finite loss with Diverged: no output then."""
        self.set_up()
        self.resume()
        if self.state.start == 0 and self.data.dev_sets:
            # The dev score before any training: the curve's first point, and what a run that
            # never learnt is measured against (reporting/training_curves.py).
            _, scores = self.score_dev()
            self.observers.on_evaluation(Evaluation(0, scores, selection_score(self.data.tasks, scores)))
        previous = self.catch_stop_signals()
        try:
            last_step = self.train()
            self.observers.on_loop_end(last_step)
            if self.state.best["step"]:
                self.best_weights.restore(self.model, self.state.best["step"])
        finally:
            self.clean_up(previous)
        self.state.train_seconds += time.time() - self.loop_started - self.eval_seconds
        log = self.train_log()
        self.save(log)
        self.observers.on_end(log)
        self.release()
        return log

    # --- set-up ------------------------------------------------------------------------------

    def set_up(self) -> None:
        """The runtime, the model with its heads, the optimiser, the schedule and the meters."""
        job = self.job
        configure_torch(job.threads)
        seed_everything(job.seed)  # the same on every rank: each builds the same model and global batches
        self.method = Method.from_settings(self.settings.method)
        self.precision = Precision(self.method.precision)
        # Under torchrun or srun: one rank of a sharded run (FSDP2); otherwise the single process.
        self.runtime = training_runtime.start(self.method)
        self.ctx, self.dev = self.runtime.ctx, self.runtime.device
        if self.ctx.distributed and self.precision.loss_scaling:  # also refused by the config check (backbone_grid)
            raise InputError(
                "precision fp16 is not supported with sharded training (its loss scale is per rank); use bf16"
            )
        self.checkpointer = self.runtime.checkpointer(job.checkpoint_dir, self.fingerprint(), job.checkpoint_every)
        check_available(self.method, self.dev)
        self.build_model()
        parameters = sum(p.numel() for p in self.model.parameters())
        packed = packing.configure(self.model, job.padding_free, self.dev.type, self.method.precision, training=True)
        self.engine = compiled.configure(job.compile, self.dev.type, self.ctx.distributed, parameters, packed)
        if self.ctx.is_main:
            LOG.info("forwards: %s; %s", self.engine.reason, self.engine.packing.reason)
        self.build_optimisation()
        self.build_observers()
        # Without a checkpoint directory the best weights live in a scratch directory under $TMPDIR
        # (node-local on clusters; a killed process's leftovers are the system's to clean).
        self.scratch = (
            None
            if job.checkpoint_dir
            else Path(
                from_rank0(tempfile.mkdtemp(prefix="xstilts-best-weights-") if self.ctx.is_main else None, self.ctx)
            )
        )
        self.best_weights = self.runtime.best_weights(
            job.checkpoint_dir / "best" if job.checkpoint_dir else self.scratch
        )

    def fingerprint(self) -> dict[str, Any]:
        """What this run is: a checkpoint of any other (settings, code, or an input rebuilt
        since) is discarded."""
        job = self.job
        return {
            "phase": job.phase,
            "seed": job.seed,
            "settings_hash": settings_hash(self.settings.to_dict()),
            "encoder": str(job.encoder_dir),
            "data": data_map_json(job.data),
            "code": module_digest("training.train"),
            "inputs": files_stamp(input_files(job.encoder_dir, job.data)),
        }

    def build_model(self) -> None:
        """The backbone, the phase's data and fresh heads, and the model the loop trains."""
        job = self.job
        self.tokenizer = load_tokenizer(job.encoder_dir)
        encoder = self.runtime.load_backbone(job.encoder_dir)
        self.data = load_phase_data(
            job.encoder_dir, encoder, self.tokenizer, job.data, self.settings, mlm_head=self.runtime.mlm_head
        )
        if (
            self.settings.carried_head is not None
        ):  # a target's stage: its head goes on training (grid_settings.target_settings)
            carry_head(job.encoder_dir, self.data.heads, *self.settings.carried_head)
        self.family = family_of(job.encoder_dir)
        # Adapters: the heads train whole and are saved with the adapter (not the MLM head, which
        # predicts with the frozen embeddings).
        self.head_formats = {
            n: (t.format, t.num_labels) for n, t in self.data.tasks.items() if head_kind(t.format) != MLM
        }
        if hasattr(encoder.config, "use_cache"):
            # Training never decodes: a decoder's KV cache would only hold memory, and under
            # activation checkpointing the recomputed forward appends to the cache the first
            # forward filled (a shape error at the first backward).
            encoder.config.use_cache = False
        self.encoder = encoder
        self.model, self.peft_model = self.runtime.build(
            job.encoder_dir, encoder, self.data.heads, self.family.name, self.head_formats
        )
        # what an arm recipe's trains choice leaves untrained (arm_phase.py: FREEZE)
        self.frozen_parameters = freeze_for(self.model, self.settings.arm_recipe)

    def build_optimisation(self) -> None:
        """The steps and their schedule, the task sampler and batch streams, the optimiser,
        fp16's loss scaler, and the MLM masking's generator."""
        import torch

        settings, seed, train_sets = self.settings, self.job.seed, self.data.train_sets
        self.total = total_steps(settings, train_sets)
        # how often the model is selected: every eval_every steps, or at every epoch's end
        self.eval_every = epoch_steps(settings, train_sets) if settings.eval_each_epoch else settings.eval_every
        self.warmup = warmup_steps(settings, self.total)
        self.sampler = TaskSampler(
            {n: len(s.features) for n, s in train_sets.items()}, settings.multitask_cap, seed, settings.fixed_shares
        )
        self.streams = {
            n: TaskStream(task, train_sets[n], settings.tasks[n].batch_size, seed)
            for n, task in self.data.tasks.items()
        }
        self.optimizer = step_.make_optimizer(self.model, settings.learning_rate, settings.weight_decay)
        self.scaler = self.precision.grad_scaler(self.dev)  # fp16's loss scaling; a pass-through otherwise
        total, warmup = self.total, self.warmup
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: linear_schedule(s, total, warmup))
        self.mlm_args = {
            "mask_id": self.tokenizer.mask_token_id,
            "vocab_size": len(self.tokenizer),
            "special_ids": list(self.tokenizer.all_special_ids),
            "generator": torch.Generator().manual_seed(seed),
        }

    def build_observers(self) -> None:
        """The step meter, and the curve and trackers watching the phase (one record of a
        sharded run: rank 0's trackers)."""
        self.meter = StepMeter(self.dev, ctx=self.ctx)
        curve_meter = CurveMeter(self.job.log_every, self.dev, self.ctx)
        self.curve = CurveObserver(curve_meter, lambda: self.meter.totals()["tokens"], self.observers.on_rows)
        self.observers.add(self.curve)
        if self.trackers is not None and self.ctx.is_main:
            self.observers.add(TrackerObserver(self.trackers))

    # --- resume ------------------------------------------------------------------------------

    def resume(self) -> None:
        """The checkpoint's state, if this run left one: model, optimiser and RNG (the
        runtime's), schedule, sampler and streams, early stopping, meters and curve."""
        resumed = self.runtime.resume(self.checkpointer, self.model, self.optimizer)
        if resumed is None:
            return
        self.scheduler.load_state_dict(resumed["scheduler"])
        self.scaler.load_state_dict(resumed["scaler"])
        self.sampler.rng.setstate(resumed["sampler"])
        for n, st in resumed["streams"].items():
            self.streams[n].rng.setstate(st["rng"])
            self.streams[n].batches, self.streams[n].passes = st["batches"], st["passes"]
        self.mlm_args["generator"].set_state(resumed["mlm_generator"])
        state = self.state
        state.best, state.bad_evals = resumed["best"], resumed["bad_evals"]
        if resumed.get("best_state") is not None:  # checkpoints written before the best weights moved to disk
            save_weights(resumed.pop("best_state"), self.best_weights.path(state.best["step"]))
        self.best_weights.checkpointed(state.best["step"] or None)  # drops bests found after the checkpoint
        state.history, state.start, state.elapsed = resumed["history"], resumed["step"], resumed["elapsed"]
        # (checkpoints written before throughput was counted resume with fresh counts)
        self.meter.counts = resumed.get("counts", self.meter.counts)
        state.train_seconds = resumed.get("train_seconds", 0.0)
        self.curve.meter.load_state(resumed["curve"])

    def checkpoint_state(self, next_step: int) -> dict[str, Any]:
        """The loop's state for a checkpoint that resumes at ``next_step``."""
        state, now = self.state, time.time()
        return {
            "step": next_step,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "sampler": self.sampler.rng.getstate(),
            "streams": {
                n: {"rng": st.rng.getstate(), "batches": st.batches, "passes": st.passes}
                for n, st in self.streams.items()
            },
            "mlm_generator": self.mlm_args["generator"].get_state(),
            "best": state.best,
            "bad_evals": state.bad_evals,
            "history": state.history,
            "curve": self.curve.meter.state(),
            "counts": self.meter.counts,
            "train_seconds": state.train_seconds + now - self.loop_started - self.eval_seconds,
            "elapsed": state.elapsed + now - self.started,
        }

    # --- the loop ----------------------------------------------------------------------------

    def catch_stop_signals(self) -> dict[int, Any]:
        """A stop signal (STOP_SIGNALS): checkpoint at the end of the current step, then stop.
        Returns the handlers they replace."""
        return {sig: signal.signal(sig, lambda signum, frame: self.stop_signal.append(signum)) for sig in STOP_SIGNALS}

    def train(self) -> int:
        """The steps from the start (or the checkpoint's) to the last, an early stop or a
        stop signal (Preempted); returns the steps trained when the loop ended."""
        start, total = self.state.start, self.total
        self.observers.add(ProgressBar(self.job.phase, start, total, disable=not self.ctx.is_main))
        self.loop_started, self.eval_seconds = time.time(), 0.0
        step = start
        for step in range(start, total):
            task, loss, grad_norm, lr = self.step(step)
            done = step + 1
            # a signal reaches the ranks at different steps: they stop together at the first that saw one
            stopping = any_rank(bool(self.stop_signal), self.ctx)
            saving = stopping or (done % self.checkpointer.every == 0 and done < total)
            evaluating = done % self.eval_every == 0 or done == total
            self.observers.on_step(StepDone(done, task, loss, grad_norm, lr, settles=evaluating or saving))
            if evaluating and self.evaluate(done):
                break
            if stopping:  # (a rank that saw no signal itself stops on another's)
                self.stop(done)
            elif saving:
                self.save_checkpoint(done)
        return step + 1 if total > start else start

    def step(self, step: int) -> tuple[str, Any, Any, float]:
        """One optimizer step (``step``: the steps before it) on a batch of the sampled task,
        in micro-batches; returns (task, loss, gradient norm before clipping, learning rate),
        the loss and norm on the device."""
        import torch

        self.model.train()
        name = self.sampler.next()
        task = self.data.tasks[name]
        feats = self.streams[name].next()
        step_loss = torch.zeros((), device=self.dev)
        mlm_args = self.mlm_args if head_kind(task.format) == MLM else None
        for chunk, weight in self.runtime.micro_batches(feats, self.settings.max_micro_batch):
            cpu_batch = collate(
                chunk, task.format, self.tokenizer.pad_token_id, mlm_args, self.engine.pad_width, self.engine.pack
            )
            if weight != 0.0:  # not a stand-in that only keeps this rank in step with the others
                self.meter.add_batch(cpu_batch, len(chunk))
            with self.precision.autocast(self.dev):
                _, loss = forward(self.model, task.format, name, _to_device(cpu_batch, self.dev))
            if weight is None:  # one process: the chunk's share of the batch
                loss = loss * len(chunk) / len(feats)
                step_loss += loss.detach()
            else:  # a rank: its share of the global batch, averaged over the ranks (distributed.loss_weight)
                loss = loss * weight
                step_loss += loss.detach() / self.ctx.world_size
            step_.backward(loss, self.scaler)
        self.meter.add_step(step_loss)
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm = step_.optimizer_step(self.model, self.optimizer, self.scaler, self.settings.max_grad_norm)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return name, step_loss, grad_norm, lr

    def stop(self, step: int) -> None:
        """A stop signal (here or on another rank): a checkpoint at ``step``, then Preempted."""
        signum = self.stop_signal[0] if self.stop_signal else signal.SIGTERM
        if self.ctx.is_main:
            LOG.warning(
                "%s: writing a checkpoint at step %d, then stopping",
                f"{signal.Signals(signum).name} received"
                if self.stop_signal
                else "another rank received a stop signal",
                step,
            )
        self.save_checkpoint(step)
        raise Preempted(signum, step, self.checkpointer.path)

    # --- evaluation --------------------------------------------------------------------------

    def score_dev(self) -> tuple[DevScores, dict[str, dict[str, float]]]:
        """The selection subsets' scores, per (task, language) and per task."""
        by_language = {
            key: score_encoded(
                self.model,
                self.data.tasks[key[0]],
                enc,
                self.tokenizer.pad_token_id,
                self.data.dev_scoring[key[0]],
                self.dev,
            )
            for key, enc in self.data.dev_sets.items()
        }
        by_language = from_rank0(by_language, self.ctx)  # every rank takes the same early-stopping decisions
        return by_language, task_scores(by_language)

    def evaluate(self, step: int) -> bool:
        """The evaluation after ``step`` steps: its history entry, the best weights when it
        is the best so far; returns whether patience ran out (an early stop)."""
        started, state = time.time(), self.state
        by_language, scores = self.score_dev()
        loss_value = self.meter.mean_loss()
        score = selection_score(self.data.tasks, scores) if scores else -loss_value
        entry = {
            "step": step,
            "loss": loss_value,
            "score": score,
            "scores": scores,
            "lr": self.scheduler.get_last_lr()[0],
        }
        if len(by_language) > len(scores):  # several selection languages: keep each one's score
            entry["scores_by_language"] = {f"{n}:{lang}": v for (n, lang), v in by_language.items()}
        state.history.append(entry)
        LOG.info("step %d/%d: loss %.4f, dev score %.3f", step, self.total, loss_value, score)
        if score > state.best["score"]:
            state.best = {k: v for k, v in entry.items() if k not in ("loss", "lr")}
            self.best_weights.save(self.model, step)
            state.bad_evals = 0
        else:
            state.bad_evals += 1
        seconds = time.time() - started
        self.eval_seconds += seconds
        self.observers.on_evaluation(Evaluation(step, scores, score, seconds))
        if state.bad_evals >= self.settings.patience:
            LOG.info("early stopping at step %d (best step %d)", step, state.best["step"])
            state.stopped_early = True
        return state.stopped_early

    # --- saving ------------------------------------------------------------------------------

    def save_checkpoint(self, step: int) -> None:
        """The whole training state, resumable at ``step`` (runtime.py: files or DCP shards)."""
        saving_started = time.time()
        self.runtime.save(self.checkpointer, self.model, self.optimizer, self.checkpoint_state(step))
        self.observers.on_checkpoint(step, time.time() - saving_started)
        self.best_weights.checkpointed(self.state.best["step"] or None)

    def train_log(self) -> dict[str, Any]:
        """The phase's ``train_log.json``."""
        state, counts, method = self.state, self.meter.totals(), self.method
        earlier = earlier_log(self.job.encoder_dir)  # the phase before this one, if any
        return {
            "phase": self.job.phase,
            "seed": self.job.seed,
            "total_steps": self.total,
            "warmup_steps": self.warmup,
            "best": state.best,
            "history": state.history,
            "task_probabilities": self.sampler.probabilities,
            "padding_share": 1 - counts["tokens"] / max(1, counts["padded_tokens"]),
            "throughput": self.throughput(counts),
            "backbone": {
                "family": self.family.name,
                "method": dataclasses.asdict(method),
                "precision": self.precision.record(self.dev, method.name),
                "trainable_parameters": sum(p.numel() for p in self.model.parameters() if p.requires_grad),
                "parameters": sum(p.numel() for p in self.model.parameters()),
            },
            "settings": self.settings.to_dict(),
            "settings_hash": settings_hash(self.settings.to_dict()),
            "resumed_at_step": state.start or None,
            "stopped_early": state.stopped_early,
            "curve": {"file": CURVE_FILE, "log_every": self.job.log_every, "rows": len(self.curve.meter.rows)},
            # An image task's visual branch: after the intermediate phase it is not in the saved
            # model (what follows is text-only); an image target saves its projector and classifier
            # in heads.pt, and evaluation reads them with the test images' features (the feature
            # bank itself is never saved).
            "visual": visual_record(self.job.phase, self.data.visual, method.adapters),
            # A model trained after an image task says so, down to the metric file (evaluate.py).
            "intermediate_visual": visual_lineage(earlier),
            # ... and under which arm recipe (spec/arm_recipe.py), down to the metric file
            "intermediate_recipe": recipe_lineage(earlier),
            "wall_time_s": round(state.elapsed + time.time() - self.started, 3),
        }

    def throughput(self, counts: dict[str, int]) -> dict[str, Any]:
        seconds = self.state.train_seconds
        return {
            **counts,
            "train_seconds": round(seconds, 3),
            "examples_per_s": counts["examples"] / max(seconds, 1e-9),
            "tokens_per_s": counts["tokens"] / max(seconds, 1e-9),
            "device": self.dev.type,
            "attention": self.encoder.config._attn_implementation,
            "engine": self.engine.record(),
            "processes": self.ctx.world_size,
        }

    def save(self, log: dict[str, Any]) -> None:
        """The output directory (the model, its log and curve) and its record beside it. A
        sharded model is gathered whole on rank 0, which alone writes the output."""
        job, rows = self.job, self.curve.meter.rows
        alpha = self.settings.arm_recipe.merge_back if self.settings.arm_recipe else 0.0
        if alpha and self.peft_model is not None:  # before gathering: a sharded run scales its shards
            log["merge_back"] = {"alpha": alpha, "lora_B_scaled": scale_adapter_updates(self.model, alpha)}
        full = self.runtime.gathered_state(self.model)
        if not self.ctx.is_main:
            return
        if alpha and self.peft_model is None:
            start = load_backbone(job.encoder_dir, self.method)  # the weights the phase started from
            log["merge_back"] = {"alpha": alpha, "tensors_moved": merge_back_full(self.model, full, start, alpha)}
        if self.frozen_parameters:
            log["frozen_parameters"] = self.frozen_parameters
        if self.peft_model is not None:
            with atomic_path(job.output) as tmp:
                tmp.mkdir()
                save_adapter_phase(
                    self.peft_model,
                    self.tokenizer,
                    tmp,
                    job.encoder_dir,
                    self.head_formats,
                    self.method,
                    self.family.name,
                    full,
                )
                write_log(log, tmp)
                write_curve(rows, tmp / CURVE_FILE)
        else:
            save_model(self.model, self.tokenizer, job.phase, log, job.output, full, rows)
        publish_record(job.output)

    # --- clean-up ----------------------------------------------------------------------------

    def clean_up(self, previous_handlers: dict[int, Any]) -> None:
        """After the loop, however it ended: the signal handlers back, the scratch folder gone."""
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        if self.scratch is not None and self.ctx.is_main:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def release(self) -> None:
        """Once the output is written: the checkpoint deleted (unless kept), the ranks done."""
        if not self.job.keep_checkpoints:  # XLM-R large checkpoints are several GB each
            self.checkpointer.remove()
        self.runtime.finish()


def train_phase(
    phase: str,
    encoder_dir: Path,
    data: DataMap | Mapping[str, Any],
    settings: PhaseSettings,
    seed: int,
    threads: int,
    output: Path,
    checkpoint_dir: Path | None = None,
    checkpoint_every: int = 1000,
    keep_checkpoints: bool = False,
    log_every: int = 10,
    trackers=None,
    compile: CompileMode = DEFAULT_COMPILE,
    padding_free: PaddingFreeMode = DEFAULT_PADDING_FREE,
) -> dict[str, Any]:
    """Train one phase (a TrainingRecipe over its PhaseJob); returns its train log."""
    job = PhaseJob(
        phase=phase,
        encoder_dir=encoder_dir,
        data=parse_data_map(data, "data"),
        settings=settings,
        seed=seed,
        output=output,
        threads=threads,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints,
        log_every=log_every,
        compile=compile,
        padding_free=padding_free,
    )
    return TrainingRecipe(job, trackers).run()


def task_scores(by_language: DevScores) -> dict[str, dict[str, float]]:
    """Each task's dev scores, the unweighted mean over its selection languages."""
    grouped: dict[str, list[dict[str, float]]] = {}
    for (name, _), scores in by_language.items():
        grouped.setdefault(name, []).append(scores)
    return {name: {k: sum(s[k] for s in group) / len(group) for k in group[0]} for name, group in grouped.items()}


def selection_score(tasks: dict[str, Task], scores: dict[str, dict[str, float]]) -> float:
    return sum(scores[n][primary_metric(tasks[n].metric)] for n in scores) / len(scores)


def _to_device(batch: dict[str, Any], dev) -> dict[str, Any]:
    if dev.type == "cuda":  # pinned host memory: the copy overlaps with the GPU's work
        return {k: v.pin_memory().to(dev, non_blocking=True) for k, v in batch.items()}
    return batch
