"""Fine-tuned and prompted across backbone sizes (docs/prompted.md): per task, each prompted
backbone's cross-lingual transfer gap and average, fine-tuned zero-shot from its baseline
config beside the pretrained backbone prompted at each shot count, against its parameter
count.

The rows come from each backbone's ``prompted.csv`` (reporting/prompted.py): the baseline
config's fine-tuned row and the pretrained backbone's prompted rows. The figure draws the gap
(English minus the other languages' mean) against parameters (log scale), one panel per
task, one line per arm.

CLI: ``python -m workflow_scripts.reporting.prompted_scaling --settings JSON --tables DIR
--models DIR --md FILE --csv FILE --figure STEM``.
"""

from __future__ import annotations

from pathlib import Path

from workflow_scripts.common import setup_logging
from workflow_scripts.reporting.compare_backbones import _params_text, cross_backbone_args, parameter_count
from workflow_scripts.reporting.modality_scaling import _size_axis
from workflow_scripts.reporting.prompted import AVG, FINE_TUNED, GAP, PROMPTED
from workflow_scripts.reporting.tables import write_csv, write_text
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import PromptedScalingSettings

COLUMNS = ["task", "backbone", "parameters", "arm", "shots", "avg", "gap"]


def arm_name(arm: str, shots) -> str:
    return "fine-tuned, zero-shot" if arm == FINE_TUNED else f"prompted, {int(shots)}-shot"


def scaling_frame(settings: PromptedScalingSettings, tables: Path, models: Path):
    """Per task, backbone and arm: the baseline's fine-tuned and the pretrained backbone's
    prompted average and gap, ordered by size."""
    import pandas as pd

    rows = []
    for name, backbone in settings.backbones.items():
        path = tables / name / "prompted.csv"
        if not path.is_file():
            raise InputError(f"{path}: missing (the backbone's prompted table, rule tabulate_prompted)")
        frame = pd.read_csv(path)
        frame = frame[(frame["config"] == settings.baselines[name]) & frame["language"].isin([AVG, GAP])]
        params = parameter_count(backbone, models)
        for (task, arm, shots), sub in frame.groupby(["task", "arm", "shots"], sort=False, dropna=False):
            values = dict(zip(sub["language"], sub["value"]))
            rows.append(
                {"task": task, "backbone": name, "parameters": params, "arm": arm_name(arm, shots),
                 "shots": shots, "avg": values.get(AVG), "gap": values.get(GAP)}
            )  # fmt: skip
    found = pd.DataFrame(rows, columns=COLUMNS)
    return found.sort_values(["task", "parameters", "backbone"], kind="stable").reset_index(drop=True)


def render(frame, settings: PromptedScalingSettings) -> str:
    lines = ["# Fine-tuned and prompted across backbone sizes (test scores)", ""]
    arms = ["fine-tuned, zero-shot", *(arm_name(PROMPTED, k) for k in settings.shots)]
    d = settings.decimals
    for task in settings.tasks:
        sub = frame[frame["task"] == task]
        if sub.empty:
            continue
        lines += [f"## {task}: average and gap (English minus the other languages)", ""]
        lines += ["| Backbone | Parameters | " + " | ".join(f"{a}: avg / gap" for a in arms) + " |"]
        lines.append("|---|---:|" + "---:|" * len(arms))
        for backbone, rows in sub.groupby("backbone", sort=False):
            by_arm = rows.set_index("arm")
            cells = [
                f"{by_arm.loc[a, 'avg']:.{d}f} / {by_arm.loc[a, 'gap']:.{d}f}" if a in by_arm.index else "–"
                for a in arms
            ]
            lines.append(
                f"| {backbone} | {_params_text(int(rows['parameters'].iloc[0]))} | " + " | ".join(cells) + " |"
            )
        lines.append("")
    lines.append(
        "Fine-tuned: each backbone's baseline config trained on English and evaluated zero-shot; prompted: the "
        "pretrained backbone through lm-evaluation-harness on the same test rows. Medians over seeds "
        "(reporting/prompted.py); per-phase rows are in each backbone's prompted table."
    )
    return "\n".join(lines) + "\n"


def figure(frame, settings: PromptedScalingSettings, stem: Path) -> None:
    """The gap against parameters, a panel per task, a line per arm."""
    from workflow_scripts.reporting.plots import _pyplot, save

    plt = _pyplot()
    tasks = [t for t in settings.tasks if (frame["task"] == t).any()] or list(settings.tasks)[:1]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        sub = frame[frame["task"] == task]
        for arm, line in sub.groupby("arm", sort=False):
            line = line.sort_values("parameters")
            ax.plot(line["parameters"], line["gap"], marker="o", label=arm)
        _size_axis(ax)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("parameters (log scale)", fontsize=8)
        ax.set_ylabel("transfer gap (points, English − rest)", fontsize=8)
        if not sub.empty:
            ax.legend(fontsize=7, frameon=False)
    fig.suptitle("Cross-lingual transfer gap, fine-tuned and prompted, against backbone size", fontsize=10)
    save(fig, stem)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    args = cross_backbone_args("Fine-tuned and prompted transfer gaps across backbone sizes.", argv)
    try:
        settings = PromptedScalingSettings.parse(args.settings, "--settings")
        frame = scaling_frame(settings, args.tables, args.models)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    write_csv(args.csv, frame, index=False)
    write_text(args.md, render(frame, settings))
    figure(frame, settings, args.figure)


if __name__ == "__main__":
    main()
