from __future__ import annotations

import os
import re

from llmcompare.errors import ScenarioError

# ---- environment expansion: ${VAR}, ${VAR:-default}, ~ --------------------------------------------------
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
