"""Reads a scenario: a named one shipped with the package (llmcompare/scenarios/NAME.yaml) or a YAML file,
merged with the command line's --set overrides, built into typed records (schema/scenario.py) and validated
(rules.py). Precedence: command line > file > the records' defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmcompare.errors import ScenarioError
from llmcompare.scenario.overrides import merge as _merge
from llmcompare.scenario.rules import validate
from llmcompare.schema.build import build
from llmcompare.schema.scenario import Scenario

# the named scenarios: package data, so `serve-bench demo` works from any install (pyproject's package-data)
SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError(f"scenario file {p} does not exist")
        return p
    for suffix in (".yaml", ".yml"):
        q = SCENARIO_DIR / f"{name_or_path}{suffix}"
        if q.exists():
            return q
    names = sorted(x.stem for x in SCENARIO_DIR.glob("*.y*ml"))
    raise ScenarioError(f"unknown scenario {name_or_path!r}: not a file; scenarios in {SCENARIO_DIR}: {', '.join(names)}")


def load(name_or_path: str, overrides: dict[str, Any] | None = None) -> Scenario:
    path = resolve_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    _merge(data, overrides or {})
    try:
        s = build(Scenario, data, exclude=("source", "written"))
        s.name = s.name or path.stem
        s.source = str(path)
        return validate(s)
    except ScenarioError as e:
        raise ScenarioError(f"{path.name}: {e}") from None
