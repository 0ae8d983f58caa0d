"""Does seeing the image help? Multimodal-minus-text differences of zero-shot test scores
(docs/protocol.md §9), each with its paired bootstrap interval (significance.py).

The arms are intermediate configs that differ in one task only: a config training an image
task (``snli_ve``) is paired with every config that is the same but for that task replaced by
one of its text-only controls (``snli_caption``: the caption the image replaced;
``hypothesis_only``: no premise), same other tasks, MLM, language and arm recipe (what
trains, the text-only share, the merge-back: spec/arm_recipe.py); the grid finds the
pairs at config check (``workflow.grid.arm_pairs``). The controls read the image task's
own rows, ids and splits (loaders/multimodal.py), so a difference is the premise's
modality and nothing else.

Differences are taken per target and per language group: English (the language the
intermediate task was in), the other languages (zero-shot transfer), and all of them;
scores are paired by seed and language, so the interval covers seed and language noise.

CLI: ``python -m workflow_scripts.reporting.modality --settings JSON --runs CSV --md F --csv F --figure STEM``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow_scripts.common import atomic_path, setup_logging
from workflow_scripts.reporting import significance
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import ModalitySettings
from workflow_scripts.spec.tasks import get_task, primary_metric
from workflow_scripts.spec.transfer_names import ZERO_SHOT

COLUMNS = [
    "visual",
    "control",
    "control_kind",
    "recipe",
    "target",
    "metric",
    "group",
    "languages",
    "seeds",
    "mean_difference",
    "ci_low",
    "ci_high",
    "excludes_zero",
]
GROUPS = ("en", "zero-shot", "all")
CONTROL_KINDS = {"snli_caption": "caption premise", "hypothesis_only": "no premise"}


def _languages(group: str, languages: list[str]) -> list[str]:
    if group == "en":
        return [l for l in languages if l == "en"]
    if group == "zero-shot":
        return [l for l in languages if l != "en"]
    return list(languages)


def modality_table(runs, settings: ModalitySettings):
    """One row per (pair, target, language group) with scores in both arms."""
    import pandas as pd

    runs = runs[runs["setting"] == ZERO_SHOT]
    rows = []
    for p, pair in enumerate(settings.pairs):
        for t, target in enumerate(settings.targets):
            metric = primary_metric(get_task(target).metric)
            languages = sorted(
                set(
                    runs[(runs["target"] == target) & (runs["split"] == "test") & (runs["language"] != "avg")][
                        "language"
                    ]
                )
            )
            for g, group in enumerate(GROUPS):
                chosen = _languages(group, languages)
                if not chosen:
                    continue
                sub = runs[runs["language"].isin(chosen)]
                diffs = significance.paired_differences(sub, pair.visual, pair.control, target, metric)
                if not diffs.size:
                    continue
                mean, low, high = significance.bootstrap_interval(diffs, seed=1000 * p + 10 * t + g)
                if diffs.size < 2:  # one seed, one language: a point, not an interval
                    low = high = float("nan")
                rows.append(
                    (
                        pair.visual,
                        pair.control,
                        CONTROL_KINDS.get(pair.control_task, pair.control_task),
                        pair.recipe or "",
                        target,
                        metric,
                        group,
                        diffs.shape[1],
                        diffs.shape[0],
                        mean,
                        low,
                        high,
                        bool(low > 0 or high < 0),
                    )
                )  # NaN compares False: never marked
    return pd.DataFrame.from_records(rows, columns=COLUMNS)


def render(table, settings: ModalitySettings) -> str:
    decimals = settings.decimals
    lines = ["# Image premise minus text premise (zero-shot test scores)", ""]
    if table.empty:
        lines.append(
            "No pair of configs differing only by an image task and one of its text-only controls has "
            "test scores in both arms."
        )
        return "\n".join(lines) + "\n"
    lines += [
        "| image config | minus | control | recipe | target | languages | Δ | 95% interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        mark = f" {significance.MARKER}" if r.excludes_zero else ""
        group = {"en": "en", "zero-shot": f"other {r.languages}", "all": f"all {r.languages}"}[r.group]
        interval = (
            "– (one paired score)" if r.ci_low != r.ci_low else f"[{r.ci_low:+.{decimals}f}, {r.ci_high:+.{decimals}f}]"
        )
        lines.append(
            f"| {r.visual} | {r.control} | {r.control_kind} | {r.recipe or '–'} | {r.target} ({r.metric}) | {group} | "
            f"{r.mean_difference:+.{decimals}f}{mark} | {interval} |"
        )
    lines += [
        "",
        f"Seeds: {', '.join(map(str, settings.seeds))}. Δ: the mean over seeds and languages of the image "
        "config's test score minus the control's, paired by seed and language. "
        + significance.METHOD.replace("to the baseline ", ""),
        "",
        "The arms train on the same SNLI-VE rows, ids and image-disjoint splits; only the premise differs "
        "(the image through a projected visual prefix, the SNLI caption it replaced, or none). The image "
        "arm's projector is dropped after intermediate training: every target model is text-only.",
    ]
    if settings.recipes:  # both arms of a pair ran under the same recipe (docs/multimodal.md, "Arm recipes")
        lines += ["", "Arm recipes, each pair at equal recipe:"]
        lines += [f"- {description}" for description in settings.recipes.values()]
    return "\n".join(lines) + "\n"


def figure(table, settings: ModalitySettings, stem: Path) -> None:
    """Differences with their intervals: one panel per target, one row per pair and group."""
    from workflow_scripts.reporting.plots import _pyplot, save

    plt = _pyplot()
    targets = [t for t in settings.targets if t in set(table["target"])] if not table.empty else []
    fig, axes = plt.subplots(
        1,
        max(1, len(targets)),
        figsize=(4.2 * max(1, len(targets)), 0.45 * max(3, len(table) // max(1, len(targets))) + 1.2),
        squeeze=False,
    )
    if not targets:
        axes[0][0].set_axis_off()
        axes[0][0].text(0.5, 0.5, "no image / text-control pair with test scores", ha="center", va="center")
    for ax, target in zip(axes[0], targets):
        sub = table[table["target"] == target].reset_index(drop=True)
        labels = [f"{r.visual} − {r.control} ({r.group})" for r in sub.itertuples()]
        y = range(len(sub))
        ax.errorbar(
            sub["mean_difference"],
            list(y),
            xerr=[
                (sub["mean_difference"] - sub["ci_low"]).fillna(0),
                (sub["ci_high"] - sub["mean_difference"]).fillna(0),
            ],
            fmt="o",
            color="black",
            ecolor="grey",
            capsize=3,
        )
        ax.axvline(0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel(f"{sub['metric'].iloc[0]} difference (points)")
        ax.set_title(f"{target}: image premise minus text")
    save(fig, stem)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", required=True)
    ap.add_argument("--runs", required=True, help="the backbone's runs.csv (tables.py)")
    ap.add_argument("--md", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--figure", required=True, help="output stem: STEM.png and STEM.svg")
    args = ap.parse_args(argv)
    import pandas as pd

    try:
        settings = ModalitySettings.parse(args.settings, "--settings")
        runs = pd.read_csv(args.runs, dtype={"language": str, "seed": int})
        table = modality_table(runs, settings)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    with atomic_path(args.md) as tmp:
        tmp.write_text(render(table, settings))
    with atomic_path(args.csv) as tmp:
        table.to_csv(tmp, index=False)  # full precision: the table across sizes re-renders these values
    figure(table, settings, Path(args.figure))


if __name__ == "__main__":
    main()
