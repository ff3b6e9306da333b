"""Checks of the workload section of a scenario (scenario.validate calls check_workload): datasets, their
paths and fields, and the grid axes."""

from __future__ import annotations

import os

from llmcompare.errors import ScenarioError
from llmcompare.expand import expand
from llmcompare.schema.build import bounded
from llmcompare.schema.scenario import EXACT_LENGTHS, Workload, _axis
from llmcompare.workload import hf, synthetic


def check_workload(wl: Workload) -> None:
    if wl.dataset in ("sharegpt", "jsonl"):
        if not wl.path:
            raise ScenarioError(f"workload.path: required for dataset {wl.dataset}")
        if not os.path.isfile(expand(wl.path, "workload.path")):
            raise ScenarioError(f"workload.path: {wl.path!r} is not a readable file")
    for axis in ("input_len", "output_len"):
        _grid_axis(f"workload.{axis}", getattr(wl, axis), wl.dataset)
    _prefix_axes(wl)
    synthetic.check(wl)
    hf.check(wl)
    bounded("workload.num_prompts", wl.num_prompts, 1, MAX_PROMPTS, "requests per load point")
    bounded("workload.prompts_per_concurrency", wl.prompts_per_concurrency, 1, 10_000, "waves", zero_is_off=True)
    bounded("workload.temperature", wl.temperature, 0, 10)


MAX_PROMPTS = 10_000_000  # requests in one load point at most (load.max_prompts_per_point too)


MAX_TOKENS = 10_000_000  # a length in tokens at most (no engine accepts a context this long)


def _grid_axis(where: str, v: int | list[int], dataset: str, what: str = "a length in tokens") -> None:
    """A value >= 1, or a list of distinct ones (an axis of the workload grid: exact lengths only)."""
    xs = _axis(v)
    if not xs:
        raise ScenarioError(f"{where}: an empty list; give {what} or a list of them")
    for i, x in enumerate(xs):
        if x < 1:
            raise ScenarioError(f"{where}{f'[{i}]' if isinstance(v, list) else ''}: must be >= 1 ({what}), got {x}")
        bounded(f"{where}{f'[{i}]' if isinstance(v, list) else ''}", x, 1, MAX_TOKENS, f"({what})")
    if len(set(xs)) != len(xs):
        raise ScenarioError(f"{where}: {xs} lists a value twice; each grid cell must be distinct")
    if len(xs) > 1 and dataset not in EXACT_LENGTHS:
        raise ScenarioError(f"{where}: a list (a grid axis) needs workload.dataset random or shared-prefix; "
                            f"dataset {dataset} takes its lengths from the file, so give one length")


# shared-prefix's fields: the default (what every other dataset must leave), and what a value is
PREFIX_AXES = {"prefix_len": (0, "tokens of each shared prefix"), "num_prefixes": (1, "distinct prefixes")}


def _prefix_axes(wl: Workload) -> None:
    """shared-prefix: prefix_len and num_prefixes are grid axes like the lengths; any other dataset leaves both
    at their defaults."""
    for name, (default, what) in PREFIX_AXES.items():
        v, where = getattr(wl, name), f"workload.{name}"
        if wl.dataset == "shared-prefix":
            _grid_axis(where, v, wl.dataset, what)
        elif v != default:
            raise ScenarioError(f"{where}: {v!r} is only for dataset shared-prefix, got dataset {wl.dataset}; "
                                f"leave it out (default {default})")
