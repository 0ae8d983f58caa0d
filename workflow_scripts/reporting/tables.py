"""Roll the per-run metric files up into the paper's tables (docs/protocol.md §5, §7).

- runs.csv: every score of every run, long format (setting, intermediate, target, seed,
  split, language, metric, value), language "avg" being the unweighted mean over languages.
- main.md / main.csv: one block per transfer setting, the baseline setting first: rows =
  intermediate configs, columns = targets + Avg. Each cell is the median over seeds of the
  run's test-language average; the baseline row is absolute, the others are differences to
  it. QA cells show F1 / EM; Avg is the XTREME score over the targets present (QA counts
  (F1 + EM) / 2). For a benchmark whose paper reports them (XTREME-R, Ruder et al. 2021;
  ``Benchmark.category_layout``), Avg is followed by the benchmark's category averages and its overall
  score (``benchmark.category_scores``), each left empty when a task of it is not in the
  grid, as the official scorer leaves them out; XTREME's table keeps the Hu et al. layout
  (targets + Avg). The notes say what keeps a number from comparing with published ones:
  the benchmark's notes for the targets shown, and each target averaged over fewer (or
  other) languages than the benchmark defines.
- best.csv and the "best models" row of main.md (docs/protocol.md §5), baseline setting.
- per_language.md / per_language.csv: per setting and target, rows = configs, columns =
  languages + Avg, medians over seeds (absolute).
- settings.md / settings.csv: XTREME's baselines table, per intermediate config: rows =
  settings, columns = targets + Avg (absolute), and the difference of each row's Avg to the
  baseline setting's.
- source_languages.md / source_languages.csv (Turc et al. 2021): per config and target, the
  relative zero-shot ability Z(S -> T) = 100 E(M^S, T) / E(M^T, T) of every source language
  S, and its advantage over English Z(S -> T) - Z(en -> T), per target language and averaged.

- translated.md / translated.csv: translated configs next to their English-data configs,
  in the translation's language (docs/protocol.md §5).
- translation.md / translation.csv: data survival, span re-alignment and cache hits per
  translated split; BLEU and chrF per language.

CLI: ``python -m workflow_scripts.reporting.tables results --settings JSON --metrics FILE ... --main-md F ...``
and ``python -m workflow_scripts.reporting.tables translation --stats F ... --quality F ... --md F --csv F``.
"""

from __future__ import annotations

import argparse
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, read_json, setup_logging
from workflow_scripts.reporting import significance
from workflow_scripts.reporting.seeds import over_seeds
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import BenchmarkDescription, TableSettings
from workflow_scripts.spec.result_files import TRAIN_LOG, MetricFile, TrainLog
from workflow_scripts.spec.tasks import get_task, primary_metric, qa_answer_score
from workflow_scripts.spec.transfer_names import ZERO_SHOT, source_language

QA_METRICS = ("f1", "exact_match")
CONTAMINATED = "‡"  # a target the backbone saw in training: not zero-shot
RUN_COLUMNS = ["setting", "intermediate", "target", "seed", "split", "language", "metric", "value"]


def load_runs(files: list[str]):
    import pandas as pd

    records = []
    for path in files:
        m = MetricFile.read(path)
        run = m.identified(path)
        key = (run.setting, run.intermediate, run.target, run.seed)
        for split, per_lang in m.scores.items():
            for lang, scores in per_lang.items():
                for metric, value in scores.items():
                    records.append((*key, split, lang, metric, value))
            if split not in m.average:
                raise InputError(f"metric file {path}: split {split!r} has scores but no average")
            for metric, value in m.average[split].items():
                records.append((*key, split, "avg", metric, value))
        if m.selection is not None:  # the dev score that selected the (single) target model
            records.append((*key, "selection", "en", "score", m.selection.score))
    return pd.DataFrame.from_records(records, columns=RUN_COLUMNS)


LEAKED = "§"  # a run whose intermediate data hold the target's test images or texts (data/leakage.py)


def leaked_runs(files: list[str]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(setting, config, target) -> what its runs' intermediate tasks share with the target's
    test data, from the metric files that record an overlap."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for path in files:
        m = MetricFile.read(path)
        if m.leakage:
            run = m.identified(path)
            key = (run.setting, run.intermediate, run.target)
            found = out.setdefault(key, [])
            found += [item for item in m.leakage if item not in found]
    return out


def leakage_note(leaked: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    if not leaked:
        return ""
    pairs = "; ".join(
        f"{config} on {target}: "
        + ", ".join(
            f"{item['task']} shares {item['images']} images and {item['texts']} texts "
            f"({item['rows_affected']} of {item['target_rows']} test rows)"
            for item in items
        )
        for (config, target), items in sorted(leaked.items())
    )
    return (
        f"{LEAKED} the config's intermediate data hold test images or texts of the target, so its score there is "
        f"not zero-shot (data/leakage/): {pairs}.\n"
    )


def of_setting(runs, setting: str):
    return runs[runs["setting"] == setting].drop(columns="setting")


OVERALL = "overall"
CATEGORY_HEADERS = {
    benchmark.CLASSIFICATION: "Classification",
    benchmark.STRUCTURED: "Struct. pred.",
    benchmark.QA: "QA",
    benchmark.RETRIEVAL: "Retrieval",
    OVERALL: "Overall",
}
QA_CONVENTION = "QA counts (F1 + EM) / 2 in the averages."


def category_columns(settings: TableSettings) -> list[str]:
    """The main table's category and overall columns after Avg (none in XTREME's layout)."""
    bench = settings.benchmark
    if not bench.registered.category_layout:
        return []
    return [*bench.categories_in_order(), OVERALL]


def category_header(column: str) -> str:
    return CATEGORY_HEADERS.get(column, column.capitalize())


def benchmark_notes(settings: TableSettings) -> list[str]:
    """Footnotes of the main table (Markdown and LaTeX): categories a grid cannot fill, the
    benchmark's notes on the targets shown, and targets averaged over other languages than
    the benchmark's (not comparable with its published scores)."""
    bench = settings.benchmark
    notes = category_notes(bench, settings.targets) if category_columns(settings) else []
    notes += [f"{target}: {bench.notes[target]}." for target in settings.targets if target in bench.notes]
    if bench.average_excludes:  # IGLUE's convention: scored, shown per language, not averaged
        notes.append(
            f"Every average leaves out {', '.join(bench.average_excludes)}, as {bench.title} averages "
            "(its scores are in the per-language table)."
        )
    for target in settings.targets:
        note = language_note(bench, target, settings.target_languages.get(target))
        if note:
            notes.append(note)
    return notes


def category_notes(bench: BenchmarkDescription, targets: tuple[str, ...]) -> list[str]:
    """What the category and overall columns average, and which of them this grid cannot fill."""
    categories = bench.categories_in_order()
    cats = "; ".join(f"{category_header(c)}: {', '.join(ts)}" for c, ts in categories.items())
    all_targets = [t for ts in categories.values() for t in ts]
    notes = [
        f"{bench.title} categories ({cats}): the mean of their task scores; Overall: the mean of all "
        f"{len(all_targets)} task scores; {QA_CONVENTION}"
    ]
    missing = {c: [t for t in ts if t not in targets] for c, ts in categories.items()}
    empty = [c for c, m in missing.items() if m]
    if empty:
        gaps = "; ".join(f"{category_header(c)}: {', '.join(missing[c])}" for c in empty)
        notes.append(
            f"– in {', '.join(category_header(c) for c in [*empty, OVERALL])}: this grid lacks tasks "
            f"of theirs ({gaps}); a category is averaged over all its tasks or left empty, as the "
            "official scorer does."
        )
    return notes


def language_note(bench: BenchmarkDescription, target: str, ran: tuple[str, ...] | None) -> str | None:
    """The note on a target run in fewer or other languages than the benchmark's (None: the same)."""
    official = bench.languages.get(target)
    if official is None or ran is None:
        return None
    covered = [l for l in official if l in ran]
    extra = [l for l in ran if l not in official]
    if len(covered) == len(official) and not extra:
        return None
    text = f"{target}: averaged over {len(covered)} of {len(official)} languages"
    if extra:
        text += f" and over {', '.join(extra)}, which {bench.title} does not evaluate {target} in"
    return text + f": not comparable with published {bench.title} scores."


def metrics_shown(target: str) -> tuple[str, ...]:
    metric = get_task(target).metric
    return QA_METRICS if metric in ("squad_v1", "squad_v2", "mlqa") else (primary_metric(metric),)


def medians(runs, split: str = "test"):
    """Median over seeds per (intermediate, target, language, metric)."""
    sub = runs[runs["split"] == split]
    return over_seeds(sub.groupby(["intermediate", "target", "language", "metric"], sort=False)["value"])


def main_table(runs, settings: TableSettings):
    """(absolute medians, shown values) as DataFrames indexed by config."""
    import pandas as pd

    med = medians(runs)
    configs, targets, baseline = list(settings.intermediate), settings.targets, settings.baseline
    absolute = pd.DataFrame(index=configs, dtype=float)
    for target in targets:
        for metric in metrics_shown(target):
            col = f"{target}.{metric}" if len(metrics_shown(target)) > 1 else target
            absolute[col] = [med.get((c, target, "avg", metric), float("nan")) for c in configs]
    task_scores = pd.DataFrame(index=configs, dtype=float)
    for target in targets:
        metric = get_task(target).metric
        task_scores[target] = [
            qa_answer_score(metric, {m: med.get((c, target, "avg", m), float("nan")) for m in metrics_shown(target)})
            for c in configs
        ]
    absolute["avg"] = task_scores.mean(axis=1, skipna=False)
    columns = category_columns(settings)
    if columns:
        bench = settings.benchmark.registered
        # None: a task of the category is not in the grid; a target of the grid without a
        # score (NaN) leaves its category NaN too.
        found = [benchmark.category_scores({t: float(task_scores.loc[c, t]) for t in targets}, bench) for c in configs]
        for column in columns:
            absolute[column] = [float("nan") if f[column] is None else f[column] for f in found]
    shown = absolute.copy()
    if baseline is None:  # a setting run without the baseline config: every row absolute
        return absolute, shown
    if baseline not in absolute.index:
        raise InputError(f"baseline config {baseline!r} has no runs")
    for c in configs:
        if c != baseline:
            shown.loc[c] = absolute.loc[c] - absolute.loc[baseline]
    return absolute, shown


def best_models(runs, settings: TableSettings):
    """docs/protocol.md §5 "Best models": per target, the config with the best median dev score,
    then its best seed by dev score, reported on test. The dev score is the English dev
    score that selected the target model; retrieval targets use their dev average (BUCC) and
    have none without a dev split (Tatoeba)."""
    import pandas as pd

    rows = []
    for target in settings.targets:
        sub = runs[runs["target"] == target]
        dev = sub[sub["split"] == "selection"]
        if dev.empty:
            dev = sub[
                (sub["split"] == "dev")
                & (sub["language"] == "avg")
                & (sub["metric"] == primary_metric(get_task(target).metric))
            ]
        if dev.empty:
            continue
        per_run = dev.set_index(["intermediate", "seed"])["value"]
        best_config = over_seeds(per_run.groupby(level=0)).idxmax()
        best_seed = per_run.loc[best_config].idxmax()
        test = sub[
            (sub["split"] == "test")
            & (sub["language"] == "avg")
            & (sub["intermediate"] == best_config)
            & (sub["seed"] == best_seed)
        ]
        for metric in metrics_shown(target):
            value = test.loc[test["metric"] == metric, "value"]
            rows.append((target, best_config, int(best_seed), metric, float(value.iloc[0])))
    return pd.DataFrame.from_records(rows, columns=["target", "intermediate", "seed", "metric", "value"])


def render_best(best, settings: TableSettings) -> str:
    decimals = settings.decimals
    cells = []
    for target in settings.targets:
        sub = best[best["target"] == target]
        if sub.empty:
            cells.append("–")
            continue
        values = " / ".join(f"{v:.{decimals}f}" for v in sub["value"])
        cells.append(f"{values} ({sub['intermediate'].iloc[0]}, seed {sub['seed'].iloc[0]})")
    return "| best models | " + " | ".join(cells) + " | |\n"


def render_main(
    shown,
    settings: TableSettings,
    best=None,
    marks: set[tuple[str, str]] = frozenset(),
    leaked: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
) -> str:
    """The main table in Markdown; ``marks``: (config, target) cells whose difference to the
    baseline is marked significant (significance.py); ``leaked``: (config, target) cells whose
    intermediate data overlap the target's test data (leaked_runs)."""
    leaked = leaked or {}
    decimals, baseline = settings.decimals, settings.baseline
    contaminated = set(settings.contaminated_targets) & set(settings.targets)
    categories = category_columns(settings)
    header = (
        ["Intermediate task"]
        + [t + (f" {CONTAMINATED}" if t in contaminated else "") for t in settings.targets]
        + ["Avg"]
        + [category_header(c) for c in categories]
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for c in shown.index:
        sign = "" if c == baseline or baseline is None else "+"
        cells = []
        for target in settings.targets:
            metrics = metrics_shown(target)
            cols = [f"{target}.{m}" for m in metrics] if len(metrics) > 1 else [target]
            cells.append(
                " / ".join(_fmt(shown.loc[c, col], decimals, sign) for col in cols)
                + (f" {significance.MARKER}" if (c, target) in marks else "")
                + (f" {LEAKED}" if (c, target) in leaked else "")
            )
        cells += [_fmt(shown.loc[c, col], decimals, sign) for col in ["avg", *categories]]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    rows = (
        f"Row `{baseline}` is absolute; the other rows are differences to it."
        if baseline is not None
        else "Every row is absolute (this setting was not run with the baseline config)."
    )
    note = (
        f"\nTest scores: median over seeds {list(settings.seeds)} of each run's mean over the target's languages. "
        f"{rows} QA cells: F1 / EM. Avg: mean over the targets shown, QA as (F1 + EM) / 2.\n"
    )
    if baseline is not None and len(shown.index) > 1:
        note += significance.METHOD + " F1 for QA.\n"
    if contaminated:
        source = settings.backbone.contamination_source or "its training mixture"
        note += (
            f"{CONTAMINATED} {', '.join(sorted(contaminated))}: backbone {settings.backbone_name} saw this "
            f"target's data in {source}; its scores are not zero-shot.\n"
        )
    if best is not None:
        lines.append(render_best(best, settings).rstrip("\n") + " |" * len(categories))
        note += (
            "Best models: per target, the config with the best median (English) dev score and its best "
            "seed by dev score, absolute test score; – where the target has no dev data.\n"
        )
    note += leakage_note({k: v for k, v in leaked.items() if k[0] in set(shown.index)})
    note += "".join(f"{n}\n" for n in benchmark_notes(settings))
    return "\n".join(lines) + "\n" + note


def _fmt(value: float, decimals: int, sign: str) -> str:
    if value != value:  # NaN
        return "–"
    text = f"{value:.{decimals}f}"
    return ("+" + text) if sign and value >= 0 else text


def per_language(runs, settings: TableSettings) -> tuple[str, Any]:
    import pandas as pd

    med = medians(runs)
    decimals = settings.decimals
    parts, frames = [], []
    for target in settings.targets:
        metric = metrics_shown(target)[0]
        sub = med.xs((target, metric), level=("target", "metric")).unstack("language")
        langs = [l for l in sub.columns if l != "avg"] + ["avg"]
        sub = sub.reindex(index=[c for c in settings.intermediate if c in sub.index], columns=langs)
        frames.append(sub.assign(target=target, metric=metric))
        parts.append(
            f"## {target} ({metric}, test, median over seeds)\n\n"
            + sub.rename(columns={"avg": "Avg"}).to_markdown(floatfmt=f".{decimals}f")
            + "\n"
        )
    long = pd.concat(frames).reset_index(names="intermediate")
    return "\n".join(parts), long


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_csv(path: str, frame, index: bool) -> None:
    buf = io.StringIO()
    frame.to_csv(buf, index=index, float_format="%.4f")
    write_text(path, buf.getvalue())


def translated_table(runs, settings: TableSettings) -> tuple[str, Any]:
    """docs/protocol.md §5: each translated config next to its English-data config, evaluated
    only on the translation's language, for every target that has that language."""
    import pandas as pd

    med = medians(runs)
    decimals = settings.decimals
    records, parts = [], []
    by_lang: dict[str, list[tuple[str, str | None]]] = {}
    for name, info in settings.translated.items():
        by_lang.setdefault(info.language, []).append((name, info.english))
    for lang, pairs in sorted(by_lang.items()):
        targets = [t for t in settings.targets if lang in settings.target_languages[t]]
        lines = [
            f"## {lang}\n",
            "| config | data | " + " | ".join(targets) + " |",
            "|---|---|" + "---:|" * len(targets),
        ]
        for name, english in pairs:
            for config, data in ((english, "en"), (name, lang)):
                if config is None:
                    continue
                cells = []
                for target in targets:
                    metrics = metrics_shown(target)
                    values = [med.get((config, target, lang, m), float("nan")) for m in metrics]
                    records += [(lang, config, data, target, m, v) for m, v in zip(metrics, values)]
                    cells.append(" / ".join(_fmt(v, decimals, "") for v in values))
                lines.append(f"| {config} | {data} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n")
    frame = pd.DataFrame.from_records(
        records, columns=["language", "intermediate", "data", "target", "metric", "median"]
    )
    note = (
        "Test scores in the translation's language only, median over seeds; `data` is the language of the "
        "intermediate-task training data.\n"
    )
    return ("\n".join(parts) + "\n" + note) if parts else "No translated intermediate configs in this grid.\n", frame


def setting_view(runs, settings: TableSettings, setting: str) -> tuple[Any, TableSettings]:
    """One setting's runs and the table settings restricted to the configs, seeds and targets
    it ran (the baseline None where the setting did not run it)."""
    sub = of_setting(runs, setting)
    present = set(sub["intermediate"])
    view = settings.replace(
        intermediate=[c for c in settings.intermediate if c in present],
        seeds=sorted(int(x) for x in set(sub["seed"])),  # numpy integers, as JSON's ints
        targets=[t for t in settings.targets if t in set(sub["target"])],
        baseline=settings.baseline if settings.baseline in present else None,
    )
    return sub, view


def setting_notes(sub, view: TableSettings, setting: str) -> str:
    """What a reader must know to compare a setting's block with the others."""
    notes = []
    test = sub[(sub["split"] == "test") & (sub["language"] != "avg")]
    for target in view.targets:
        scored = [l for l in view.target_languages[target] if l in set(test[test["target"] == target]["language"])]
        if scored != list(view.target_languages[target]):
            notes.append(f"{target} is scored in {', '.join(scored)} only, so its average is over those languages.")
    if setting == "translate_test" and any(get_task(t).format == "span" for t in view.targets):
        notes.append(
            "translate_test QA is scored on the English side against re-aligned gold answers, and drops "
            "questions lost in translation (XTREME); it is not directly comparable with other settings."
        )
    return "".join(f"{n}\n" for n in notes)


def ordered_settings(runs, settings: TableSettings) -> list[str]:
    """The settings with runs, the baseline setting first, then in config order."""
    present = set(runs["setting"])
    order = [settings.baseline_setting, *settings.settings]
    order += sorted(present - set(order))
    return [s for i, s in enumerate(order) if s in present and s not in order[:i]]


def _score_over(runs, target: str, languages: list[str]) -> dict[str, float]:
    """Median over seeds of each run's mean test score over ``languages`` (the runs of one
    setting and config), per metric shown; NaN where a run lacks one of the languages."""
    test = runs[(runs["target"] == target) & (runs["split"] == "test") & runs["language"].isin(languages)]
    out = {}
    for metric in metrics_shown(target):
        per_run = test[test["metric"] == metric].groupby("seed")["value"].agg(["mean", "count"])
        complete = per_run[per_run["count"] == len(languages)]["mean"]
        out[metric] = float(over_seeds(complete)) if len(complete) == len(per_run) and len(per_run) else float("nan")
    return out


def settings_table(runs, settings: TableSettings) -> tuple[str, Any]:
    """XTREME's baselines table: per config, rows = settings, columns = targets + Avg (absolute
    medians over seeds of each run's language average). Δ Avg compares like with like: the
    row's Avg minus the baseline setting's, over the same targets and, per target, the same
    languages (a translate-train row scored in en and de is compared with zero-shot in en
    and de)."""
    import pandas as pd

    reference = settings.baseline_setting
    order = ordered_settings(runs, settings)
    records, parts = [], []
    for config in settings.intermediate:
        subs = _config_runs_by_setting(runs, order, config)
        if len(subs) < 2:
            continue
        lines = [
            f"## {config}\n",
            "| setting | seeds | " + " | ".join(settings.targets) + " | Avg | Δ Avg |",
            "|---|---|" + "---:|" * (len(settings.targets) + 2),
        ]
        lines += [_settings_row(subs, config, setting, settings, records) for setting in subs]
        parts.append("\n".join(lines) + "\n")
    frame = pd.DataFrame.from_records(records, columns=["intermediate", "setting", "target", "metric", "median"])
    note = (
        "Absolute test scores, median over the row's seeds of each run's mean over the languages it scores; QA "
        "cells F1 / EM; – where a setting does not apply to a target. Avg: the XTREME score over the targets "
        f"the row has (QA as (F1 + EM) / 2). Δ Avg: the row's Avg minus the `{reference}` row's over the same "
        "targets and languages (– when the reference lacks one). translate_test QA is scored on the English "
        "side and drops questions lost in translation, so it is not directly comparable.\n"
    )
    if not parts:
        return "Only one transfer setting in this grid.\n", frame
    return "\n".join(parts) + "\n" + note, frame


def _config_runs_by_setting(runs, order: list[str], config: str) -> dict[str, Any]:
    """Setting -> the runs of ``config`` in it, for the settings (in ``order``) that ran it."""
    subs = {}
    for setting in order:
        sub = of_setting(runs, setting)
        sub = sub[sub["intermediate"] == config]
        if not sub.empty:
            subs[setting] = sub
    return subs


def _settings_row(subs: dict[str, Any], config: str, setting: str, settings: TableSettings, records: list) -> str:
    """One setting's row of a config's block in the settings table; its values go to ``records``."""
    decimals, reference, sub = settings.decimals, settings.baseline_setting, subs[setting]
    cells, scores, base_scores = [], [], []
    for target in settings.targets:
        test = sub[(sub["target"] == target) & (sub["split"] == "test") & (sub["language"] != "avg")]
        langs = [l for l in settings.target_languages[target] if l in set(test["language"])]
        if not langs:
            cells.append("–")
            continue
        values = _score_over(sub, target, langs)
        records += [(config, setting, target, m, v) for m, v in values.items()]
        cells.append(" / ".join(_fmt(v, decimals, "") for v in values.values()))
        scores.append(qa_answer_score(get_task(target).metric, values))
        if reference in subs:
            base_scores.append(qa_answer_score(get_task(target).metric, _score_over(subs[reference], target, langs)))
    avg = sum(scores) / len(scores)
    delta = (
        avg - sum(base_scores) / len(base_scores)
        if setting != reference and len(base_scores) == len(scores)
        else float("nan")
    )
    records.append((config, setting, "avg", "xtreme_score", avg))
    seeds = ",".join(str(x) for x in sorted(set(sub["seed"])))
    return (
        f"| {setting} | {seeds} | " + " | ".join(cells) + f" | {_fmt(avg, decimals, '')} "
        f"| {_fmt(delta, decimals, '+') if setting != reference else ''} |"
    )


def source_language_table(runs, settings: TableSettings) -> tuple[str, Any]:
    """Turc et al. 2021 (docs/protocol.md §7), per config and target with source-language runs:
    E(S, T) the median over seeds of model M^S's test score in T (primary metric; English
    from the zero-shot setting), Z(S -> T) = 100 E(S, T) / E(T, T) where M^T exists (else the
    unnormalised E(S, T), flagged), advantage Z(S -> T) - Z(en -> T); "avg" rows are the
    unweighted means over the target's languages."""
    import pandas as pd

    sources_of = _source_settings(runs)
    records, parts = [], []
    for config in settings.intermediate:
        for target in settings.targets:
            metric = primary_metric(get_task(target).metric)
            score = _source_scores(runs, sources_of, config, target, metric)
            sources = sorted({s for s, _ in score}, key=lambda s: (s != "en", s))
            if not [s for s in sources if s != "en"]:
                continue
            langs = [l for l in settings.target_languages[target] if any((s, l) in score for s in sources)]
            found = _relative_ability(score, sources, langs, (config, target, metric))
            records += found
            frame_z = {(r[2], r[3]): r[6] for r in found}
            parts.append(_source_block((config, target, metric), sources, langs, score, frame_z, settings.decimals))
    frame = pd.DataFrame.from_records(
        records, columns=["intermediate", "target", "source", "language", "metric", "score", "z", "normalised"]
    )
    if not frame.empty:
        english = frame[frame["source"] == "en"].set_index(["intermediate", "target", "language"])["z"]
        frame["advantage"] = [
            z - english.get((c, t, l), float("nan"))
            for c, t, l, z in zip(frame["intermediate"], frame["target"], frame["language"], frame["z"])
        ]
    note = (
        "E(S, T): median over seeds of the test score in language T of the model trained on source language "
        "S (S = en: the zero_shot setting; others: source:S), selected on S's dev set. Z(S -> T) = 100 E(S, T) / "
        "E(T, T); * marks cells where no model was trained on T, which show the unnormalised E(S, T) "
        "(Turc et al. 2021). Avg: the mean over the target's languages.\n"
    )
    if not parts:
        return "No source-language settings in this grid.\n", frame
    return "\n".join(parts) + "\n" + note, frame


def _source_settings(runs) -> dict[str, str]:
    """Setting -> its source language, for the settings with runs that train on one language
    (zero_shot: English; source:S: S)."""
    sources_of: dict[str, str] = {}
    for setting in set(runs["setting"]):
        lang = "en" if setting == ZERO_SHOT else source_language(setting)
        if lang is not None:
            sources_of[setting] = lang
    return sources_of


def _source_scores(runs, sources_of: dict[str, str], config: str, target: str, metric: str):
    """E(S, T): (source, test language) -> the median over seeds of the test score."""
    score: dict[tuple[str, str], float] = {}
    for setting, source in sources_of.items():
        sub = runs[
            (runs["setting"] == setting)
            & (runs["intermediate"] == config)
            & (runs["target"] == target)
            & (runs["split"] == "test")
            & (runs["metric"] == metric)
            & (runs["language"] != "avg")
        ]
        for lang, value in over_seeds(sub.groupby("language")["value"]).items():
            score[(source, lang)] = float(value)
    return score


def _relative_ability(score, sources: list[str], langs: list[str], key: tuple[str, str, str]) -> list[tuple]:
    """Z(S -> T) per source and language, and its mean over the languages where a source has
    all of them: records (config, target, source, language, metric, E, Z, normalised)."""
    config, target, metric = key
    records, z = [], {}
    for s in sources:
        for t in langs:
            if (s, t) not in score:
                continue
            normaliser = score.get((t, t))
            normalised = bool(normaliser)
            z[(s, t)] = 100 * score[(s, t)] / normaliser if normalised else score[(s, t)]
            records.append((config, target, s, t, metric, score[(s, t)], z[(s, t)], normalised))
    for s in sources:
        row = [z[(s, t)] for t in langs if (s, t) in z]
        if len(row) == len(langs):
            normalised = all(score.get((t, t)) for t in langs)
            records.append((config, target, s, "avg", metric, float("nan"), sum(row) / len(row), normalised))
    return records


def _source_block(key: tuple[str, str, str], sources, langs, score, frame_z, decimals: int) -> str:
    """One config's and target's Z table and, with English among the sources, its advantages."""
    config, target, metric = key
    lines = [
        f"## {config} · {target} ({metric}, test)\n",
        "Z(S -> T), x100:\n",
        "| source | " + " | ".join(langs) + " | Avg |",
        "|---|" + "---:|" * (len(langs) + 1),
    ]
    for s in sources:
        cells = [
            _fmt(frame_z.get((s, t), float("nan")), decimals, "") + ("" if score.get((t, t)) else "*")
            if (s, t) in frame_z
            else "–"
            for t in langs + ["avg"]
        ]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    if "en" in sources:
        lines += [
            "",
            "Advantage over English, Z(S -> T) - Z(en -> T):\n",
            "| source | " + " | ".join(langs) + " | Avg |",
            "|---|" + "---:|" * (len(langs) + 1),
        ]
        for s in sources:
            if s == "en":
                continue
            cells = []
            for t in langs + ["avg"]:
                ok = (s, t) in frame_z and ("en", t) in frame_z
                cells.append(_fmt(frame_z[(s, t)] - frame_z[("en", t)], decimals, "+") if ok else "–")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def intermediate_dev_scores(model_dirs: list[str]):
    """Each intermediate run's best dev score (on its own, possibly translated, dev data)."""
    import pandas as pd

    records = []
    for model_dir in model_dirs:
        m = re.search(r"intermediate/(?:[^/]+/)?([^/]+)/seed(\d+)/encoder/?$", str(model_dir))
        if not m:
            raise InputError(
                f"{model_dir}: not an intermediate model directory (…/intermediate/[BACKBONE/]CONFIG/seedN/encoder)"
            )
        log = TrainLog.read(Path(model_dir).parent / TRAIN_LOG)  # the record beside the model (disk.py)
        for task, scores in log.best.scores.items():
            for metric, value in scores.items():
                records.append((m.group(1), int(m.group(2)), log.settings.get("language", "en"), task, metric, value))
    frame = pd.DataFrame.from_records(records, columns=["intermediate", "seed", "data", "task", "metric", "value"])
    if frame.empty:
        return frame
    return over_seeds(frame.groupby(["intermediate", "data", "task", "metric"], sort=False)["value"]).reset_index()


def translation_tables(
    stats_files: list[str], quality_files: list[str], model_dirs: list[str] | None = None
) -> tuple[str, Any]:
    """Span recovery and data survival per (task, direction, split); BLEU / chrF per language;
    the intermediate-task dev score of models trained on translated data."""
    import pandas as pd

    records = []
    for path in stats_files:
        st = read_json(path)
        split = Path(path).name.split(".")[0]
        # translate-test stats (into English) name their direction, e.g. de-en.
        records.append(
            {
                "task": st["task"],
                "direction": st.get("direction", f"en-{st['language']}"),
                "split": split,
                "examples": st["examples"],
                "kept": st["kept"],
                "by_markers": st.get("recovered_by_markers"),
                "by_fuzzy_match": st.get("recovered_by_fuzzy_match"),
                "dropped": st["examples"] - st["kept"],
                "cache_hit_rate": st["segments_from_cache"] / max(1, st["segments_requested"]),
            }
        )
    data = pd.DataFrame.from_records(records)
    quality = pd.DataFrame.from_records(
        [
            {
                "direction": q.get("direction", f"en-{q['language']}"),
                "split": split,
                "bleu": v["bleu"],
                "chrf": v["chrf"],
                "sentences": v["sentences"],
            }
            for q in map(read_json, quality_files)
            for split, v in q["splits"].items()
        ]
    )
    md = "# Machine-translated data\n\n## Survival and span re-alignment\n\n"
    md += (data.to_markdown(index=False, floatfmt=".3f") if not data.empty else "No translations.") + "\n\n"
    md += (
        "## Translation quality (sacrebleu; en -> X against XNLI's human translations, X -> en against "
        "its English originals)\n\n"
    )
    md += (
        quality.to_markdown(index=False, floatfmt=".1f")
        if not quality.empty
        else "No language with XNLI references in this grid."
    ) + "\n"
    if not quality.empty:
        first = next(iter(read_json(quality_files[0])["splits"].values()))
        md += f"\nSignatures: {first['bleu_signature']}; {first['chrf_signature']}\n"
    dev = intermediate_dev_scores(model_dirs or [])
    md += "\n## Intermediate-task dev score (median over seeds; translated configs on translated dev)\n\n"
    md += (dev.to_markdown(index=False, floatfmt=".1f") if not dev.empty else "No translated configs.") + "\n"
    both = pd.concat(
        [
            data.assign(kind="data"),
            quality.assign(kind="quality"),
            dev.rename(columns={"value": "median"}).assign(kind="intermediate_dev"),
        ],
        ignore_index=True,
    )
    return md, both


RESULT_OUTPUTS = (
    "main-md",
    "main-csv",
    "best-csv",
    "per-language-md",
    "per-language-csv",
    "translated-md",
    "translated-csv",
    "runs-csv",
    "settings-md",
    "settings-csv",
    "source-md",
    "source-csv",
    "significance-csv",
)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Aggregate metric files into the paper's tables.")
    sub = ap.add_subparsers(dest="command", required=True)
    results = sub.add_parser("results", help="median-over-seeds result tables from the metric files")
    results.add_argument("--settings", required=True)
    results.add_argument("--metrics", nargs="+", required=True)
    for name in RESULT_OUTPUTS:
        results.add_argument(f"--{name}", required=True)
    translation = sub.add_parser("translation", help="translation statistics and quality")
    translation.add_argument("--stats", nargs="*", default=[])
    translation.add_argument("--quality", nargs="*", default=[])
    translation.add_argument("--intermediate", nargs="*", default=[], help="intermediate model directories")
    translation.add_argument("--md", required=True)
    translation.add_argument("--csv", required=True)
    return ap


@dataclass
class SettingBlocks:
    """The main and per-language tables' blocks, one per transfer setting, the baseline
    setting's first (its block alone has the best-models row)."""

    main_md: list[str] = field(default_factory=list)
    main_frames: list[Any] = field(default_factory=list)
    per_language_md: list[str] = field(default_factory=list)
    per_language_frames: list[Any] = field(default_factory=list)
    significance_frames: list[Any] = field(default_factory=list)
    best: Any = None


def setting_blocks(runs, settings: TableSettings, leaked: dict) -> SettingBlocks:
    order = ordered_settings(runs, settings)
    found = SettingBlocks()
    for setting in order:
        sub, view = setting_view(runs, settings, setting)
        _, shown = main_table(sub, view)
        tested = significance.significance(sub, view, setting) if view.baseline is not None else None
        if tested is not None:
            found.significance_frames.append(tested)
        best = best_models(sub, view) if setting == order[0] else None
        if best is not None:
            found.best = best
        title = f"## {setting}" + (" (baseline setting)" if setting == order[0] and len(order) > 1 else "")
        found.main_md.append(
            (title + "\n\n" if len(order) > 1 else "")
            + render_main(
                shown,
                view,
                best,
                significance.marked(tested) if tested is not None else set(),
                {(c, t): items for (s_, c, t), items in leaked.items() if s_ == setting},
            )
            + setting_notes(sub, view, setting)
        )
        found.main_frames.append(shown.rename_axis("intermediate").reset_index().assign(setting=setting))
        md, frame = per_language(sub, view)
        found.per_language_md.append((f"# {setting}\n\n" if len(order) > 1 else "") + md)
        found.per_language_frames.append(frame.assign(setting=setting))
    return found


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    args = parser().parse_args(argv)
    try:
        if args.command == "translation":
            md, frame = translation_tables(args.stats, args.quality, args.intermediate)
            write_csv(args.csv, frame, index=False)
            write_text(args.md, md)
            print(md)
            return
        settings = TableSettings.parse(args.settings, "--settings")
        runs = load_runs(args.metrics)
        blocks = setting_blocks(runs, settings, leaked_runs(args.metrics))
        others = {
            "translated": translated_table(of_setting(runs, ordered_settings(runs, settings)[0]), settings),
            "settings": settings_table(runs, settings),
            "source": source_language_table(runs, settings),
        }
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    main_md = write_results(args, settings.backbone_name, runs, blocks, others)
    LOG.info("tables from %d metric files -> %s", len(args.metrics), Path(args.main_md).parent)
    print(main_md)


def _setting_first(frame):
    return frame[["setting"] + [c for c in frame.columns if c != "setting"]]


def write_results(args, backbone: str | None, runs, blocks: SettingBlocks, others: dict[str, tuple]) -> str:
    """Every table of ``tables results`` to its file; the main table's Markdown."""
    import pandas as pd

    # every row of the long table names the backbone that produced it
    write_csv(
        args.runs_csv,
        runs if backbone is None else runs.assign(backbone=backbone)[["backbone", *RUN_COLUMNS]],
        index=False,
    )
    write_csv(args.main_csv, _setting_first(pd.concat(blocks.main_frames, ignore_index=True)), index=False)
    write_csv(args.best_csv, blocks.best, index=False)
    write_csv(
        args.significance_csv,
        pd.concat(blocks.significance_frames, ignore_index=True)
        if blocks.significance_frames
        else pd.DataFrame(columns=significance.COLUMNS),
        index=False,
    )
    main_md = (
        "# Intermediate-task results"
        + (f": backbone {backbone}" if backbone else "")
        + "\n\n"
        + "\n".join(blocks.main_md)
    )
    write_text(args.main_md, main_md)
    per_lang = _setting_first(pd.concat(blocks.per_language_frames, ignore_index=True))
    write_csv(args.per_language_csv, per_lang, index=False)
    write_text(args.per_language_md, "# Per-language results\n\n" + "\n".join(blocks.per_language_md))
    titles = {
        "translated": "# Translated intermediate-task data\n\n",
        "settings": "# Transfer settings (XTREME baselines)\n\n",
        "source": "# Source languages (Turc et al. 2021)\n\n",
    }
    for name, (md, frame) in others.items():
        write_csv(getattr(args, f"{name}_csv"), frame, index=False)
        write_text(getattr(args, f"{name}_md"), titles[name] + md)
    return main_md


if __name__ == "__main__":
    main()
