"""The few helpers every layer needs: the checkout's root, the error for bad input, YAML and
canonical JSON. Standard library and PyYAML only, like the rest of spec/."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# The checkout: relative release and mirror paths in a config are read from here.
REPO_ROOT = Path(__file__).resolve().parents[2]


class InputError(ValueError):
    """Bad input (config value, data file, model directory) named in the message."""


def repo_path(path: str | os.PathLike[str]) -> Path:
    """A configured path; relative paths are relative to the repository."""
    path = Path(path)
    return path if path.is_absolute() else REPO_ROOT / path


def is_url(location: str) -> bool:
    """A download location (http, https, ftp) rather than a local path."""
    return location.split("://", 1)[0] in ("http", "https", "ftp")


def canonical_json(value: Any) -> str:
    """Key-sorted, compact JSON: the same settings always give the same string (and hash)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def load_yaml(text: str) -> Any:
    """YAML read with libyaml's C parser where PyYAML was built with it, else PyYAML's own
    (the same values). Every job reads the config schema when it starts, and every Snakemake
    run reads it and the task catalogue: the C parser reads the schema about 8x faster."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
