from __future__ import annotations

from llmcompare.engines.environments import resolve_python
from llmcompare.expand import expand
from llmcompare.schema.scenario import Engine


def engine_python(e: Engine) -> str | None:
    """The python of the engine's environment: its `venv` (made by `llmcompare setup`) or its `python`."""
    if e.venv:

        return resolve_python(e.venv, f"engine {e.name!r}: venv")
    return expand(e.python) if e.python else None


def _prefix(e: Engine, module: str, console: str) -> list[str]:
    if e.command:
        return [expand(c) for c in e.command]
    if py := engine_python(e):
        return [py, "-m", module]
    return [console]
