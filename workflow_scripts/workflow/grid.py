"""The experiment grid's inventories: which jobs a config asks for and where each one's files
lie (models, data, metric files, reports), and each rule's resources.

The Snakefile imports this (standard library only) to lay out the DAG. The config's checks
beyond its JSON schema are in ``grid_checks.py``; each job's resolved settings, the one
canonical param a rule passes, in ``grid_settings.py``.
"""

from __future__ import annotations

from typing import Any

from workflow_scripts.spec import benchmark, few_shot, intermediate_entry, paths, task_entry
from workflow_scripts.spec.data_map import DataMap, TaskFiles
from workflow_scripts.spec.source_entries import data_of, models_of
from workflow_scripts.spec.tasks import (
    PROVIDED_TRANSLATIONS,
    TASKS,
    get_task,
)
from workflow_scripts.spec.translation_settings import translation_of
from workflow_scripts.workflow import (
    arm_recipes,
    backbone_grid,
    sweep,
    transfer,
)
from workflow_scripts.workflow.transfer import data_path, translate_test_path, translated_path

# The languages of the embedded demo data (demo/hub, demo/parallel): demo/make_demo_data.py
# writes synthetic rows in them for every multilingual task (XCOPA and Mewsli-X too).
DEMO_LANGUAGES = ("en", "de", "ru", "sw")


class ConfigError(ValueError):
    """A config value that cannot work, named by its key path."""


def is_baseline(config: dict[str, Any], name: str) -> bool:
    return intermediate_entry.entry_of(config, name).trains_nothing


def intermediate_encoder(config: dict[str, Any], backbone: str, name: str, seed: int | str) -> str:
    """The backbone a target phase starts from: the pretrained one for the baseline config."""
    if is_baseline(config, name):
        return backbone_grid.base_dir(config, backbone)
    return f"{paths.results()}/intermediate/{backbone}/{name}/seed{seed}/encoder"


def target_stages(config: dict[str, Any], target: str) -> list[str]:
    """The tasks trained before a target's own training, in order (tasks.<t>.stages, else
    the catalogue's: XCOPA's SIQA)."""
    own = task_entry.find(config, target)
    return list(own.stages if own is not None and own.stages is not None else get_task(target).stages)


def stage_model(backbone: str, name: str, target: str, stage: str, seed: int | str) -> str:
    """The model a target's stage leaves (shared by every recipe of the target)."""
    return f"{paths.results()}/target/{backbone}/{name}/{target}/stages/{stage}/seed{seed}/model"


def target_start(
    config: dict[str, Any], backbone: str, name: str, target: str, seed: int | str, before: str | None = None
) -> str:
    """The model a target's training (or, with ``before``, that stage's) starts from: the
    previous stage's, else the backbone the intermediate phase left."""
    stages = target_stages(config, target)
    earlier = stages[: stages.index(before)] if before is not None else stages
    if earlier:
        return stage_model(backbone, name, target, earlier[-1], seed)
    return intermediate_encoder(config, backbone, name, seed)


def stage_data(config: dict[str, Any], stage: str) -> DataMap:
    """A stage's data map: its English train and dev splits."""
    return {stage: TaskFiles(train=data_path(stage, "train"), dev=data_path(stage, "dev"))}


def retrieval_encoder_source(config: dict[str, Any], target: str) -> str:
    """ "intermediate", or the trained target whose encoder a retrieval target embeds with."""
    configured = config.get("retrieval", {}).get("encoders", {})
    return configured.get(target, benchmark.of_config(config).retrieval_encoders.get(target, "intermediate"))


def retrieval_encoder(config: dict[str, Any], backbone: str, name: str, target: str, seed: int | str) -> str:
    source = retrieval_encoder_source(config, target)
    if source == "intermediate":
        return intermediate_encoder(config, backbone, name, seed)
    return target_model(backbone, name, source, "en.dev-en", seed)  # its zero-shot (English) model


def target_model(backbone: str, name: str, target: str, recipe: str, seed: int | str) -> str:
    """A target model; its recipe names its training and selection data (transfer.py)."""
    return f"{paths.results()}/target/{backbone}/{name}/{target}/{recipe}/seed{seed}/model"


def sweep_candidate(backbone: str, name: str, target: str, recipe: str, seed: int | str, point: str) -> str:
    """One sweep point's model (sweep.py); the selected one is linked to ``target_model``."""
    return f"{paths.results()}/target/{backbone}/{name}/{target}/{recipe}/seed{seed}/sweep/{point}/model"


def sweep_candidates(config: dict[str, Any], backbone: str, name: str, target: str, recipe: str, seed) -> dict:
    """TOKEN -> model of every sweep point of one recipe and seed, in the config's order."""
    return {p.token: sweep_candidate(backbone, name, target, recipe, seed, p.token) for p in sweep.points(config)}


def kept_model(backbone: str, name: str, target: str, recipe: str) -> str:
    """Where ``disk.keep_target_models: best`` links the best seed's model (disk.py)."""
    return f"{paths.results()}/kept/{backbone}/{name}/{target}/{recipe}/model"


def training_record(model: str) -> dict[str, str]:
    """A trained model's record, written beside it and kept when the model is discarded:
    its curve and its train log (training/curves.py)."""
    parent = model.rsplit("/", 1)[0]
    return {"curve": f"{parent}/curve.csv", "train_log": f"{parent}/train_log.json"}


def metric_file(backbone: str, setting: str, name: str, target: str, seed: int | str) -> str:
    return f"{paths.results()}/metrics/{backbone}/{transfer.path_token(setting)}/{name}/{target}/seed{seed}.json"


def intermediate_data(config: dict[str, Any], name: str) -> DataMap:
    """An intermediate config's data map: each task's files in the config's language (a
    multilingual file, whose rows of that language are kept, or the pipeline's translation)."""
    inter = intermediate_entry.entry_of(config, name)
    lang = inter.data_language
    out = {}
    for task in inter.tasks:
        if not inter.translated:
            train, dev = data_path(task, "train"), data_path(task, "dev")
        elif task in PROVIDED_TRANSLATIONS:  # multilingual file; training keeps `language` rows
            provided = PROVIDED_TRANSLATIONS[task]
            train, dev = data_path(provided, "train"), data_path(provided, "dev")
        else:
            train, dev = translated_path(task, lang, "train"), translated_path(task, lang, "dev")
        # an image task: its images' features (the embed_images step)
        out[task] = TaskFiles(train=train, dev=dev, images=image_features_path(task) if get_task(task).visual else None)
    recipe = arm_recipes.recipe_of(config, name)
    if recipe is not None and recipe.text_task:  # the recipe's text-only share: its English data
        out[recipe.text_task] = TaskFiles(
            train=data_path(recipe.text_task, "train"), dev=data_path(recipe.text_task, "dev")
        )
    if inter.mlm:
        out["mlm"] = TaskFiles(train=data_path("mlm", "train"))
    return out


def image_features_path(task: str) -> str:
    return f"{paths.results()}/data/images/{task}"


def vision_encoder_dir() -> str:
    return f"{paths.results()}/models/vision_encoder"


def multimodal_target(name: str) -> str | None:
    """The multimodal target a target belongs to (IGLUE's: tasks/xvnli.yaml): itself if it
    reads images, the image target whose text control it is, else None."""
    if name not in TASKS or not get_task(name).is_target:
        return None
    if get_task(name).visual:
        return name
    return next((t.name for t in TASKS.values() if t.is_target and t.visual and name in t.controls), None)


def leakage_path(task: str, target: str) -> str:
    return f"{paths.results()}/data/leakage/{task}/{target}.json"


def leakage_inputs(task: str, target: str) -> dict[str, list[str]]:
    """The files the check between an intermediate task and a target compares: the task's
    English training and dev rows (a translated config's images are the same; its texts are
    compared in English), the target's scored splits."""
    task_spec, target_spec = get_task(task), get_task(target)
    return {
        "intermediate": [data_path(task, s) for s in ("train", "dev") if s in task_spec.splits],
        "target": [data_path(target, s) for s in (target_spec.eval_splits or ("test",))],
    }


def leakage_reports(config: dict[str, Any], name: str, target: str) -> list[str]:
    """The checks a target model trained after intermediate config ``name`` waits for: one per
    task of the config, when the target is multimodal (IGLUE's; its text arms included)."""
    if multimodal_target(target) is None:
        return []
    return [leakage_path(task, target) for task in intermediate_entry.entry_of(config, name).tasks]


def visual_tasks(config: dict[str, Any]) -> list[str]:
    """The tasks whose images the grid embeds: the image tasks any intermediate config trains,
    each image target (its own test images, for evaluation) and the image task it trains on
    and selects with."""
    found = {t for inter in intermediate_entry.entries(config).values() for t in inter.tasks if get_task(t).visual}
    for target in config["targets"]:
        task = get_task(target) if target in TASKS else None
        if task is None or not task.is_target or not task.visual:
            continue
        # (a task missing from `tasks` is named by the config check's need_task)
        found |= {t for t in (target, task.train_from, task.select_from) if t in config["tasks"] and get_task(t).visual}
    found |= {pool for pool in few_shot_pools(config) if get_task(pool).visual}
    return sorted(found)


def few_shot_pools(config: dict[str, Any]) -> list[str]:
    """The few-shot pools (spec/few_shot.py) the grid's few_shot:<N> settings read."""
    return sorted(
        {
            get_task(target).few_shot.task
            for setting in transfer.configured(config)
            if few_shot.shots_of(setting) is not None
            for target in transfer.targets(config, setting)
            if target in TASKS and get_task(target).few_shot is not None
        }
    )


def visual_target_images(config: dict[str, Any], target: str) -> str | None:
    """The feature bank an image target's training reads (its ``train_from`` task's; the
    ``select_from`` dev rows are matched to the same bank when both are the same task), or
    None for a text target."""
    task = get_task(target)
    if not task.visual:
        return None
    return image_features_path(task.train_from or target)


def image_dir(config: dict[str, Any], task: str) -> str:
    """Where a task's images are: its ``images`` key, else beside a local mirror's rows."""
    entry = task_entry.entry_of(config, task)
    if entry.images is not None:
        return entry.images
    mirror = data_of(config).mirror
    if mirror is not None and entry.hub is not None:
        return f"{mirror.rstrip('/')}/{entry.hub.path}/images"
    raise ConfigError(
        f"config key tasks.{task}.images: the directory of {task}'s images is needed with data "
        "from the Hub (SNLI-VE: Flickr30k's flickr30k-images, distributed on request)"
    )


def target_data(config: dict[str, Any], target: str, recipe: str) -> DataMap:
    """The training phase's data map of one target model: each file with the languages kept,
    and for an image target the features of the task it trains on (the embed_images step)."""
    found = transfer.find_recipe(config, target, recipe)
    return {target: TaskFiles(train=found.train, dev=found.dev, images=visual_target_images(config, target) or None)}


def zero_shot_model(backbone: str, name: str, target: str, seed: int | str) -> str:
    """The English model of a target, where its few-shot training starts (spec/few_shot.py)."""
    return target_model(backbone, name, target, "en.dev-en", seed)


def target_data_files(config: dict[str, Any], target: str, recipe: str) -> list[str]:
    found = transfer.find_recipe(config, target, recipe)
    return sorted({r.path for r in found.train + found.dev})


def evaluation(
    config: dict[str, Any], backbone: str, setting_token: str, name: str, target: str, seed: int | str
) -> dict[str, Any]:
    """One metric file's inputs: the model scoring each language and the data of each split."""
    plan = backbone_grid.find_plan(config, backbone, setting_token, target)
    if get_task(target).is_retrieval:  # the intermediate phase's encoder, or a trained target's (XTREME-R's Tatoeba)
        models = {lang: retrieval_encoder(config, backbone, name, target, seed) for lang in plan.languages}
    else:
        models = {lang: target_model(backbone, name, target, recipe.name, seed) for lang, recipe in plan.models.items()}
    data = {split: [r.as_dict() for r in refs] for split, refs in plan.eval_data.items()}
    found: dict[str, Any] = {"models": models, "data": data}
    if get_task(target).visual:  # the features of the target's own test images
        found["images"] = image_features_path(target)
    return found


def target_tasks(config: dict[str, Any], target: str) -> list[str]:
    """The tasks a target's jobs read: the target, the tasks that train and select it, and
    its stages."""
    task = get_task(target)
    return sorted({target, *filter(None, (task.train_from, task.select_from)), *target_stages(config, target)})


def grid_tasks(config: dict[str, Any]) -> list[str]:
    """Every task the grid's intermediate configs and targets read (the tables' tasks)."""
    found = {t for name in config["intermediate"] for t in intermediate_data(config, name)}
    for target in config["targets"]:
        found.update(target_tasks(config, target))
    return sorted(found)


def demo_pretraining_text(config: dict[str, Any]) -> list[str]:
    """The task data files the demo's vocabularies are learnt from (models.demo_pretraining.text):
    declared, not derived from the grid, so a task added to the grid retrains no demo model."""
    declared = models_of(config).pretraining.text
    return sorted(data_path(task, split) for task, splits in declared.items() for split in splits)


def demo_corpus(config: dict[str, Any], lang: str) -> str:
    """The demo's parallel corpus between English and ``lang``."""
    return f"{models_of(config).demo_corpora.rstrip('/')}/en-{lang}.jsonl"


def demo_encoder_corpora(config: dict[str, Any]) -> list[str]:
    """The parallel corpora the demo backbones are pre-trained on (models.demo_pretraining.languages)."""
    return [demo_corpus(config, lang) for lang in sorted(models_of(config).pretraining.languages)]


def translation_jobs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(task, language, split) of every machine translation out of English: the data the
    translated configs train and select on, the extra datasets of `translation.datasets`,
    and what the transfer settings train and select on."""
    pairs = {
        (task, inter.data_language)
        for inter in intermediate_entry.entries(config).values()
        if inter.translated
        for task in inter.tasks
        if task not in PROVIDED_TRANSLATIONS
    }
    pairs |= {(task, lang) for task, langs in translation_of(config).datasets.items() for lang in langs}
    jobs = {(task, lang, split) for task, lang in pairs for split in ("train", "dev")}
    jobs |= set(transfer.pipeline_translations(config))
    return sorted(jobs)


def translation_stats_files(config: dict[str, Any]) -> list[str]:
    files = [
        translated_path(task, lang, split).replace(".parquet", ".stats.json")
        for task, lang, split in translation_jobs(config)
    ]
    files += [
        translate_test_path(task, lang).replace(".parquet", ".stats.json")
        for task, lang in transfer.test_translations(config)
    ]
    return files


def translated_intermediate_models(config: dict[str, Any]) -> list[str]:
    """Intermediate models of the translated configs and their English-data counterparts,
    whose dev scores the translation table reports (those of the first backbone that runs
    the translated config)."""
    found = []
    for name, info in translated_counterparts(config).items():
        backbone = next(
            (b for b in backbone_grid.names(config) if name in backbone_grid.grid_of(config, b)["intermediate"]), None
        )
        if backbone is None:
            continue
        part = backbone_grid.grid_of(config, backbone)
        for n in sorted({name, info["english"]} & set(part["intermediate"])):
            found += [intermediate_encoder(config, backbone, n, seed) for seed in part["seeds"]]
    return sorted(set(found))


def quality_files(config: dict[str, Any]) -> list[str]:
    """MT quality of every translator the grid uses, where the grid's XNLI data has references
    (English and the language): en -> X, and X -> en for the translate-test languages."""
    entry = task_entry.find(config, "xnli")
    xnli = entry.languages_or(()) if entry is not None else ()
    referenced = set(xnli) if "en" in xnli else set()
    into = sorted({lang for _, lang, _ in translation_jobs(config)} & referenced)
    out_of = sorted({lang for _, lang in transfer.test_translations(config)} & referenced)
    return [quality_file(lang) for lang in into] + [quality_file(lang, "en") for lang in out_of]


def quality_file(lang: str, into: str | None = None) -> str:
    """``quality/de.json`` for en -> de, ``quality/de-en.json`` for de -> en."""
    return f"{paths.results()}/translation/quality/{lang}{'-' + into if into else ''}.json"


def metric_files(config: dict[str, Any], backbone: str) -> list[str]:
    """Every run's metric file of a backbone: (setting, intermediate config, target, seed)."""
    return [
        metric_file(backbone, plan.setting, name, plan.target, seed)
        for plan in backbone_grid.plans(config, backbone)
        for name in plan.intermediate
        for seed in plan.seeds
    ]


def training_outputs(config: dict[str, Any], backbone: str) -> list[str]:
    """Every trained model of a backbone's runs (each with its curve, training/curves.py):
    the intermediate encoders, the targets' stages and the targets' models."""
    found: dict[str, None] = {}
    for plan in backbone_grid.plans(config, backbone):
        for name in plan.intermediate:
            for seed in plan.seeds:
                if not is_baseline(config, name):
                    found[intermediate_encoder(config, backbone, name, seed)] = None
                for stage in target_stages(config, plan.target):
                    found[stage_model(backbone, name, plan.target, stage, seed)] = None
                run = evaluation(config, backbone, transfer.path_token(plan.setting), name, plan.target, seed)
                for model in run["models"].values():
                    if model != backbone_grid.base_dir(config, backbone):  # a retrieval target of the baseline
                        found[model] = None
    return list(found)


def training_records(config: dict[str, Any], backbone: str) -> list[str]:
    """The record (curve and train log) of every trained model of a backbone: what the
    training figures read, so that they keep no discarded model alive (disk.py)."""
    return [path for model in training_outputs(config, backbone) for path in training_record(model).values()]


def target_recipes(config: dict[str, Any], backbone: str) -> dict[tuple[str, str, str], list[int]]:
    """(intermediate config, target, recipe) -> seeds, of every target model a backbone's
    grid trains."""
    found: dict[tuple[str, str, str], set[int]] = {}
    for plan in backbone_grid.plans(config, backbone):
        for name in plan.intermediate:
            for recipe in plan.models.values():
                found.setdefault((name, plan.target, recipe.name), set()).update(plan.seeds)
    return {key: sorted(seeds) for key, seeds in found.items()}


def kept_model_inputs(config: dict[str, Any], backbone: str, name: str, target: str, recipe: str) -> dict[str, str]:
    """seed<N> -> model, of the seeds ``keep_best_target_model`` chooses among."""
    seeds = target_recipes(config, backbone)[(name, target, recipe)]
    return {f"seed{seed}": target_model(backbone, name, target, recipe, seed) for seed in seeds}


def kept_models(config: dict[str, Any], backbone: str) -> list[str]:
    """The models ``disk.keep_target_models: best`` keeps: one per config, target and recipe."""
    return [kept_model(backbone, *key) for key in target_recipes(config, backbone)]


def submission_predictions(config: dict[str, Any], backbone: str) -> dict[str, str]:
    """ "<config>/<target>/seed<N>" -> prediction folder, for every run of the baseline setting
    (the best models of the main table are chosen among them)."""
    baseline = transfer.baseline_setting(config)
    return {
        f"{name}/{plan.target}/seed{seed}": metric_file(backbone, plan.setting, name, plan.target, seed).removesuffix(
            ".json"
        )
        + ".predictions"
        for plan in backbone_grid.plans(config, backbone)
        if plan.setting == baseline
        for name in plan.intermediate
        for seed in plan.seeds
    }


def translated_counterparts(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each translated config with its language and the English-data config it is compared
    with (same tasks, same MLM setting), for the translated-data table (docs/protocol.md §5)."""
    inters = intermediate_entry.entries(config)
    out = {}
    for name, inter in inters.items():
        if inter.translated:
            english = next((n for n, i in inters.items() if inter.same_data_in_english(i)), None)
            out[name] = {"language": inter.data_language, "english": english}
    return out


def resources(config: dict[str, Any], rule: str) -> dict[str, Any]:
    res = {
        "threads": 1,
        "mem_mb": 4000,
        "runtime": 60,
        "gpu": 0,
        "checkpoint_every": 1000,
        "keep_checkpoints": 0,
        "log_every": 10,
        "compile": "auto",
        "padding_free": "auto",
    }
    res.update(config.get("resources", {}).get("default", {}))
    res.update(config.get("resources", {}).get(rule, {}))
    return res


def uses_mlm(config: dict[str, Any]) -> bool:
    return any(inter.mlm for inter in intermediate_entry.entries(config).values())
