"""A table as an HTML page, for `snakemake --report`: the report shows an HTML result inline
and offers any other file (CSV, Markdown) only as a download.

A page is rendered from the table's Markdown when the rule writes one (the formatted table a
reader sees in the repository: rounded values, marks and footnotes), otherwise from its CSV
(values to ``--decimals`` places). The Markdown is the subset the table writers produce:
headings, pipe tables, bullet lists, paragraphs, ``code`` and **bold**.

CLI: ``python -m workflow_scripts.reporting.html_page [--decimals N] PAGE=SOURCE ...`` (each
PAGE an ``.html`` path, each SOURCE a ``.md`` or ``.csv`` table).
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path

from workflow_scripts.common import atomic_path, setup_logging
from workflow_scripts.spec.basics import InputError

STYLE = """
body { font-family: sans-serif; font-size: 14px; margin: 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.source { color: #666; font-size: 12px; }
"""
ALIGNMENT_CELL = re.compile(r"^:?-+:?$")
# a number, signed or not, with its marks (†, ‡, §, *), or two of them as QA's "F1 / EM"
NUMBER = re.compile(r"^[+\-−]?\d[\d.,]*(e[+\-]?\d+)?(\s*/\s*[+\-−]?\d[\d.,]*)?(\s*[%†‡§*])*$")


def inline(text: str) -> str:
    """Escaped text with ``code`` and **bold** marked up."""
    out = html.escape(text, quote=False)
    out = re.sub(r"``?([^`]+)``?", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _cell(tag: str, text: str) -> str:
    # numbers right-aligned, so that a column's digits line up
    attributes = ' class="num"' if tag == "td" and NUMBER.match(text) else ""
    return f"<{tag}{attributes}>{inline(text)}</{tag}>"


def pipe_table(lines: list[str]) -> str:
    """A Markdown pipe table (header, alignment row, body) as an HTML table."""
    rows = [_cells(line) for line in lines]
    header, body = rows[0], rows[1:]
    if body and all(ALIGNMENT_CELL.match(cell) for cell in body[0] if cell):
        body = body[1:]
    parts = ["<table>", "<thead><tr>" + "".join(_cell("th", c) for c in header) + "</tr></thead>", "<tbody>"]
    parts += ["<tr>" + "".join(_cell("td", c) for c in row) + "</tr>" for row in body]
    return "\n".join([*parts, "</tbody>", "</table>"])


def _blocks(text: str) -> list[list[str]]:
    """Runs of lines of one kind: table rows, list items, a heading, paragraph lines."""
    blocks: list[list[str]] = []
    kind = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            kind = None
            continue
        this = "table" if stripped.startswith("|") else "list" if stripped.startswith("- ") else "text"
        if stripped.startswith("#"):
            this = "heading"
        if this != kind or this == "heading":
            blocks.append([])
        blocks[-1].append(stripped)
        kind = this
    return blocks


def markdown_html(text: str) -> str:
    """The HTML body of a table writer's Markdown."""
    parts = []
    for block in _blocks(text):
        first = block[0]
        if first.startswith("#"):
            level = min(4, len(first) - len(first.lstrip("#")))
            parts.append(f"<h{level}>{inline(first.lstrip('#').strip())}</h{level}>")
        elif first.startswith("|"):
            parts.append(pipe_table(block))
        elif first.startswith("- "):
            parts.append("<ul>" + "".join(f"<li>{inline(line[2:])}</li>" for line in block) + "</ul>")
        else:
            parts.append(f"<p>{inline(' '.join(block))}</p>")
    return "\n".join(parts)


def frame_html(frame, decimals: int) -> str:
    """The HTML body of a CSV table: every row, floats to ``decimals`` places, blanks empty."""
    if frame.empty:
        return "<p>No rows.</p>"
    body = frame.to_html(index=False, na_rep="", border=0, float_format=lambda v: f"{v:.{decimals}f}")
    return re.sub(r"<td>([^<]*)</td>", lambda m: _cell("td", html.unescape(m.group(1))), body)


def page(title: str, body: str, source: Path | None = None) -> str:
    """A whole HTML document: the body, then the file it was rendered from (when there is one)."""
    footer = f'<p class="source">Rendered from <code>{html.escape(str(source))}</code>.</p>\n' if source else ""
    return (
        f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f"<style>{STYLE}</style>\n</head>\n<body>\n{body}\n{footer}</body>\n</html>\n"
    )


def render(source: Path, decimals: int) -> str:
    """The page of one table file (``.md`` or ``.csv``)."""
    if source.suffix == ".md":
        return page(source.stem, markdown_html(source.read_text()), source)
    if source.suffix == ".csv":
        import pandas as pd

        frame = pd.read_csv(source, keep_default_na=False, na_values=[""])
        return page(source.stem, f"<h1>{html.escape(source.stem)}</h1>\n" + frame_html(frame, decimals), source)
    raise InputError(f"{source}: a table page is rendered from a .md or .csv file")


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Render tables as HTML pages for the Snakemake report.")
    ap.add_argument("--decimals", type=int, default=2, help="decimal places of a CSV table's floats")
    ap.add_argument("pages", nargs="+", metavar="PAGE=SOURCE")
    args = ap.parse_args(argv)
    try:
        for item in args.pages:
            target, sep, source = item.partition("=")
            if not sep:
                raise InputError(f"{item!r}: expected PAGE=SOURCE")
            text = render(Path(source), args.decimals)
            with atomic_path(target) as tmp:
                tmp.write_text(text)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
