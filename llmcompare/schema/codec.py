"""The records' JSON codec: dataclasses to plain JSON (inf as "inf") and back by their type hints."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

# Returned as they are, and checked first: a saved request holds a list of 64 to 16k floats, and the checks below
# cost ~1 us a value, which the client's parent pays for every request at high load (scripts/parent_cost.py).
_SCALARS = frozenset({str, int, bool, type(None)})


def _plain(v: Any) -> Any:
    tv = type(v)
    if tv in _SCALARS:
        return v
    if tv is float:
        return v if not math.isinf(v) else ("inf" if v > 0 else "-inf")
    if tv is list and all(type(x) is float and not math.isinf(x) for x in v):
        return list(v)  # a list of finite floats (the chunk times) is already plain (a copy, as below)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return v.to_json() if hasattr(v, "to_json") else {f.name: _plain(getattr(v, f.name))
                                                          for f in dataclasses.fields(v)}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _build(t: Any, v: Any) -> Any:
    """v (plain JSON) as type t."""
    return _builder(t)(v)


def _same(v: Any) -> Any:
    return v


def _to_float(v: Any) -> Any:
    return float(v) if isinstance(v, str) else v  # "inf"


@functools.cache
def _builder(t: Any) -> Callable[[Any], Any]:
    """The function that builds a value of type t from plain JSON (None stays None), made once per type: reading
    a record's type hints and walking them for every value cost ~0.5 ms a request record (scripts/parent_cost.py)."""
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return _builder(args[0])
    if origin is list:
        (item,) = typing.get_args(t) or (Any,)
        each = _builder(item)
        if each is _to_float:
            return lambda v: None if v is None else [float(x) if isinstance(x, str) else x for x in v]
        return lambda v: None if v is None else [each(x) for x in v]
    if origin is dict:
        args = typing.get_args(t)
        if not args:
            return lambda v: None if v is None else dict(v)
        each = _builder(args[1])
        return lambda v: None if v is None else {k: each(x) for k, x in v.items()}
    if dataclasses.is_dataclass(t):
        make = t.from_json if "from_json" in t.__dict__ else functools.partial(record, t)
        return lambda v: None if v is None else make(v)
    if t is float:
        return _to_float
    return _same


@functools.cache
def _fields(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Per init field of dataclass cls, the builder of its type."""
    hints = typing.get_type_hints(cls)
    return {f.name: _builder(hints[f.name]) for f in dataclasses.fields(cls) if f.init}


def record(cls: type, data: dict) -> Any:
    """Builds dataclass `cls` from a mapping; unknown keys are ignored (a newer file read by older code)."""
    fields = _fields(cls)
    return cls(**{k: fields[k](v) for k, v in data.items() if k in fields})
