"""The user's cache of what parse time derives from files and could derive again (a source's
package imports, the config schema as JSON): under ``XSTILTS_CACHE_DIR``, else
``$XDG_CACHE_HOME/xstilts``, else ``~/.cache/xstilts``. Entries are named by the hash of what
they were derived from, so they are never stale and every checkout shares them; where no
cache can be written, parse time derives them again. Standard library only: the Snakefile
imports this, and no job does (editing it reruns nothing)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path | None:
    """The cache folder (None: no home folder to put it in)."""
    root = os.environ.get("XSTILTS_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home folder (an unknown user)
            return None
    return Path(base) / "xstilts"


def read_text(name: str) -> str | None:
    """An entry's text, or None when it is not there (or cannot be read)."""
    root = cache_root()
    if root is None:
        return None
    try:
        return (root / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def write_text(name: str, text: str) -> Path | None:
    """Store an entry through a temporary file in the same folder, so that a reader sees all
    of it or nothing; returns its path, or None where the cache cannot be written."""
    root = cache_root()
    if root is None:
        return None
    path = root / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            f.write(text)
        Path(f.name).replace(path)
    except OSError:
        return None
    return path


def path_of(name: str) -> Path | None:
    """Where an entry is, if it is there."""
    root = cache_root()
    return root / name if root is not None and (root / name).is_file() else None
