"""Scenarios: read (loader.py), overridden from the command line (scenario/overrides.py) and validated (rules.py) against
the registries they name. The records themselves are in schema/scenario.py."""

from llmcompare.scenario.loader import SCENARIO_DIR, load, resolve_path, validate
from llmcompare.scenario.overrides import parse_set

__all__ = ["SCENARIO_DIR", "load", "parse_set", "resolve_path", "validate"]
