"""Where a scenario's model is before a run: a local directory, a hub snapshot (setup/hub.py), or one that
`make-model` builds (model.make). The one rule the run, preflight and doctor share (hub.model_source)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from llmcompare.errors import ScenarioError
from llmcompare.models import checkpoint
from llmcompare.schema.scenario import Model, Scenario
from llmcompare.setup import hub

Source = Literal["local", "hub", "make", "missing"]


def source(model: Model) -> Source:
    """Where model.path (resolved) is: a local directory; a hub id (org/name, or a bare name with no model.make);
    one make-model builds there (model.make); or missing."""
    path = model.path
    if Path(path).exists():
        return "local"
    if hub.is_hub_id(path) or (model.make is None and not path.startswith(("/", "~", "."))):
        return "hub"
    return "make" if model.make is not None else "missing"


def prepare_model(s: Scenario) -> str:
    """The local directory the engines are given: the model's own, its hub snapshot, or the one made now."""
    hub.resolve_tokenizer(s.model)  # a hub id becomes its local directory
    path, where = s.model.path, source(s.model)
    if where == "local":
        return path
    if where == "hub":
        return hub.resolve(path, "model.path")  # the engines get the local snapshot (model.make: local paths only)
    if where == "missing":
        raise ScenarioError(f"model.path: {path} does not exist (and model.make is not set to build it)")
    mk = s.model.make
    print(f"model {path} is missing: making it (preset {mk.preset}, quant {mk.quant}, {mk.dtype}, seed {mk.seed})",
          file=sys.stderr)
    checkpoint.make_model(path, mk.preset, mk.quant, mk.dtype, mk.seed)
    return path

