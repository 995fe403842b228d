"""Family configs from plain dicts: ``ModelConfig`` (the base of every family's config
dataclass) and ``coerce_config``, which builds a dataclass from parsed JSON driven by its
type hints (tuples restored from lists, nested dataclasses, ``Optional``, enums).

It needs no torch, so the registry and the converters can read configs cheaply.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _coerce_value(tp: Any, value: Any, where: str) -> Any:
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional or tp is Any:
            return None
        raise TypeError(f"{where}: None is not allowed for a field of type {tp!r}")
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected a mapping for {tp.__name__}, got {type(value).__name__}")
        return coerce_config(tp, value)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{where}: expected a sequence, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise TypeError(f"{where}: expected {len(args)} items, got {len(value)}")
        if not args:
            return tuple(value)
        return tuple(_coerce_value(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is list:
        return [_coerce_value(args[0] if args else Any, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        kt, vt = args if args else (Any, Any)
        return {_coerce_value(kt, k, where): _coerce_value(vt, v, f"{where}[{k!r}]") for k, v in value.items()}
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{where}: {value!r} is not one of {args}")
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if isinstance(tp, type) and not isinstance(value, tp):
        if tp is bool or (tp is int and isinstance(value, bool)):
            raise TypeError(f"{where}: expected {tp.__name__}, got {value!r}")
        try:
            return tp(value)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{where}: expected {tp.__name__}, got {value!r}") from e
    return value


_C = TypeVar("_C")


def coerce_config(cls: type[_C], data: Mapping[str, Any], *, strict: bool = True) -> _C:
    """Build dataclass ``cls`` from a plain dict, driven by its type hints.

    Restores Tuple fields from lists (``Tuple[int, ...]``, fixed tuples, nested),
    recurses into nested dataclasses, unwraps ``Optional``, converts enums. A class
    with ``_from_dict_overrides`` pre-processes ``data`` first (a flat dict to
    nest, or a polymorphic field whose class depends on a sibling key).

    Raises:
        ValueError: an unknown key (with ``strict``) or a missing required field.
        TypeError: a value that does not fit its field's type.
    """
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"coerce_config needs a dataclass type, got {cls!r}")
    overrides = getattr(cls, "_from_dict_overrides", None)
    data = dict(overrides(dict(data)) if overrides is not None else data)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown and strict:
        raise ValueError(f"{cls.__name__}: unknown config key(s) {unknown}; known: {sorted(fields)}")
    kwargs = {}
    for name in fields:
        if name in data:
            kwargs[name] = _coerce_value(hints[name], data[name], f"{cls.__name__}.{name}")
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{cls.__name__}: missing required config key(s) {missing}")
    return cls(**kwargs)


@dataclass
class ModelConfig:
    """Base for family configs: a type-driven ``from_dict`` and a plain ``to_dict``."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, strict: bool = True):
        return coerce_config(cls, data, strict=strict)

    def to_dict(self) -> dict[str, Any]:
        def plain(v):
            if isinstance(v, tuple):
                return [plain(x) for x in v]
            if isinstance(v, enum.Enum):
                return v.value
            return v

        return {k: plain(v) for k, v in dataclasses.asdict(self).items()}


def config_int(name: str, via: str = "config") -> property:
    """A read-only property: the config field ``name`` as an int, read off the owner's config at
    the attribute ``via`` (a model's ``blank_id``, a decoder's ``sos``)."""

    def get(self: Any) -> int:
        return int(getattr(getattr(self, via), name))

    return property(get, doc=f"``{via}.{name}`` as an int.")


__all__ = ["ModelConfig", "coerce_config", "config_int"]
