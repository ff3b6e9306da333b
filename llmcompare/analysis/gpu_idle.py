"""Whether the GPU waited on something else during a load point: its power draw (nvidia-smi, serve/telemetry.py)
set against the engine's own generation counter (its /metrics, serve/engine_metrics.py) over the same seconds.

Why: a delivered rate below the GPU's decode rate has several possible causes (the waves' prefill, fewer requests
running, the serving process, the client). A GPU that draws its idle power while requests are in flight did no
work then, so the point was not GPU-bound for that time; and where the engine's counter still rose quickly in
those seconds, the counter (kept in the engine's serving process, as vLLM's is) ran behind the GPU: the tokens had
been generated earlier and were still on their way out. Measured first on an H100 at c=512
(reports/h100-c512-complete: vLLM's GPU idle in 4-10% of each window while its counter rose at 13-15k tok/s against
~8k while the GPU was busy; TurboMind's idle in none).

Rule. Power: per nvidia-smi sample time, summed over the GPUs (on Ampere and newer `power.draw` is the average over
the last second). floor = the point's lowest sum (the idle draw, reached at the opening, when the GPU waits for the
first requests), top = its 95th percentile (the busy draw); a sample is idle below floor + IDLE_FRACTION x (top -
floor). Where top - floor < MIN_CONTRAST_W the point has no idle/busy contrast to tell (not measured). Only the
point's comparison window counts (analysis/agreement.py's window_s: from the steady state's start to the last
send, so neither the warm-up nor the drain, when few requests are left); never its first OPENING_S seconds (every
point opens on an idle GPU); a window with fewer than MIN_SAMPLES power samples, or none on file, is not measured.
A counter interval (two consecutive /metrics samples) is idle when the power sample nearest its midpoint is. Where
the counter's mean rate over the idle intervals exceeds LAGGING_RATIO x its rate over the busy ones, the report names
the run: the counter ran behind the GPU there.

Clocks: telemetry times are Unix seconds (nvidia-smi's own stamps), the counter samples' seconds from the sampler's
start; both samplers start together around the point (serve/measure.py), so each series is counted from its own
first sample. The error is about one telemetry interval plus the 1 s averaging: coarse, so only the shares and the
mean rates are given, never single seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmcompare.schema.telemetry import GpuIdle

IDLE_FRACTION = 0.4  # of the way from the idle draw to the busy draw; H100 at c=512: 125 W idle, ~700 W busy -> 355 W
MIN_CONTRAST_W = 150.0  # below it the point has no idle stretch to find (or the GPU never left its idle draw)
OPENING_S = 5.0  # the point's first seconds: the GPU waits for the first prompts
MIN_SAMPLES = 25  # power samples in the window (5 s at the default 0.2 s): fewer say nothing about its share
LAGGING_RATIO = 0.5  # a counter still rising at over half its busy rate while the GPU idles counts tokens made earlier


def counter_lagged(g: GpuIdle | None) -> bool:
    """Whether the engine's counter rose quickly while the GPU was idle (LAGGING_RATIO of its busy-time rate)."""
    return bool(g and g.gen_tok_s_idle is not None and g.gen_tok_s_busy
                and g.gen_tok_s_idle > LAGGING_RATIO * g.gen_tok_s_busy)


def power_series(rows: Sequence[dict]) -> list[tuple[float, float]]:
    """[(s from the first sample, watts summed over the GPUs)] from telemetry rows {t_s, gpu, power_w}. nvidia-smi
    stamps each GPU's line a few ms apart, so the sum is taken on the grid of the GPU with the most samples, each
    other GPU contributing its nearest sample."""
    per_gpu: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("power_w") is not None:
            per_gpu.setdefault(r.get("gpu", 0), []).append((r["t_s"], r["power_w"]))
    if not per_gpu:
        return []
    series = [sorted(v) for _, v in sorted(per_gpu.items())]
    grid = max(series, key=len)
    t0 = grid[0][0]
    return [(t - t0, sum(_nearest(s, t) for s in series)) for t, _ in grid]


def threshold_w(watts: Sequence[float]) -> float | None:
    """The idle threshold of one point's power sums; None where idle and busy cannot be told apart."""
    if len(watts) < 10:
        return None
    s = sorted(watts)
    floor, top = s[0], s[min(len(s) - 1, int(0.95 * len(s)))]
    if top - floor < MIN_CONTRAST_W:
        return None
    return floor + IDLE_FRACTION * (top - floor)


def _nearest(series: list[tuple[float, float]], t: float) -> float:
    lo, hi = 0, len(series) - 1
    while lo < hi:  # the first sample at or after t
        mid = (lo + hi) // 2
        if series[mid][0] < t:
            lo = mid + 1
        else:
            hi = mid
    if lo > 0 and abs(series[lo - 1][0] - t) < abs(series[lo][0] - t):
        lo -= 1
    return series[lo][1]


def compare(power: list[tuple[float, float]], counters: Sequence[tuple[float, float]],
            window_s: Sequence[float] | None = None) -> GpuIdle | None:
    """The point's GpuIdle from its power series (power_series) and its generation-counter samples
    [(s from the sampler's start, generation_tokens_total)] over window_s, the point's comparison window, which
    leaves out the warm-up and the drain (when few requests are left in flight, a GPU drawing little is not
    waiting); without one (runs made before the engine-counter window) it is not measured. None where there is no
    power series."""
    if not power:
        return None
    if not window_s:
        return GpuIdle(why_not="no comparison window on file (a run before the engine-counter window)")
    lo, hi = max(OPENING_S, window_s[0]), window_s[1]
    inside = [w for t, w in power if lo <= t <= hi]
    thr = threshold_w([w for _, w in power])
    out = GpuIdle(samples=len(inside), window_s=[round(lo, 2), round(min(hi, power[-1][0]), 2)])
    if len(inside) < MIN_SAMPLES:
        out.why_not = f"{len(inside)} power samples in the window (under {MIN_SAMPLES})"
        return out
    if thr is None:
        out.why_not = f"no idle/busy contrast (the point's power spans under {MIN_CONTRAST_W:g} W)"
        return out
    out.threshold_w = round(thr, 1)
    out.idle_share = sum(1 for w in inside if w < thr) / len(inside)
    idle, busy = [], []
    pts = [(t, v) for t, v in counters if v is not None]
    for (ta, va), (tb, vb) in zip(pts, pts[1:], strict=False):  # consecutive pairs
        mid = (ta + tb) / 2
        if tb <= ta or not lo <= mid <= hi:
            continue
        (idle if _nearest(power, mid) < thr else busy).append((vb - va) / (tb - ta))
    out.idle_intervals, out.busy_intervals = len(idle), len(busy)
    out.gen_tok_s_idle = sum(idle) / len(idle) if idle else None
    out.gen_tok_s_busy = sum(busy) / len(busy) if busy else None
    return out
