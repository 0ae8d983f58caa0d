"""Every Hugging Face Hub repository a config's grid reads, each with the config key that
names it: the datasets of its tasks (and their further sources, ``Task.hub_sources``), the
backbones, the translators and the vision encoder.

The lock check at config time (``revisions.lock_disagreements``) and the preflight read
this list; the jobs resolve and lock the same repositories as they read them. Parse-time
code: no network, no third-party import.
"""

from __future__ import annotations

from typing import Any

from workflow_scripts.revisions import HubRepo
from workflow_scripts.spec import task_entry
from workflow_scripts.spec.backbone_entry import entry_of
from workflow_scripts.spec.source_entries import data_of, models_of
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.workflow import backbone_grid, grid, grid_settings, transfer


class HubSourceError(ValueError):
    """A task that needs its original release, configured without it."""


def read_tasks(config: dict[str, Any]) -> list[str]:
    """Every task whose data a job of the grid prepares: the intermediate configs' and the
    targets', the transfer settings' further data (published translations), what is
    machine-translated, and the demo models' pre-training text."""
    found = set(grid.grid_tasks(config)) | {task for task, _, _ in grid.translation_jobs(config)}
    data = transfer.data_path("{task}", "").split("{task}")[0]
    for plan in transfer.plans(config):
        for recipe in plan.models.values():
            found |= {
                ref.path[len(data) :].split("/")[0] for ref in (*recipe.train, *recipe.dev) if ref.path.startswith(data)
            }
    if grid.uses_mlm(config):
        found.add("mlm")
    if models_of(config).demo:
        found |= set(models_of(config).pretraining.text)
    return sorted(found)


def release_set(config: dict[str, Any], task: str) -> str | None:
    """The release option of a task the config sets (None: its data comes from hub.path)."""
    options = task_entry.entry_of(config, task).options
    return next((o for o in get_task(task).release_options if options.get(o)), None)


def dataset_repos(config: dict[str, Any]) -> list[HubRepo]:
    if data_of(config).source != "hub":
        return []
    repos = []
    for task in read_tasks(config):
        entry = task_entry.entry_of(config, task)
        if entry.data is not None:
            continue  # its own local files (tasks.<name>.data)
        if release_set(config, task) is None and entry.hub is not None:
            repos.append(HubRepo("dataset", entry.hub.path, entry.hub.revision, f"tasks.{task}.hub"))
        options = entry.options
        for source in get_task(task).hub_sources:
            if source.is_read(list(entry.languages_or(("en",))), options):
                repos.append(
                    HubRepo(
                        "dataset",
                        str(options.get(f"{source.name}_path", source.path)),
                        str(options.get(f"{source.name}_revision", "main")),
                        f"tasks.{task}.options.{source.name}_path",
                    )
                )
    return repos


def model_repos(config: dict[str, Any]) -> list[HubRepo]:
    models = models_of(config)
    if models.demo:
        return []
    repos = []
    for name in backbone_grid.names(config):
        entry = entry_of(config, name)
        repos.append(HubRepo("model", str(entry.hub_id), str(entry.revision), f"backbones.{name}"))
    into = sorted({lang for _, lang, _ in grid.translation_jobs(config)})
    out_of = sorted({lang for _, lang in transfer.test_translations(config)})
    for group, translators, langs in (
        ("translators", models.translators, into),
        ("translators_to_en", models.translators_to_en, out_of),
    ):
        for lang in langs:
            mt = translators[lang]
            repos.append(HubRepo("model", mt.hub_id, mt.revision, f"models.{group}.{lang}"))
    if grid.visual_tasks(config):
        vision = grid_settings.vision_settings(config)
        repos.append(HubRepo("model", vision.hub_id, vision.revision, "vision"))
    return repos


def config_repos(config: dict[str, Any]) -> list[HubRepo]:
    """Every Hub repository the grid reads, in config order (one entry per config key)."""
    return dataset_repos(config) + model_repos(config)


def check_releases(config: dict[str, Any]) -> None:
    """With data from the Hub, a task the Hub holds no faithful copy of names its release."""
    if data_of(config).source != "hub":
        return
    for task in read_tasks(config):
        entry = get_task(task)
        reads_hub = task_entry.entry_of(config, task).data is None
        if reads_hub and entry.release_required and release_set(config, task) is None:
            raise HubSourceError(
                f"config key tasks.{task}.options.{entry.release_options[0]}: {task} is read from its original "
                f"release with data.source hub (the Hub holds no faithful copy); set it to the release "
                f"(a URL or a local folder)"
            )
