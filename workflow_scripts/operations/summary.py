"""The run summary printed when the workflow finishes: where this experiment's tables,
figures and report are, and each of its backbones' main table of the baseline setting."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def run_summary(results: Path | str, backbones: Sequence[str], experiment: str) -> str:
    """The summary of a finished run whose outputs are under ``results`` (the experiment's
    folder); only ``backbones`` are shown, so tables another config left there never pass
    for this run's ("" when no main table was written)."""
    results = Path(results)
    tables, figures = results / "tables", results / "figures"
    mains = [tables / b / "main.md" for b in backbones if (tables / b / "main.md").is_file()]
    if not mains:
        return ""
    lines = ["", f"xstilts: results of experiment {experiment}"]
    for main in mains:
        lines.append(f"  tables:  {main.parent}/ ({', '.join(sorted(p.name for p in main.parent.glob('*.md')))})")
    if (tables / "backbones.md").is_file():
        lines.append(f"  across backbones: {tables / 'backbones.md'}")
    if (tables / "cost.md").is_file():
        lines.append(f"  cost:    {tables / 'cost.md'}")
    if figures.is_dir():
        lines.append(f"  figures: {figures}/ ({sum(1 for _ in figures.rglob('*.png'))} PNG, each also as SVG)")
    lines.append(f"  report:  snakemake --report {results}/report.html   (every table and figure, captioned)")
    for main in mains:
        sections = main.read_text().split("\n## ")
        first = sections[1].strip() if len(sections) > 1 else sections[0].strip()
        lines += ["", f"# backbone {main.parent.name}", "## " + first if len(sections) > 1 else first]
    return "\n".join(lines + [""])
