"""A :class:`~paella_tui.supervisor.run.state.RunState` to JSON and back, checked by type.

The compact state is kept beside the ledger, where the agent can write: reading it back checks
every value against the field's declared type (a wrong type, an unknown enum word, a missing
field is a :class:`ValueError`, and the reader folds the ledger again instead).

A type a run holds by the thousand (:class:`SnapshotRecord`: a checkpoint every few minutes of a
day-long run) is kept as a row of its fields and read back by its own checker, as strict as the
generic one and several times faster (a property test holds them to the same verdicts).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

Decode = Callable[[Any], Any]
ROWS: dict[type, tuple[Callable[[Any], Any], Decode]] = {
    SnapshotRecord: (SnapshotRecord.to_row, SnapshotRecord.from_row),
}
"""Types kept as rows: (to a row, checked back from one)."""


def encode(value: Any) -> Any:
    """Plain JSON data for ``value`` (dataclasses, mappings, tuples, sets, enums)."""
    if value is None or isinstance(value, str | int | float):
        return value.value if isinstance(value, enum.Enum) else value
    kind: Any = type(value)
    if kind in ROWS:
        return ROWS[kind][0](value)
    names = _names(kind)
    if names is not None:
        return {name: encode(getattr(value, name)) for name in names}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(encode(v) for v in value)
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    return value


@cache
def _names(cls: Any) -> tuple[str, ...] | None:
    """A dataclass's field names (None for any other type)."""
    return tuple(f.name for f in fields(cls)) if is_dataclass(cls) else None


def decode(cls: type, data: Any) -> Any:
    """An instance of the dataclass ``cls`` from :func:`encode`'s output; ValueError if unfit."""
    return _decoder(cls)(data)


def _bad(what: str, value: Any) -> ValueError:
    text = repr(value)
    return ValueError(f"expected {what}, found {text[:40]}")


@cache
def _decoder(tp: Any) -> Decode:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return lambda v: v
    if tp in ROWS:
        return ROWS[tp][1]
    if origin in (typing.Union, types.UnionType):
        return _union([_decoder(a) for a in args], None in args or type(None) in args)
    if tp is type(None):
        return _none
    if origin is typing.Literal:
        allowed = frozenset(args)
        return lambda v: v if v in allowed and type(v) in {type(a) for a in args} else _raise(tp, v)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda v: tp(v)
    if origin in (tuple,):
        return _tuple(args)
    if origin in (frozenset, set):
        item = _decoder(args[0])
        return lambda v: frozenset(item(x) for x in _list(v))
    if origin in (Mapping, dict):
        return _mapping(args, frozen=origin is Mapping)
    if tp in (int, float, str, bool):
        return _primitive(tp)
    if isinstance(tp, type) and is_dataclass(tp):
        return _dataclass(tp)
    raise TypeError(f"no decoder for {tp!r}")


def _raise(tp: Any, v: Any) -> Any:
    raise _bad(str(tp), v)


def _none(v: Any) -> None:
    if v is not None:
        raise _bad("null", v)
    return None


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise _bad("a list", v)
    return v


def _union(options: list[Decode], optional: bool) -> Decode:
    def decode_union(v: Any) -> Any:
        if v is None and optional:
            return None
        for option in options:
            try:
                return option(v)
            except (ValueError, TypeError):
                continue
        raise _bad("one of a union", v)

    return decode_union


def _tuple(args: tuple[Any, ...]) -> Decode:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])
        return lambda v: tuple(item(x) for x in _list(v))
    parts = [_decoder(a) for a in args]

    def decode_fixed(v: Any) -> tuple[Any, ...]:
        items = _list(v)
        if len(items) != len(parts):
            raise _bad(f"{len(parts)} items", v)
        return tuple(p(x) for p, x in zip(parts, items, strict=True))

    return decode_fixed


def _mapping(args: tuple[Any, ...], *, frozen: bool) -> Decode:
    key_type, value_type = args if args else (str, Any)
    value = _decoder(value_type)
    key: Decode = int if key_type is int else _primitive(str)

    def decode_mapping(v: Any) -> Mapping[Any, Any]:
        if not isinstance(v, dict):
            raise _bad("an object", v)
        decoded = {key(k): value(x) for k, x in v.items()}
        return MappingProxyType(decoded) if frozen else decoded

    return decode_mapping


def _primitive(tp: type) -> Decode:
    def decode_primitive(v: Any) -> Any:
        if tp is float and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if type(v) is not tp:
            raise _bad(tp.__name__, v)
        return v

    return decode_primitive


def _dataclass(cls: type) -> Decode:
    hints = typing.get_type_hints(cls)
    own = [(f.name, f.init) for f in fields(cls)]
    decoders = {name: _decoder(hints[name]) for name, _init in own}

    plan = [(name, decoders[name]) for name, _init in own]
    every_init = all(init for _name, init in own)

    def decode_dataclass(v: Any) -> Any:
        if not isinstance(v, dict):
            raise _bad(f"a {cls.__name__}", v)
        try:
            values = {name: decode(v[name]) for name, decode in plan}
        except KeyError as missing:
            raise ValueError(f"{cls.__name__} lacks {missing}") from None
        if every_init:
            return cls(**values)
        obj = cls(**{name: values[name] for name, init in own if init})
        for name, init in own:
            if not init:
                object.__setattr__(obj, name, values[name])
        return obj

    return decode_dataclass
