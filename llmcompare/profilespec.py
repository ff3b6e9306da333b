"""The scenario's `profile` section: which load points get a captured pass, and GPU telemetry.

profile:
  points: [64]             # concurrencies (of load.concurrency) to capture; [] (default): none
  seconds: 2.0             # capture window, started once the pass's first 2c requests have finished, at the
                           # first moment every request in flight is past its first token (capture.all_decoding:
                           # decode steps only; at most the point's median E2EL later)
  input_len: null          # with a grid: capture only the cell of this input length (null: every cell)
  output_len: null         # likewise for the output length
  anchor: null             # kernel name marking steps (timeline.py); null: found from the timeline
  telemetry_interval_ms: 200   # nvidia-smi sampling during every point; 0: off
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .typed import ScenarioError


@dataclass
class Profile:
    points: list[int] = field(default_factory=list)
    seconds: float = 2.0
    anchor: str | None = None
    telemetry_interval_ms: int = 200
    input_len: int | None = None
    output_len: int | None = None

    def wants(self, key) -> bool:
        """Is this load point (a LoadKey) one to capture?"""
        return (key.concurrency in self.points and self.input_len in (None, key.input_len)
                and self.output_len in (None, key.output_len))


def check_profile(p: Profile, concurrency: list[int], input_lens: list[int], output_lens: list[int]) -> None:
    for name, want, axis in (("input_len", p.input_len, input_lens), ("output_len", p.output_len, output_lens)):
        if want is not None and want not in axis:
            raise ScenarioError(f"profile.{name}: {want} is not a cell of the grid; valid: workload.{name} "
                                f"({', '.join(map(str, axis))}) or null (every cell)")
    for i, c in enumerate(p.points):
        if c not in concurrency:
            raise ScenarioError(f"profile.points[{i}]: {c} is not a load point; valid: the concurrencies of "
                                f"load.concurrency ({', '.join(map(str, concurrency)) or 'none'})")
    if len(set(p.points)) != len(p.points):
        raise ScenarioError(f"profile.points: {p.points} names a point twice")
    if not p.seconds > 0:
        raise ScenarioError(f"profile.seconds: must be > 0, got {p.seconds}")
    if p.telemetry_interval_ms < 0:
        raise ScenarioError(f"profile.telemetry_interval_ms: must be >= 0 (0: off), got {p.telemetry_interval_ms}")
