"""The training job's command line: one phase (intermediate or target) of one run.

The settings (``--settings``, built by workflow/grid_settings.py) are parsed into the typed
``PhaseSettings`` (spec/phase_settings.py) before anything is loaded; the phase itself is
``recipe.TrainingRecipe`` (docs/training.md).

CLI: ``python -m workflow_scripts.training.train intermediate|target --encoder DIR --data JSON
--settings JSON --seed N --output DIR``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

from workflow_scripts.common import LOG, setup_logging
from workflow_scripts.models.compiled import COMPILE_MODES, DEFAULT_COMPILE
from workflow_scripts.models.packing import DEFAULT_PADDING_FREE, PADDING_FREE_MODES
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_map import parse_data_map
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.run_identity import TrainingIdentity
from workflow_scripts.training.checkpoints import Preempted
from workflow_scripts.training.curves import Diverged
from workflow_scripts.training.recipe import PhaseJob, TrainingRecipe


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Train one phase (intermediate or target) of one run.")
    ap.add_argument("phase", choices=["intermediate", "target"])
    ap.add_argument("--encoder", required=True, type=Path)
    ap.add_argument(
        "--data", required=True, help='the data map: JSON {"task": {"train": FILE, "dev": FILE}} (spec/data_map.py)'
    )
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
    ap.add_argument("--tracking", default="off", help='the trackers to log to, e.g. "tensorboard+mlflow" (tracking.py)')
    ap.add_argument("--tracking-dir", type=Path, help="where the trackers write (results/<experiment>/tracking)")
    # (not --run: under torchrun, whose own --run-path it would abbreviate, it is refused as ambiguous)
    ap.add_argument("--run-identity", help="the run's identity: TrainingIdentity JSON (spec/run_identity.py)")
    return ap


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    if int(os.environ.get("RANK", "0")) != 0:  # one log of a sharded run: rank 0's (and every rank's warnings)
        logging.getLogger().setLevel(logging.WARNING)
    args = parser().parse_args(argv)
    # Named in every error: the run's identity when the workflow gives it, else its output.
    run_name = str(args.output)
    trackers = settings = None
    try:
        identity = TrainingIdentity.parse(args.run_identity, "--run-identity") if args.run_identity else None
        run_name = identity.label() if identity else run_name
        settings = PhaseSettings.parse(args.settings, "--settings")  # (bad settings: an InputError, below)
        trackers = _open_trackers(args, settings, identity)
        TrainingRecipe(_job(args, settings), trackers).run()
    except InputError as err:
        _finish_failed(trackers, "FAILED")
        raise SystemExit(f"error: {err}") from None
    except Diverged as err:
        _finish_failed(trackers, "FAILED")
        raise SystemExit(
            f"error: {run_name}: training diverged: {err}, with learning rate {settings.learning_rate};"
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


def _job(args: argparse.Namespace, settings: PhaseSettings) -> PhaseJob:
    return PhaseJob(
        phase=args.phase,
        encoder_dir=args.encoder,
        data=parse_data_map(args.data, "--data"),
        settings=settings,
        seed=args.seed,
        output=args.output,
        threads=args.threads,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=bool(args.keep_checkpoints),
        log_every=args.log_every,
        compile=args.compile,
        padding_free=args.padding_free,
    )


def _open_trackers(args: argparse.Namespace, settings: PhaseSettings, identity: TrainingIdentity | None):
    """The job's trackers, or None: with tracking off no tracker library is even imported."""
    if args.tracking in (None, "", "off") or int(os.environ.get("RANK", "0")) != 0:
        return None  # (a sharded run's trackers are rank 0's)
    from workflow_scripts.training.tracking import open_trackers

    run = identity.to_dict() if identity else None
    return open_trackers(args.tracking, args.tracking_dir, run, settings.to_dict(), job=args.phase)


def _finish_failed(trackers, status: str) -> None:
    if trackers is not None:
        trackers.finish({}, status=status)


if __name__ == "__main__":
    main()
