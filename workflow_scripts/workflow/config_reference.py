"""The configuration reference (docs/configuration/reference.md), rendered from the JSON schema.

Every key of ``schemas/config.schema.yaml`` becomes one row: its dotted path (``<name>`` where
the key is a name of your choosing), type and constraints, default, and the schema's
description. Nested objects, maps (``additionalProperties``), ``$ref``, ``allOf``,
``oneOf``/``anyOf`` and ``if``/``then``/``else`` are followed generically, so a key added to
the schema appears in the page with no change here.

    python -m workflow_scripts.workflow.config_reference           # print the page
    python -m workflow_scripts.workflow.config_reference --write   # write docs/configuration/reference.md

``tests/test_docs.py`` fails when the committed page differs from what the schema renders.
Its last section, where a training hyperparameter comes from, is rendered from
``workflow/hyperparameters.py``. Standard library and PyYAML only (parse-time layer).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.spec.schema import with_records

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "schemas" / "config.schema.yaml"
PAGE = REPO / "docs" / "configuration" / "reference.md"
COMMAND = "python -m workflow_scripts.workflow.config_reference --write"

Schema = dict[str, Any]


def _resolve(node: Schema, root: Schema) -> Schema:
    """A node with its $ref and allOf members merged in (the node's own keys win)."""
    merged: Schema = {}
    if "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $refs are supported, not {ref!r}")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        merged = _merge(merged, _resolve(target, root))
    conditionals = list(merged.pop("_conditionals", []))
    for member in node.get("allOf", []):
        if "if" in member:
            conditionals.append(member)
        else:
            resolved = _resolve(member, root)
            conditionals += resolved.pop("_conditionals", [])
            merged = _merge(merged, resolved)
    if "if" in node:
        conditionals.append({k: node[k] for k in ("if", "then", "else") if k in node})
    own = {k: v for k, v in node.items() if k not in ("$ref", "allOf", "if", "then", "else")}
    merged = _merge(merged, own)
    if conditionals:
        merged["_conditionals"] = conditionals
    return merged


def _merge(base: Schema, over: Schema) -> Schema:
    out = dict(base)
    for key, value in over.items():
        if key == "properties" and key in out:
            props = dict(out[key])
            for name, sub in value.items():
                props[name] = _merge(props.get(name, {}), sub) if name in props else sub
            out[key] = props
        elif key == "required" and key in out:
            out[key] = list(dict.fromkeys([*out[key], *value]))
        else:
            out[key] = value
    return out


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"`{text}`"


def _type(node: Schema, root: Schema) -> str:
    """Type, allowed values and constraints of a (resolved) node, as a short phrase."""
    if "const" in node:
        return f"{_code(node['const'])} only"
    if "enum" in node:
        return "one of " + ", ".join(_code(v) for v in node["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in node:
            return " or ".join(_type(_resolve(option, root), root) for option in node[combinator])
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    words = []
    for k in kinds:
        if k == "array":
            items = _resolve(node.get("items", {}), root)
            inner = _type(items, root)
            words.append(f"list of {inner}" if inner else "list")
        elif k == "object" and isinstance(node.get("additionalProperties"), dict) and not node.get("properties"):
            value = _resolve(node["additionalProperties"], root)
            inner = "" if value.get("properties") else _type(value, root)
            words.append(f"map of {inner}" if inner else "map")
        elif k == "null":
            words.append("null")
        elif k:
            words.append(k)
    text = " or ".join(words)
    limits = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in node:
            limits.append(f"{sign} {node[key]}")
    if "minItems" in node:
        limits.append(f"at least {node['minItems']} item{'s' if node['minItems'] != 1 else ''}")
    if node.get("uniqueItems"):
        limits.append("no repeats")
    if "minProperties" in node:
        limits.append(f"at least {node['minProperties']} entr{'ies' if node['minProperties'] != 1 else 'y'}")
    if "minLength" in node:
        limits.append("non-empty" if node["minLength"] == 1 else f"length ≥ {node['minLength']}")
    if "pattern" in node:
        limits.append(f"matching {_code(node['pattern'])}")
    if "propertyNames" in node:
        names = node["propertyNames"]
        if "pattern" in names:
            limits.append(f"names matching {_code(names['pattern'])}")
        elif "enum" in names:
            limits.append("names: " + ", ".join(_code(v) for v in names["enum"]))
    if "not" in node and "const" in node["not"]:
        limits.append(f"not {_code(node['not']['const'])}")
    if limits:
        text = f"{text}, {', '.join(limits)}" if text else ", ".join(limits)
    return text


def _cell(text: str) -> str:
    """One line of table-cell Markdown: a | outside code spans is escaped (inside them the
    tables extension reads it as text)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _prose(text: str) -> str:
    """A description as table-cell Markdown: <name> and * stay literal (not HTML, not emphasis)."""
    return _cell(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def _rows(
    path: str,
    node: Schema,
    root: Schema,
    required: bool,
    note: str,
    stack: tuple[str, ...],
    out: list[tuple[str, str, str, str]],
) -> None:
    """Append the rows of ``node`` at ``path`` and of everything under it."""
    ref = node.get("$ref", "")
    if ref and ref in stack:  # a recursive definition: name it, do not unfold it again
        out.append((path, f"see {ref}", "", ""))
        return
    stack = (*stack, ref) if ref else stack
    node = _resolve(node, root)
    description = " ".join(str(node.get("description", "")).split())
    if note:
        description = f"({note}) {description}".strip()
    kind = _type(node, root)
    if required:
        kind = f"{kind}, required" if kind else "required"
    default = _code(node["default"]) if "default" in node else ""
    out.append((path, kind, default, description))

    needed = set(node.get("required", []))
    for name, sub in node.get("properties", {}).items():
        _rows(f"{path}.{name}", sub, root, name in needed, "", stack, out)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        value = _resolve(extra, root)
        if value.get("properties") or isinstance(value.get("additionalProperties"), dict) or value.get("_conditionals"):
            _rows(f"{path}.<name>", extra, root, False, "", stack, out)
    # if/then/else (in allOf members): the branches' properties, each labelled with its condition
    for member in node.get("_conditionals", []):
        condition = _condition(member["if"])
        for branch, label in (("then", f"when {condition}"), ("else", f"unless {condition}")):
            for name, sub in member.get(branch, {}).get("properties", {}).items():
                _rows(f"{path}.{name}", sub, root, False, label, stack, out)
    # items of a list whose elements are objects with their own keys
    items = node.get("items")
    if isinstance(items, dict) and _resolve(items, root).get("properties"):
        _rows(f"{path}[]", items, root, False, "", stack, out)


def _condition(schema: Schema) -> str:
    parts = []
    for name, sub in schema.get("properties", {}).items():
        if "const" in sub:
            parts.append(f"{name} is {_code(sub['const'])}")
        elif "enum" in sub:
            parts.append(f"{name} in {', '.join(_code(v) for v in sub['enum'])}")
    return " and ".join(parts) or "the condition holds"


def render(schema: Schema) -> str:
    """The reference page of a config schema, as markdown."""
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from schemas/config.schema.yaml and the records of spec/schema.py RECORD_BLOCKS by "
        f"`{COMMAND}`; do not edit by hand. -->",
        "",
        " ".join(str(schema.get("description", "")).split()),
        "",
        "Every key of the schema, by dotted path. `<name>` stands for a name you choose (a backbone,",
        "a task, an intermediate config, a language, a rule); a key marked *required* must be set",
        "whenever its parent is; a default is what the schema fills in when the key is absent.",
        "[Configuration](index.md) explains how the blocks fit together.",
        "",
    ]
    needed = set(schema.get("required", []))
    for name, node in schema.get("properties", {}).items():
        rows: list[tuple[str, str, str, str]] = []
        _rows(name, node, schema, name in needed, "", (), rows)
        lines += [f"## `{name}`", "", "| key | type | default | description |", "|---|---|---|---|"]
        lines += [
            f"| `{_cell(path)}` | {_cell(kind)} | {_cell(default)} | {_prose(text)} |"
            for path, kind, default, text in rows
        ]
        lines.append("")
    return "\n".join(lines + _precedence())


def _precedence() -> list[str]:
    """Where a training job's hyperparameters come from (workflow/hyperparameters.py)."""
    from workflow_scripts.workflow import hyperparameters

    return [
        "## Where a training hyperparameter comes from",
        "",
        "A training job's phase settings are layered, lowest precedence first: each source sets",
        "the keys named, and a later source replaces what an earlier one set",
        "(`workflow_scripts/workflow/hyperparameters.py`). The schema's defaults fill the first",
        "layer; a task's `batch_size`, `epochs` and `max_length` are its own (`tasks.<name>`).",
        "",
        hyperparameters.precedence_markdown(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema", type=Path, default=SCHEMA)
    parser.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(REPO)} instead of printing")
    args = parser.parse_args(argv)
    page = render(with_records(yaml.safe_load(args.schema.read_text())))
    if args.write:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(page)
        print(f"wrote {PAGE.relative_to(REPO)}", file=sys.stderr)
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
