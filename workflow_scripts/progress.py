"""Progress bars for the long steps (tokenising, translating, embedding, searching, predicting,
downloading, demo pre-training), configured once for the project.

On a terminal a bar redraws in place, as tqdm does. A job's stderr is its log file
(``> log 2>&1``), where in-place redraws would pile up as carriage returns on one line; there a
bar writes one plain line per update instead, at most every ``XSTILTS_PROGRESS_INTERVAL``
seconds (default 30), plus its first and final lines, so a two-hour step adds a few hundred
lines to its log::

    tokenising mnli:  55%|##################1              | 49500/90000 [00:08<00:07, 5737.60example/s]

The bars only observe: they never change what a loop yields or in which order.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm import tqdm

from workflow_scripts.spec.basics import InputError

INTERVAL_VARIABLE = "XSTILTS_PROGRESS_INTERVAL"
LIBRARY_BARS_VARIABLE = "HF_HUB_DISABLE_PROGRESS_BARS"  # transformers' and the Hub client's bars
DEFAULT_LOG_INTERVAL = 30.0  # seconds between lines in a log file
LOG_WIDTH = 100  # characters of a log line: a bar of fixed width, whatever the terminal that launched the job
# Room kept after a long description for the percentage, counts, times and rate: tqdm cuts a
# line at its width, and the counts come last.
STATS_WIDTH = 80

T = TypeVar("T")


class LogLines(tqdm):
    """A tqdm bar that writes each update as its own line (no carriage return), for a file.

    tqdm's monitor thread, which forces a redraw when its estimate of items to skip runs
    long, has nothing to do: a log bar reads the clock at every item (``miniters=1``)."""

    monitor_interval = 0

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "":  # tqdm clearing a bar it does not leave: nothing to clear in a file
            return False
        self.fp.write((self.__str__() if msg is None else msg) + "\n")
        self.fp.flush()
        return True

    def close(self) -> None:
        if self.disable:
            return
        # The final line, whatever the interval (unless the last line already shows the count
        # reached): the count and the overall rate.
        if self.n != self.last_print_n:
            with self._lock:
                self._ema_dt = lambda: None
                self.display()
        self.leave = False  # tqdm's own close then writes nothing more (display("") above)
        super().close()


def quiet_library_bars() -> None:
    """Keeps the libraries' own bars (transformers loading weights, Hub file downloads) out of
    a job's log: they redraw every 0.1 s with carriage returns. Their switch is read when they
    are imported, so a step calls this first (``common.setup_logging`` does); an explicit
    ``HF_HUB_DISABLE_PROGRESS_BARS`` is kept, and a terminal keeps them."""
    if not _is_terminal(sys.stderr):
        os.environ.setdefault(LIBRARY_BARS_VARIABLE, "1")


def log_interval() -> float:
    """Seconds between a bar's lines in a log file: ``XSTILTS_PROGRESS_INTERVAL`` when set."""
    value = os.environ.get(INTERVAL_VARIABLE, "").strip()
    if not value:
        return DEFAULT_LOG_INTERVAL
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also rejects nan
        raise InputError(f"{INTERVAL_VARIABLE}={value!r}: expected a number of seconds >= 0")
    return seconds


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: float | None = None,
    desc: str,
    unit: str = "it",
    unit_scale: bool = False,
    initial: int = 0,
    disable: bool = False,
) -> tqdm:
    """A progress bar on stderr over ``iterable`` (or updated by hand with ``total``): redrawn
    in place on a terminal, one line at most every ``log_interval()`` seconds otherwise.
    ``desc`` says what is counted ("tokenising xnli"), ``unit`` one item ("example");
    ``initial``: items already done (a resumed training's steps); ``disable``: no bar (a
    sharded run's ranks but the first)."""
    stream = sys.stderr
    common = {
        "total": total,
        "desc": desc,
        "unit": unit,
        "unit_scale": unit_scale,
        "file": stream,
        "initial": initial,
        "disable": disable,
    }
    if _is_terminal(stream):
        return tqdm(iterable, dynamic_ncols=True, **common)
    return LogLines(
        iterable,
        mininterval=log_interval(),
        # The clock is read at every item: tqdm's own estimate of how many items to skip between
        # reads, kept from a fast start, would silence a step that slows down for hours.
        miniters=1,
        ncols=max(LOG_WIDTH, len(desc) + STATS_WIDTH),
        ascii=True,
        **common,
    )
