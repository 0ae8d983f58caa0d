"""A backbone's sweep table (``tables/<backbone>/sweep.{md,csv}``): for every run of a grid
with a ``sweep`` (workflow/sweep.py), each point's selection score and which point won.

One row per (setting, config, target, seed, model, point), read from the metric files'
``sweep`` record: the table shows what the evaluated models were selected from, so a reader
sees that no target-language test data took part in the choice.

CLI: ``python -m workflow_scripts.reporting.sweep_table --metrics FILE... --md OUT --csv OUT``
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow_scripts.common import atomic_path
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.result_files import MetricFile

COLUMNS = ["setting", "config", "target", "seed", "point", "dev_score", "selected_on", "selected", "model"]


def sweep_rows(metric_files: list[str]) -> list[dict]:
    rows = []
    for path in metric_files:
        parts = Path(path).parts  # metrics/<backbone>/<setting>/<config>/<target>/seed<N>.json
        if len(parts) < 5 or not parts[-1].startswith("seed"):
            raise InputError(f"{path}: not a metric file path (…/metrics/BACKBONE/SETTING/CONFIG/TARGET/seedN.json)")
        metric = MetricFile.read(path)
        for model, record in sorted((metric.sweep or {}).items()):
            for point, score in record["scores"].items():
                rows.append(
                    {
                        "setting": parts[-4],
                        "config": parts[-3],
                        "target": parts[-2],
                        "seed": int(parts[-1].removeprefix("seed").removesuffix(".json")),
                        "point": point,
                        "dev_score": score,
                        "selected_on": record.get("selected_on", ""),
                        "selected": point == record["selected"],
                        "model": model,
                    }
                )
    return rows


def render(rows: list[dict]) -> str:
    lines = [
        "# Hyperparameter sweep",
        "",
        "Each seed's points and their score on the recipe's selection dev data (English for",
        "zero-shot and translate-train); the selected point (**bold**) is the model evaluated.",
        "",
    ]
    if not rows:
        return "\n".join([*lines, "No run of this backbone has a sweep."]) + "\n"
    lines += ["| setting | config | target | seed | point | dev score | on |", "|---|---|---|---:|---|---:|---|"]
    for row in rows:
        point = f"**{row['point']}**" if row["selected"] else row["point"]
        lines.append(
            f"| {row['setting']} | {row['config']} | {row['target']} | {row['seed']} | {point} "
            f"| {row['dev_score']:.4f} | {row['selected_on']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics", nargs="*", default=[])
    ap.add_argument("--md", required=True, type=Path)
    ap.add_argument("--csv", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        rows = sweep_rows(args.metrics)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    with atomic_path(args.md) as tmp:
        tmp.write_text(render(rows))
    with atomic_path(args.csv) as tmp:
        pd.DataFrame(rows, columns=COLUMNS).to_csv(tmp, index=False)


if __name__ == "__main__":
    main()
