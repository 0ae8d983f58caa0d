"""The experiment grid: config checks, file layout and each step's resolved settings.

The Snakefile imports this (standard library only) to validate the config beyond its JSON
schema and to hand every rule exactly the settings it depends on, as one canonical param:
a change reruns the steps whose settings changed and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.spec import benchmark, few_shot, paths, report_settings
from workflow_scripts.spec.basics import REPO_ROOT, is_url, load_yaml, repo_path
from workflow_scripts.spec.data_settings import DataOptions, DataSettings, LeakageSettings, unread_options
from workflow_scripts.spec.evaluation_settings import EvaluationSettings
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.local_data import SOURCE as LOCAL_FILES
from workflow_scripts.spec.model_settings import TranslatorPrepare, VisionPrepare
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.spec.schema import error_hint
from workflow_scripts.spec.suggest import did_you_mean
from workflow_scripts.spec.tasks import (
    CONTROLS,
    MLM,
    PROVIDED_TRANSLATIONS,
    TASKS,
    TRANSLATABLE_FORMATS,
    get_task,
)
from workflow_scripts.spec.translation_settings import UNREAD_KEYS, TranslationSettings
from workflow_scripts.workflow import (
    arm_recipes,
    backbone_grid,
    hyperparameters,
    local_data,
    memory_plan,
    slurm,
    sweep,
    transfer,
)
from workflow_scripts.workflow.transfer import data_path, translate_test_path, translated_path

# The keys of a training.<phase> block a training job reads (absent ones stay absent: max_steps).
# The languages of the embedded demo data (demo/hub, demo/parallel): demo/make_demo_data.py
# writes synthetic rows in them for every multilingual task (XCOPA and Mewsli-X too).
DEMO_LANGUAGES = ("en", "de", "ru", "sw")


class ConfigError(ValueError):
    """A config value that cannot work, named by its key path."""


# ----- checks ---------------------------------------------------------------------------


def check_schema(config: dict[str, Any], schema_file: str) -> None:
    """JSON-schema errors as one line per problem, each naming the config key."""
    import jsonschema

    schema = load_yaml(Path(schema_file).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in err.absolute_path).replace(".[", "[")
        problems.append(f"config key {key or '(top level)'}: {err.message}{error_hint(err)}")
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


def check_config(config: dict[str, Any]) -> None:
    """Every check of a config that the schema cannot make, section by section; the first
    problem raises ConfigError naming its config key."""
    _check_benchmark_name(config)
    _check_task_entries(config)
    if config["models"]["source"] == "demo":
        _check_demo_pretraining(config)
    check_languages(config)
    baselines = _check_intermediate_configs(config)
    for task in visual_tasks(config):
        image_dir(config, task)  # raises when the images have no known place
    for i, target in enumerate(config["targets"]):
        _check_target(config, target, f"targets[{i}]")
    _check_translation_datasets(config)
    _check_tables_baseline(config, baselines)
    if "en" in config["models"].get("translators_to_en", {}):
        raise ConfigError("config key models.translators_to_en.en: English needs no translation into English")
    for rule in ("train_intermediate", "train_target"):
        try:
            slurm.training_retries(resources(config, rule))
        except ValueError as err:
            raise ConfigError(f"config key resources.{rule}.runtime: {err}") from None
    try:
        transfer.check(config)
        backbone_grid.check(config)
        # A backbone whose training cannot fit the GPUs it asks for stops here, before any job.
        memory_plan.check_fits(config)
    except (transfer.TransferError, backbone_grid.BackboneError, memory_plan.PlanError) as err:
        raise ConfigError(str(err)) from None


def _check_benchmark_name(config: dict[str, Any]) -> None:
    # Checked here, not by a schema enum: a benchmark is declared in one place (benchmark.py).
    if config.get("benchmark", benchmark.DEFAULT) not in benchmark.BENCHMARKS:
        raise ConfigError(
            f"config key benchmark: unknown benchmark {config['benchmark']!r}"
            f"{did_you_mean(config['benchmark'], benchmark.BENCHMARKS)}; known: {', '.join(benchmark.BENCHMARKS)}"
        )


def _need_task(config: dict[str, Any], name: str, key: str) -> None:
    """``name`` is a catalogued task with an entry under ``tasks`` (its data source)."""
    if name not in TASKS:
        raise ConfigError(
            f"config key {key}: unknown task {name!r}{did_you_mean(name, TASKS)}; known tasks: {', '.join(TASKS)}"
        )
    if name not in config["tasks"]:
        raise ConfigError(f"config key {key}: task {name!r} has no entry under 'tasks' (its data source)")


def _check_task_entries(config: dict[str, Any]) -> None:
    tasks_cfg = config["tasks"]
    for key in tasks_cfg:
        if key not in TASKS:
            raise ConfigError(
                f"config key tasks.{key}: unknown task{did_you_mean(key, TASKS)}; known tasks: {', '.join(TASKS)}"
            )
        for option, release in local_releases(tasks_cfg[key]).items():
            if not release.exists():
                raise ConfigError(
                    f"config key tasks.{key}.options.{option}: {_release_option(tasks_cfg[key], option)!r} "
                    "is neither a URL nor "
                    "an existing archive or directory"
                )


def _check_intermediate_configs(config: dict[str, Any]) -> list[str]:
    """Each intermediate config's tasks; returns the baselines (configs with no task)."""
    baselines = []
    for name, inter in config["intermediate"].items():
        for i, task in enumerate(inter["tasks"]):
            key = f"intermediate.{name}.tasks[{i}]"
            _need_task(config, task, key)
            if get_task(task).is_target:
                raise ConfigError(f"config key {key}: {task!r} is a target task, not an intermediate task")
            if task == "mlm":
                raise ConfigError(f"config key {key}: mix in MLM with 'mlm: true', not as a task")
        if inter.get("mlm"):
            _need_task(config, "mlm", f"intermediate.{name}.mlm")
        if not inter["tasks"] and not inter.get("mlm"):
            baselines.append(name)
            if "language" in inter or "learning_rate" in inter:
                raise ConfigError(
                    f"config key intermediate.{name}: the baseline (no tasks) takes no language or learning_rate"
                )
        lang = inter.get("language")
        if lang and lang != "en":
            _check_translated_config(config, name, inter["tasks"], lang)
    return baselines


def _check_translated_config(config: dict[str, Any], name: str, tasks: list[str], lang: str) -> None:
    """A config translated into ``lang``: each task's published translation, or a translator."""
    for task in tasks:
        if task in PROVIDED_TRANSLATIONS:
            provided = PROVIDED_TRANSLATIONS[task]
            _need_task(config, provided, f"intermediate.{name}.language (translated {task} is read from {provided!r})")
            if lang not in config["tasks"][provided].get("languages", []):
                raise ConfigError(
                    f"config key tasks.{provided}.languages: lacks {lang!r} needed by intermediate.{name}"
                )
            continue
        if lang not in config["models"].get("translators", {}):
            raise ConfigError(
                f"config key intermediate.{name}.language: no translator for {lang!r} under models.translators"
            )
        if get_task(task).format not in TRANSLATABLE_FORMATS:
            raise ConfigError(
                f"config key intermediate.{name}.language: task {task!r} "
                f"({get_task(task).format}) cannot be machine-translated"
            )


def _check_target(config: dict[str, Any], target: str, key: str) -> None:
    bench = benchmark.of_config(config)
    if target in TASKS and get_task(target).is_target and target not in bench.targets:
        raise ConfigError(
            f"config key {key}: {target!r} is not a {bench.title} target (benchmark: {bench.name}; "
            f"its targets: {', '.join(bench.targets)})"
        )
    _need_task(config, target, key)
    task = get_task(target)
    if not task.is_target:
        raise ConfigError(f"config key {key}: {target!r} is not a target task")
    if task.is_retrieval:
        source = retrieval_encoder_source(config, target)
        if source != "intermediate" and (source not in config["targets"] or get_task(source).is_retrieval):
            raise ConfigError(
                f"config key retrieval.encoders.{target}: {target} embeds with the model of target "
                f"{source!r} ({bench.title}'s protocol), which is not a trained target of the grid: "
                f"add it to targets or set retrieval.encoders.{target}: intermediate"
            )
    for j, stage in enumerate(target_stages(config, target)):
        stage_key = f"tasks.{target}.stages[{j}]"
        _need_task(config, stage, stage_key)
        if get_task(stage).is_target or get_task(stage).format != task.format:
            raise ConfigError(
                f"config key {stage_key}: a stage must be a {task.format} task that is not a "
                f"target (its head carries over to {target}), got {stage!r}"
            )
    if "languages" not in config["tasks"][target]:
        raise ConfigError(f"config key tasks.{target}.languages: a target needs its evaluation languages")
    for dep in {task.train_from, task.select_from} - {None, target}:
        _need_task(config, dep, f"{key} (trains on / selects with {dep!r})")
    if task.visual:
        check_visual_target(config, target, key)


def _check_translation_datasets(config: dict[str, Any]) -> None:
    for task, langs in config.get("translation", {}).get("datasets", {}).items():
        _need_task(config, task, f"translation.datasets.{task}")
        if get_task(task).format not in TRANSLATABLE_FORMATS:
            raise ConfigError(
                f"config key translation.datasets.{task}: {get_task(task).format} data cannot be machine-translated"
            )
        for lang in langs:
            if lang not in config["models"].get("translators", {}):
                raise ConfigError(
                    f"config key translation.datasets.{task}: no translator for {lang!r} under models.translators"
                )


def _check_tables_baseline(config: dict[str, Any], baselines: list[str]) -> None:
    baseline = config.get("tables", {}).get("baseline", "none")
    if baseline not in config["intermediate"]:
        raise ConfigError(f"config key tables.baseline: {baseline!r} is not an intermediate config")
    if baseline not in baselines:
        raise ConfigError(f"config key tables.baseline: {baseline!r} has tasks; the baseline must have none")


def check_visual_target(config: dict[str, Any], target: str, key: str) -> None:
    """A target that reads images (XVNLI, MaRVL, xFlickr&CO): trained on its ``train_from``
    task's English rows with that task's image features, selected on ``select_from``'s English
    dev split, and scored with its own test images' features. Both image folders must be
    known, the task it trains from must read the same number of images per row. Zero-shot
    applies, and translate-test on the target's published translations (transfer._applies)."""
    task = get_task(target)
    for dep in (task.train_from, task.select_from):
        if dep is None or not get_task(dep).visual or get_task(dep).format != task.format:
            raise ConfigError(
                f"config key {key}: {target} reads images ({task.format}); the task it trains on or selects "
                f"with must be an image task of the same format, got {dep!r} (tasks/{target}.yaml)"
            )
        if get_task(dep).images_per_example != task.images_per_example:
            raise ConfigError(
                f"config key {key}: {target} reads {task.images_per_example} image(s) per row, {dep} "
                f"{get_task(dep).images_per_example}"
            )
    for task_name in (target, task.train_from):
        image_dir(config, task_name)  # raises, naming tasks.<task>.images, when unknown


def _check_demo_pretraining(config: dict[str, Any]) -> None:
    declared = config["models"].get("demo_pretraining")
    if not declared:
        raise ConfigError(
            "config key models.demo_pretraining: models.source demo needs the text and languages its"
            " models are pre-trained on (e.g. {text: {mnli: [train]}, languages: [de]})"
        )
    for task, splits in declared["text"].items():
        key = f"models.demo_pretraining.text.{task}"
        if task not in TASKS:
            raise ConfigError(
                f"config key {key}: unknown task{did_you_mean(task, TASKS)}; known tasks: {', '.join(TASKS)}"
            )
        if task not in config["tasks"]:
            raise ConfigError(f"config key {key}: task {task!r} has no entry under 'tasks' (its data source)")
        unknown = [s for s in splits if s not in TASKS[task].splits]
        if unknown:
            raise ConfigError(
                f"config key {key}: {task} has no split {', '.join(map(repr, unknown))};"
                f" its splits: {', '.join(TASKS[task].splits)}"
            )
    corpora = repo_path(config["models"]["demo_corpora"])
    for lang in declared["languages"]:
        if not (corpora / f"en-{lang}.jsonl").is_file():
            raise ConfigError(
                f"config key models.demo_pretraining.languages: no parallel corpus for {lang!r}"
                f" ({corpora / f'en-{lang}.jsonl'} does not exist)"
            )


def target_languages(target: str) -> tuple[str, ...]:
    """Every language a target has data in: its official languages in each benchmark that
    defines it (benchmark.py). The loaders read XTREME-R's additions (PAN-X from WikiANN,
    XQuAD's ro, Tatoeba's five, UD v2.7) whichever benchmark scores the grid; their own lists
    (udpos.UD_LANGUAGE_NAMES, xtreme.TATOEBA_CODES, ...) are these, as a test checks."""
    return tuple(sorted({lang for b in benchmark.BENCHMARKS.values() for lang in b.languages.get(target, ())}))


# Every language of the benchmarks' targets: those the translators, the translated
# intermediate configs and the source-language settings may name.
LANGUAGES = tuple(
    sorted({lang for b in benchmark.BENCHMARKS.values() for langs in b.languages.values() for lang in langs})
)


def task_languages(config: dict[str, Any], task: str) -> tuple[str, ...]:
    """The language codes a task's data has: those its entry declares, else a target's (target_languages); a task holding a
    target's published translations has the target's (xnli_mt: XNLI's); MLM's Wikipedia
    corpus every benchmark language; the other intermediate tasks English. With data.source
    local the demo's languages count too for a multilingual task: the demo mirror has its
    synthetic rows in them (XCOPA in de, ru, sw)."""
    translations_of = {t.train_translations: t.name for t in TASKS.values() if t.train_translations}
    if get_task(task).languages:  # declared by the task's entry
        known = set(get_task(task).languages)
    elif get_task(task).is_target or task in translations_of:
        known = set(target_languages(translations_of.get(task, task)))
    elif get_task(task).format == MLM:
        known = set(LANGUAGES)
    else:
        return ("en",)
    if config["data"]["source"] == "local":
        known |= set(DEMO_LANGUAGES)
    return tuple(sorted(known))


def check_languages(config: dict[str, Any]) -> None:
    """Every language code the config names is one its data (or a translator) can have: a
    misspelt one stops here, naming the key, instead of failing a job later."""

    def check(key: str, lang: str, known: tuple[str, ...], of: str = "") -> None:
        if lang not in known:
            raise ConfigError(
                f"config key {key}: unknown language {lang!r}{of}{did_you_mean(lang, known)}; known: {', '.join(known)}"
            )

    for task, cfg in config["tasks"].items():
        known = task_languages(config, task)
        for i, lang in enumerate(cfg.get("languages", [])):
            check(f"tasks.{task}.languages[{i}]", lang, known, f" for {task}")
        extra = cfg.get("options", {}).get("ud_release_extra")
        for i, lang in enumerate(extra.get("languages", []) if isinstance(extra, dict) else []):
            check(f"tasks.{task}.options.ud_release_extra.languages[{i}]", lang, known, f" for {task}")
    for name, inter in config["intermediate"].items():
        if "language" in inter:
            check(f"intermediate.{name}.language", inter["language"], LANGUAGES)
    for group in ("translators", "translators_to_en"):
        for lang in config["models"].get(group, {}):
            check(f"models.{group}.{lang}", lang, LANGUAGES)
    for task, langs in config.get("translation", {}).get("datasets", {}).items():
        for i, lang in enumerate(langs):
            check(f"translation.datasets.{task}[{i}]", lang, LANGUAGES)
    for setting in transfer.configured(config):
        source = transfer.source_language(setting)
        if source is not None:
            check(f"transfer.settings.{setting}", source, LANGUAGES)


def _release_options(task_cfg: dict[str, Any]) -> dict[str, str | None]:
    """A task's options that name an original release (a URL, archive or directory), as
    written: UD v2.5 (``ud_release``), XTREME-R's UD v2.7 languages
    (``ud_release_extra.release``), XQuAD-R (``xquad_r_path``)."""
    options = task_cfg.get("options", {})
    extra = options.get("ud_release_extra")
    return {
        "ud_release": options.get("ud_release"),
        "ud_release_extra.release": extra.get("release") if isinstance(extra, dict) else None,
        "xquad_r_path": options.get("xquad_r_path"),
    }


def local_releases(task_cfg: dict[str, Any]) -> dict[str, Path]:
    """The local paths of a task's releases by option; URLs are not local."""
    return {
        key: REPO_ROOT / release
        for key, release in _release_options(task_cfg).items()  # absolute stays absolute
        if release and not is_url(release)
    }


def reads_hub_data(task_cfg: dict[str, Any]) -> bool:
    """Whether a task reads its Hub data (or its local mirror) besides its releases: all but
    UD-POS read from the UD v2.5 release."""
    return not task_cfg.get("options", {}).get("ud_release")


def _release_option(task_cfg: dict[str, Any], option: str) -> str:
    """The configured value of a local release option, as the user wrote it."""
    return str(_release_options(task_cfg)[option])


# ----- layout -----------------------------------------------------------------------------


def is_baseline(config: dict[str, Any], name: str) -> bool:
    inter = config["intermediate"][name]
    return not inter["tasks"] and not inter.get("mlm")


def intermediate_encoder(config: dict[str, Any], backbone: str, name: str, seed: int | str) -> str:
    """The backbone a target phase starts from: the pretrained one for the baseline config."""
    if is_baseline(config, name):
        return backbone_grid.base_dir(config, backbone)
    return f"{paths.results()}/intermediate/{backbone}/{name}/seed{seed}/encoder"


def target_stages(config: dict[str, Any], target: str) -> list[str]:
    """The tasks trained before a target's own training, in order (tasks.<t>.stages, else
    the catalogue's: XCOPA's SIQA)."""
    return list(config["tasks"].get(target, {}).get("stages", get_task(target).stages))


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


def stage_data(config: dict[str, Any], stage: str) -> dict[str, dict[str, str]]:
    """A stage's data map: its English train and dev splits."""
    return {stage: {"train": data_path(stage, "train"), "dev": data_path(stage, "dev")}}


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


def intermediate_data(config: dict[str, Any], name: str) -> dict[str, dict[str, str]]:
    inter = config["intermediate"][name]
    lang = inter.get("language", "en")
    out = {}
    for task in inter["tasks"]:
        if lang == "en":
            out[task] = {"train": data_path(task, "train"), "dev": data_path(task, "dev")}
        elif task in PROVIDED_TRANSLATIONS:  # multilingual file; training keeps `language` rows
            provided = PROVIDED_TRANSLATIONS[task]
            out[task] = {"train": data_path(provided, "train"), "dev": data_path(provided, "dev")}
        else:
            out[task] = {"train": translated_path(task, lang, "train"), "dev": translated_path(task, lang, "dev")}
    for task in inter["tasks"]:
        if get_task(task).visual:  # the task's image features (the embed_images step)
            out[task]["images"] = image_features_path(task)
    recipe = arm_recipes.recipe_of(config, name)
    if recipe is not None and recipe.text_task:  # the recipe's text-only share: its English data
        out[recipe.text_task] = {
            "train": data_path(recipe.text_task, "train"),
            "dev": data_path(recipe.text_task, "dev"),
        }
    if inter.get("mlm"):
        out["mlm"] = {"train": data_path("mlm", "train")}
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
    return [leakage_path(task, target) for task in config["intermediate"][name]["tasks"]]


def leakage_settings(config: dict[str, Any]) -> LeakageSettings:
    return LeakageSettings.parse(config["leakage"], "leakage")


def visual_tasks(config: dict[str, Any]) -> list[str]:
    """The tasks whose images the grid embeds: the image tasks any intermediate config trains,
    each image target (its own test images, for evaluation) and the image task it trains on
    and selects with."""
    found = {t for inter in config["intermediate"].values() for t in inter["tasks"] if get_task(t).visual}
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
    task_cfg = config["tasks"][task]
    if "images" in task_cfg:
        return task_cfg["images"]
    if config["data"]["source"] == "local" and "hub" in task_cfg:
        return f"{config['data']['local_root'].rstrip('/')}/{task_cfg['hub']['path']}/images"
    raise ConfigError(
        f"config key tasks.{task}.images: the directory of {task}'s images is needed with data "
        "from the Hub (SNLI-VE: Flickr30k's flickr30k-images, distributed on request)"
    )


def vision_settings(config: dict[str, Any]) -> VisionPrepare:
    """What builds or fetches the vision encoder (a change rebuilds it and re-embeds)."""
    vision = config.get("vision", {})
    if config["models"]["source"] == "demo":
        demo = vision.get("demo", {})
        return VisionPrepare.parse({"source": "demo", "demo": demo, "seed": demo.get("seed", 0)}, "vision")
    hub = {
        "source": "hub",
        "hub_id": vision.get("hub_id", "openai/clip-vit-base-patch32"),
        "revision": vision.get("revision", "main"),
    }
    return VisionPrepare.parse(hub, "vision")


def target_data(config: dict[str, Any], target: str, recipe: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The training phase's data map of one target model: each file with the languages kept."""
    found = transfer.find_recipe(config, target, recipe)
    entry: dict[str, Any] = {"train": [r.as_dict() for r in found.train], "dev": [r.as_dict() for r in found.dev]}
    images = visual_target_images(config, target)
    if images:  # the image features of the task it trains on (the embed_images step)
        entry["images"] = images
    return {target: entry}


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
    declared = config["models"]["demo_pretraining"]["text"]
    return sorted(data_path(task, split) for task, splits in declared.items() for split in splits)


def demo_corpus(config: dict[str, Any], lang: str) -> str:
    """The demo's parallel corpus between English and ``lang``."""
    return f"{config['models']['demo_corpora'].rstrip('/')}/en-{lang}.jsonl"


def demo_encoder_corpora(config: dict[str, Any]) -> list[str]:
    """The parallel corpora the demo backbones are pre-trained on (models.demo_pretraining.languages)."""
    return [demo_corpus(config, lang) for lang in sorted(config["models"]["demo_pretraining"]["languages"])]


def translation_jobs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(task, language, split) of every machine translation out of English: the data the
    translated configs train and select on, the extra datasets of `translation.datasets`,
    and what the transfer settings train and select on."""
    pairs = {
        (task, inter["language"])
        for inter in config["intermediate"].values()
        if inter.get("language", "en") != "en"
        for task in inter["tasks"]
        if task not in PROVIDED_TRANSLATIONS
    }
    pairs |= {(task, lang) for task, langs in config["translation"].get("datasets", {}).items() for lang in langs}
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
    xnli = config["tasks"].get("xnli", {}).get("languages", [])
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


# ----- settings ---------------------------------------------------------------------------


def _task_opts(config: dict[str, Any], task: str) -> dict[str, Any]:
    cfg = config["tasks"][task]
    opts = {k: cfg[k] for k in ("batch_size", "epochs", "max_length")}
    opts.update({k: cfg[k] for k in get_format(get_task(task).format).options})  # spec/formats/: TaskFormat.options
    return opts


def data_settings(config: dict[str, Any], task: str, split: str) -> DataSettings:
    cfg = config["tasks"][task]
    languages = cfg.get("languages", ["en"])
    if split == "train" and get_task(task).foreign_train:
        # A target's train split holds every language that has one (in-language data; PAWS-X's
        # published translations), whether or not a transfer setting uses them: enabling or
        # changing a setting then never rewrites the data the zero-shot runs train on.
        missing = get_task(task).train_missing
        languages = ["en"] + [l for l in languages if l != "en" and l not in missing]
    options = DataOptions.parse(cfg.get("options", {}), f"tasks.{task}.options")
    unread_options(get_task(task), options, f"tasks.{task}.options")
    settings = {"languages": languages, "options": options}
    own = local_data.spec(config, task)
    if own is not None:  # the task's own files, whatever data.source says for the others
        return DataSettings.parse({**settings, "source": LOCAL_FILES, "data": own.settings(split)}, f"tasks.{task}")
    source = config["data"]["source"]
    root = config["data"]["local_root"] if source == "local" else None
    return DataSettings.parse({**settings, "source": source, "hub": cfg["hub"], "local_root": root}, f"tasks.{task}")


def translator_settings(config: dict[str, Any], lang: str, to_english: bool = False) -> TranslatorPrepare:
    """The OPUS-MT model en -> lang (or lang -> en for translate-test)."""
    models = config["models"]
    group = "translators_to_en" if to_english else "translators"
    if models["source"] == "hub":
        mt = models[group][lang]
        return TranslatorPrepare.parse(
            {"source": "hub", "hub_id": mt["hub_id"], "revision": mt["revision"]}, f"models.{group}.{lang}"
        )
    demo = {
        "source": "demo",
        "demo": models.get("translator_demo", {}),
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
    unread = (*UNREAD_KEYS, *(("precision",) if config["translation"].get("backend") != "transformers" else ()))
    settings = {k: v for k, v in config["translation"].items() if k not in unread}
    token = config["models"]["translators"].get(lang, {}).get("target_token") if lang else None
    if token:
        settings["target_token"] = token
    return TranslationSettings.parse({"task": task, **settings} if task else settings, "translation")


def intermediate_settings(config: dict[str, Any], backbone: str, name: str) -> PhaseSettings:
    inter = config["intermediate"][name]
    settings = hyperparameters.phase_values(
        config, hyperparameters.PhaseJob("intermediate", backbone, intermediate=name)
    )
    lang = inter.get("language", "en")
    # Translated configs select on their own (translated) dev data.
    tasks = {t: {**_task_opts(config, t), "select_language": lang} for t in inter["tasks"]}
    if inter.get("mlm"):
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


def few_shot_data(config: dict[str, Any], target: str, recipe: str) -> dict[str, dict[str, Any]]:
    """A few-shot recipe's data map: the shots and the translated dev rows of its language,
    and for an image target the features of the pool's images (its shots' and its dev's)."""
    data = target_data(config, target, recipe)
    if get_task(target).visual:
        data[target]["images"] = image_features_path(get_task(target).few_shot.task)
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
    cfg = config["tasks"][target]
    settings: dict[str, Any] = {
        "languages": cfg["languages"],
        "max_length": cfg["max_length"],
        "eval_batch_size": config["training"]["target"]["eval_batch_size"],
        # the backbone's precision policy decides the evaluation's compute dtype too (precision.py)
        "precision": backbone_grid.method_settings(config, backbone).precision,
    }
    settings.update({k: cfg[k] for k in get_format(get_task(target).format).options})
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
        settings["max_length"] = min(cfg["max_length"], ret["max_length"])
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
        **config["tables"],
        "targets": part["targets"],
        "intermediate": part["intermediate"],
        "seeds": part["seeds"],
        "translated": translated,
        "settings": part["settings"],
        "baseline_setting": transfer.baseline_setting(config),
        "target_languages": {t: config["tasks"][t]["languages"] for t in config["targets"]},
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


def arm_pairs(intermediate: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """(visual config, control config, the image task, its control) for every pair of configs
    that differ by one image task replaced by one of its controls."""

    def key(spec: dict[str, Any], tasks) -> tuple:  # equal recipe: an arm is compared with its twin's
        return (tuple(sorted(tasks)), bool(spec.get("mlm")), spec.get("language", "en"), spec.get("recipe"))

    index = {key(spec, spec["tasks"]): name for name, spec in intermediate.items()}
    pairs = []
    for name, spec in intermediate.items():
        for task in spec["tasks"]:
            for control in CONTROLS.get(task, ()):
                swapped = [control if t == task else t for t in spec["tasks"]]
                other = index.get(key(spec, swapped))
                if other is not None:
                    pair = {"visual": name, "control": other, "task": task, "control_task": control}
                    if spec.get("recipe") is not None:
                        pair["recipe"] = spec["recipe"]
                    pairs.append(pair)
    return pairs


def modality_settings(config: dict[str, Any], backbone: str) -> report_settings.ModalitySettings:
    """The image-vs-text comparison of a backbone's grid (modality.py): its pairs of configs
    that differ only by an image task and one of its text-only controls."""
    part = backbone_grid.grid_of(config, backbone)
    chosen = {n: config["intermediate"][n] for n in part["intermediate"]}
    found = {
        "targets": part["targets"],
        "seeds": part["seeds"],
        "decimals": config["tables"].get("decimals", 1),
        "pairs": arm_pairs(chosen),
        "recipes": {
            n: r.describe()
            for n, r in arm_recipes.arm_recipes_of(config).items()
            if any(spec.get("recipe") == n for spec in chosen.values())
        },
    }
    return report_settings.ModalitySettings.parse(found, f"modality settings of backbone {backbone}")


def backbone_descriptions(config: dict[str, Any]) -> dict[str, Any]:
    """Every backbone's description (backbone_grid.describe), by name."""
    return {b: backbone_grid.describe(config, b) for b in backbone_grid.names(config)}


def modality_scaling_settings(config: dict[str, Any]) -> report_settings.ModalityScalingSettings:
    """What the image-vs-text table across backbone sizes shows (modality_scaling.py)."""
    found = {
        "decimals": config["tables"].get("decimals", 1),
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
        "decimals": config["tables"]["decimals"],
        "baseline": config["tables"].get("baseline", "none"),
        "baseline_setting": transfer.baseline_setting(config),
        "targets": config["targets"],
        "intermediate": list(config["intermediate"]),
        "backbones": backbone_descriptions(config),
    }
    return report_settings.ComparisonSettings.parse(found, "comparison settings")


def translated_counterparts(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each translated config with its language and the English-data config it is compared
    with (same tasks, same MLM setting), for the translated-data table (docs/protocol.md §5)."""
    inters = config["intermediate"]
    out = {}
    for name, inter in inters.items():
        if inter.get("language", "en") == "en":
            continue
        english = next(
            (
                n
                for n, i in inters.items()
                if i.get("language", "en") == "en"
                and sorted(i["tasks"]) == sorted(inter["tasks"])
                and i.get("mlm") == inter.get("mlm")
            ),
            None,
        )
        out[name] = {"language": inter["language"], "english": english}
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
    return any(inter.get("mlm") for inter in config["intermediate"].values())
