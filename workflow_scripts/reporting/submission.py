"""A backbone's leaderboard submission: the best models' test prediction folders
(``evaluation/predictions.py`` writes one per run) copied into
``results/<experiment>/submission/<backbone>/<benchmark>/``, each task under the benchmark's
leaderboard folder name (``Benchmark.leaderboard_names``: XTREME's ``bucc2018``), with a
manifest saying which run each folder comes from.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, read_result_table, setup_logging, write_json
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.tasks import MINING, RETRIEVAL, get_task


def collect(
    best_csv: Path,
    targets: list[str],
    predictions_of: dict[str, Path],
    output: Path,
    baseline: str | None = None,
    bench: str = benchmark.DEFAULT,
) -> dict[str, Any]:
    """Copy the best model's prediction folder of each target into ``output/<task>/``, named
    as the leaderboard of benchmark ``bench`` names the task (``benchmark.leaderboard_names``).

    ``predictions_of`` maps "<config>/<target>/seed<N>" to that run's folder. A target
    without a dev split (Tatoeba) has no best model of its own: it takes the one chosen for
    another retrieval target with a dev split (BUCC: same kind of task, same encoder use),
    or, when the grid has none, the ``baseline`` config's run of the lowest seed (the
    pretrained backbone, whatever the seed); the manifest says which. Returns the manifest."""
    board = benchmark.get(bench)
    best = read_result_table(best_csv)
    chosen: dict[str, dict[str, Any]] = {}
    for target in targets:
        rows = best[best["target"] == target]
        if not rows.empty:
            chosen[target] = {
                "intermediate": rows["intermediate"].iloc[0],
                "seed": int(rows["seed"].iloc[0]),
                "chosen_by": "best median dev score, then best seed by dev score",
            }
    retrieval = [t for t in targets if get_task(t).format in (MINING, RETRIEVAL)]
    for target in targets:
        if target not in chosen and target in retrieval:
            donor = next((t for t in retrieval if t in chosen), None)
            seeds = sorted(int(k.rsplit("seed", 1)[1]) for k in predictions_of if k.startswith(f"{baseline}/{target}/"))
            if donor is not None:
                chosen[target] = {
                    **chosen[donor],
                    "chosen_by": f"{target} has no dev split: the best model for {donor}",
                }
            elif seeds:
                chosen[target] = {
                    "intermediate": baseline,
                    "seed": seeds[0],
                    "chosen_by": f"{target} has no dev split and the grid no retrieval target with one: "
                    f"the baseline config {baseline!r}, seed {seeds[0]}",
                }
    manifest = {
        "layout": f"{board.title} leaderboard (<task>/test-<lang>.<ext>)",
        "benchmark": board.name,
        "tasks": {},
        "missing": [],
    }
    with atomic_path(output) as tmp:
        tmp.mkdir()
        for target in targets:
            if target not in chosen:
                manifest["missing"].append(target)
                continue
            key = f"{chosen[target]['intermediate']}/{target}/seed{chosen[target]['seed']}"
            if key not in predictions_of:
                raise InputError(f"no prediction folder for the best {target} run {key}")
            source = predictions_of[key]
            folder = board.leaderboard_names.get(target, target)
            shutil.copytree(source, tmp / folder)
            manifest["tasks"][folder] = {
                **chosen[target],
                "target": target,
                "source": str(source),
                "files": sorted(p.name for p in (tmp / folder).iterdir()),
            }
        write_json(tmp / "manifest.json", manifest)
    LOG.info("submission: %s (missing: %s)", sorted(manifest["tasks"]), manifest["missing"] or "none")
    return manifest


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Collect the best models' test predictions into one submission.")
    ap.add_argument("--best", required=True, type=Path, help="best.csv from aggregate_tables")
    ap.add_argument("--targets", nargs="+", required=True)
    ap.add_argument("--predictions", nargs="+", required=True, help="RUN=DIR, RUN = <config>/<target>/seed<N>")
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--baseline", help="the baseline config: a retrieval target without dev data falls back on it")
    ap.add_argument(
        "--benchmark",
        default=benchmark.DEFAULT,
        choices=sorted(benchmark.BENCHMARKS),
        help="whose leaderboard layout (task folder names) the submission takes",
    )
    args = ap.parse_args(argv)
    try:
        runs = dict(item.split("=", 1) for item in args.predictions)
        collect(
            args.best, args.targets, {k: Path(v) for k, v in runs.items()}, args.output, args.baseline, args.benchmark
        )
    except (InputError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
