"""The checks a config passes before any job runs, in the order they depend on each other.
The Snakefile runs them at parse time and the preflight runs the same; each error names
the offending key.

Snakemake's own validation (``snakemake.utils.validate``) fills in the schema's defaults
after the project's own schema check has named any unknown or mistyped key.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts import revisions
from workflow_scripts.spec import paths, schema, trackers, user_cache
from workflow_scripts.spec import tasks as task_catalogue
from workflow_scripts.spec.basics import REPO_ROOT, load_yaml
from workflow_scripts.workflow import (
    arm_recipes,
    config_layers,
    grid,
    grid_checks,
    hub_sources,
    local_data,
    prompted,
    retention,
)

SCHEMA = REPO_ROOT / "schemas" / "config.schema.yaml"
# What a config that cannot run raises (each message names the key).
CONFIG_ERRORS = (
    arm_recipes.RecipeError,
    config_layers.ConfigLayerError,
    grid.ConfigError,
    paths.ExperimentNameError,
    task_catalogue.CatalogueError,
    hub_sources.HubSourceError,
    local_data.LocalDataError,
    revisions.RevisionError,
)


def schema_for_validation() -> Path:
    """The schema for Snakemake's ``validate`` and the check's own messages: its JSON
    rendition with what records declare filled in (spec/schema.py ``with_records``), in the
    user's cache (named by the hash of the YAML and of those declarations), which Snakemake reads about 10x faster than the YAML (it tries JSON first, then
    parses YAML in pure Python); in a temporary file where no cache can be written."""
    text = SCHEMA.read_bytes()
    records = json.dumps(schema.record_declarations()).encode()
    key = hashlib.sha256(text + b"\0" + records).hexdigest()[:16]
    name = f"config-schema-{key}.json"
    found = user_cache.path_of(name)
    if found is None:
        rendered = json.dumps(schema.with_records(load_yaml(text.decode("utf-8"))))
        found = user_cache.write_text(name, rendered)
        if found is None:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as tmp:
                tmp.write(rendered)
            found = Path(tmp.name)
    return found


def check(config: dict[str, Any], configfiles: Sequence[str | Path], catalogues: Sequence[str]) -> str:
    """Check ``config`` (completing it with the schema's defaults) and root this process's
    paths at its experiment; returns the experiment's name."""
    from snakemake.utils import validate

    # The user's own task entries join the built-in ones before anything checks a task name.
    task_catalogue.use_catalogues(list(catalogues))
    rendered = str(schema_for_validation())
    grid_checks.check_schema(config, rendered)
    validate(config, rendered)
    # Image arms become one config per recipe before anything reads the intermediate configs.
    arm_recipes.expand(config)
    # Before anything reads a task's hub key: a task has it or local files of its own.
    local_data.check_config(config)
    grid_checks.check_config(config)
    retention.check(config)
    prompted.check(config)
    check_tracking(config)
    experiment = paths.experiment_name(config, configfiles)
    # Named before anything builds a path (the grid's plans are cached).
    paths.use_experiment(experiment)
    hub_sources.check_releases(config)
    # The Hub commits this experiment's results were computed on: a config that now asks
    # for other revisions stops here.
    disagreements = revisions.lock_disagreements(hub_sources.config_repos(config), hub_lock())
    if disagreements:
        raise revisions.RevisionError("\n".join(disagreements))
    return experiment


def check_tracking(config: dict[str, Any]) -> None:
    """The enabled trackers' libraries are installed (found, not imported: a library that
    is installed but fails to import stops the job that opens it, naming the tracker)."""
    missing = trackers.missing_modules(config.get("tracking"))
    if missing:
        raise grid.ConfigError(
            "\n".join(
                f"config key tracking.{name}: {', '.join(modules)} not installed "
                f"(pip install -r requirements.txt, or set tracking.{name}: false)"
                for name, modules in missing.items()
            )
        )


def hub_lock() -> str:
    """The experiment's lock file of Hub commits (revisions.py)."""
    return paths.results(revisions.LOCK_FILE)
