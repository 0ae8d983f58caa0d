"""The experiment trackers a config turns on (``tracking:``, docs/tracking.md), as the rules
pass them: a resource token ("off", or the trackers joined by "+"), and the modules each needs
(checked at config check without importing them). The job side is training/tracking.py."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

TRACKERS = ("tensorboard", "mlflow", "wandb")
OFF = "off"
DEFAULT_WANDB_PROJECT = "xstilts"
# The modules each tracker needs (checked at config check without importing them).
REQUIRED_MODULES = {
    "tensorboard": ("tensorboard", "torch.utils.tensorboard"),
    "mlflow": ("mlflow", "sqlalchemy", "alembic", "filelock"),
    "wandb": ("wandb",),
}
# The identity keys of a run, in the order its name lists them.
# a sweep point (workflow/sweep.py) is one more run of the same seed: its own folder and name
IDENTITY_KEYS = ("job", "backbone", "setting", "config", "target", "stage", "point", "seed")


class TrackingError(RuntimeError):
    """A tracker token that names no tracker, or a tracker that cannot be opened."""


def token(tracking: Mapping[str, Any] | None) -> str:
    """The resource token of a config's ``tracking`` block: "off", or the enabled
    trackers joined by "+" (W&B with ``=<project>`` when not the default project)."""
    tracking = tracking or {}
    parts = []
    for name in TRACKERS:
        if tracking.get(name):
            project = tracking.get("wandb_project", DEFAULT_WANDB_PROJECT)
            parts.append(f"wandb={project}" if name == "wandb" and project != DEFAULT_WANDB_PROJECT else name)
    return "+".join(parts) or OFF


def parse_token(value: str) -> dict[str, str | None]:
    """{tracker: option} of a token ("off": none); the option is W&B's project."""
    if value in (OFF, ""):
        return {}
    found: dict[str, str | None] = {}
    for part in value.split("+"):
        name, _, option = part.partition("=")
        if name not in TRACKERS:
            raise TrackingError(f"--tracking {value!r}: unknown tracker {name!r}; known: off, {', '.join(TRACKERS)}")
        found[name] = option or None
    return found


def missing_modules(tracking: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """{tracker: modules not installed} of the config's enabled trackers (found without
    importing them, so the config check stays fast)."""
    out = {}
    for name in parse_token(token(tracking)):
        missing = [m for m in REQUIRED_MODULES[name] if not _module_found(m)]
        if missing:
            out[name] = missing
    return out


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing
        return False
