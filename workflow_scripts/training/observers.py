"""What watches a training phase without steering it: the recipe (training/recipe.py) tells
its observers what happened, and each keeps its own record.

- the curve (``curves.CurveObserver``): each step's loss into its window, a train row every
  ``log_every`` steps, eval rows at each evaluation; reading the window is also the
  divergence check, before every evaluation and checkpoint (``StepDone.settles``);
- the experiment trackers (``TrackerObserver`` over tracking.py's ``RunTrackers``): the
  curve's rows as they are written, and the phase's final values;
- the progress bar (``ProgressBar``): one tick per step.

The hooks, in the order a phase calls them: ``on_evaluation`` (step 0, before any training,
then at every evaluation), ``on_step`` after every step, ``on_checkpoint`` after a checkpoint
is written, ``on_loop_end`` after the last step trained, ``on_end`` once the output is
written. ``on_rows`` carries the curve's rows to whoever records them. Every hook does
nothing unless an observer says otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

Row = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class StepDone:
    """A step trained: ``step`` counts the steps so far (1-based); ``loss`` and ``grad_norm``
    are still on the device (reading them would wait for the GPU)."""

    step: int
    task: str
    loss: Any
    grad_norm: Any
    lr: float  # the step's learning rate (before the scheduler moved on)
    # an evaluation or a checkpoint follows: whatever watches the loss reads it first
    settles: bool = False


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """A dev evaluation at ``step`` (0: before training): each task's scores (none in an
    MLM-only phase), the selection score, and the seconds it took (not training time)."""

    step: int
    scores: Mapping[str, Mapping[str, float]]
    selection: float
    seconds: float = 0.0


class Observer:
    """A training phase's observer; override the hooks it needs."""

    def on_step(self, done: StepDone) -> None:
        pass

    def on_evaluation(self, evaluation: Evaluation) -> None:
        pass

    def on_checkpoint(self, step: int, seconds: float) -> None:
        pass

    def on_rows(self, step: int, rows: list[Row]) -> None:
        pass

    def on_loop_end(self, step: int) -> None:
        pass

    def on_end(self, log: Mapping[str, Any]) -> None:
        pass


class Observers(Observer):
    """Several observers as one: each hook reaches every one of them, in the order added."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.observers = list(observers)

    def add(self, observer: Observer) -> None:
        self.observers.append(observer)

    def on_step(self, done: StepDone) -> None:
        for observer in self.observers:
            observer.on_step(done)

    def on_evaluation(self, evaluation: Evaluation) -> None:
        for observer in self.observers:
            observer.on_evaluation(evaluation)

    def on_checkpoint(self, step: int, seconds: float) -> None:
        for observer in self.observers:
            observer.on_checkpoint(step, seconds)

    def on_rows(self, step: int, rows: list[Row]) -> None:
        for observer in self.observers:
            observer.on_rows(step, rows)

    def on_loop_end(self, step: int) -> None:
        for observer in self.observers:
            observer.on_loop_end(step)

    def on_end(self, log: Mapping[str, Any]) -> None:
        for observer in self.observers:
            observer.on_end(log)


class ProgressBar(Observer):
    """The phase's progress bar (progress.py): a tick per step, from a resumed run's step on;
    ``disable``: no bar (a sharded run's ranks but the first)."""

    def __init__(self, phase: str, start: int, total: int, disable: bool) -> None:
        from workflow_scripts.progress import progress

        self.bar = progress(total=total, desc=f"{phase} training", unit="step", initial=start, disable=disable)

    def on_step(self, done: StepDone) -> None:
        self.bar.update(1)

    def on_loop_end(self, step: int) -> None:
        self.bar.close()


class TrackerObserver(Observer):
    """The job's experiment trackers (tracking.py's ``RunTrackers``): every curve row as a
    tracker value at its step, and the phase's final values at its end."""

    def __init__(self, trackers) -> None:
        from workflow_scripts.training.curves import tracker_values  # (curves.py imports this module)

        self.trackers, self.values = trackers, tracker_values

    def on_rows(self, step: int, rows: list[Row]) -> None:
        if rows:
            self.trackers.log(step, self.values(rows))

    def on_end(self, log: Mapping[str, Any]) -> None:
        self.trackers.finish(final_metrics(log))


def final_metrics(log: Mapping[str, Any]) -> dict[str, float]:
    """A training job's final values for its tracker run (from its train log)."""
    return {
        "best/score": float(log["best"]["score"]),
        "best/step": float(log["best"]["step"]),
        "steps": float(log["history"][-1]["step"] if log["history"] else log["total_steps"]),
        "total_steps": float(log["total_steps"]),
        "stopped_early": float(log["stopped_early"]),
        "wall_time_s": float(log["wall_time_s"]),
    }
