"""Layered configs: a config file may name, under ``extends``, the config files it is layered
on, and holds only what differs from them.

``extends`` is a path or a list of paths, relative to the repository like every path a
config holds (absolute paths work too). A file resolves to its bases, each resolved the same
way (a base may extend others), merged in the order listed, then the file itself on top:

* mappings merge key by key, the later layer winning;
* lists and scalars replace what a base set (a layer restates a whole list);
* ``null`` removes an inherited key (``tasks: {bucc: null}`` drops the base's BUCC entry);
  a ``null`` no base set is kept as written (``transfer.settings.zero_shot:``);
* ``experiment`` is never inherited: a run is named by the file the user gave
  (:func:`workflow_scripts.spec.paths.experiment_name`), never by a base.

Several ``--configfile`` files are each resolved and then merged as Snakemake merges them,
and Snakemake's ``--config`` values are merged last, over everything. The Snakefile, the
preflight and the command-line tools that read a config all resolve it here, before the
schema and :mod:`config_check` see it.

Standard library and PyYAML (Snakemake's dependency) only: the Snakefile imports this.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.spec.basics import REPO_ROOT, InputError, repo_path

EXTENDS = "extends"
# A key only the named file (or --config) sets.
NOT_INHERITED = ("experiment",)
DEFAULT_CONFIG = REPO_ROOT / "config.yaml"


class ConfigLayerError(InputError):
    """A config file that cannot be resolved; the message names the file and the key."""


def merge(base: Mapping[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``layer`` on top of ``base`` (neither is modified): mappings merge, a ``null`` removes
    an inherited key, anything else replaces."""
    merged = copy.deepcopy(dict(base))
    for key, value in layer.items():
        if value is None and key in merged:
            del merged[key]
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def override(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` over ``config`` as Snakemake applies ``--config`` and later
    ``--configfile`` files (``snakemake.utils.update_config``: mappings merge, the rest
    replaces, ``null`` included)."""
    merged = copy.deepcopy(dict(config))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = override(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read(path: Path, named_by: str) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigLayerError(f"{named_by}: config file {path} does not exist") from None
    except OSError as err:
        raise ConfigLayerError(f"{named_by}: config file {path} cannot be read: {err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigLayerError(f"config file {path}: not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigLayerError(f"config file {path}: holds a {type(data).__name__}, not a mapping of config keys")
    return data


def bases(config: Mapping[str, Any], path: Path) -> list[Path]:
    """The files ``config`` (read from ``path``) extends, as paths."""
    given = config.get(EXTENDS, [])
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, list) or not all(isinstance(p, str) and p for p in given):
        raise ConfigLayerError(
            f"config file {path}: key {EXTENDS}: {given!r} is neither a path nor a list of"
            " paths (relative to the repository)"
        )
    return [repo_path(p) for p in given]


def resolve_file(path: str | Path, _chain: tuple[Path, ...] = (), _named_by: str = "") -> dict[str, Any]:
    """The config ``path`` holds with every layer it extends merged under it (without
    ``extends``). ``path`` is as the user gave it (relative to the working directory); the
    paths under ``extends`` are relative to the repository."""
    path = Path(path)
    here = path.resolve()
    if here in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain[_chain.index(here) :], here))
        raise ConfigLayerError(f"config file {_chain[-1]}: key {EXTENDS}: a cycle: {cycle}")
    layer = _read(path, _named_by or "config")
    resolved: dict[str, Any] = {}
    for base in bases(layer, path):
        inherited = resolve_file(base, (*_chain, here), f"config file {path}: key {EXTENDS}")
        for key in NOT_INHERITED:
            inherited.pop(key, None)
        resolved = merge(resolved, inherited)
    return merge(resolved, {k: v for k, v in layer.items() if k != EXTENDS})


def load(configfiles: Sequence[str | Path] = (), overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config a run sees: each file resolved, the files merged in order (the
    repository's config.yaml when none is given), then the ``--config`` overrides."""
    config: dict[str, Any] = {}
    for file in configfiles or [DEFAULT_CONFIG]:
        config = override(config, resolve_file(file))
    return override(config, overrides or {})


def resolve_in_place(
    config: dict[str, Any], configfiles: Sequence[str | Path], overrides: Mapping[str, Any] | None = None
) -> None:
    """Replace the contents of Snakemake's ``config`` (the files merged without their layers)
    by the resolved config."""
    resolved = load(configfiles, overrides)
    config.clear()
    config.update(resolved)
