"""Where a scenario's model is before a run: a local directory, a hub snapshot (setup/hub.py), or one that
`make-model` builds (model.make). The one rule the run, preflight and doctor share (hub.model_source)."""

from __future__ import annotations

import sys
from pathlib import Path

from llmcompare.errors import ScenarioError
from llmcompare.models import checkpoint
from llmcompare.schema.scenario import Scenario
from llmcompare.setup import hub


def prepare_model(s: Scenario) -> str:

    hub.resolve_tokenizer(s.model)  # a hub id becomes its local directory
    path = s.model.path
    if Path(path).exists():
        return path
    if hub.is_hub_id(path) or (s.model.make is None and not path.startswith(("/", "~", "."))):
        return hub.resolve(path, "model.path")  # the engines get the local snapshot (model.make: local paths only)
    if s.model.make is None:
        raise ScenarioError(f"model.path: {path} does not exist (and model.make is not set to build it)")
    mk = s.model.make
    print(f"model {path} is missing: making it (preset {mk.preset}, quant {mk.quant}, {mk.dtype}, seed {mk.seed})",
          file=sys.stderr)
    checkpoint.make_model(path, mk.preset, mk.quant, mk.dtype, mk.seed)
    return path

