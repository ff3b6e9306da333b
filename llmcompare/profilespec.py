"""The scenario's `profile` section: which load points get a captured pass, and GPU telemetry.

profile:
  points: [64]             # concurrencies (of load.concurrency) to capture; [] (default): none
  seconds: 2.0             # capture window, started once the pass's first c requests have finished (steady)
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


def check_profile(p: Profile, concurrency: list[int]) -> None:
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
