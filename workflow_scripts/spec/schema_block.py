"""A config block's JSON schema, generated from the record that parses it: one declaration of
each key's name, type, allowed values, default and description.

A record field is a key of the block. Its type gives the schema's type (``int`` integer,
``float`` number, ``str`` string, ``bool`` boolean, ``tuple[X, ...]`` an array of X, a
``Literal`` an enum, another record a nested block, ``dict[str, Any]`` an object); its default
the schema's default (a nested record's default is ``{}``: its own defaults fill the rest);
a field without a default is required. What a type cannot say, a description and bounds
(``minimum``, ``minLength``, ...), the field declares with ``key(...)``; what only the whole
config can say (a rule across fields or blocks) stays hand-written in
schemas/config.schema.yaml, beside the ``record:`` that names the block's record.

Standard library only: the Snakefile imports this through spec/schema.py.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from workflow_scripts.spec.record import ITEMS, OMIT_WHEN_NONE, Record, plain
from workflow_scripts.spec.record import JSON_SCHEMA as SCHEMA


def key(
    default: Any = dataclasses.MISSING,
    *,
    description: str | None = None,
    items: dict[str, Any] | None = None,
    factory: Any = None,
    **schema: Any,
) -> Any:
    """A record field that is a config key: its default (``None``: the key may be absent and
    has none; a record class as ``factory``: a nested block whose defaults fill it), its
    description and the bounds of its value (JSON-schema keywords, e.g. ``minimum=1``)."""
    extra = dict(schema)
    if description:
        extra["description"] = " ".join(description.split())
    metadata: dict[str, Any] = {SCHEMA: extra}
    if items:
        metadata[ITEMS] = items
    if default is None:
        metadata[OMIT_WHEN_NONE] = True
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def block(record: type[Record]) -> dict[str, Any]:
    """The schema of a mapping ``record`` parses: its keys, their types and defaults, and no
    other key."""
    hints = typing.get_type_hints(record)
    fields = [f for f in dataclasses.fields(record) if f.init]
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    required = [f.name for f in fields if _required(f)]
    if required:
        out["required"] = required
    out["properties"] = {f.name: _property(f, hints[f.name]) for f in fields}
    return out


def _property(field: dataclasses.Field, hint: Any) -> dict[str, Any]:
    extra = dict(field.metadata.get(SCHEMA, {}))
    if "$ref" in extra:  # a block the YAML declares (shared with other blocks)
        return extra
    out = {**_of_type(hint), **extra}
    if ITEMS in field.metadata:
        out["items"] = {**out["items"], **field.metadata[ITEMS]}
    default = _default(field)
    if default is not dataclasses.MISSING:
        out["default"] = default
    return out


def _of_type(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):  # X | None: absent is the None
        (arm,) = [a for a in args if a is not type(None)]
        return _of_type(arm)
    if origin is Literal:
        return {"enum": list(args)}
    if isinstance(hint, type) and issubclass(hint, Record):
        return block(hint)
    if origin is tuple:
        return {"type": "array", "items": _of_type(args[0])}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint is Any:
        return {}
    return {"type": _SCALARS[hint]}


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:  # a nested block: its own defaults fill it
        return {}
    if field.default is dataclasses.MISSING or field.default is None:
        return dataclasses.MISSING
    return plain(field.default)


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
