"""The config's checks beyond its JSON schema: every value that cannot work is refused at
config time, before any job runs, with an error that names its key (``grid.ConfigError``).
``config_check.py`` runs them after the schema's own check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.planning import memory_model, memory_plan, slurm
from workflow_scripts.spec import benchmark, intermediate_entry, task_entry
from workflow_scripts.spec.basics import load_yaml, repo_path
from workflow_scripts.spec.few_shot import SETTING_PREFIX as FEW_SHOT_PREFIX
from workflow_scripts.spec.few_shot import shots_of
from workflow_scripts.spec.report_settings import tables_of
from workflow_scripts.spec.schema import error_hint
from workflow_scripts.spec.source_entries import data_of, models_of
from workflow_scripts.spec.suggest import did_you_mean
from workflow_scripts.spec.tasks import (
    MLM,
    PROVIDED_TRANSLATIONS,
    TASKS,
    TRANSLATABLE_FORMATS,
    get_task,
)
from workflow_scripts.spec.transfer_names import PER_LANGUAGE, SETTINGS, SOURCE_PREFIX, source_language
from workflow_scripts.spec.translation_settings import translation_of
from workflow_scripts.workflow import backbone_grid, transfer
from workflow_scripts.workflow.grid import (
    DEMO_LANGUAGES,
    ConfigError,
    image_dir,
    resources,
    retrieval_encoder_source,
    target_stages,
    visual_tasks,
)
from workflow_scripts.workflow.releases import local_releases, release_option


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
    if models_of(config).demo:
        _check_demo_pretraining(config)
    check_languages(config)
    baselines = _check_intermediate_configs(config)
    for task in visual_tasks(config):
        image_dir(config, task)  # raises when the images have no known place
    for i, target in enumerate(config["targets"]):
        _check_target(config, target, f"targets[{i}]")
    _check_translation_datasets(config)
    _check_tables_baseline(config, baselines)
    if "en" in models_of(config).translators_to_en:
        raise ConfigError("config key models.translators_to_en.en: English needs no translation into English")
    for rule in ("train_intermediate", "train_target"):
        try:
            slurm.training_retries(resources(config, rule))
        except ValueError as err:
            raise ConfigError(f"config key resources.{rule}.runtime: {err}") from None
    try:
        check_transfer(config)
        backbone_grid.check(config)
        # A backbone whose training cannot fit the GPUs it asks for stops here, before any job.
        memory_plan.check_fits(config)
    except (transfer.TransferError, backbone_grid.BackboneError, memory_model.PlanError) as err:
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
    for key, entry in task_entry.entries(config).items():
        if key not in TASKS:
            raise ConfigError(
                f"config key tasks.{key}: unknown task{did_you_mean(key, TASKS)}; known tasks: {', '.join(TASKS)}"
            )
        for option, release in local_releases(entry.options).items():
            if not release.exists():
                raise ConfigError(
                    f"config key tasks.{key}.options.{option}: {release_option(entry.options, option)!r} "
                    "is neither a URL nor "
                    "an existing archive or directory"
                )


def _check_intermediate_configs(config: dict[str, Any]) -> list[str]:
    """Each intermediate config's tasks; returns the baselines (configs with no task)."""
    baselines = []
    for name, inter in intermediate_entry.entries(config).items():
        for i, task in enumerate(inter.tasks):
            key = f"intermediate.{name}.tasks[{i}]"
            _need_task(config, task, key)
            if get_task(task).is_target:
                raise ConfigError(f"config key {key}: {task!r} is a target task, not an intermediate task")
            if task == "mlm":
                raise ConfigError(f"config key {key}: mix in MLM with 'mlm: true', not as a task")
        if inter.mlm:
            _need_task(config, "mlm", f"intermediate.{name}.mlm")
        if inter.trains_nothing:
            baselines.append(name)
            if inter.language is not None or inter.learning_rate is not None:
                raise ConfigError(
                    f"config key intermediate.{name}: the baseline (no tasks) takes no language or learning_rate"
                )
        if inter.translated:
            _check_translated_config(config, name, inter.tasks, inter.data_language)
    return baselines


def _check_translated_config(config: dict[str, Any], name: str, tasks: tuple[str, ...], lang: str) -> None:
    """A config translated into ``lang``: each task's published translation, or a translator."""
    for task in tasks:
        if task in PROVIDED_TRANSLATIONS:
            provided = PROVIDED_TRANSLATIONS[task]
            _need_task(config, provided, f"intermediate.{name}.language (translated {task} is read from {provided!r})")
            if lang not in task_entry.entry_of(config, provided).languages_or(()):
                raise ConfigError(
                    f"config key tasks.{provided}.languages: lacks {lang!r} needed by intermediate.{name}"
                )
            continue
        if lang not in models_of(config).translators:
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
    if task_entry.entry_of(config, target).languages is None:
        raise ConfigError(f"config key tasks.{target}.languages: a target needs its evaluation languages")
    for dep in {task.train_from, task.select_from} - {None, target}:
        _need_task(config, dep, f"{key} (trains on / selects with {dep!r})")
    if task.visual:
        check_visual_target(config, target, key)


def _check_translation_datasets(config: dict[str, Any]) -> None:
    for task, langs in translation_of(config).datasets.items():
        _need_task(config, task, f"translation.datasets.{task}")
        if get_task(task).format not in TRANSLATABLE_FORMATS:
            raise ConfigError(
                f"config key translation.datasets.{task}: {get_task(task).format} data cannot be machine-translated"
            )
        for lang in langs:
            if lang not in models_of(config).translators:
                raise ConfigError(
                    f"config key translation.datasets.{task}: no translator for {lang!r} under models.translators"
                )


def _check_tables_baseline(config: dict[str, Any], baselines: list[str]) -> None:
    baseline = tables_of(config).baseline
    if baseline not in config["intermediate"]:
        raise ConfigError(f"config key tables.baseline: {baseline!r} is not an intermediate config")
    if baseline not in baselines:
        raise ConfigError(f"config key tables.baseline: {baseline!r} has tasks; the baseline must have none")


def check_visual_target(config: dict[str, Any], target: str, key: str) -> None:
    """A target that reads images (XVNLI, MaRVL, xFlickr&CO): trained on its ``train_from``
    task's English rows with that task's image features, selected on ``select_from``'s English
    dev split, and scored with its own test images' features. Both image folders must be
    known, the task it trains from must read the same number of images per row. Zero-shot
    applies, and translate-test on the target's published translations (transfer.refusal_reason)."""
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
    declared = models_of(config).demo_pretraining
    if declared is None:
        raise ConfigError(
            "config key models.demo_pretraining: models.source demo needs the text and languages its"
            " models are pre-trained on (e.g. {text: {mnli: [train]}, languages: [de]})"
        )
    for task, splits in declared.text.items():
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
    corpora = repo_path(models_of(config).demo_corpora)
    for lang in declared.languages:
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
    if data_of(config).mirror is not None:
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

    for task, entry in task_entry.entries(config).items():
        known = task_languages(config, task)
        for i, lang in enumerate(entry.languages_or(())):
            check(f"tasks.{task}.languages[{i}]", lang, known, f" for {task}")
        extra = entry.options.get("ud_release_extra")
        for i, lang in enumerate(extra.get("languages", []) if isinstance(extra, dict) else []):
            check(f"tasks.{task}.options.ud_release_extra.languages[{i}]", lang, known, f" for {task}")
    for name, inter in intermediate_entry.entries(config).items():
        if inter.language is not None:
            check(f"intermediate.{name}.language", inter.language, LANGUAGES)
    models = models_of(config)
    for group, translators in (("translators", models.translators), ("translators_to_en", models.translators_to_en)):
        for lang in translators:
            check(f"models.{group}.{lang}", lang, LANGUAGES)
    for task, langs in translation_of(config).datasets.items():
        for i, lang in enumerate(langs):
            check(f"translation.datasets.{task}[{i}]", lang, LANGUAGES)
    for setting in transfer.configured(config):
        source = transfer.source_language(setting)
        if source is not None:
            check(f"transfer.settings.{setting}", source, LANGUAGES)


def check_transfer(config: dict[str, Any]) -> None:
    """Every transfer setting resolvable for every target it names, before any job
    (workflow/transfer.py)."""
    settings = transfer.configured(config)
    for setting, setting_cfg in settings.items():
        key = f"transfer.settings.{setting}"
        source = source_language(setting)
        if setting not in SETTINGS and source is None and shots_of(setting) is None:
            raise transfer.TransferError(
                f"config key {key}: unknown transfer setting{did_you_mean(setting, SETTINGS)}; "
                f"known: {', '.join(SETTINGS)}, {SOURCE_PREFIX}<lang>, {FEW_SHOT_PREFIX}<shots>"
            )
        if setting_cfg.get("learning_rates") is not None and shots_of(setting) is None:
            raise transfer.TransferError(
                f"config key {key}.learning_rates: only few_shot:<N> settings take learning rates"
            )
        if setting_cfg.get("model_selection", "own") != "own" and shots_of(setting) is not None:
            raise transfer.TransferError(
                f"config key {key}.model_selection: a few-shot model is selected as its target's protocol "
                "says (tasks/<target>.yaml: few_shot.selection)"
            )
        for i, seed in enumerate(setting_cfg.get("seeds") or []):
            if seed not in config["seeds"]:
                raise transfer.TransferError(f"config key {key}.seeds[{i}]: {seed} is not one of the config's seeds")
        for i, name in enumerate(setting_cfg.get("intermediate") or []):
            if name not in config["intermediate"]:
                raise transfer.TransferError(
                    f"config key {key}.intermediate[{i}]: {name!r} is not an intermediate config"
                )
        for i, target in enumerate(setting_cfg.get("targets") or []):
            if target not in config["targets"]:
                raise transfer.TransferError(f"config key {key}.targets[{i}]: {target!r} is not in targets")
            reason = transfer.refusal_reason(setting, target)
            if reason:
                raise transfer.TransferError(
                    f"config key {key}.targets[{i}]: {setting} does not apply to {target}: {reason}"
                )
        if (
            setting_cfg.get("languages") is not None
            and setting not in PER_LANGUAGE + ("translate_train_all", "in_language_all")
            and shots_of(setting) is None
        ):
            raise transfer.TransferError(
                f"config key {key}.languages: only per-language and *_all settings take languages"
            )
        if source is not None and setting_cfg.get("languages") is not None:
            raise transfer.TransferError(f"config key {key}.languages: a source setting evaluates every language")
        chosen = setting_cfg.get("languages")
        per_target = chosen if isinstance(chosen, dict) else {None: chosen or []}
        for target, langs in per_target.items():
            where = f"{key}.languages" + (f".{target}" if target else "")
            if target is not None and target not in transfer.targets(config, setting):
                raise transfer.TransferError(f"config key {where}: {target!r} is not a target of this setting")
            scope = [target] if target else transfer.targets(config, setting)
            covered = {l for t in scope for l in task_entry.entry_of(config, t).languages_or(())}
            for i, lang in enumerate(langs):
                if lang not in covered:
                    raise transfer.TransferError(
                        f"config key {where}[{i}]: {' / '.join(scope)} is not evaluated in "
                        f"{lang!r}; known (tasks.<target>.languages): {', '.join(sorted(covered))}"
                    )
        for target in transfer.targets(config, setting):
            transfer.plan(config, setting, target)
    baseline = transfer.baseline_setting(config)
    if baseline not in settings:
        raise transfer.TransferError(f"config key transfer.baseline: {baseline!r} is not one of transfer.settings")
