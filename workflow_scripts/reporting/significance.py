"""Is a config's difference to the baseline more than seed and language noise?

For each config, target and setting, the test scores config minus baseline are paired by
seed and language (the same seed means the same data order and head initialisation, the
same language the same test set): a seeds x languages matrix of differences. A two-level
bootstrap resamples seeds with replacement, then languages with replacement within each
drawn seed (10,000 times, seeded), and takes the 2.5th and 97.5th percentiles of the
resampled mean difference. The difference is marked when this 95% interval excludes 0.

Resampling seeds first matters: the languages of one run share its model, so their
differences move together; a bootstrap over (seed, language) cells as if independent would
call a single lucky seed significant. With 3 seeds the interval is an indication for a
reader, not a test with a controlled error rate; the tables state the method.
"""

from __future__ import annotations

from workflow_scripts.spec.report_settings import TableSettings
from workflow_scripts.spec.tasks import get_task, primary_metric

RESAMPLES = 10_000
LEVEL = 0.95
MARKER = "†"
METHOD = (
    f"{MARKER}: the {LEVEL:.0%} paired bootstrap interval of the difference to the baseline "
    f"excludes 0 (test scores paired by seed and language; {RESAMPLES:,} resamples of the seeds, then of "
    "the languages within each seed; seeded)."
)
COLUMNS = [
    "setting",
    "intermediate",
    "target",
    "metric",
    "seeds",
    "languages",
    "mean_difference",
    "ci_low",
    "ci_high",
    "excludes_zero",
]


def paired_differences(runs, config: str, baseline: str, target: str, metric: str):
    """Seeds x languages matrix of config minus baseline test scores, over the seeds and
    languages both have for every pairing (empty when none)."""
    import numpy as np

    sub = runs[
        (runs["split"] == "test")
        & (runs["target"] == target)
        & (runs["metric"] == metric)
        & (runs["language"] != "avg")
    ]
    table = sub[sub["intermediate"].isin([config, baseline])].pivot_table(
        index=["seed", "language"], columns="intermediate", values="value", aggfunc="first"
    )
    if config not in table or baseline not in table:
        return np.empty((0, 0))
    diffs = (table[config] - table[baseline]).unstack("language").dropna(axis=1, how="any")
    return diffs.to_numpy(dtype=float)


def bootstrap_interval(differences, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean difference and its two-level bootstrap interval."""
    import numpy as np

    diffs = np.asarray(differences, dtype=float)
    if diffs.size == 0:
        return float("nan"), float("nan"), float("nan")
    seeds, langs = diffs.shape
    rng = np.random.default_rng(seed)
    drawn_seeds = rng.integers(0, seeds, size=(RESAMPLES, seeds, 1))
    drawn_langs = rng.integers(0, langs, size=(RESAMPLES, seeds, langs))
    means = diffs[drawn_seeds, drawn_langs].mean(axis=(1, 2))
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(diffs.mean()), float(low), float(high)


def significance(runs, settings: TableSettings, setting: str):
    """One row per non-baseline config and target of ``setting`` (runs of that setting)."""
    import pandas as pd

    baseline, rows = settings.baseline, []
    for config in settings.intermediate:
        if config == baseline:
            continue
        for k, target in enumerate(settings.targets):
            metric = primary_metric(get_task(target).metric)
            diffs = paired_differences(runs, config, baseline, target, metric)
            if not diffs.size:
                continue
            mean, low, high = bootstrap_interval(diffs, seed=k)
            rows.append(
                (
                    setting,
                    config,
                    target,
                    metric,
                    diffs.shape[0],
                    diffs.shape[1],
                    mean,
                    low,
                    high,
                    bool(low > 0 or high < 0),
                )
            )
    return pd.DataFrame.from_records(rows, columns=COLUMNS)


def marked(table) -> set[tuple[str, str]]:
    """(config, target) pairs whose interval excludes 0."""
    return {(r.intermediate, r.target) for r in table.itertuples() if r.excludes_zero}
