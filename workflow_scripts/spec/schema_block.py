"""A config block's JSON schema, generated from the record that parses it: one declaration of
each key's name, type, allowed values, default and description.

A record field is a key of the block. Its type gives the schema's type (``int`` integer,
``float`` number, ``str`` string, ``bool`` boolean, ``tuple[X, ...]`` an array of X, a
``Literal`` an enum, another record a nested block, ``dict[str, Any]`` an object); its default
the schema's default (a nested record's default is ``{}``: its own defaults fill the rest);
a field without a default is required. A field may also be required of a job's settings
and still have a default in the config, which Snakemake fills in (``key(fill=...)``: every
key then reaches the job; ``filled`` gives those defaults). What a type cannot say, a
description and bounds (``minimum``, ``minLength``, ...), the field declares with
``key(...)``; what only the whole config can say (a rule across fields or blocks) stays
hand-written in schemas/config.schema.yaml, beside a comment naming the block's record
(spec/schema.py RECORD_BLOCKS lists them).

Standard library only: the Snakefile imports this through spec/schema.py.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from workflow_scripts.spec.record import ITEMS, NUMBER_BOUNDS, OMIT_WHEN_NONE, R, Record, parsed_once, plain
from workflow_scripts.spec.record import JSON_SCHEMA as SCHEMA

# The pattern of a language code key, as the config writes one (ISO 639-1 or 639-3).
LANGUAGE_CODE = "^[a-z]{2,3}$"
FILL = "fill"  # a field's metadata: the default the config schema gives a required field
NULLABLE = "nullable"  # ... a key whose null means "the default" (the config may write it)


def key(
    default: Any = dataclasses.MISSING,
    /,
    *,
    description: str | None = None,
    items: dict[str, Any] | None = None,
    factory: Any = None,
    fill: Any = dataclasses.MISSING,
    nullable: bool = False,
    **schema: Any,
) -> Any:
    """A record field that is a config key: its default (``None``: the key may be absent and
    has none; a record class as ``factory``: a nested block whose defaults fill it), or, for
    a field the record requires, the default the schema fills into the config (``fill``),
    whether the config may write null for the default (``nullable``, with a None default), its
    description and the bounds of its value (JSON-schema keywords, e.g. ``minimum=1``; with
    ``$ref``, a block the YAML declares, its schema ``default`` too)."""
    extra = dict(schema)
    if description:
        extra["description"] = " ".join(description.split())
    metadata: dict[str, Any] = {SCHEMA: extra}
    if fill is not dataclasses.MISSING:
        metadata[FILL] = fill
    if nullable:
        metadata[NULLABLE] = True
    if items:
        metadata[ITEMS] = items
    if default is None:
        metadata[OMIT_WHEN_NONE] = True
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Part:
    """Some keys of a record's block, each optional and without its default: a block that
    overrides a few settings of another (a backbone's own phase settings)."""

    record: type[Record]
    keys: tuple[str, ...]


def block(record: type[Record] | Part) -> dict[str, Any]:
    """The schema of a mapping ``record`` parses: its keys, their types and defaults, and no
    other key."""
    part = record if isinstance(record, Part) else None
    record = part.record if part else record  # type: ignore[union-attr]
    hints = typing.get_type_hints(record)
    fields = [f for f in dataclasses.fields(record) if f.init and (part is None or f.name in part.keys)]
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    required = [f.name for f in fields if _required(f) and FILL not in f.metadata]
    if required and part is None:
        out["required"] = required
    out["properties"] = {f.name: _property(f, hints[f.name], with_default=part is None) for f in fields}
    return out


def _property(field: dataclasses.Field, hint: Any, with_default: bool = True) -> dict[str, Any]:
    extra = dict(field.metadata.get(SCHEMA, {}))
    if "$ref" in extra:  # a block the YAML declares (shared with other blocks)
        return extra
    out = {**_of_type(hint), **extra}
    if "oneOf" in out:  # a number's bounds go to the arm that is a number (the other may be a word)
        bounds = {k: out.pop(k) for k in NUMBER_BOUNDS if k in out}
        out["oneOf"] = [{**arm, **bounds} if arm.get("type") in ("integer", "number") else arm for arm in out["oneOf"]]
    if ITEMS in field.metadata:
        out["items"] = {**out["items"], **field.metadata[ITEMS]}
    default = _default(field)
    if field.metadata.get(NULLABLE):
        out["type"], default = [out["type"], "null"], None
    if default is not dataclasses.MISSING and with_default:
        out["default"] = default
    return out


def _of_type(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):  # X | None: absent is the None
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:
            return _of_type(arms[0])
        return {"oneOf": [_one_word(a) or _of_type(a) for a in arms]}
    if origin is Literal:
        return {"enum": list(args)}
    if isinstance(hint, type) and issubclass(hint, Record):
        return block(hint)
    if origin is tuple:
        return {"type": "array", "items": _of_type(args[0])}
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], Record):
        return {"type": "object", "additionalProperties": block(args[1])}  # name -> a block of that record
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint is Any:
        return {}
    return {"type": _SCALARS[hint]}


def _one_word(hint: Any) -> dict[str, Any] | None:
    """A union's arm that allows one value (``Literal["auto"]``): that constant."""
    args = typing.get_args(hint)
    return {"const": args[0]} if typing.get_origin(hint) is Literal and len(args) == 1 else None


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _default(field: dataclasses.Field) -> Any:
    if FILL in field.metadata:
        return plain(field.metadata[FILL])
    if field.default_factory is not dataclasses.MISSING:  # a nested block: its own defaults fill it
        return {}
    if field.default is dataclasses.MISSING or field.default is None:
        return dataclasses.MISSING
    return plain(field.default)


def filled(record: type[Record]) -> dict[str, Any]:
    """The mapping the schema's defaults make of an absent ``record`` block (nested blocks with
    theirs): what Snakemake fills into a config that leaves the block out."""
    hints = typing.get_type_hints(record)
    out: dict[str, Any] = {}
    for field in (f for f in dataclasses.fields(record) if f.init):
        hint = hints[field.name]
        if isinstance(hint, type) and issubclass(hint, Record) and _default(field) == {}:
            out[field.name] = filled(hint)
        elif (default := _default(field)) is not dataclasses.MISSING:
            out[field.name] = default
    return out


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


@functools.cache
def _filled_once(record: type[Record]) -> dict[str, Any]:
    return filled(record)  # read-only by use: parsed_once copies it


def parsed_filled(record: type[R], data: Mapping[str, Any], where: str) -> R:
    """A config block's record, parsed once per mapping, with the schema's defaults filling the
    keys ``data`` leaves out, as Snakemake fills them into a config it validates: a config
    nobody validated (the planners' command lines, a test's raw YAML) reads the same."""
    return parsed_once(record, data, where, _filled_once(record))
