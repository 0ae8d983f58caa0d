"""The run summary printed when the workflow finishes: where the tables, figures and report
are, and each backbone's main table of the baseline setting."""

from __future__ import annotations

from pathlib import Path


def run_summary(root: Path = Path(".")) -> str:
    """The summary of a finished run under ``root`` ("" when no main table was written)."""
    tables, figures = root / "results/tables", root / "results/figures"
    mains = sorted(tables.glob("*/main.md"))
    if not mains:
        return ""
    lines = ["", "xstilts: results"]
    for main in mains:
        lines.append(f"  tables:  {main.parent}/ ({', '.join(sorted(p.name for p in main.parent.glob('*.md')))})")
    if (tables / "backbones.md").is_file():
        lines.append(f"  across backbones: {tables / 'backbones.md'}")
    if figures.is_dir():
        lines.append(f"  figures: {figures}/ ({sum(1 for _ in figures.rglob('*.png'))} PNG, each also as SVG)")
    lines.append("  report:  snakemake --report report.html   (every table and figure, captioned)")
    for main in mains:
        sections = main.read_text().split("\n## ")
        first = sections[1].strip() if len(sections) > 1 else sections[0].strip()
        lines += ["", f"# backbone {main.parent.name}", "## " + first if len(sections) > 1 else first]
    return "\n".join(lines + [""])
