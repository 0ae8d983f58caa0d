"""Optional experiment trackers of training and evaluation jobs: TensorBoard event files,
MLflow on a local SQLite store, and W&B in offline mode (docs/tracking.md).

Tracking is operational: the rules pass the enabled trackers as a resource token ("off",
or trackers joined by "+": ``tensorboard+mlflow+wandb``, ``wandb=<project>`` for a W&B
project other than the default), so switching it on or off reruns nothing. Each job opens
one tracker run named by its identity (backbone, setting, intermediate config, target,
seed, job kind) and grouped by its grid, the experiment: an MLflow experiment and a W&B
group per grid; TensorBoard's folder lives in the grid's own results folder.

With the token "off" :func:`open_trackers` returns a no-op object and imports no tracker
library: tracking off costs nothing. Tracker libraries are imported only when opened.

Only rank 0 of a distributed training job tracks (``RANK``): one run per job.

MLflow's SQLite store is shared by the grid's concurrent jobs: a job's metrics are
buffered and written with one ``log_batch`` per flush (at dev evaluations and at the end),
under a file lock beside the store, retried while SQLite reports the database locked.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.spec.trackers import (
    DEFAULT_WANDB_PROJECT,
    IDENTITY_KEYS,
    OFF,
    TrackingError,
    parse_token,
)

# MLflow's limits (mlflow.utils.validation): longer param values are cut, with a marker.
MLFLOW_PARAM_KEY_MAX = 250
MLFLOW_PARAM_VALUE_MAX = 6000
MLFLOW_BATCH_MAX = 1000  # metrics per log_batch call
# Buffered metric values that force a flush between dev evaluations.
FLUSH_EVERY_VALUES = 2000
LOCK_RETRIES = 8
LOCK_TIMEOUT_S = 120


# The project's logger (workflow_scripts.common.LOG), named here: this module imports only the
# trackers' config side (spec/trackers.py), so editing other modules reruns nothing through it.
LOG = logging.getLogger("xstilts")


# --- the job side -------------------------------------------------------------------


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested settings as {"a.b.c": value}; lists are kept as JSON text."""
    if isinstance(tree, Mapping):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(tree, (list, tuple)):
        return {prefix: json.dumps(tree, sort_keys=True)}
    return {prefix: tree}


def identity_of(run_json: str | Mapping[str, Any] | None, root: Path | None, job: str) -> dict[str, str]:
    """A run's identity tags from the rule's identity JSON: backbone, setting (a training
    job's recipe, else the transfer setting), config (the intermediate config), target,
    stage, seed, the job kind (``job`` unless the JSON names it: a stage is trained by the
    target phase) and the grid (the JSON's, else the experiment whose results folder holds
    ``root``: results/<experiment>/tracking). Lists (file paths) are not identity."""
    run = json.loads(run_json) if isinstance(run_json, str) else dict(run_json or {})
    if "intermediate" in run:  # the metric file's name for the intermediate config
        run.setdefault("config", run.pop("intermediate"))
    if "recipe" in run:
        run.setdefault("setting", run["recipe"])
    run.setdefault("job", job)
    if "grid" not in run and root is not None:
        run["grid"] = Path(root).resolve().parent.name
    return {key: str(value) for key, value in run.items() if not isinstance(value, (list, dict))}


def run_name(identity: Mapping[str, str]) -> str:
    """job/backbone/setting/config/target[/stage][/point]/seedN: readable, and one folder per run
    under TensorBoard's."""
    parts = [f"seed{identity[k]}" if k == "seed" else identity[k] for k in IDENTITY_KEYS if k in identity]
    return "/".join(p.replace(":", "-").replace("/", "-") for p in parts)


class RunTrackers:
    """The open trackers of one job; each call reaches every one of them."""

    def __init__(self, trackers: list[Any]) -> None:
        self.trackers = trackers
        self.finished = False

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        """Values of one training step (a curve row, or a dev evaluation: "dev/..." keys,
        which flush the buffered values)."""
        numeric = _numeric(values)
        flush = any(k.startswith("dev/") for k in numeric)
        for tracker in list(self.trackers):
            self._guard(tracker, "log", lambda t=tracker: t.log(int(step), numeric, flush))

    def finish(self, final: Mapping[str, float] | None = None, status: str = "FINISHED") -> None:
        """The job's final metrics and its end: FINISHED, FAILED or KILLED."""
        if self.finished:
            return
        self.finished = True
        numeric = _numeric(final or {})
        for tracker in list(self.trackers):
            self._guard(tracker, "finish", lambda t=tracker: t.finish(numeric, status))

    def _guard(self, tracker: Any, what: str, call) -> None:
        """A tracker that fails mid-job is dropped with a warning: the job's results matter
        more than its records."""
        try:
            call()
        except Exception as err:  # noqa: BLE001 - any tracker failure is reported the same way
            LOG.warning(
                "tracking: %s failed at %s (%s: %s); its records of this job stop here",
                tracker.name,
                what,
                type(err).__name__,
                err,
            )
            self.trackers.remove(tracker)

    def __enter__(self) -> RunTrackers:
        return self

    def __exit__(self, kind, err, tb) -> None:
        if kind is None:
            self.finish()
        else:  # stopped by a signal (Ctrl-C, or an exit status of 128 + its number), or failed
            signalled = issubclass(kind, KeyboardInterrupt) or (
                issubclass(kind, SystemExit) and isinstance(err.code, int) and err.code >= 128
            )
            self.finish(status="KILLED" if signalled else "FAILED")


def _numeric(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of ``values`` as floats (a flag such as stopped_early counts as 0 or 1)."""
    return {str(k): float(v) for k, v in values.items() if isinstance(v, (int, float))}


def open_trackers(
    token_value: str,
    root: Path | str | None,
    run_json: str | Mapping[str, Any] | None,
    settings: Mapping[str, Any] | str | None,
    job: str,
) -> RunTrackers:
    """One tracker run per enabled tracker for this job, under ``root`` (the grid's
    results/<experiment>/tracking). "off" (or a rank other than 0): a no-op."""
    chosen = parse_token(token_value or OFF)
    if not chosen or int(os.environ.get("RANK", "0")) != 0:
        return RunTrackers([])
    if root is None:
        raise TrackingError(f"--tracking {token_value}: needs --tracking-dir (the folder the records go to)")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    identity = identity_of(run_json, root, job)
    params = flatten(json.loads(settings) if isinstance(settings, str) else (settings or {}))
    opened: list[Any] = []
    openers = {"tensorboard": _TensorBoard, "mlflow": _MLflow, "wandb": _WandB}
    try:
        for name, option in chosen.items():
            try:
                opened.append(openers[name](root, identity, params, option))
            except Exception as err:
                raise TrackingError(
                    f"tracking: {name} could not be opened under {root} ({type(err).__name__}: {err}); "
                    f"set tracking.{name}: false in the config to run without it"
                ) from err
    except TrackingError:
        for tracker in opened:
            tracker.finish({}, "FAILED")
        raise
    return RunTrackers(opened)


class _TensorBoard:
    """Event files in tensorboard/<run name>/; identity and settings as text and hparams."""

    name = "tensorboard"

    def __init__(self, root: Path, identity: dict[str, str], params: dict[str, Any], option: str | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.identity, self.params = identity, params
        self.dir = root / "tensorboard" / run_name(identity)
        self.writer = SummaryWriter(log_dir=str(self.dir))
        table = "\n".join(f"| {k} | {v} |" for k, v in {**identity, **params}.items())
        self.writer.add_text("run", "| key | value |\n|---|---|\n" + table, 0)

    def log(self, step: int, values: dict[str, float], flush: bool) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        if flush:
            self.writer.flush()

    def finish(self, final: dict[str, float], status: str) -> None:
        if final:
            step = int(final.get("steps", 0))
            for key, value in final.items():
                self.writer.add_scalar(key, value, step)
            # hparams: the identity beside the final metrics, one row per run in the HPARAMS tab
            self.writer.add_hparams(dict(self.identity), {f"hparams/{k}": v for k, v in final.items()}, run_name=".")
        self.writer.add_text("status", status, 0)
        self.writer.close()


class _MLflow:
    """A run in tracking/mlflow.db (SQLite), in the MLflow experiment named after the grid."""

    name = "mlflow"

    def __init__(self, root: Path, identity: dict[str, str], params: dict[str, Any], option: str | None) -> None:
        from filelock import FileLock
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self.db = root / "mlflow.db"
        self.lock = FileLock(str(self.db) + ".lock", timeout=LOCK_TIMEOUT_S)
        self.pending: list[Any] = []
        grid = identity.get("grid", "xstilts")
        tags = [RunTag(k, v) for k, v in identity.items()]
        param_list = [Param(k[:MLFLOW_PARAM_KEY_MAX], _cut(v)) for k, v in params.items()]

        def start() -> str:
            client = MlflowClient(tracking_uri=f"sqlite:///{self.db.resolve()}")
            found = client.get_experiment_by_name(grid)
            experiment = (
                found.experiment_id
                if found
                else client.create_experiment(grid, artifact_location=(root / "mlflow-artifacts").resolve().as_uri())
            )
            run = client.create_run(experiment, run_name=run_name(identity), tags={t.key: t.value for t in tags})
            for start_at in range(0, len(param_list), 100):  # MLflow's params per batch
                client.log_batch(run.info.run_id, params=param_list[start_at : start_at + 100])
            self.client = client
            return run.info.run_id

        self.run_id = self._locked(start)

    def _locked(self, call):
        """``call`` holding the store's file lock, retried while SQLite reports it locked
        (a reader outside the lock, e.g. `mlflow ui`)."""
        for attempt in range(LOCK_RETRIES):
            try:
                with self.lock:
                    return call()
            except Exception as err:
                if "database is locked" not in str(err) or attempt == LOCK_RETRIES - 1:
                    raise
                time.sleep(0.2 * 2**attempt)
        return None

    def log(self, step: int, values: dict[str, float], flush: bool) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.pending += [Metric(k, v, now, step) for k, v in values.items()]
        if flush or len(self.pending) >= FLUSH_EVERY_VALUES:
            self.flush()

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return

        def write() -> None:
            for start_at in range(0, len(pending), MLFLOW_BATCH_MAX):
                self.client.log_batch(self.run_id, metrics=pending[start_at : start_at + MLFLOW_BATCH_MAX])

        self._locked(write)

    def finish(self, final: dict[str, float], status: str) -> None:
        step = int(final.get("steps", 0))
        self.log(step, final, flush=False)
        self.flush()
        self._locked(lambda: self.client.set_terminated(self.run_id, status))


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= MLFLOW_PARAM_VALUE_MAX else text[: MLFLOW_PARAM_VALUE_MAX - 3] + "..."


class _WandB:
    """An offline W&B run under tracking/wandb/ (`wandb sync` uploads it): silent, no code
    or git state saved, no network."""

    name = "wandb"

    def __init__(self, root: Path, identity: dict[str, str], params: dict[str, Any], option: str | None) -> None:
        os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(
            project=option or DEFAULT_WANDB_PROJECT,
            group=identity.get("grid"),
            job_type=identity.get("job"),
            name=run_name(identity),
            tags=[f"{k}:{v}" for k, v in identity.items()][:20],
            config={"identity": identity, **params},
            dir=str(root),
            mode="offline",
            settings=wandb.Settings(
                silent=True,
                save_code=False,
                disable_git=True,
                disable_code=True,
                disable_job_creation=True,
                console="off",
                x_disable_stats=True,
                x_disable_meta=True,
                x_disable_machine_info=True,
                x_save_requirements=False,
            ),
        )

    def log(self, step: int, values: dict[str, float], flush: bool) -> None:
        self.run.log(values, step=step)

    def finish(self, final: dict[str, float], status: str) -> None:
        import wandb

        self.run.summary.update(final)
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)
        # The service writes the run's records until it shuts down: now, so the job ends
        # with its offline run complete (not at interpreter exit).
        wandb.teardown()
