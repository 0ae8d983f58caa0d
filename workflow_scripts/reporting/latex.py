"""LaTeX versions of the main and per-language tables, ready to ``\\input`` (booktabs).

Drawn from the tables `aggregate_tables` wrote, so they agree with the Markdown: the
baseline config's row is absolute, the other rows are signed differences to it, QA cells
are "F1 / EM", the best config of each column (by absolute score) is bold, and a dagger
marks a difference whose paired bootstrap interval excludes 0 (significance.py). Only the
baseline setting's block of the main table goes into ``main.tex``: it is the paper's table,
with the benchmark's category averages and overall score after Avg where the Markdown table
has them (XTREME-R), and its notes (categories left empty, languages short of the
benchmark's) as comment lines.

CLI: ``python -m workflow_scripts.reporting.latex --tables DIR --settings JSON --output DIR``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from workflow_scripts.common import read_result_table, setup_logging
from workflow_scripts.reporting.tables import (
    benchmark_notes,
    category_columns,
    category_header,
    metrics_shown,
    write_text,
)
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.report_settings import LatexSettings, TableSettings

_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def escape(text: str) -> str:
    return "".join(_SPECIAL.get(ch, ch) for ch in str(text))


def number(value: float, decimals: int, signed: bool, bold: bool = False) -> str:
    if not math.isfinite(value):
        return "--"
    text = f"{abs(value):.{decimals}f}"
    if signed:
        text = ("$+$" if value >= 0 else "$-$") + text
    elif value < 0:
        text = "$-$" + text
    return rf"\textbf{{{text}}}" if bold else text


def tabular(header: list[str], rows: list[list[str]]) -> str:
    lines = [
        r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def _best(absolute: dict[str, float]) -> set[str]:
    finite = {k: v for k, v in absolute.items() if math.isfinite(v)}
    if not finite:
        return set()
    top = max(finite.values())
    return {k for k, v in finite.items() if v == top}


def delta_rows(
    shown: dict[str, dict[str, float]],
    baseline: str,
    columns: list[list[str]],
    decimals: int,
    marks: set[tuple[str, str]],
    mark_keys: list[str | None],
) -> list[list[str]]:
    """Rows of cells: ``shown[config][column]`` (baseline absolute, others differences);
    each cell joins its ``columns`` group with " / "; bold marks the best absolute value of
    each column; ``mark_keys`` names the significance key of each group (None: no marker)."""
    absolute = {
        c: {col: v + (0.0 if c == baseline else shown[baseline].get(col, math.nan)) for col, v in vals.items()}
        for c, vals in shown.items()
    }
    best = {col: _best({c: absolute[c].get(col, math.nan) for c in shown}) for group in columns for col in group}
    rows = []
    for config, values in shown.items():
        cells = [escape(config)]
        for group, key in zip(columns, mark_keys):
            text = " / ".join(
                number(values.get(col, math.nan), decimals, config != baseline, config in best[col]) for col in group
            )
            if key is not None and (config, key) in marks:
                text += r"\textsuperscript{\dag}"  # the Markdown tables' marker
            cells.append(text)
        rows.append(cells)
    return rows


def main_tex(main, significance, settings: TableSettings) -> str:
    setting = settings.baseline_setting
    block = main[main["setting"] == setting].set_index("intermediate")
    configs = [c for c in settings.intermediate if c in block.index]
    baseline = settings.baseline
    if baseline not in configs:
        raise InputError(f"main.csv: no row for the baseline config {baseline!r} in setting {setting}")
    groups, header, keys = [], ["Intermediate task"], []
    for target in settings.targets:
        metrics = metrics_shown(target)
        groups.append([f"{target}.{m}" for m in metrics] if len(metrics) > 1 else [target])
        header.append(escape(target) + (" (F1 / EM)" if len(metrics) > 1 else ""))
        keys.append(target)
    groups.append(["avg"])
    header.append("Avg")
    keys.append(None)
    for column in category_columns(settings):  # XTREME-R: category averages and overall score
        if column not in block.columns:
            raise InputError(
                f"main.csv: no column {column!r} (written by a version of the tables without category averages?)"
            )
        groups.append([column])
        header.append(escape(category_header(column)))
        keys.append(None)
    shown = {c: {col: float(block.loc[c, col]) for g in groups for col in g} for c in configs}
    marks = {
        (r.intermediate, r.target) for r in significance.itertuples() if r.setting == setting and bool(r.excludes_zero)
    }
    rows = delta_rows(shown, baseline, groups, settings.decimals, marks, keys)
    comment = (
        f"% xstilts main table, setting {setting}: median test scores over seeds "
        f"{', '.join(map(str, settings.seeds))}; row {baseline} absolute, other rows differences to it;\n"
        f"% bold: best config per column; \\dag: 95% paired bootstrap interval of the difference excludes 0.\n"
    )
    comment += "".join(f"% {note}\n" for note in benchmark_notes(settings))
    return comment + tabular(header, rows)


def per_language_tex(per_language, settings: TableSettings, target: str) -> str:
    setting = settings.baseline_setting
    sub = per_language[(per_language["setting"] == setting) & (per_language["target"] == target)]
    block = sub.set_index("intermediate")
    configs = [c for c in settings.intermediate if c in block.index]
    baseline = settings.baseline
    if baseline not in configs:
        raise InputError(f"per_language.csv: no {target} row for the baseline config {baseline!r}")
    languages = [l for l in settings.target_languages[target] if l in block.columns] + ["avg"]
    base = {l: float(block.loc[baseline, l]) for l in languages}
    shown = {c: {l: float(block.loc[c, l]) - (0.0 if c == baseline else base[l]) for l in languages} for c in configs}
    rows = delta_rows(shown, baseline, [[l] for l in languages], settings.decimals, set(), [None] * len(languages))
    metric = block["metric"].iloc[0]
    comment = (
        f"% xstilts {target} ({metric}) per language, setting {setting}: median test scores over seeds "
        f"{', '.join(map(str, settings.seeds))}; row {baseline} absolute, other rows differences to it;"
        " bold: best config per column.\n"
    )
    return comment + tabular(["Intermediate task"] + [escape(l) for l in languages[:-1]] + ["Avg"], rows)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="LaTeX (booktabs) versions of the main and per-language tables.")
    ap.add_argument("--tables", required=True, type=Path)
    ap.add_argument("--settings", required=True)
    ap.add_argument("--output", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        settings = LatexSettings.parse(args.settings, "--settings")
        main_frame = read_result_table(args.tables / "main.csv")
        significance = read_result_table(args.tables / "significance.csv")
        per_language = read_result_table(args.tables / "per_language.csv")
        outputs = {args.output / "main.tex": main_tex(main_frame, significance, settings)}
        for target in settings.targets_drawn():
            outputs[args.output / "per_language" / f"{target}.tex"] = (
                per_language_tex(per_language, settings, target)
                if target in settings.targets
                else f"% xstilts: backbone {settings.backbone_name} does not run target {target}"
                " (its grid leaves it out)\n"
            )
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    for path, text in outputs.items():
        write_text(str(path), text)


if __name__ == "__main__":
    main()
