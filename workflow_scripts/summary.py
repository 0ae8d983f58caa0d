"""The run summary printed when the workflow finishes: where the tables, figures and report
are, and the main table of the baseline setting."""

from __future__ import annotations

from pathlib import Path


def run_summary(root: Path = Path(".")) -> str:
    """The summary of a finished run under ``root`` ("" when no main table was written)."""
    tables, figures = root / "results/tables", root / "results/figures"
    main = tables / "main.md"
    if not main.is_file():
        return ""
    sections = main.read_text().split("\n## ")
    first = sections[1].strip() if len(sections) > 1 else sections[0].strip()
    lines = ["", "xstilts: results", f"  tables:  {tables}/ ({', '.join(sorted(p.name for p in tables.glob('*.md')))})"]
    if figures.is_dir():
        lines.append(f"  figures: {figures}/ ({sum(1 for _ in figures.rglob('*.png'))} PNG, each also as SVG)")
    lines += ["  report:  snakemake --report report.html   (every table and figure, captioned)", "",
              "## " + first, ""]
    return "\n".join(lines)
