"""Roll the per-run metric files up into the paper's tables (PROTOCOL.md §5).

- runs.csv: every score of every run, long format (intermediate, target, seed, split,
  language, metric, value), language "avg" being the unweighted mean over languages.
- main.md / main.csv: rows = intermediate configs, columns = targets + Avg. Each cell is the
  median over seeds of the run's test-language average; the baseline row is absolute, the
  others are differences to it. QA cells show F1 / EM; Avg is the XTREME score over the
  targets present (QA counts (F1 + EM) / 2).
- best.csv and the "best models" row of main.md (PROTOCOL.md §5).
- per_language.md / per_language.csv: per target, rows = configs, columns = languages + Avg,
  medians over seeds (absolute).

- translated.md / translated.csv: translated configs next to their English-data configs,
  in the translation's language (PROTOCOL.md §5).
- translation.md / translation.csv: data survival, span re-alignment and cache hits per
  translated split; BLEU and chrF per language.

CLI: ``python -m workflow_scripts.tables results --settings JSON --metrics FILE ... --main-md F ...``
and ``python -m workflow_scripts.tables translation --stats F ... --quality F ... --md F --csv F``.
"""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path
from typing import Any

from .common import LOG, InputError, atomic_path, load_settings, read_json, setup_logging
from .tasks import get_task, primary_metric, qa_answer_score

QA_METRICS = ("f1", "exact_match")


def load_runs(files: list[str]):
    import pandas as pd

    records = []
    for path in files:
        m = read_json(path)
        try:
            run = m["run"]
            for split, per_lang in m["scores"].items():
                for lang, scores in per_lang.items():
                    for metric, value in scores.items():
                        records.append((run["intermediate"], run["target"], run["seed"], split, lang, metric, value))
                for metric, value in m["average"][split].items():
                    records.append((run["intermediate"], run["target"], run["seed"], split, "avg", metric, value))
            if "selection" in m:  # the English dev score that selected the target model
                records.append((run["intermediate"], run["target"], run["seed"], "selection", "en", "score",
                                m["selection"]["score"]))
        except (KeyError, TypeError) as err:
            raise InputError(f"metric file {path} lacks field {err}") from err
    return pd.DataFrame.from_records(
        records, columns=["intermediate", "target", "seed", "split", "language", "metric", "value"])


def _metrics_shown(target: str) -> tuple[str, ...]:
    metric = get_task(target).metric
    return QA_METRICS if metric in ("squad_v1", "squad_v2", "mlqa") else (primary_metric(metric),)


def medians(runs, split: str = "test"):
    """Median over seeds per (intermediate, target, language, metric)."""
    sub = runs[runs["split"] == split]
    return sub.groupby(["intermediate", "target", "language", "metric"], sort=False)["value"].median()


def main_table(runs, settings: dict[str, Any]):
    """(absolute medians, shown values) as DataFrames indexed by config."""
    import pandas as pd

    med = medians(runs)
    configs, targets, baseline = settings["intermediate"], settings["targets"], settings["baseline"]
    absolute = pd.DataFrame(index=configs, dtype=float)
    for target in targets:
        for metric in _metrics_shown(target):
            col = f"{target}.{metric}" if len(_metrics_shown(target)) > 1 else target
            absolute[col] = [med.get((c, target, "avg", metric), float("nan")) for c in configs]
    task_scores = pd.DataFrame(index=configs, dtype=float)
    for target in targets:
        metric = get_task(target).metric
        task_scores[target] = [
            qa_answer_score(metric, {m: med.get((c, target, "avg", m), float("nan")) for m in _metrics_shown(target)})
            for c in configs]
    absolute["avg"] = task_scores.mean(axis=1, skipna=False)
    shown = absolute.copy()
    if baseline not in absolute.index:
        raise InputError(f"baseline config {baseline!r} has no runs")
    for c in configs:
        if c != baseline:
            shown.loc[c] = absolute.loc[c] - absolute.loc[baseline]
    return absolute, shown


def best_models(runs, settings: dict[str, Any]):
    """PROTOCOL.md §5 "Best models": per target, the config with the best median dev score,
    then its best seed by dev score, reported on test. The dev score is the English dev
    score that selected the target model; retrieval targets use their dev average (BUCC) and
    have none without a dev split (Tatoeba)."""
    import pandas as pd

    rows = []
    for target in settings["targets"]:
        sub = runs[runs["target"] == target]
        dev = sub[sub["split"] == "selection"]
        if dev.empty:
            dev = sub[(sub["split"] == "dev") & (sub["language"] == "avg")
                      & (sub["metric"] == primary_metric(get_task(target).metric))]
        if dev.empty:
            continue
        per_run = dev.set_index(["intermediate", "seed"])["value"]
        best_config = per_run.groupby(level=0).median().idxmax()
        best_seed = per_run.loc[best_config].idxmax()
        test = sub[(sub["split"] == "test") & (sub["language"] == "avg") & (sub["intermediate"] == best_config)
                   & (sub["seed"] == best_seed)]
        for metric in _metrics_shown(target):
            value = test.loc[test["metric"] == metric, "value"]
            rows.append((target, best_config, int(best_seed), metric, float(value.iloc[0])))
    return pd.DataFrame.from_records(rows, columns=["target", "intermediate", "seed", "metric", "value"])


def render_best(best, settings: dict[str, Any]) -> str:
    decimals = int(settings["decimals"])
    cells = []
    for target in settings["targets"]:
        sub = best[best["target"] == target]
        if sub.empty:
            cells.append("–")
            continue
        values = " / ".join(f"{v:.{decimals}f}" for v in sub["value"])
        cells.append(f"{values} ({sub['intermediate'].iloc[0]}, seed {sub['seed'].iloc[0]})")
    return "| best models | " + " | ".join(cells) + " | |\n"


def render_main(shown, settings: dict[str, Any], best=None) -> str:
    decimals, baseline = int(settings["decimals"]), settings["baseline"]
    header = ["Intermediate task"] + [t for t in settings["targets"]] + ["Avg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for c in shown.index:
        sign = "" if c == baseline else "+"
        cells = []
        for target in settings["targets"]:
            metrics = _metrics_shown(target)
            cols = [f"{target}.{m}" for m in metrics] if len(metrics) > 1 else [target]
            cells.append(" / ".join(_fmt(shown.loc[c, col], decimals, sign) for col in cols))
        cells.append(_fmt(shown.loc[c, "avg"], decimals, sign))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    note = (f"\nTest scores: median over seeds {settings['seeds']} of each run's mean over the target's languages. "
            f"Row `{baseline}` is absolute; the other rows are differences to it. QA cells: F1 / EM. "
            "Avg: mean over the targets shown, QA as (F1 + EM) / 2.\n")
    if best is not None:
        lines.append(render_best(best, settings).rstrip("\n"))
        note += ("Best models: per target, the config with the best median (English) dev score and its best "
                 "seed by dev score, absolute test score; – where the target has no dev data.\n")
    return "\n".join(lines) + "\n" + note


def _fmt(value: float, decimals: int, sign: str) -> str:
    if value != value:  # NaN
        return "–"
    text = f"{value:.{decimals}f}"
    return ("+" + text) if sign and value >= 0 else text


def per_language(runs, settings: dict[str, Any]) -> tuple[str, Any]:
    import pandas as pd

    med = medians(runs)
    decimals = int(settings["decimals"])
    parts, frames = [], []
    for target in settings["targets"]:
        metric = _metrics_shown(target)[0]
        sub = med.xs((target, metric), level=("target", "metric")).unstack("language")
        langs = [l for l in sub.columns if l != "avg"] + ["avg"]
        sub = sub.reindex(index=[c for c in settings["intermediate"] if c in sub.index], columns=langs)
        frames.append(sub.assign(target=target, metric=metric))
        parts.append(f"## {target} ({metric}, test, median over seeds)\n\n"
                     + sub.rename(columns={"avg": "Avg"}).to_markdown(floatfmt=f".{decimals}f") + "\n")
    long = pd.concat(frames).reset_index(names="intermediate")
    return "\n".join(parts), long


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_csv(path: str, frame, index: bool) -> None:
    buf = io.StringIO()
    frame.to_csv(buf, index=index, float_format="%.4f")
    write_text(path, buf.getvalue())


def translated_table(runs, settings: dict[str, Any]) -> tuple[str, Any]:
    """PROTOCOL.md §5: each translated config next to its English-data config, evaluated
    only on the translation's language, for every target that has that language."""
    import pandas as pd

    med = medians(runs)
    decimals = int(settings["decimals"])
    records, parts = [], []
    by_lang: dict[str, list[tuple[str, str | None]]] = {}
    for name, info in settings.get("translated", {}).items():
        by_lang.setdefault(info["language"], []).append((name, info["english"]))
    for lang, pairs in sorted(by_lang.items()):
        targets = [t for t in settings["targets"] if lang in settings["target_languages"][t]]
        lines = [f"## {lang}\n", "| config | data | " + " | ".join(targets) + " |",
                 "|---|---|" + "---:|" * len(targets)]
        for name, english in pairs:
            for config, data in ((english, "en"), (name, lang)):
                if config is None:
                    continue
                cells = []
                for target in targets:
                    metrics = _metrics_shown(target)
                    values = [med.get((config, target, lang, m), float("nan")) for m in metrics]
                    records += [(lang, config, data, target, m, v) for m, v in zip(metrics, values)]
                    cells.append(" / ".join(_fmt(v, decimals, "") for v in values))
                lines.append(f"| {config} | {data} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n")
    frame = pd.DataFrame.from_records(records, columns=["language", "intermediate", "data", "target", "metric",
                                                        "median"])
    note = ("Test scores in the translation's language only, median over seeds; `data` is the language of the "
            "intermediate-task training data.\n")
    return ("\n".join(parts) + "\n" + note) if parts else "No translated intermediate configs in this grid.\n", frame


def intermediate_dev_scores(model_dirs: list[str]):
    """Each intermediate run's best dev score (on its own, possibly translated, dev data)."""
    import pandas as pd

    records = []
    for model_dir in model_dirs:
        m = re.search(r"intermediate/([^/]+)/seed(\d+)/encoder/?$", str(model_dir))
        if not m:
            raise InputError(f"{model_dir}: not an intermediate model directory (…/intermediate/CONFIG/seedN/encoder)")
        log = read_json(Path(model_dir) / "train_log.json")
        for task, scores in log["best"]["scores"].items():
            for metric, value in scores.items():
                records.append((m.group(1), int(m.group(2)), log["settings"].get("language", "en"), task, metric, value))
    frame = pd.DataFrame.from_records(records, columns=["intermediate", "seed", "data", "task", "metric", "value"])
    if frame.empty:
        return frame
    return frame.groupby(["intermediate", "data", "task", "metric"], sort=False)["value"].median().reset_index()


def translation_tables(stats_files: list[str], quality_files: list[str],
                       model_dirs: list[str] | None = None) -> tuple[str, Any]:
    """Span recovery and data survival per (task, language, split); BLEU / chrF per language;
    the intermediate-task dev score of models trained on translated data."""
    import pandas as pd

    records = []
    for path in stats_files:
        st = read_json(path)
        split = Path(path).name.split(".")[0]
        records.append({"task": st["task"], "language": st["language"], "split": split,
                        "examples": st["examples"], "kept": st["kept"],
                        "by_markers": st.get("recovered_by_markers"), "by_fuzzy_match": st.get("recovered_by_fuzzy_match"),
                        "dropped": st["examples"] - st["kept"],
                        "cache_hit_rate": st["segments_from_cache"] / max(1, st["segments_requested"])})
    data = pd.DataFrame.from_records(records)
    quality = pd.DataFrame.from_records(
        [{"language": q["language"], "split": split, "bleu": v["bleu"], "chrf": v["chrf"], "sentences": v["sentences"]}
         for q in map(read_json, quality_files) for split, v in q["splits"].items()])
    md = "# Machine-translated data\n\n## Survival and span re-alignment\n\n"
    md += (data.to_markdown(index=False, floatfmt=".3f") if not data.empty else "No translations.") + "\n\n"
    md += "## Translation quality (sacrebleu, against XNLI's human translations)\n\n"
    md += (quality.to_markdown(index=False, floatfmt=".1f") if not quality.empty
           else "No language with XNLI references in this grid.") + "\n"
    if not quality.empty:
        first = next(iter(read_json(quality_files[0])["splits"].values()))
        md += f"\nSignatures: {first['bleu_signature']}; {first['chrf_signature']}\n"
    dev = intermediate_dev_scores(model_dirs or [])
    md += "\n## Intermediate-task dev score (median over seeds; translated configs on translated dev)\n\n"
    md += (dev.to_markdown(index=False, floatfmt=".1f") if not dev.empty else "No translated configs.") + "\n"
    both = pd.concat([data.assign(kind="data"), quality.assign(kind="quality"),
                      dev.rename(columns={"value": "median"}).assign(kind="intermediate_dev")], ignore_index=True)
    return md, both


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Aggregate metric files into the paper's tables.")
    sub = ap.add_subparsers(dest="command", required=True)
    results = sub.add_parser("results", help="median-over-seeds result tables from the metric files")
    results.add_argument("--settings", required=True)
    results.add_argument("--metrics", nargs="+", required=True)
    for name in ("main-md", "main-csv", "best-csv", "per-language-md", "per-language-csv", "translated-md",
                 "translated-csv", "runs-csv"):
        results.add_argument(f"--{name}", required=True)
    translation = sub.add_parser("translation", help="translation statistics and quality")
    translation.add_argument("--stats", nargs="*", default=[])
    translation.add_argument("--quality", nargs="*", default=[])
    translation.add_argument("--intermediate", nargs="*", default=[], help="intermediate model directories")
    translation.add_argument("--md", required=True)
    translation.add_argument("--csv", required=True)
    args = ap.parse_args(argv)
    try:
        if args.command == "translation":
            md, frame = translation_tables(args.stats, args.quality, args.intermediate)
            write_csv(args.csv, frame, index=False)
            write_text(args.md, md)
            print(md)
            return
        settings = load_settings(args.settings)
        runs = load_runs(args.metrics)
        absolute, shown = main_table(runs, settings)
        best = best_models(runs, settings)
        per_lang_md, per_lang = per_language(runs, settings)
        translated_md, translated = translated_table(runs, settings)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    write_csv(args.runs_csv, runs, index=False)
    write_csv(args.main_csv, shown.rename_axis("intermediate"), index=True)
    write_csv(args.best_csv, best, index=False)
    write_text(args.main_md, "# Intermediate-task results\n\n" + render_main(shown, settings, best))
    write_csv(args.per_language_csv, per_lang, index=False)
    write_text(args.per_language_md, "# Per-language results\n\n" + per_lang_md)
    write_csv(args.translated_csv, translated, index=False)
    write_text(args.translated_md, "# Translated intermediate-task data\n\n" + translated_md)
    LOG.info("tables from %d metric files -> %s", len(args.metrics), Path(args.main_md).parent)
    print(render_main(shown, settings, best))


if __name__ == "__main__":
    main()
