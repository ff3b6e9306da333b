"""GPU telemetry records: nvidia-smi samples during a point and their summary per point (serve/telemetry.py
samples; PointResult.telemetry holds the summary)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sample:
    gpu: int
    t_s: float  # Unix seconds (nvidia-smi's own timestamp, local time)
    sm_clock_mhz: float | None
    power_w: float | None
    memory_used_mib: float | None


@dataclass
class TelemetrySummary:
    available: bool = False
    why_not: str | None = None  # e.g. "nvidia-smi not on PATH"
    samples: int = 0
    gpus: list[int] = field(default_factory=list)
    duration_s: float = 0.0
    mean_power_w: float | None = None  # summed over GPUs
    energy_j: float | None = None  # summed over GPUs
    j_per_output_token: float | None = None
    sm_clock_mhz_mean: float | None = None
    sm_clock_mhz_min: float | None = None
    memory_used_mib_max: float | None = None
