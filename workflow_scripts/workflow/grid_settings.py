"""Each job's resolved settings: the one frozen record (spec/) a rule passes as its
``--settings`` param, holding exactly what the job's output depends on, so that a change
reruns the jobs whose settings changed and nothing else. Where a training hyperparameter
comes from is ``hyperparameters.py``'s table.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workflow_scripts.spec import benchmark, few_shot, intermediate_entry, report_settings, source_entries, task_entry
from workflow_scripts.spec.data_map import DataMap
from workflow_scripts.spec.data_settings import DataOptions, DataSettings, LeakageSettings, unread_options
from workflow_scripts.spec.evaluation_settings import EvaluationSettings
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.intermediate_entry import IntermediateEntry
from workflow_scripts.spec.local_data import SOURCE as LOCAL_FILES
from workflow_scripts.spec.model_settings import TranslatorPrepare, VisionPrepare
from workflow_scripts.spec.phase_settings import PhaseSettings, phase_of
from workflow_scripts.spec.report_settings import tables_of
from workflow_scripts.spec.tasks import (
    CONTROLS,
    get_task,
)
from workflow_scripts.spec.translation_settings import UNREAD_KEYS, TranslationSettings, translation_of
from workflow_scripts.workflow import (
    arm_recipes,
    backbone_grid,
    hyperparameters,
    sweep,
    transfer,
)
from workflow_scripts.workflow.grid import (
    ConfigError,
    image_features_path,
    retrieval_encoder_source,
    sweep_candidate,
    target_data,
    target_stages,
    translated_counterparts,
)


def _task_opts(config: dict[str, Any], task: str) -> dict[str, Any]:
    entry = task_entry.entry_of(config, task)
    opts = {k: getattr(entry, k) for k in ("batch_size", "epochs", "max_length")}
    # spec/formats/: TaskFormat.options
    opts.update({k: getattr(entry, k) for k in get_format(get_task(task).format).options})
    return opts


def data_settings(config: dict[str, Any], task: str, split: str) -> DataSettings:
    entry = task_entry.entry_of(config, task)
    languages = list(entry.languages_or(("en",)))
    if split == "train" and get_task(task).foreign_train:
        # A target's train split holds every language that has one (in-language data; PAWS-X's
        # published translations), whether or not a transfer setting uses them: enabling or
        # changing a setting then never rewrites the data the zero-shot runs train on.
        missing = get_task(task).train_missing
        languages = ["en"] + [l for l in languages if l != "en" and l not in missing]
    options = DataOptions.parse(entry.options, f"tasks.{task}.options")
    unread_options(get_task(task), options, f"tasks.{task}.options")
    settings = {"languages": languages, "options": options}
    own = entry.local_data(task)
    if own is not None:  # the task's own files, whatever data.source says for the others
        return DataSettings.parse({**settings, "source": LOCAL_FILES, "data": own.settings(split)}, f"tasks.{task}")
    data = source_entries.data_of(config)
    source, root = data.source, data.mirror
    hub = entry.hub.to_dict() if entry.hub else None
    return DataSettings.parse({**settings, "source": source, "hub": hub, "local_root": root}, f"tasks.{task}")


def translator_settings(config: dict[str, Any], lang: str, to_english: bool = False) -> TranslatorPrepare:
    """The OPUS-MT model en -> lang (or lang -> en for translate-test)."""
    models = source_entries.models_of(config)
    group = "translators_to_en" if to_english else "translators"
    if not models.demo:
        mt = (models.translators_to_en if to_english else models.translators)[lang]
        return TranslatorPrepare.parse(
            {"source": "hub", "hub_id": mt.hub_id, "revision": mt.revision}, f"models.{group}.{lang}"
        )
    demo = {
        "source": "demo",
        "demo": models.translator_demo,
        "direction": f"{lang}-en" if to_english else None,
    }
    return TranslatorPrepare.parse(demo, "models.translator_demo")


def translation_settings(
    config: dict[str, Any], task: str | None = None, lang: str | None = None
) -> TranslationSettings:
    """Decoding and re-alignment settings; for a translation out of English into ``lang``, the
    target-language token its model needs. Not among them: the list of extra datasets, and
    the batch size, which changes only speed (a resource of the rule, so editing it reruns
    nothing)."""
    # precision only for the engine that reads it, so that it reruns nothing else
    entry = translation_of(config)
    unread = (*UNREAD_KEYS, *(("precision",) if entry.backend != "transformers" else ()))
    settings = {k: v for k, v in entry.to_dict().items() if k not in unread}
    translator = source_entries.models_of(config).translators.get(lang) if lang else None
    token = translator.target_token if translator else None
    if token:
        settings["target_token"] = token
    return TranslationSettings.parse({"task": task, **settings} if task else settings, "translation")


def intermediate_settings(config: dict[str, Any], backbone: str, name: str) -> PhaseSettings:
    inter = intermediate_entry.entry_of(config, name)
    settings = hyperparameters.phase_values(
        config, hyperparameters.PhaseJob("intermediate", backbone, intermediate=name)
    )
    lang = inter.data_language
    # Translated configs select on their own (translated) dev data.
    tasks = {t: {**_task_opts(config, t), "select_language": lang} for t in inter.tasks}
    if inter.mlm:
        tasks["mlm"] = _task_opts(config, "mlm")
    recipe = arm_recipes.recipe_of(config, name)
    if recipe is not None:  # an image arm: its recipe (spec/arm_recipe.py)
        settings["arm_recipe"] = recipe
        if recipe.text_task:
            tasks[recipe.text_task] = {**_task_opts(config, recipe.text_task), "select_language": "en"}
    # trains: adapters on a fully fine-tuned backbone: LoRA for this phase only (merged for the next)
    adapters = recipe is not None and recipe.trains == "adapters"
    method = backbone_grid.method_settings(config, backbone, adapters=adapters)
    return PhaseSettings.parse(
        {**settings, "method": method, "tasks": tasks, "language": lang},
        f"the intermediate phase settings of {name}",
    )


def target_settings(config: dict[str, Any], backbone: str, target: str, stage: str | None = None) -> PhaseSettings:
    """Target-phase settings; which languages train and select is the recipe's data map.
    A target with stages (or a stage after another) starts from the previous stage's model
    and carries its head over (``continue_head``: same format, so the same head shape)."""
    trained = stage or target
    settings = hyperparameters.phase_values(config, hyperparameters.PhaseJob("target", backbone, trained=trained))
    stages = target_stages(config, target)
    earlier = stages[: stages.index(stage)] if stage is not None else stages
    if earlier:
        settings["continue_head"] = {"from": earlier[-1], "to": trained}
    settings.update(
        method=backbone_grid.method_settings(config, backbone), tasks={trained: _task_opts(config, trained)}
    )
    return PhaseSettings.parse(settings, f"the target phase settings of {trained}")


def sweep_point_settings(config: dict[str, Any], backbone: str, target: str, point: str) -> PhaseSettings:
    """A target's settings at one sweep point: the point's values replace the config's."""
    return sweep.apply(target_settings(config, backbone, target), target, sweep.point(config, point).values)


def few_shot_settings(config: dict[str, Any], backbone: str, target: str, recipe: str, point: str) -> PhaseSettings:
    """One learning rate of a target's few-shot training (spec/few_shot.py): the target
    phase's settings with the protocol's epochs, batch size, warmup and this learning rate;
    the zero-shot model's head goes on training, the model is selected at every epoch's end,
    and no early stop cuts the epochs short (IGLUE keeps the best epoch of all)."""
    protocol = get_task(target).few_shot
    rates = few_shot_learning_rates(config, target, recipe)
    if point not in rates:
        raise ConfigError(f"few-shot recipe {recipe} of {target} has no learning rate {point!r} (has {sorted(rates)})")
    base = target_settings(config, backbone, target)
    options = base.tasks[target].replace(epochs=protocol.epochs, batch_size=protocol.batch_size)
    return base.replace(
        learning_rate=rates[point],
        warmup_ratio=protocol.warmup_ratio,
        patience=protocol.epochs + 1,
        eval_each_epoch=True,
        continue_head={"from": target, "to": target},
        tasks={**base.tasks, target: options},
    )


def few_shot_learning_rates(config: dict[str, Any], target: str, recipe: str) -> dict[str, float]:
    """TOKEN -> learning rate of a few-shot recipe's candidates: its setting's
    ``learning_rates``, else the target's protocol's."""
    setting = f"{few_shot.SETTING_PREFIX}{few_shot.shots_of_recipe(recipe)}"
    setting_cfg = transfer.configured(config).get(setting, {})
    rates = setting_cfg.get("learning_rates") or get_task(target).few_shot.learning_rates
    return {few_shot.candidate_token(float(r)): float(r) for r in rates}


def few_shot_candidates(config: dict[str, Any], backbone: str, name: str, target: str, recipe: str, seed) -> dict:
    """TOKEN -> model of every learning rate of a few-shot recipe and seed."""
    tokens = few_shot_learning_rates(config, target, recipe)
    return {token: sweep_candidate(backbone, name, target, recipe, seed, token) for token in tokens}


def few_shot_data(config: dict[str, Any], target: str, recipe: str) -> DataMap:
    """A few-shot recipe's data map: the shots and the translated dev rows of its language,
    and for an image target the features of the pool's images (its shots' and its dev's)."""
    data = target_data(config, target, recipe)
    if get_task(target).visual:
        data[target] = dataclasses.replace(data[target], images=image_features_path(get_task(target).few_shot.task))
    return data


def few_shot_tasks(target: str) -> list[str]:
    """The tasks a few-shot training job reads: the target and its pool."""
    return sorted({target, get_task(target).few_shot.task})


def stage_settings(config: dict[str, Any], backbone: str, target: str, stage: str) -> PhaseSettings:
    return target_settings(config, backbone, target, stage)


def eval_settings(
    config: dict[str, Any], backbone: str, target: str, setting_token: str | None = None
) -> EvaluationSettings:
    """How one (setting, target) is scored; its models and data files are the rule's inputs."""
    entry = task_entry.entry_of(config, target)
    settings: dict[str, Any] = {
        "languages": entry.languages,
        "max_length": entry.max_length,
        "eval_batch_size": phase_of(config, "target").eval_batch_size,
        # the backbone's precision policy decides the evaluation's compute dtype too (precision.py)
        "precision": backbone_grid.method_settings(config, backbone).precision,
    }
    settings.update({k: getattr(entry, k) for k in get_format(get_task(target).format).options})
    if get_task(target).is_retrieval:
        ret = backbone_grid.retrieval_settings(config, backbone)
        settings["retrieval"] = {
            "layer": ret["layer"],
            "pooling": ret["pooling"],
            "index": ret["index"],
            "encoder": retrieval_encoder_source(config, target),
        }
        if ret["index"] != "exact":
            settings["retrieval"]["nprobe"] = ret["nprobe"]
        if get_task(target).format == "mining":
            settings["retrieval"].update({"bucc_k": ret["bucc_k"], "bucc_duplicates": ret["bucc_duplicates"]})
        settings["eval_batch_size"] = ret["batch_size"]
        settings["max_length"] = min(entry.max_length, ret["max_length"])
    if setting_token is not None:
        settings["transfer"] = transfer.find_plan(config, setting_token, target).describe()
    excluded = benchmark.of_config(config).average_excludes
    if excluded:  # IGLUE's averages leave English out
        settings["average_excludes"] = list(excluded)
    return EvaluationSettings.parse(settings, f"the evaluation settings of {target}")


def table_settings(config: dict[str, Any], backbone: str) -> report_settings.TableSettings:
    """What a backbone's tables show: its part of the grid, and the backbone itself (its
    contaminated targets are footnoted: not zero-shot)."""
    part = backbone_grid.grid_of(config, backbone)
    translated = {n: info for n, info in translated_counterparts(config).items() if n in part["intermediate"]}
    found = {
        **tables_of(config).to_dict(),
        "targets": part["targets"],
        "intermediate": part["intermediate"],
        "seeds": part["seeds"],
        "translated": translated,
        "settings": part["settings"],
        "baseline_setting": transfer.baseline_setting(config),
        "target_languages": {t: task_entry.entry_of(config, t).languages for t in config["targets"]},
        "backbone": backbone_grid.describe(config, backbone),
        # The benchmark whose categories and overall score the tables report (benchmark.py).
        "benchmark": benchmark.of_config(config).describe(),
        # Figures and LaTeX files are written for every target and setting of the config
        # (the rules' outputs are the same for each backbone); those a backbone does not
        # run say so.
        "output_targets": list(config["targets"]),
        "output_settings": list(transfer.configured(config)),
    }
    return report_settings.TableSettings.parse(found, f"table settings of backbone {backbone}")


def arm_pairs(intermediate: dict[str, IntermediateEntry]) -> list[dict[str, str]]:
    """(visual config, control config, the image task, its control) for every pair of configs
    that differ by one image task replaced by one of its controls."""

    def key(spec: IntermediateEntry, tasks) -> tuple:  # equal recipe: an arm is compared with its twin's
        return (tuple(sorted(tasks)), spec.mlm, spec.data_language, spec.recipe)

    index = {key(spec, spec.tasks): name for name, spec in intermediate.items()}
    pairs = []
    for name, spec in intermediate.items():
        for task in spec.tasks:
            for control in CONTROLS.get(task, ()):
                swapped = [control if t == task else t for t in spec.tasks]
                other = index.get(key(spec, swapped))
                if other is not None:
                    pair = {"visual": name, "control": other, "task": task, "control_task": control}
                    if spec.recipe is not None:
                        pair["recipe"] = spec.recipe
                    pairs.append(pair)
    return pairs


def modality_settings(config: dict[str, Any], backbone: str) -> report_settings.ModalitySettings:
    """The image-vs-text comparison of a backbone's grid (modality.py): its pairs of configs
    that differ only by an image task and one of its text-only controls."""
    part = backbone_grid.grid_of(config, backbone)
    chosen = {n: intermediate_entry.entry_of(config, n) for n in part["intermediate"]}
    found = {
        "targets": part["targets"],
        "seeds": part["seeds"],
        "decimals": tables_of(config).decimals,
        "pairs": arm_pairs(chosen),
        "recipes": {
            n: r.describe()
            for n, r in arm_recipes.arm_recipes_of(config).items()
            if any(spec.recipe == n for spec in chosen.values())
        },
    }
    return report_settings.ModalitySettings.parse(found, f"modality settings of backbone {backbone}")


def backbone_descriptions(config: dict[str, Any]) -> dict[str, Any]:
    """Every backbone's description (backbone_grid.describe), by name."""
    return {b: backbone_grid.describe(config, b) for b in backbone_grid.names(config)}


def modality_scaling_settings(config: dict[str, Any]) -> report_settings.ModalityScalingSettings:
    """What the image-vs-text table across backbone sizes shows (modality_scaling.py)."""
    found = {
        "decimals": tables_of(config).decimals,
        "targets": config["targets"],
        "seeds": config["seeds"],
        "backbones": backbone_descriptions(config),
        # the config's order of backbones (the settings' JSON sorts keys): families appear in it
        "order": backbone_grid.names(config),
    }
    return report_settings.ModalityScalingSettings.parse(found, "modality scaling settings")


def comparison_settings(config: dict[str, Any]) -> report_settings.ComparisonSettings:
    """What the cross-backbone table and figure show."""
    found = {
        "decimals": tables_of(config).decimals,
        "baseline": tables_of(config).baseline,
        "baseline_setting": transfer.baseline_setting(config),
        "targets": config["targets"],
        "intermediate": list(config["intermediate"]),
        "backbones": backbone_descriptions(config),
    }
    return report_settings.ComparisonSettings.parse(found, "comparison settings")


def leakage_settings(config: dict[str, Any]) -> LeakageSettings:
    return LeakageSettings.parse(config["leakage"], "leakage")


def vision_settings(config: dict[str, Any]) -> VisionPrepare:
    """What builds or fetches the vision encoder (a change rebuilds it and re-embeds)."""
    vision = source_entries.vision_of(config)
    if source_entries.models_of(config).demo:
        demo = vision.demo
        return VisionPrepare.parse({"source": "demo", "demo": demo, "seed": demo.get("seed", 0)}, "vision")
    return VisionPrepare.parse({"source": "hub", "hub_id": vision.hub_id, "revision": vision.revision}, "vision")
