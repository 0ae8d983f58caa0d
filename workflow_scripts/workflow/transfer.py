"""Transfer settings (docs/protocol.md §7): how a target task is trained and what each language is
scored on. One more axis of the grid, next to the intermediate config and the seed.

A setting resolves, per target, to a *plan*: which model scores each evaluation language and
which data files (with the languages kept from each) every split is scored on. A model is a
*recipe*: its training data and its model-selection dev data, named
``<train>.dev-<dev>`` (``en.dev-en``, ``mt-de.dev-de``, ``il-all.dev-all``) so that two
settings needing the same model share one training job:

- ``zero_shot``: one model on English, selected on English dev, scores every language;
- ``source:S`` (Turc et al. 2021): one model on S's training data, selected on S's dev;
- ``translate_train``: per language T, a model on the training data machine-translated into
  T, selected on T's dev; English keeps the English model;
- ``translate_train_all``: one model on English plus every translation, selected on the
  mean of their dev scores;
- ``translate_test``: the English model scores each language's test data machine-translated
  into English (QA answers are scored on the English side, as XTREME did);
- ``in_language``: per language T, a model on T's own training data (PAN-X, UD-POS,
  TyDiQA-GoldP); ``in_language_all``: one model on every language's own training data.
- ``few_shot:<N>`` (IGLUE's few-shot protocol, spec/few_shot.py): per language T, the zero-shot
  model trained on N shots of T (the target's few-shot pool), at each learning rate of the
  protocol, the best on the English dev split machine-translated into T kept; English keeps
  the English model.

Training data in a language L != en is, in this order: the task's own training data in L
for ``il`` recipes; for ``mt`` recipes the published machine translation where one exists
(XNLI-MT for XNLI, PAWS-X's translated train), else the pipeline's OPUS-MT translation of the
English training data. ``source:S`` uses the task's own data in S where it exists, else MT.
Dev data in L: the selection task's own dev in L where it exists, else its English dev
machine-translated into L (SQuAD dev for XQuAD), else English (named in the metric file).

Standard library only: the Snakefile imports this to validate the config and build the DAG.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from workflow_scripts.spec import paths, task_entry
from workflow_scripts.spec.data_map import DataRef
from workflow_scripts.spec.few_shot import SETTING_PREFIX as FEW_SHOT_PREFIX
from workflow_scripts.spec.few_shot import recipe_name as few_shot_recipe
from workflow_scripts.spec.few_shot import shots_of
from workflow_scripts.spec.formats import get_format
from workflow_scripts.spec.tasks import RANKING, SPAN, TRANSLATABLE_FORMATS, VISUAL_RETRIEVAL, get_task
from workflow_scripts.spec.transfer_names import (  # noqa: F401 (the Snakefile reads them as transfer.*)
    MODEL_SELECTION,
    PER_LANGUAGE,
    SETTINGS,
    SOURCE_PREFIX,
    ZERO_SHOT,
    path_token,
    source_language,
)

# What a target's training data has besides English is on its task entry: published
# translations (Task.train_translations, docs/protocol.md §7), in-language training splits
# (Task.in_language_train, Task.train_missing).


class TransferError(ValueError):
    """A transfer setting that cannot run, named by its config key."""


@dataclass(frozen=True)
class Recipe:
    """One target model: what trains it and what selects it."""

    name: str
    train: tuple[DataRef, ...]
    dev: tuple[DataRef, ...]

    def describe(self) -> dict[str, Any]:
        return {"recipe": self.name, "train": [r.as_dict() for r in self.train], "dev": [r.as_dict() for r in self.dev]}


@dataclass(frozen=True)
class Plan:
    """One (setting, target): the model of each language and the data of each split."""

    setting: str
    target: str
    intermediate: tuple[str, ...]
    seeds: tuple[int, ...]
    models: dict[str, Recipe]  # evaluation language -> recipe (empty for retrieval targets)
    eval_data: dict[str, tuple[DataRef, ...]]
    text_language: str | None = None  # translate_test: rows are English, whatever their label
    notes: tuple[str, ...] = field(default=())

    @property
    def languages(self) -> list[str]:
        return sorted({lang for refs in self.eval_data.values() for r in refs for lang in r.languages})

    def recipes(self) -> list[Recipe]:
        return sorted({r.name: r for r in self.models.values()}.values(), key=lambda r: r.name)

    def describe(self) -> dict[str, Any]:
        """What the metric file records (and what makes its evaluation rerun when it changes)."""
        return {
            "setting": self.setting,
            "text_language": self.text_language,
            "notes": list(self.notes),
            "models": {lang: recipe.describe() for lang, recipe in sorted(self.models.items())},
            "data": {split: [r.as_dict() for r in refs] for split, refs in self.eval_data.items()},
        }


# ----- names ------------------------------------------------------------------------------


def configured(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings of the config (zero-shot alone when it has no ``transfer`` block)."""
    settings = (config.get("transfer") or {}).get("settings") or {ZERO_SHOT: {}}
    return {name: dict(setting_cfg or {}) for name, setting_cfg in settings.items()}


def baseline_setting(config: dict[str, Any]) -> str:
    return (config.get("transfer") or {}).get("baseline", ZERO_SHOT)


def data_path(task: str, split: str) -> str:
    return f"{paths.results()}/data/{task}/{split}.parquet"


def translated_path(task: str, lang: str, split: str) -> str:
    return f"{paths.results()}/data_mt/{task}/{lang}/{split}.parquet"


def translate_test_path(task: str, lang: str) -> str:
    return f"{paths.results()}/translate_test/{task}/{lang}/test.parquet"


# ----- data per language -----------------------------------------------------------------


class _Resolver:
    """Training and dev data of one target in any language, from the config's sources."""

    def __init__(self, config: dict[str, Any], target: str, key: str) -> None:
        self.config, self.target, self.key = config, target, key
        self.task = get_task(target)
        self.languages = list(task_entry.entry_of(config, target).languages_or(()))

    def fail(self, message: str) -> TransferError:
        return TransferError(f"config key {self.key}: {message}")

    def has_own_train(self, lang: str) -> bool:
        return lang == "en" or (
            self.task.in_language_train and lang in self.languages and lang not in self.task.train_missing
        )

    def mt_train(self, lang: str) -> DataRef:
        train_from = self.task.train_from
        published = self.task.train_translations
        if published:
            entry = task_entry.find(self.config, published)
            if entry is None:
                raise self.fail(
                    f"{self.target} in {lang!r} trains on the published translations of task "
                    f"{published!r}, which has no entry under 'tasks'"
                )
            if lang not in entry.languages_or(()):
                raise self.fail(
                    f"no published {self.target} training translation in {lang!r}: tasks.{published}.languages lacks it"
                )
            return DataRef(data_path(published, "train"), (lang,), "published_mt")
        if not get_format(self.task.format).translatable or get_task(train_from).format not in TRANSLATABLE_FORMATS:
            raise self.fail(
                f"{self.target} ({self.task.format}) training data cannot be machine-translated "
                "(label projection is out of scope)"
            )
        self.need_translator(lang)
        return DataRef(translated_path(train_from, lang, "train"), (lang,), "pipeline_mt")

    def own_train(self, lang: str) -> DataRef:
        if not self.has_own_train(lang):
            raise self.fail(f"{self.target} has no training data of its own in {lang!r}")
        if lang == "en":
            return DataRef(data_path(self.task.train_from, "train"), ("en",), "english")
        return DataRef(data_path(self.task.train_from, "train"), (lang,), "in_language")

    def need_translator(self, lang: str, to_english: bool = False) -> None:
        key = "translators_to_en" if to_english else "translators"
        if lang not in self.config["models"].get(key, {}):
            raise self.fail(f"{self.target} in {lang!r} needs a translator: models.{key} has no {lang!r}")

    def dev(self, lang: str) -> DataRef:
        """Model-selection dev data in ``lang`` (see the module doc for the order)."""
        select = self.task.select_from
        if lang == "en":
            return DataRef(data_path(select, "dev"), ("en",), "english")
        select_task = get_task(select)
        own = task_entry.find(self.config, select)
        own_langs = own.languages_or(()) if own is not None else ()
        if select_task.is_target and lang in own_langs and lang not in select_task.dev_missing:
            return DataRef(data_path(select, "dev"), (lang,), "human")
        if (
            "dev" in select_task.splits
            and select_task.format in TRANSLATABLE_FORMATS
            and lang in self.config["models"].get("translators", {})
        ):
            return DataRef(translated_path(select, lang, "dev"), (lang,), "pipeline_mt")
        return DataRef(data_path(select, "dev"), ("en",), "english")


def languages_for(setting_cfg: dict[str, Any], target: str) -> list[str] | None:
    """A setting's ``languages`` for one target: a list for every target, or a map per target
    (None: every language the target has data for)."""
    chosen = setting_cfg.get("languages")
    return chosen.get(target) if isinstance(chosen, dict) else chosen


def _recipe(train: list[DataRef], dev: list[DataRef], train_key: str, dev_key: str) -> Recipe:
    return Recipe(f"{train_key}.dev-{dev_key}", tuple(train), tuple(dev))


def _merge(refs: list[DataRef]) -> list[DataRef]:
    """Refs to one file become one ref with their languages (XNLI dev in en, de, ...)."""
    merged: dict[str, tuple[list[str], list[str]]] = {}
    for r in refs:
        langs, kinds = merged.setdefault(r.path, ([], []))
        langs.extend(l for l in r.languages if l not in langs)
        kinds.extend(k for k in [r.kind] if k not in kinds)
    return [DataRef(path, tuple(langs), "+".join(kinds)) for path, (langs, kinds) in merged.items()]


def refusal_reason(setting: str, target: str) -> str | None:
    """Why a setting does not apply to a target (None: it does)."""
    task = get_task(target)
    if setting.startswith(FEW_SHOT_PREFIX):
        return _few_shot_refusal(shots_of(setting) or 0, target)
    if task.is_retrieval:
        return "retrieval targets are not trained; only zero_shot applies"
    if setting != ZERO_SHOT and task.visual and not (setting == "translate_test" and task.test_translations):
        allowed = (
            "zero_shot and translate_test (its published translations) apply"
            if task.test_translations
            else "zero_shot applies"
        )
        return f"{target} reads images and trains on its English image task only; only {allowed}"
    if setting != ZERO_SHOT and (task.format == RANKING or task.stages):
        # XTREME-R defines these on English training data only; their other-language data
        # (translated SIQA, COPA, Wikipedia pairs) is not part of the benchmark.
        return f"{target} trains on English data only here; only zero_shot applies"
    if setting.startswith("translate_train") and not get_format(task.format).translatable:
        return f"{task.format} tasks get no translate settings (label projection is out of scope, as in XTREME)"
    if setting == "translate_test" and not (task.test_translations or get_format(task.format).translate_test):
        return f"{task.format} test data cannot be translated and scored"  # (published translations aside)
    if setting.startswith("in_language") and not task.in_language_train:
        return f"{target} has no training data outside English"
    return None


def _few_shot_refusal(shots: int, target: str) -> str | None:
    protocol = get_task(target).few_shot
    if protocol is None:
        return f"{target} has no few-shot protocol (its catalogue entry's few_shot)"
    if shots not in protocol.shots:
        return f"{target}'s few-shot files have {', '.join(map(str, protocol.shots))} shots, not {shots}"
    if get_task(target).format == VISUAL_RETRIEVAL and shots < 2:
        # its training contrasts each caption with the other rows of its batch (multimodal/prefix.py)
        return f"one shot is one image: {target}'s in-batch contrastive loss over a batch of one is zero"
    return None


def plan(config: dict[str, Any], setting: str, target: str) -> Plan:
    """The plan of one (setting, target); TransferError names the key when it cannot run."""
    planner = _Planner(config, setting, target)
    source = source_language(setting)
    if planner.task.is_retrieval or setting == ZERO_SHOT or source == "en":
        return planner.zero_shot()
    if source:
        return planner.from_source(source)
    if setting in ("translate_train", "in_language"):
        return planner.per_language(in_language=setting == "in_language")
    if setting in ("translate_train_all", "in_language_all"):
        return planner.all_languages(in_language=setting == "in_language_all")
    if setting == "translate_test":
        return planner.translate_test()
    if shots_of(setting):
        return planner.few_shot(shots_of(setting))
    raise TransferError(f"config key {planner.key}: unknown transfer setting {setting!r}")


class _Planner:
    """What every setting's plan of one target shares: the resolver of its data files, the
    intermediate configs and seeds it runs, how it selects models, its English recipe."""

    def __init__(self, config: dict[str, Any], setting: str, target: str) -> None:
        setting_cfg = configured(config)[setting]
        self.setting, self.target = setting, target
        self.key = f"transfer.settings.{setting}"
        self.r = _Resolver(config, target, self.key)
        self.task = self.r.task
        self.intermediate = tuple(setting_cfg.get("intermediate") or config["intermediate"])
        self.seeds = tuple(setting_cfg.get("seeds") or config["seeds"])
        self.selection = setting_cfg.get("model_selection", "own")
        self.splits = tuple(self.task.eval_splits)
        chosen = languages_for(setting_cfg, target)  # intersected with the target's languages (check() vets them)
        self.chosen = chosen
        self.others = [l for l in self.r.languages if l != "en" and (chosen is None or l in chosen)]

    def _plan(self, models: dict[str, Recipe], langs: list[str] | None = None, **extra: Any) -> Plan:
        """A plan scoring ``langs`` (every language of the target) on their own data files."""
        langs = self.r.languages if langs is None else langs
        data = {s: self._own_data(s, langs) for s in self.splits}
        return Plan(self.setting, self.target, self.intermediate, self.seeds, models, data, **extra)

    def _own_data(self, split: str, langs: list[str]) -> tuple[DataRef, ...]:
        langs = [l for l in langs if l not in self.task.dev_missing] if split == "dev" else langs
        return (DataRef(data_path(self.target, split), tuple(langs), "human"),)

    def _english(self) -> Recipe:
        return _recipe([self.r.own_train("en")], [self.r.dev("en")], "en", "en")

    def _per_language_dev(self, lang: str) -> tuple[list[DataRef], str]:
        # Named by the dev data actually used: a language without dev data selects on English.
        ref = self.r.dev("en" if self.selection == "en" else lang)
        return [ref], "-".join(ref.languages)

    def zero_shot(self) -> Plan:
        """One English model scores every language (a retrieval target: no model at all)."""
        return self._plan({} if self.task.is_retrieval else dict.fromkeys(self.r.languages, self._english()))

    def from_source(self, source: str) -> Plan:
        # S need not be an evaluation language: Turc et al. also train on MT-only languages.
        r = self.r
        train = r.own_train(source) if r.has_own_train(source) else r.mt_train(source)
        dev, dev_key = self._per_language_dev(source)
        kind = "il" if train.kind == "in_language" else "mt"
        return self._plan(dict.fromkeys(r.languages, _recipe([train], dev, f"{kind}-{source}", dev_key)))

    def per_language(self, in_language: bool) -> Plan:
        """translate_train / in_language: a model per language, English keeps the English one."""
        r, others = self.r, self.others
        if in_language:
            missing = [l for l in others if not r.has_own_train(l)]
            if missing and self.chosen is not None:
                raise r.fail(f"{self.target} has no training data of its own in {missing}")
            others = [l for l in others if r.has_own_train(l)]
        models = {"en": self._english()}
        for lang in others:
            train = r.own_train(lang) if in_language else r.mt_train(lang)
            dev, dev_key = self._per_language_dev(lang)
            models[lang] = _recipe([train], dev, f"{'il' if in_language else 'mt'}-{lang}", dev_key)
        langs = ["en"] + others if "en" in r.languages else others
        with_what = "training data" if in_language else "a translation"
        notes = (
            () if len(langs) == len(r.languages) else (f"evaluated on {langs} only (the languages with {with_what})",)
        )
        return self._plan({l: models[l] for l in langs}, langs, notes=notes)

    def all_languages(self, in_language: bool) -> Plan:
        """translate_train_all / in_language_all: one model on English and every other language."""
        r = self.r
        others = [l for l in self.others if r.has_own_train(l)] if in_language else self.others
        train = [r.own_train("en")] + [r.own_train(l) if in_language else r.mt_train(l) for l in others]
        train_langs = ["en"] + others
        dev, dev_key = ([r.dev("en")], "en") if self.selection == "en" else ([r.dev(l) for l in train_langs], "all")
        recipe = _recipe(_merge(train), _merge(dev), "il-all" if in_language else "mt-all", dev_key)
        return self._plan(dict.fromkeys(r.languages, recipe))

    def translate_test(self) -> Plan:
        """Each language's test data machine-translated into English, scored by the English
        model: the published translations where the target has them (IGLUE's), else the
        pipeline's."""
        r, others = self.r, self.others
        langs = (["en"] if "en" in r.languages else []) + others
        test = [DataRef(data_path(self.target, "test"), ("en",), "human")] if "en" in langs else []
        if self.task.test_translations:
            test += self._published_test_translations(others)
            notes = (f"test data in published machine translations into English ({self.task.test_translations})",)
        else:
            for lang in others:
                r.need_translator(lang, to_english=True)
            test += [DataRef(translate_test_path(self.target, lang), (lang,), "translate_test") for lang in others]
            notes = ("test data machine-translated into English and scored by the English model",)
        if self.task.format == SPAN:
            notes += (
                "QA answers are scored on the English side against the re-aligned gold answers "
                "(XTREME); questions lost in translation are dropped, so scores are not directly "
                "comparable with the other settings",
            )
        models = dict.fromkeys(langs, self._english())
        return Plan(
            self.setting,
            self.target,
            self.intermediate,
            self.seeds,
            models,
            {"test": tuple(test)},
            text_language="en",
            notes=notes,
        )

    def few_shot(self, shots: int) -> Plan:
        """Per language T of the target's few-shot pool, a model trained from the zero-shot
        one on N shots of T, selected on the English dev split machine-translated into T."""
        protocol = self.task.few_shot
        pool = task_entry.find(self.r.config, protocol.task)
        if pool is None:
            raise self.r.fail(
                f"{self.target}'s shots are task {protocol.task!r}, which has no entry under 'tasks' "
                f"(give it the release folder: tasks.{protocol.task}.options.path)"
            )
        pool_langs = pool.languages or get_task(protocol.task).languages
        if self.chosen is not None and (missing := [l for l in self.chosen if l not in pool_langs and l != "en"]):
            raise self.r.fail(f"{self.target} has no shots in {missing}: tasks.{protocol.task}.languages")
        others = [l for l in self.others if l in pool_langs]
        english = protocol.selection == "english"
        models = {"en": self._english()}
        for lang in others:
            train = DataRef(data_path(protocol.task, "train"), (lang,), "few_shot", shots)
            dev = DataRef(
                data_path(protocol.task, "dev"),
                ("en",) if english else (lang,),
                "english" if english else "published_mt",
            )
            models[lang] = Recipe(few_shot_recipe(shots, lang, dev.languages[0]), (train,), (dev,))
        langs = (["en"] if "en" in self.r.languages else []) + others
        selected_on = "English dev split" if english else "English dev split machine-translated into the language"
        notes = (
            f"{shots} shots per language on top of the zero-shot model, the learning rate selected on the "
            f"{selected_on} (IGLUE's few-shot protocol)",
        )
        if len(langs) < len(self.r.languages):
            notes += (f"evaluated on {langs} only (the languages with shots: tasks.{protocol.task}.languages)",)
        return self._plan({l: models[l] for l in langs}, langs, notes=notes)

    def _published_test_translations(self, langs: list[str]) -> list[DataRef]:
        published = self.task.test_translations
        entry = task_entry.find(self.r.config, published)
        if entry is None:
            raise self.r.fail(
                f"{self.target}'s translate-test data are the published translations of task {published!r}, "
                f"which has no entry under 'tasks' (give it the release folder: tasks.{published}.options.path)"
            )
        missing = [lang for lang in langs if lang not in entry.languages_or(())]
        if missing:
            raise self.r.fail(
                f"no published translation of {self.target}'s test data from {missing}: tasks.{published}.languages"
            )
        return [DataRef(data_path(published, "test"), (lang,), "published_mt") for lang in langs]


# ----- the whole grid ---------------------------------------------------------------------


def targets(config: dict[str, Any], setting: str) -> list[str]:
    """The targets a setting runs on: those it names, else every target it applies to."""
    named = configured(config)[setting].get("targets")
    if named:
        return list(named)
    return [t for t in config["targets"] if setting == ZERO_SHOT or refusal_reason(setting, t) is None]


def plans(config: dict[str, Any]) -> list[Plan]:
    """Every (setting, target) plan. Input functions ask for them several times per job, so
    they are computed once per distinct config, keyed by the (small) part a plan reads."""
    view = {
        # the data paths' root: a plan computed before the run's results folder was set must
        # not be served after it
        "results": paths.results(),
        "transfer": config.get("transfer"),
        "targets": config["targets"],
        "seeds": config["seeds"],
        "intermediate": dict.fromkeys(config["intermediate"]),
        "tasks": {
            name: {"languages": list(entry.languages)} if entry.languages is not None else {}
            for name, entry in task_entry.entries(config).items()
        },
        "models": {key: dict.fromkeys(config["models"].get(key, {})) for key in ("translators", "translators_to_en")},
    }
    return list(_plans(json.dumps(view, sort_keys=True)))


@functools.lru_cache(maxsize=8)
def _plans(config_json: str) -> tuple[Plan, ...]:
    config = json.loads(config_json)
    return tuple(plan(config, setting, target) for setting in configured(config) for target in targets(config, setting))


def find_plan(config: dict[str, Any], token: str, target: str) -> Plan:
    for p in plans(config):
        if path_token(p.setting) == token and p.target == target:
            return p
    raise KeyError(f"no transfer setting {token!r} runs {target}")


def find_recipe(config: dict[str, Any], target: str, name: str) -> Recipe:
    for p in plans(config):
        if p.target == target:
            for recipe in p.models.values():
                if recipe.name == name:
                    return recipe
    raise KeyError(f"no transfer setting trains {target} with recipe {name!r}")


def pipeline_translations(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(task, language, split) of every English file the settings need machine-translated."""
    jobs = set()
    for p in plans(config):
        for recipe in p.models.values():
            for ref in recipe.train + recipe.dev:
                if ref.kind == "pipeline_mt":
                    task, lang, split = ref.path.removesuffix(".parquet").split("/")[-3:]
                    jobs.add((task, lang, split))
    return sorted(jobs)


def test_translations(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(target, language) of every test set translated into English."""
    return sorted(
        {
            (p.target, lang)
            for p in plans(config)
            for ref in p.eval_data.get("test", ())
            if ref.kind == "translate_test"
            for lang in ref.languages
        }
    )


# ----- what a grid costs ------------------------------------------------------------------


def summary(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Per setting, in config order: its metric files, the target trainings it adds (a model
    an earlier setting already trains is not counted again) and their training data in units
    of one English training set (a translation is one unit; own data is counted per language,
    whose sizes differ)."""
    trained: set[tuple[str, str, str, int]] = set()
    rows = []
    for setting in configured(config):
        metric_files, new_jobs, units = 0, 0, 0
        for p in (p for p in plans(config) if p.setting == setting):
            metric_files += len(p.intermediate) * len(p.seeds)
            for name in p.intermediate:
                for recipe in p.recipes():
                    for seed in p.seeds:
                        if (name, p.target, recipe.name, seed) in trained:
                            continue
                        trained.add((name, p.target, recipe.name, seed))
                        new_jobs += 1
                        units += sum(len(r.languages) for r in recipe.train)
        rows.append(
            {
                "setting": setting,
                "targets": targets(config, setting),
                "metric_files": metric_files,
                "target_trainings": new_jobs,
                "training_units": units,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    import argparse

    from workflow_scripts.workflow import config_layers
    from workflow_scripts.workflow.grid_checks import check_transfer

    ap = argparse.ArgumentParser(description="What each transfer setting of a config adds to the grid.")
    ap.add_argument("configfile")
    args = ap.parse_args(argv)
    try:
        config = config_layers.load([args.configfile])
        check_transfer(config)
    except (config_layers.ConfigLayerError, TransferError) as err:
        raise SystemExit(f"error: {err}") from None
    print("| setting | targets | metric files | target trainings added | training data (English-set units) |")
    print("|---|---|---:|---:|---:|")
    for row in summary(config):
        print(
            f"| {row['setting']} | {', '.join(row['targets'])} | {row['metric_files']} | "
            f"{row['target_trainings']} | {row['training_units']} |"
        )


if __name__ == "__main__":
    main()
