"""A training phase's curve: what the loop measured, step by step, saved next to the model.

Every ``log_every`` steps (and at the phase's last step) one *train* row per quantity: the
mean loss of each task sampled in the window and of the window as a whole, the learning rate
of the window's last step, the mean gradient norm before clipping, real (unpadded) tokens per
second of the training steps alone, and the peak memory so far (the GPU's allocated peak, or
the process's peak resident size on a CPU). At every dev evaluation, and once before the
first step, *eval* rows: each task's dev metrics and the selection score.

The file (``curve.csv``) is tidy: one value per row, columns ``step, event, task, quantity,
value`` (``task`` is empty for a quantity of the whole step). pandas reads it as it is; the
report's figures and divergence table (reporting/training_curves.py) and the trackers
(tracking.py) read the same rows.

The loop never waits for the GPU at a step: each step's loss and gradient norm are written
into a small on-device window, which is read once per row (one synchronisation). Reading it
is also the divergence check: the first non-finite loss in the window stops the phase with
its exact step and task (:class:`Diverged`), before any evaluation or checkpoint can see the
weights. A checkpoint saves the rows and the window's unread values, so a resumed phase
writes the same rows as one never interrupted (the timing quantities aside).
"""

from __future__ import annotations

import csv
import math
import resource
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.common import atomic_path
from workflow_scripts.spec.result_files import TRAIN_LOG
from workflow_scripts.training.observers import Evaluation, Observer, StepDone

CURVE_FILE = "curve.csv"
COLUMNS = ("step", "event", "task", "quantity", "value")
TRAIN, EVAL = "train", "eval"
# Measurements of the machine rather than of the training: they differ between two runs of
# the same phase (and between a resumed run and an uninterrupted one).
TIMING_QUANTITIES = ("tokens_per_s", "peak_memory_mb")
SELECTION = "score"  # an eval row's quantity for the selection score (task empty)

Row = dict[str, Any]


class Diverged(FloatingPointError):
    """A non-finite training loss: the phase stops, and no model is written."""

    def __init__(self, step: int, task: str, value: float) -> None:
        self.step, self.task, self.value = step, task, value
        super().__init__(f"the loss of task {task} at step {step} is {value}")


class CurveMeter:
    """Collects a phase's curve rows; ``ctx``: a sharded run's context (each rank holds its
    share of every step's loss; the window is summed over the ranks when read)."""

    def __init__(self, every: int, dev, ctx=None) -> None:
        import torch

        if every < 1:
            raise ValueError(f"log_every must be at least 1, got {every}")
        self.every = every
        self.ctx = ctx if ctx is not None and ctx.distributed else None
        self.dev = dev
        # (loss, gradient norm) of each step of the current window, on the device
        self.window = torch.zeros((2, every), dtype=torch.float32, device=dev)
        self.filled = 0  # steps of the window written on the device
        # Steps already read from the device but not yet in a row (read at a checkpoint or an
        # evaluation that fell inside the window): (step, task, loss, grad norm).
        self.read: list[tuple[int, str, float, float]] = []
        self.window_tasks: list[tuple[int, str]] = []
        self.rows: list[Row] = []
        self.lr = math.nan
        self.tokens_at_row = 0
        self.row_started = time.perf_counter()
        self.excluded_seconds = 0.0  # evaluation time inside the window

    # --- each step ---------------------------------------------------------------------------

    def add_step(self, step: int, task: str, loss, grad_norm, lr: float) -> None:
        """Step ``step`` (1-based) trained ``task``; ``loss`` and ``grad_norm`` stay on the device."""
        if self.filled == self.every:  # a window read early (checkpoint, evaluation) and full again
            self._read_window()
        if hasattr(grad_norm, "full_tensor"):  # a sharded run's norm is a DTensor
            grad_norm = grad_norm.full_tensor()
        self.window[0, self.filled] = loss
        self.window[1, self.filled] = grad_norm
        self.filled += 1
        self.window_tasks.append((step, task))
        self.lr = lr

    def row_due(self, step: int) -> bool:
        """Whether ``step`` ends a window (the phase's last steps are flushed by the caller)."""
        return step % self.every == 0

    def check(self) -> None:
        """Read the window (one synchronisation) and raise :class:`Diverged` at the first
        non-finite loss in it. Called before every evaluation and checkpoint."""
        self._read_window()

    def _read_window(self) -> None:
        if not self.filled:
            return
        values = self.window[:, : self.filled]
        if self.ctx is not None:
            from workflow_scripts.training.distributed import sum_over_ranks

            values = values.clone()
            # each rank's loss is its share of the global batch; the norm is already global
            values[0] = sum_over_ranks(values[0].contiguous(), self.ctx)
        losses, norms = values.double().tolist()
        for (step, task), loss, norm in zip(self.window_tasks, losses, norms):
            if not math.isfinite(loss):
                raise Diverged(step, task, loss)
            self.read.append((step, task, loss, norm))
        self.filled = 0
        self.window_tasks = []

    def train_row(self, step: int, tokens_so_far: int) -> list[Row]:
        """The window's train rows at ``step``; ``tokens_so_far``: the real tokens trained
        since the phase began (every rank's)."""
        self._read_window()
        steps = self.read
        self.read = []
        if not steps:
            return []
        by_task: dict[str, list[float]] = {}
        for _, task, loss, _ in steps:
            by_task.setdefault(task, []).append(loss)
        seconds = time.perf_counter() - self.row_started - self.excluded_seconds
        rows = [_row(step, TRAIN, name, "loss", sum(v) / len(v)) for name, v in sorted(by_task.items())]
        rows += [
            _row(step, TRAIN, "", "loss", sum(s[2] for s in steps) / len(steps)),
            _row(step, TRAIN, "", "lr", self.lr),
            _row(step, TRAIN, "", "grad_norm", sum(s[3] for s in steps) / len(steps)),
            _row(step, TRAIN, "", "tokens_per_s", (tokens_so_far - self.tokens_at_row) / max(seconds, 1e-9)),
            _row(step, TRAIN, "", "peak_memory_mb", peak_memory_mb(self.dev)),
        ]
        self.rows += rows
        self.tokens_at_row = tokens_so_far
        self.row_started, self.excluded_seconds = time.perf_counter(), 0.0
        return rows

    def eval_rows(self, step: int, scores: Mapping[str, Mapping[str, float]], selection: float) -> list[Row]:
        """A dev evaluation's rows: each task's metrics, then the selection score."""
        rows = [
            _row(step, EVAL, task, metric, value)
            for task, metrics in sorted(scores.items())
            for metric, value in sorted(metrics.items())
        ]
        rows.append(_row(step, EVAL, "", SELECTION, selection))
        self.rows += rows
        return rows

    # --- checkpoints ---------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (the window is read first: a checkpoint syncs anyway)."""
        self._read_window()
        return {"rows": list(self.rows), "read": list(self.read), "lr": self.lr, "tokens_at_row": self.tokens_at_row}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.rows = list(state["rows"])
        self.read = [tuple(s) for s in state["read"]]
        self.lr, self.tokens_at_row = state["lr"], state["tokens_at_row"]


class CurveObserver(Observer):
    """The curve as the recipe's observer (observers.py): each step into the window, its
    train rows every ``log_every`` steps and after the last step, its eval rows at every
    evaluation; ``publish`` hands each new set of rows on (to the trackers).
    ``tokens_so_far``: the real tokens trained since the phase began (every rank's; a
    collective in a sharded run, so asked only when a row is due)."""

    def __init__(
        self, meter: CurveMeter, tokens_so_far: Callable[[], int], publish: Callable[[int, list[Row]], None]
    ) -> None:
        self.meter, self.tokens_so_far, self.publish = meter, tokens_so_far, publish

    def on_step(self, done: StepDone) -> None:
        self.meter.add_step(done.step, done.task, done.loss, done.grad_norm, done.lr)
        if self.meter.row_due(done.step):  # reads the window: raises Diverged at a NaN loss
            self.publish(done.step, self.meter.train_row(done.step, self.tokens_so_far()))
        if done.settles:
            self.meter.check()  # never evaluate or checkpoint diverged weights

    def on_evaluation(self, evaluation: Evaluation) -> None:
        if evaluation.scores:
            self.publish(
                evaluation.step, self.meter.eval_rows(evaluation.step, evaluation.scores, evaluation.selection)
            )
        self.meter.excluded_seconds += evaluation.seconds

    def on_checkpoint(self, step: int, seconds: float) -> None:
        self.meter.excluded_seconds += seconds

    def on_loop_end(self, step: int) -> None:
        # The steps since the last row (an early stop's window, the final one, or those a
        # checkpoint taken at the very last step kept): their row.
        self.publish(step, self.meter.train_row(step, self.tokens_so_far()))


def _row(step: int, event: str, task: str, quantity: str, value: float) -> Row:
    return {"step": step, "event": event, "task": task, "quantity": quantity, "value": float(value)}


def peak_memory_mb(dev) -> float:
    """The GPU's peak allocated memory, or the process's peak resident set (Linux: KiB)."""
    if getattr(dev, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.max_memory_allocated(dev) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tracker_values(rows: Iterable[Row]) -> dict[str, float]:
    """One step's rows as tracker metrics: ``train/loss``, ``train/loss/<task>``, ``train/lr``,
    ..., ``dev/score``, ``dev/<task>/<metric>``."""
    values = {}
    for row in rows:
        if row["event"] == TRAIN:
            key = f"train/{row['quantity']}" + (f"/{row['task']}" if row["task"] else "")
        else:
            key = f"dev/{row['task']}/{row['quantity']}" if row["task"] else f"dev/{row['quantity']}"
        values[key] = row["value"]
    return values


def write_curve(rows: Iterable[Row], path: Path) -> None:
    """The rows as CSV (full precision: ``repr`` of each float)."""
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([row["step"], row["event"], row["task"], row["quantity"], repr(float(row["value"]))])


RECORD_FILES = (CURVE_FILE, TRAIN_LOG)


def publish_record(model_dir: Path) -> None:
    """The model's curve and train log, copied beside it (grid.training_record): the record
    that stays when the model is discarded (planning/disk.py)."""
    for name in RECORD_FILES:
        with atomic_path(model_dir.parent / name) as tmp:
            shutil.copyfile(model_dir / name, tmp)


def read_curve(path: Path) -> list[Row]:
    """A ``curve.csv``'s rows, with a clear error for a file that is not one."""
    with open(path, newline="") as src:
        reader = csv.DictReader(src)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: not a training curve (columns {reader.fieldnames}, expected {list(COLUMNS)})")
        rows = []
        for n, raw in enumerate(reader, start=2):
            try:
                rows.append(_row(int(raw["step"]), raw["event"], raw["task"], raw["quantity"], float(raw["value"])))
            except ValueError as err:
                raise ValueError(f"{path}, line {n}: {err}") from None
    return rows
