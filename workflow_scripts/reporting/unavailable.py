"""The report's "not available" page: every figure the rules wrote as a placeholder (no data to
draw, spec/availability.py), with the reason. The report lists only figures drawn from data; this
page names the rest, so a reader sees what the grid does not cover instead of empty images.

CLI: ``python -m workflow_scripts.reporting.unavailable --missing JSON --html FILE``, the JSON a
list of ``{"figure": path, "reason": text}``.
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path

from workflow_scripts.common import atomic_path, setup_logging
from workflow_scripts.reporting.html_page import page

TITLE = "Figures without data"


def body(missing: list[dict[str, str]]) -> str:
    """The page's HTML body: one table row per missing figure, or a line saying there is none."""
    lines = [f"<h1>{TITLE}</h1>"]
    if not missing:
        lines.append("<p>Every figure of this grid is drawn from data; none is left out of the report.</p>")
        return "\n".join(lines)
    lines += [
        f"<p>{len(missing)} figure(s) have no data to draw and are left out of the report's results. "
        "The files exist (each rule writes the same figures for every backbone) and hold only this reason.</p>",
        "<table>",
        "<thead><tr><th>figure</th><th>why it has no data</th></tr></thead>",
        "<tbody>",
    ]
    for item in sorted(missing, key=lambda m: m["figure"]):
        figure, reason = html.escape(item["figure"]), html.escape(item["reason"])
        lines.append(f"<tr><td><code>{figure}</code></td><td>{reason}</td></tr>")
    return "\n".join([*lines, "</tbody>", "</table>"])


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Write the report's page of figures without data.")
    ap.add_argument("--missing", required=True, help='JSON: [{"figure": path, "reason": text}, ...]')
    ap.add_argument("--html", required=True, type=Path)
    args = ap.parse_args(argv)
    missing = json.loads(args.missing)
    with atomic_path(args.html) as tmp:
        tmp.write_text(page(TITLE, body(missing)))
    print(f"{len(missing)} figure(s) without data -> {args.html}")


if __name__ == "__main__":
    main()
