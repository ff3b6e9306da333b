"""${VAR}, ${VAR:-default} and ~ in scenario fields: the one place they are expanded.

scenario.load expands once, into a resolved copy (`resolve`): every field in `fields` below, for the engines that
will run; the code after it reads plain values. The text as written is kept beside the copy
(Scenario.written), and run.json records the scenario as written (Scenario.to_dict), so a run file never holds
a machine's secrets or paths that came from its environment.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator

from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Scenario

_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def expand(s: str, where: str | None = None) -> str:
    """${VAR}, ${VAR:-default} (used when VAR is unset or empty) and ~. An unset or empty VAR without a default
    is an error naming it and `where` (the field); ${VAR:-} gives an empty default."""
    def sub(m: re.Match) -> str:
        if value := os.environ.get(m.group(1)):
            return value
        if m.group(2) is None:
            raise ScenarioError(f"{where + ': ' if where else ''}{m.group(0)} in {s!r} is not set (or is empty) and "
                                f"has no default; set {m.group(1)}, or write ${{{m.group(1)}:-DEFAULT}}")
        return m.group(2)

    return os.path.expanduser(_VAR.sub(sub, s))


Field = tuple[str, tuple, object, object]  # (name for errors, path in to_dict(), container, key in it)


def fields(s: Scenario, engines: list[str] | None = None) -> Iterator[Field]:
    """Every scenario string that llmcompare expands: paths, the engines' programs, arguments and environment
    (of the engines named; None: all), the kernel-bench pythons."""
    yield "model.path", ("model", "path"), s.model, "path"
    yield "model.tokenizer", ("model", "tokenizer"), s.model, "tokenizer"
    yield "workload.path", ("workload", "path"), s.workload, "path"
    yield "output_dir", ("output_dir",), s, "output_dir"
    for b in s.kernel_bench.python:
        yield f"kernel_bench.python[{b!r}]", ("kernel_bench", "python", b), s.kernel_bench.python, b
    for i, e in enumerate(s.engines):
        if engines is not None and e.name not in engines:
            continue
        w = f"engines[{i}]"
        for name in ("python", "venv", "base_url"):
            yield f"{w}.{name}", ("engines", i, name), e, name
        for j in range(len(e.command or [])):
            yield f"{w}.command[{j}]", ("engines", i, "command", j), e.command, j
        for j in range(len(e.args)):
            yield f"{w}.args[{j}]", ("engines", i, "args", j), e.args, j
        for k in e.env:
            yield f"{w}.env.{k}", ("engines", i, "env", k), e.env, k


def _get(container, key):
    return container[key] if isinstance(container, (dict, list)) else getattr(container, key)


def _set(container, key, value) -> None:
    if isinstance(container, (dict, list)):
        container[key] = value
    else:
        setattr(container, key, value)


def resolve(s: Scenario, engines: list[str] | None = None) -> Scenario:
    """A copy of `s` with every field of `fields` expanded (an unset ${VAR} is an error naming the field); the
    text as written goes to the copy's `written` (path -> text) for to_dict()."""
    r = copy.deepcopy(s)
    for where, path, container, key in fields(r, engines):
        value = _get(container, key)
        if isinstance(value, str) and value:
            done = expand(value, where)
            if done != value:
                r.written[path] = value
                _set(container, key, done)
    return r
