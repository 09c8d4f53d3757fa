"""Facts to JSON and back, guided by their dataclasses' type hints (for the persistent memo)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any


def encode(value: Any) -> Any:
    """A fact as JSON-able data: dataclasses become dicts, tuples lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a fact cannot hold a {type(value).__name__}")


@functools.cache
def _fields(kind: type) -> tuple[tuple[str, Any], ...]:
    """(name, type) of a dataclass's fields, its string annotations evaluated once."""
    hints = typing.get_type_hints(kind)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(kind))


_PLAIN = (str, int, float, bool, type(None))


def decode(kind: Any, data: Any) -> Any:
    """``data`` (from ``encode``) as the type ``kind`` names."""
    if kind in _PLAIN:
        return data
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return kind(**{name: decode(hint, data[name]) for name, hint in _fields(kind) if name in data})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(data)
    if origin in (types.UnionType, typing.Union):
        if data is None:
            return None
        options = [a for a in args if a is not type(None)]
        return decode(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(data) if args[0] in _PLAIN else tuple(decode(args[0], d) for d in data)
        return tuple(decode(a, d) for a, d in zip(args, data)) if args else tuple(data)
    if origin is list:
        return [decode(args[0], d) for d in data] if args else list(data)
    if origin is dict:
        return {k: decode(args[1], v) for k, v in data.items()} if args else dict(data)
    return data
