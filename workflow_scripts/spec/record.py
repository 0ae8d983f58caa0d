"""Typed, frozen records: what one step of the workflow hands the next.

The workflow builds a record per job (``workflow/grid.py``) and passes it to the job's CLI as
``--settings`` JSON (``record.to_json()``); the CLI parses that JSON back through the same
record (``Record.parse``). A key the record does not declare, or a declared key that is
missing, is an error naming the key and the record when the job starts, not a ``KeyError``
hours into it. Values are checked against the field's type: ``int``, ``float`` (an integer
is a float, and is written back as it came, so the JSON stays byte-identical), ``str``,
``bool``, ``X | None``, ``Literal[...]``, ``tuple[X, ...]`` (a JSON list), ``dict[str, X]``,
another record, or ``Any`` (taken as it is).

A field declared with ``optional()`` may be absent: it reads ``None`` (or the given default)
and, when ``None``, is left out of the JSON again, so a record written back is the JSON it
was read from.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, ClassVar, Literal, TypeVar, Union

from workflow_scripts.spec.basics import InputError, canonical_json
from workflow_scripts.spec.suggest import did_you_mean

R = TypeVar("R", bound="Record")
OMIT_WHEN_NONE = "omit_when_none"
# A field's metadata: the JSON-schema keywords of a config key (spec/schema_block.py ``key``),
# whose bounds parsing checks too, so a config part nobody validated is held to them.
JSON_SCHEMA = "json_schema"
ITEMS = "items"


def optional(default: Any = None) -> Any:
    """A field that may be absent from the JSON; ``None`` is written as absent."""
    return dataclasses.field(default=default, metadata={OMIT_WHEN_NONE: True})


def default_factory(factory: Any) -> Any:
    """A field with a mutable default (a fresh one per record)."""
    return dataclasses.field(default_factory=factory)


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every settings record. Subclasses are ``@dataclass(frozen=True)``."""

    # The CLI module (below workflow_scripts) that parses this record from --settings.
    step: ClassVar[str | None] = None
    # What its errors call one of its keys (a result file's keys are not settings).
    key_noun: ClassVar[str] = "settings key"

    @classmethod
    def parse(cls: type[R], data: str | Mapping[str, Any], where: str | None = None) -> R:
        """The record of ``data`` (a mapping or its JSON); unknown, missing or mistyped keys
        raise InputError naming the key and where it was read."""
        where = where or cls.__name__
        data = cls.mapping_of(data, where)
        declared = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(data) - set(declared))
        if unknown:
            key = unknown[0]
            raise InputError(
                f"{where}: unknown {cls.key_noun} {key!r}{did_you_mean(key, declared)} "
                f"(the keys of {cls.__name__}: {', '.join(sorted(declared))})"
            )
        missing = [name for name, f in declared.items() if name not in data and _required(f)]
        if missing:
            raise InputError(f"{where}: {cls.key_noun} {missing[0]!r} is missing ({cls.__name__} needs it)")
        hints = _hints(cls)
        values = {name: _coerce(hints[name], value, f"{where}.{name}") for name, value in data.items()}
        for name, value in values.items():
            _check_bounds(declared[name], value, f"{where}.{name}")
        return cls(**values)

    @staticmethod
    def mapping_of(data: Any, where: str) -> Mapping[str, Any]:
        """``data`` as a mapping: JSON text decoded, a record as its JSON mapping."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as err:
                raise InputError(f"{where}: settings are not valid JSON: {err}") from err
        if isinstance(data, Record):
            data = data.to_dict()
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: settings must be a JSON object, got {type(data).__name__}")
        return data

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready mapping; optional fields left at ``None`` are absent."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get(OMIT_WHEN_NONE):
                continue
            out[f.name] = plain(value)
        return out

    def to_json(self) -> str:
        """Key-sorted, compact JSON: what the rule passes as --settings."""
        return canonical_json(self.to_dict())

    def replace(self: R, **changes: Any) -> R:
        """A copy with ``changes``, checked like parsed settings."""
        return type(self).parse({**self.to_dict(), **{k: plain(v) for k, v in changes.items()}})

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


# A record per config mapping it was parsed from, kept with a copy of that mapping: a config
# edited in place (tests, config layers) is parsed again, an unchanged one never.
_PARSED: dict[tuple[type, int], tuple[Any, Any]] = {}


def parsed_once(record: type[R], data: Mapping[str, Any], where: str, defaults: Mapping[str, Any] | None = None) -> R:
    """``record.parse(data, where)``, once per config mapping (again when it has changed);
    ``defaults`` fill the keys ``data`` leaves out, as the config schema fills them into a
    config it validates (a config nobody validated then reads the same)."""
    found = _PARSED.get((record, id(data)))
    if found is not None and found[0] == data:
        return found[1]
    result = record.parse({**(defaults or {}), **data}, where)
    _PARSED[(record, id(data))] = (copy.deepcopy(data), result)
    return result


def settings_json(value: Record | Mapping[str, Any]) -> str:
    """The canonical JSON of a record or of a plain mapping (a phase's map of data files)."""
    return value.to_json() if isinstance(value, Record) else canonical_json(value)


def plain(value: Any) -> Any:
    """Records, tuples and mappings as JSON's dicts and lists."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    """``value`` checked against ``hint`` (and lists made tuples, mappings of records parsed)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in (a for a in args if a is not type(None)):
            try:
                return _coerce(arm, value, where)
            except InputError as err:
                errors.append(str(err))
        raise InputError(errors[0] if len(errors) == 1 else f"{where}: {value!r} is none of {_name(hint)}")
    if origin is Literal:
        if value not in args:
            raise InputError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if isinstance(hint, type) and issubclass(hint, Record):
        if not isinstance(value, (Mapping, Record)):  # JSON text is read only at the top level
            raise InputError(f"{where}: expected a mapping ({hint.__name__}), got {value!r}")
        return hint.parse(value, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{where}: expected a list, got {value!r}")
        item = args[0] if args else Any
        return tuple(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping, typing.Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise InputError(f"{where}: expected a mapping, got {value!r}")
        item = args[1] if len(args) == 2 else Any
        return {k: _coerce(item, v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(hint, value, where)


def _scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint in (str, bool):
        ok = isinstance(value, hint)
    else:
        raise TypeError(f"{where}: a record field of type {_name(hint)} is not supported")
    if not ok:
        raise InputError(f"{where}: expected {_name(hint)}, got {value!r}")
    return value


# A number's bounds, by JSON-schema keyword: the test and the words of its error.
NUMBER_BOUNDS = {
    "minimum": (lambda v, b: v >= b, "at least"),
    "exclusiveMinimum": (lambda v, b: v > b, "greater than"),
    "maximum": (lambda v, b: v <= b, "at most"),
    "exclusiveMaximum": (lambda v, b: v < b, "less than"),
}


def _check_bounds(field: dataclasses.Field, value: Any, where: str) -> None:
    """``value`` within the bounds its config key declares (nothing to check for other fields)."""
    schema = field.metadata.get(JSON_SCHEMA)
    if not schema or value is None:
        return
    _within(schema, value, where)
    if isinstance(value, tuple):
        if len(value) < schema.get("minItems", 0):
            raise InputError(f"{where}: needs at least {schema['minItems']} item(s), got {list(value)!r}")
        if schema.get("uniqueItems") and len(set(value)) < len(value):
            raise InputError(f"{where}: {list(value)!r} names an item twice")
        for i, item in enumerate(value):
            _within(field.metadata.get(ITEMS, {}), item, f"{where}[{i}]")


def _within(schema: Mapping[str, Any], value: Any, where: str) -> None:
    if "enum" in schema and value not in schema["enum"]:
        raise InputError(f"{where}: {value!r} is not one of {', '.join(map(repr, schema['enum']))}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        raise InputError(f"{where}: {value!r} is shorter than {schema['minLength']} character(s)")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        raise InputError(f"{where}: {value!r} does not match {schema['pattern']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for keyword, (holds, words) in NUMBER_BOUNDS.items():
            if keyword in schema and not holds(value, schema[keyword]):
                raise InputError(f"{where}: {value!r} must be {words} {schema[keyword]}")


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
