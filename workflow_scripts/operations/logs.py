"""Job logs that keep the previous attempt's: ``<log>.1`` (then ``.2``, ... up to ``KEEP``).

A rule's shell redirects its command to ``$(fresh_log {log:q})`` (the shell function
``SHELL_FUNCTION``, defined for every job by rules/common.smk): this module makes ``<log>``
a new, empty file and prints its path. A rerun of a job that was interrupted (Ctrl-C, a
Slurm signal, a crash) or that failed therefore no longer overwrites what that attempt
wrote.

Snakemake deletes a job's log files before the job starts (``Job.remove_existing_output``
in Snakemake 9), so the job itself never sees the previous log. Each attempt therefore
gives its log a second, hidden name, a hard link ``.<name>.latest`` beside it; Snakemake
removes only ``<log>``, and the next attempt finds the previous one's text under the hidden
name. Where hard links are not available, only a log that is still in place is kept.

Standard library only: the Snakefile imports this at parse time, and no job module imports
it, so it is in no rule's code hash.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

KEEP = 5  # previous attempts' logs kept: <log>.1 (the newest) to <log>.5
# The shell function rules redirect to: fresh_log LOG rotates, creates LOG and prints it.
# Its body is a subshell, not a { } group: Snakemake formats its shell prefix, where braces
# would name variables.
SHELL_FUNCTION = 'fresh_log() ( python -m workflow_scripts.operations.logs "$@" );'


def kept(log: str | os.PathLike[str], n: int) -> Path:
    """The n-th previous attempt's log (1: the newest)."""
    log = Path(log)
    return log.with_name(f"{log.name}.{n}")


def latest_link(log: str | os.PathLike[str]) -> Path:
    """The hidden second name of the log the newest attempt writes."""
    log = Path(log)
    return log.with_name(f".{log.name}.latest")


def fresh(log: str | os.PathLike[str], keep: int = KEEP) -> Path:
    """Make ``log`` a new, empty file for an attempt about to write it; the previous
    attempt's log (``log`` itself if it is still there, else its hidden second name) becomes
    ``log.1``, ``log.1`` becomes ``log.2`` and so on; the oldest beyond ``keep`` is dropped."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    latest = latest_link(log)
    previous = log if log.exists() else latest if latest.exists() else None
    if previous is not None:
        if keep < 1:
            previous.unlink()
        else:
            for n in range(keep - 1, 0, -1):
                if kept(log, n).exists():
                    kept(log, n).replace(kept(log, n + 1))
            previous.replace(kept(log, 1))
    latest.unlink(missing_ok=True)  # another name of the previous log, or stale
    log.open("x").close()  # a new file: never truncates a kept log through a shared link
    try:
        os.link(log, latest)
    except OSError as err:
        print(
            f"warning: {log}: no hard link {latest.name} ({err.strerror}); the next attempt "
            "keeps this log only if Snakemake leaves it in place",
            file=sys.stderr,
        )
    return log


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Start a job's log, keeping the previous attempt's as LOG.1, LOG.2, ...")
    ap.add_argument("log", type=Path)
    ap.add_argument("--keep", type=int, default=KEEP, help=f"previous logs kept (default {KEEP})")
    args = ap.parse_args(argv)
    try:
        print(fresh(args.log, args.keep))
    except OSError as err:  # the job's command then does not run: its log cannot be written
        raise SystemExit(f"error: cannot start the log {args.log}: {err}") from None


if __name__ == "__main__":
    main()
