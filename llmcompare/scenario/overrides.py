"""Command-line overrides of scenario fields: `--set KEY=VALUE`, merged over the scenario file.

KEY is a dotted path; a part that is an integer picks an element of a list (`engines.0.args=[--foo]`), so
every field can be reached, including those of one engine. VALUE is YAML.
"""

from __future__ import annotations

from typing import Any

import yaml

from llmcompare.errors import ScenarioError


def _error(message: str) -> Exception:

    return ScenarioError(message)


def parse_set(items: list[str]) -> dict[str, Any]:
    """`--set load.concurrency=[1,2] workload.num_prompts=8` -> nested dict (values are YAML); integer parts
    (`engines.0.args`) stay strings here and pick list elements in merge()."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise _error(f"--set {item!r}: expected KEY=VALUE, e.g. load.concurrency=[1,4]")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise _error(f"--set {item!r}: {key.strip()!r} is not a field path; expected e.g. load.concurrency "
                         "or engines.0.args")
        d = out
        for i, p in enumerate(parts[:-1]):
            if not isinstance(d.setdefault(p, {}), dict):
                raise _error(f"--set {item!r}: {'.'.join(parts[:i + 1])} is given a value by another --set, "
                             "so it has no fields to set")
            d = d[p]
        try:
            d[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise _error(f"--set {item!r}: the value is not valid YAML: {e}") from None
    return out


def _is_index(k: Any) -> bool:
    return isinstance(k, int) or (isinstance(k, str) and k.isdigit())


def _merge_list(base: list, over: dict, where: str) -> list:
    for k, v in over.items():
        if not _is_index(k):
            raise _error(f"--set {where}.{k}: {where} is a list; pick an element by its index "
                         f"(0..{len(base) - 1}), e.g. {where}.0")
        i = int(k)
        if i >= len(base):
            valid = f"valid: 0..{len(base) - 1}" if base else "it is empty"
            raise _error(f"--set {where}.{k}: index {i} is out of range: {where} has {len(base)} "
                         f"element{'s' if len(base) != 1 else ''} ({valid})")
        if isinstance(v, dict) and isinstance(base[i], dict):
            merge(base[i], v, f"{where}.{i}")
        elif isinstance(v, dict) and isinstance(base[i], list):
            _merge_list(base[i], v, f"{where}.{i}")
        else:
            base[i] = v
    return base


def merge(base: dict, over: dict, where: str = "") -> dict:
    """Merges `over` into `base` (a scenario file's mapping), in place. A mapping with integer keys over a list
    sets those elements; an index past the end is an error naming the path and the valid range."""
    for k, v in over.items():
        path = f"{where}.{k}" if where else str(k)
        cur = base.get(k)
        if isinstance(v, dict) and isinstance(cur, dict):
            merge(cur, v, path)
        elif isinstance(v, dict) and (isinstance(cur, list) or (cur is None and v and all(map(_is_index, v)))):
            _merge_list(cur if cur is not None else [], v, path)  # None: an empty list, so out of range
        else:
            base[k] = v
    return base
