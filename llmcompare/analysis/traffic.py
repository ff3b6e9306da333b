"""What kind of traffic a load point was: synchronized, or not (issue 26).

A closed loop whose requests all have the same prompt and output length (the `random` and `shared-prefix`
datasets with ignore_eos, the map's fixed cells) moves in synchronized waves: c requests start together,
prefill together, decode together and finish together, so the next c start together again. Its whole-point and
short-run figures depend on the first wave and on how the point's length cuts the waves (reports/h200-grid's
3-wave c=256 points: per-wave rates up to 2x apart within one point, reports/h200-grid/steady-rule.md). Users' traffic is not like that: lengths vary (ShareGPT-like
lengths, a dataset file, outputs ending at EOS) and requests arrive at a rate (open loop). The report labels every
verdict row with its traffic, so a synchronized verdict is never read as one about realistic traffic.
"""

from __future__ import annotations

import math

from llmcompare.analysis.verdict import usable_points
from llmcompare.schema.run import EngineRecord, LoadKey

SAME_TOKENS = 0.005  # output tokens this close (relative) count as the same work: no failed request, ignore_eos
SYNCHRONIZED = "synchronized"  # the label's first word for fixed lengths in a closed loop
FIXED_LENGTH_DATASETS = ("random", "shared-prefix")  # every prompt the same length; outputs too with ignore_eos


def fixed_lengths(workload: dict) -> bool:
    """Every request the same prompt and output length; workload: the run's scenario["workload"] (defaults:
    schema/scenario.Workload)."""
    return workload.get("dataset", "random") in FIXED_LENGTH_DATASETS and workload.get("ignore_eos", True)


def label(workload: dict, burstiness: float, key: LoadKey) -> str:
    """'synchronized (fixed lengths, closed loop)', 'variable lengths, closed loop', or 'open loop, Poisson
    arrivals' (and the lengths); workload: the run's scenario["workload"] (defaults: schema/scenario.Workload)."""
    fixed = fixed_lengths(workload)
    lengths = "fixed lengths" if fixed else "variable lengths"
    if key.concurrency is not None:
        return f"{SYNCHRONIZED} ({lengths}, closed loop)" if fixed else f"{lengths}, closed loop"
    if key.request_rate is not None and math.isinf(key.request_rate):
        return f"every request at once, {lengths}" + (" (synchronized)" if fixed else "")
    arrivals = "Poisson arrivals" if burstiness == 1.0 else f"gamma arrivals (burstiness {burstiness:g})"
    return f"open loop, {arrivals}, {lengths}"


def synchronized(text: str) -> bool:
    return SYNCHRONIZED in text


def open_loop(key: LoadKey) -> bool:
    """An open loop at a finite rate (requests sent on a seeded arrival schedule, whatever the replies)."""
    return key.concurrency is None and key.request_rate is not None and math.isfinite(key.request_rate)


def durations(points: list) -> tuple[float, float] | None:
    """Mean whole-point duration (s, first send to last reply: Metrics.duration_s) and mean output tokens of one
    engine's usable repeats of a point (analysis/verdict.usable_points); None without figures.

    Why: in an open loop both engines are sent the same requests on the same schedule, so where they also
    return the same output tokens (ignore_eos, none failed) their whole-point throughputs (tokens / duration) differ
    by the ratio of their durations alone, and as the sending lasted the same for both, by what came after the
    last send: the drain of the last replies. Below both engines' capacity that is a latency difference, not a
    difference in what the engine can serve (reports/h100-capacity: +19.8% at 32 req/s, from drains of ~8 s
    against ~15 s)."""
    ms = [p.metrics for p in points if p.metrics is not None and p.metrics.duration_s]
    if not ms:
        return None
    return (sum(m.duration_s for m in ms) / len(ms), sum(m.total_output_tokens for m in ms) / len(ms))


def same_work_durations(cand: EngineRecord, base: EngineRecord, key: LoadKey) -> tuple[float, float] | None:
    """(candidate, baseline) mean whole-point durations (s) of an open-loop point where both returned the same output
    tokens (within SAME_TOKENS), so that their throughput gap is the ratio of these (durations()); else None."""
    if not open_loop(key):
        return None
    a, b = durations(usable_points(cand).get(key, [])), durations(usable_points(base).get(key, []))
    if a is None or b is None or not b[1] or abs(a[1] / b[1] - 1) > SAME_TOKENS:
        return None
    return a[0], b[0]
