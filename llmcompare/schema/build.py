"""Typed records from YAML mappings: build a dataclass from plain data, converting each field to its annotated
type and rejecting unknown keys and wrong types with an error that names the field and what is valid."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any, Literal

from llmcompare.errors import ScenarioError


def _typename(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(t))
    if origin in (list,):
        return f"a list of {_typename(typing.get_args(t)[0])}"
    if origin is dict:
        return "a mapping of strings"
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return " or ".join(_typename(a) for a in args) + " (or null)"
    if dataclasses.is_dataclass(t):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(t, str(t))


def _convert(value: Any, t: Any, where: str) -> Any:
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if value is None:
            return None
        lists = [a for a in args if typing.get_origin(a) is list]
        if isinstance(value, list) and lists:  # `int | list[int]`: a scalar or a grid axis
            return _convert(value, lists[0], where)
        if isinstance(value, bool) and bool in args:  # `str | bool`: YAML's bare on/off
            return value
        scalars = [a for a in args if a not in lists] or args
        for a in scalars[:-1]:  # `int | str`: the first type the value is
            try:
                return _convert(value, a, where)
            except ScenarioError:
                continue
        return _convert(value, scalars[-1], where)
    if origin is Literal:
        if value not in typing.get_args(t):
            raise ScenarioError(f"{where}: {value!r} is not valid; valid: {', '.join(map(str, typing.get_args(t)))}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ScenarioError(f"{where}: expected {_typename(t)}, got {type(value).__name__} {value!r}")
        (item,) = typing.get_args(t)
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ScenarioError(f"{where}: expected {_typename(t)}, got {type(value).__name__}")
        return {str(k): str(v) for k, v in value.items()}
    if dataclasses.is_dataclass(t):
        return build(t, value, where)
    if t is bool:
        if not isinstance(value, bool):
            raise ScenarioError(f"{where}: expected true or false, got {value!r}")
        return value
    if t is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{where}: expected an integer, got {value!r}")
        return value
    if t is float:
        if isinstance(value, str) and value.strip().lower() in ("inf", ".inf", "infinity"):
            return math.inf
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if t is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ScenarioError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def build(cls: type, data: Any, where: str = "scenario", exclude: tuple[str, ...] = ()) -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types; `exclude`: fields a file
    may not set."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in exclude]
    unknown = [k for k in data if k not in names]
    if unknown:
        at = "" if where == "scenario" else f"{where}: "
        raise ScenarioError(f"{at}unknown key {unknown[0]!r}; valid keys: {', '.join(names)}")
    kwargs = {k: _convert(v, hints[k], f"{where}.{k}" if where != "scenario" else k) for k, v in data.items()}
    return cls(**kwargs)


# names become file and directory names (<engine>.server.log, <scenario>-<time>/): nothing that leaves the directory
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


NAME_RULE = "letters, digits, '.', '_' and '-', not starting with '.', at most 100 characters"


def check_name(where: str, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ScenarioError(f"{where}: {name!r} is not a valid name (it names the run's files); "
                            f"allowed: {NAME_RULE}")


def bounded(where: str, v: float, lo: float, hi: float, unit: str = "", zero_is_off: bool = False,
            inf: str = "") -> None:
    """`v` finite and in lo..hi (`unit` after the range), or 0 where zero_is_off, or .inf where `inf` says what it
    means; else an error naming the field, the value and the valid range. NaN is never valid."""
    if (zero_is_off and v == 0) or (inf and v == math.inf) or (math.isfinite(v) and lo <= v <= hi):
        return
    valid = f"{lo:g}..{hi:g}" + (f" {unit}" if unit else "") + (", or 0 (off)" if zero_is_off else "") \
        + (f", or .inf ({inf})" if inf else "")
    raise ScenarioError(f"{where}: must be in {valid}, got {v}")
