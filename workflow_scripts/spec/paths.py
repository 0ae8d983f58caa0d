"""Where an experiment's outputs live: one folder per experiment, so configs never overwrite
each other's models, tables or figures.

Every output of a run is rooted at ``results/<experiment>/`` (its logs at
``logs/<experiment>/``); only content-keyed caches, which any experiment may reuse safely,
live outside it, under ``results/cache/``. The experiment's name is the config's
``experiment`` key, else the name of the last ``--configfile`` (``config/paper.yaml`` ->
``paper``), else ``demo`` for the repository's default ``config.yaml``.

The Snakefile names the experiment once (:func:`use_experiment`) before any path is asked
for; the path functions of ``grid``, ``transfer`` and ``backbone_grid`` build on
:func:`results`. Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = "results"
LOGS = "logs"
# Content-keyed caches shared by every experiment (downloaded release archives, image
# features keyed by the vision tower's weights and the image bytes).
SHARED_CACHE = f"{RESULTS}/cache"
DEFAULT_EXPERIMENT = "demo"
# A folder name: letters, digits, '.', '_' and '-', not starting with a dot.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Names that would collide with the shared folders of results/.
RESERVED = frozenset({"cache"})
# Beside a target model chosen by a sweep (workflow/sweep.py): which point won, among which;
# the evaluation copies it into the metric file.
SWEEP_SELECTION_FILE = "sweep_selection.json"

_experiment = DEFAULT_EXPERIMENT


class ExperimentNameError(ValueError):
    pass


def experiment_name(config: dict[str, Any], configfiles: Sequence[str | Path] = ()) -> str:
    """The experiment a run belongs to (see the module docstring)."""
    name = config.get("experiment")
    key = "experiment"
    if not name:
        given = [Path(f) for f in configfiles]
        # The repository's config.yaml is the demo's; any other file names its experiment.
        name = given[-1].stem if given and given[-1].name != "config.yaml" else DEFAULT_EXPERIMENT
        key = f"the config file name {given[-1]}" if given else key
    if not NAME_PATTERN.match(str(name)) or name in RESERVED:
        raise ExperimentNameError(
            f"{key}: {name!r} is not a usable experiment name (a folder under {RESULTS}/: letters, digits,"
            f" '.', '_', '-'; not {', '.join(sorted(RESERVED))}); set `experiment:` in the config"
        )
    return str(name)


def use_experiment(name: str) -> None:
    """Root every path of this process at ``name``'s folders."""
    global _experiment
    _experiment = name


def experiment() -> str:
    return _experiment


def results(*parts: str) -> str:
    """``results/<experiment>/<parts...>``."""
    return "/".join((RESULTS, _experiment, *parts))


def logs(*parts: str) -> str:
    """``logs/<experiment>/<parts...>``."""
    return "/".join((LOGS, _experiment, *parts))


def shared_cache(*parts: str) -> str:
    return "/".join((SHARED_CACHE, *parts))
