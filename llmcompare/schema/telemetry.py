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


@dataclass
class GpuIdle:
    """Whether the GPU waited during a point (analysis/gpu_idle.py): the share of its power samples at idle draw
    over the point's comparison window, and the engine's own generation counter in the seconds the GPU was idle
    against the others. Computed by the report from <engine>.telemetry.jsonl.gz and <engine>.metrics.jsonl; not
    stored in run.json."""
    samples: int = 0  # power samples in the window
    window_s: list[float] = field(default_factory=list)  # [from, to] s from the point's start
    threshold_w: float | None = None  # idle below this sum over the GPUs
    idle_share: float | None = None  # of `samples`, 0..1
    idle_intervals: int = 0  # counter intervals (two /metrics samples) whose midpoint's power was idle
    busy_intervals: int = 0
    gen_tok_s_idle: float | None = None  # the engine's generation_tokens_total rate over the idle intervals (mean)
    gen_tok_s_busy: float | None = None
    idle_over_busy_min: float | None = None  # lowest idle/busy rate ratio over the clocks' alignments (ALIGN_SHIFTS_S)
    why_not: str | None = None  # set where idle and busy cannot be told apart
    clocks: str = ""  # how power and counters were matched: by Unix time, or from their first samples (~1 s)
    # the engine's requests (its num_requests_running / _waiting gauges, mean over its samples) while the GPU was
    # idle and while busy; only where the clocks are matched by Unix time (None otherwise)
    running_idle: float | None = None
    waiting_idle: float | None = None
    running_busy: float | None = None
    waiting_busy: float | None = None
    running_idle_range: list[float] | None = None  # [lowest, highest] running_idle over ALIGNED_SHIFTS_S
