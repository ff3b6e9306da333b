"""The records' JSON codec: dataclasses to plain JSON (inf as "inf") and back by their type hints."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any


def _plain(v: Any) -> Any:
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
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return None if v is None else _build(args[0], v)
    if v is None:
        return None
    if origin is list:
        (item,) = typing.get_args(t) or (Any,)
        return [_build(item, x) for x in v]
    if origin is dict:
        args = typing.get_args(t)
        return {k: _build(args[1], x) for k, x in v.items()} if args else dict(v)
    if dataclasses.is_dataclass(t):
        return t.from_json(v) if "from_json" in t.__dict__ else record(t, v)
    if t is float and isinstance(v, str):
        return float(v)  # "inf"
    return v


def record(cls: type, data: dict) -> Any:
    """Builds dataclass `cls` from a mapping; unknown keys are ignored (a newer file read by older code)."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: _build(hints[k], v) for k, v in data.items() if k in names})
