"""Small shared helpers: atomic writes, canonical settings, seeding, logging, device choice."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.spec.basics import InputError, canonical_json

LOG = logging.getLogger("xstilts")


def setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # One line per HTTP request of the Hub client would bury the job's own log.
    for chatty in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    from workflow_scripts.progress import quiet_library_bars  # progress.py imports this module

    quiet_library_bars()


def settings_hash(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]


def load_settings(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"--settings is not valid JSON: {err}") from err
    if not isinstance(value, dict):
        raise InputError("--settings must be a JSON object")
    return value


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path; rename it onto ``final`` only if the block succeeds.

    Works for files and directories, so an interrupted job never leaves an output that
    looks complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    target = tmp / final.name
    try:
        yield target
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        os.replace(target, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | os.PathLike[str], value: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise InputError(f"missing file: {path}") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"corrupt JSON file {path}: {err}") from err


def read_result_table(path: str | os.PathLike[str]):
    """A CSV table `aggregate_tables` wrote (for figures and LaTeX), as a DataFrame."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing table {path}: run aggregate_tables first")
    return pd.read_csv(path, dtype={"seed": "Int64"})


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def configure_torch(threads: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))
    # Deterministic kernels where they exist: same config and seed, same numbers on CPU.
    # torch.use_deterministic_algorithms also sets the flag of the inductor compiler, which
    # we never run, and importing it costs ~3 s: a third of a short evaluation job, paid by
    # every job of the grid. So set the kernel flag alone (are_deterministic_algorithms_enabled
    # reads it; tests/test_training_units.py checks that it is on).
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    # With deterministic algorithms on, torch also fills every uninitialised allocation
    # (torch.empty) with NaN, a write of each buffer that no correct kernel needs. Measured on
    # an H200 (XLM-R large trained in full, bf16, three interleaved runs each): 1.32x the
    # tokens/s at seq 128 and 1.68x at seq 384 with the fill off, kernels still deterministic
    # (docs/benchmarks.md, gpu-check).
    torch._C._set_deterministic_fill_uninitialized_memory(False)
    # No cuDNN attention in SDPA: it builds an execution graph for each new sequence length,
    # milliseconds of host time per call, and length-grouped batches bring a new length at
    # almost every step. Measured on an H200 (benchmarks/engine_host_overhead.py, base-size
    # encoder, batch 32): 6.3x the steps/s with it off; flash and memory-efficient attention
    # remain. A no-op on CPUs.
    torch.backends.cuda.enable_cudnn_sdp(False)


def device():  # -> torch.device
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
