"""Whether the GPU waited on something else during a load point: its power draw (nvidia-smi, serve/telemetry.py)
set against the engine's own generation counter (its /metrics, serve/engine_metrics.py) over the same seconds.

Why: a delivered rate below the GPU's decode rate has several possible causes (the waves' prefill, fewer requests
running, the serving process, the client). A GPU that draws its idle power while requests are in flight did no
work then, so the point was not GPU-bound for that time; and where the engine's counter still rose quickly in
those seconds, the counter (kept in the engine's serving process, as vLLM's is) ran behind the GPU: the tokens had
been generated earlier and were still on their way out. Measured first on an H100 at c=512
(reports/h100-c512-complete: vLLM's GPU idle in 4-10% of each window while its counter rose at 13-15k tok/s against
~8k while the GPU was busy, 10-17k at any alignment within 1 s; TurboMind's idle in none).

Rule. Power: per nvidia-smi sample time, summed over the GPUs (on Ampere and newer `power.draw` is the average over
the last second). floor = the point's lowest sum (the idle draw, reached at the opening, when the GPU waits for the
first requests), top = its 95th percentile (the busy draw); a sample is idle below floor + IDLE_FRACTION x (top -
floor). Where top - floor < MIN_CONTRAST_W the point has no idle/busy contrast to tell (not measured). Only the
point's comparison window counts (analysis/agreement.py's window_s: from the steady state's start to the last
send, so neither the warm-up nor the drain, when few requests are left); never its first OPENING_S seconds (every
point opens on an idle GPU); a window with fewer than MIN_SAMPLES power samples, or none on file, is not measured.
A counter interval (two consecutive /metrics samples) is idle when the power sample nearest its midpoint is. Where
the counter's mean rate over the idle intervals exceeds its rate over the busy ones at every alignment of the two
clocks within ALIGN_SHIFTS_S, the report names the run: the counter ran behind the GPU there.

Clocks. Telemetry times are Unix seconds (nvidia-smi's own stamps). Since session 20 each /metrics sample also
carries its Unix time (`unix_s`, serve/measure.py), so the two series are matched on the host's wall clock
(`aligned`); then the only offset left is nvidia-smi's averaging: `power.draw` on Ampere and newer is the mean over
the last second, so a sample at t describes the second before it, and the power of a moment m is read from the
sample nearest m + POWER_AVG_S / 2 (with ALIGNED_SHIFTS_S around that for the sample spacing and the averaging's
edges). Older files have no `unix_s`: each series is then counted from its own first sample (both samplers start
together around the point), an error of about one telemetry interval plus the 1 s averaging; so the lag is claimed
only where it survives shifting the power by up to 1 s either way (ALIGN_SHIFTS_S), and the engine's running and
waiting requests in the idle seconds are not read (session 20's H200 run: with the power 1 s later or earlier they
read 247-256 or 87-90 running, so they said nothing).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from llmcompare.schema.telemetry import GpuIdle

IDLE_FRACTION = 0.4  # of the way from the idle draw to the busy draw; H100 at c=512: 125 W idle, ~700 W busy -> 355 W
MIN_CONTRAST_W = 150.0  # below it the point has no idle stretch to find (or the GPU never left its idle draw)
OPENING_S = 5.0  # the point's first seconds: the GPU waits for the first prompts
MIN_SAMPLES = 25  # power samples in the window (5 s at the default 0.2 s): fewer say nothing about its share
# the clocks' matching error: nvidia-smi's power is a trailing 1 s average and its first sample comes a little after
# the counters' (0.1-0.5 s); the counter's idle-time rate is also taken with the power shifted by each of these
ALIGN_SHIFTS_S = (-1.0, -0.5, 0.5, 1.0)
POWER_AVG_S = 1.0  # nvidia-smi's power.draw: the mean over the last second (Ampere and newer)
# matched clocks: the power of moment m is the sample nearest m + POWER_AVG_S / 2, give or take a sample or so
ALIGNED_SHIFTS_S = (-0.25, 0.25)


def counter_lagged(g: GpuIdle | None) -> bool:
    """Whether the engine's counter rose faster while the GPU was idle than while it was busy, at every alignment
    of the two clocks tried (ALIGN_SHIFTS_S; ALIGNED_SHIFTS_S where matched by Unix time): a GPU at idle draw generates next to nothing, so those tokens were made
    earlier. (H100, c=512: it holds for vLLM at every shift; H200, c=256, h200-converge: it reverses at +0.5 s.)"""
    return bool(g and g.idle_over_busy_min is not None and g.idle_over_busy_min > 1.0)


def power_series(rows: Sequence[dict], origin_s: float | None = None) -> list[tuple[float, float]]:
    """[(s, watts summed over the GPUs)] from telemetry rows {t_s, gpu, power_w}: s from origin_s (a Unix time: the
    counters' zero, where they carry Unix times) or else from the first sample. nvidia-smi stamps each GPU's line a
    few ms apart, so the sum is taken on the grid of the GPU with the most samples, each other GPU contributing its
    nearest sample."""
    per_gpu: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("power_w") is not None:
            per_gpu.setdefault(r.get("gpu", 0), []).append((r["t_s"], r["power_w"]))
    if not per_gpu:
        return []
    series = [sorted(v) for _, v in sorted(per_gpu.items())]
    grid = max(series, key=len)
    t0 = grid[0][0] if origin_s is None else origin_s
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
    """The value of the sample nearest t in a time-sorted [(t, value)]."""
    i = min(bisect.bisect_left(series, t, key=lambda x: x[0]), len(series) - 1)
    if i > 0 and abs(series[i - 1][0] - t) < abs(series[i][0] - t):
        i -= 1
    return series[i][1]


def _rates(power: list[tuple[float, float]], pts: list[tuple[float, float]], lo: float, hi: float, thr: float,
           shift_s: float = 0.0) -> tuple[list[float], list[float]]:
    """The counter's rates (tok/s) over its intervals inside [lo, hi], split by the power at each midpoint (the
    power read at midpoint - shift_s): (idle, busy)."""
    idle, busy = [], []
    for (ta, va), (tb, vb) in zip(pts, pts[1:], strict=False):  # consecutive pairs
        mid = (ta + tb) / 2
        if tb <= ta or not lo <= mid <= hi:
            continue
        (idle if _nearest(power, mid - shift_s) < thr else busy).append((vb - va) / (tb - ta))
    return idle, busy


def _gauges(power: list[tuple[float, float]], gauges: Sequence[tuple[float, float, float]], lo: float, hi: float,
            thr: float, shift_s: float) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The engine's (running, waiting) samples inside [lo, hi], split by the power at their time: (idle, busy)."""
    idle, busy = [], []
    for t, run, wait in gauges:
        if lo <= t <= hi:
            (idle if _nearest(power, t - shift_s) < thr else busy).append((run, wait))
    return idle, busy


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _means(pairs: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    return _mean([r for r, _ in pairs]), _mean([w for _, w in pairs])


def compare(power: list[tuple[float, float]], counters: Sequence[tuple[float, float]],
            window_s: Sequence[float] | None = None, aligned: bool = False,
            gauges: Sequence[tuple[float, float, float]] = ()) -> GpuIdle | None:
    """The point's GpuIdle from its power series (power_series) and its generation-counter samples
    [(s from the sampler's start, generation_tokens_total)] over window_s, the point's comparison window, which
    leaves out the warm-up and the drain (when few requests are left in flight, a GPU drawing little is not
    waiting); without one (runs made before the engine-counter window) it is not measured. aligned: the power's
    times are on the counters' clock (matched by Unix time); gauges: [(s, num_requests_running,
    num_requests_waiting)], read only when aligned. None where there is no power series."""
    if not power:
        return None
    if not window_s:
        return GpuIdle(why_not="no comparison window on file (a run before the engine-counter window)")
    lo, hi = max(OPENING_S, window_s[0]), window_s[1]
    inside = [w for t, w in power if lo <= t <= hi]
    thr = threshold_w([w for _, w in power])
    out = GpuIdle(samples=len(inside), window_s=[round(lo, 2), round(min(hi, power[-1][0]), 2)],
                  clocks="matched by Unix time" if aligned else "from their first samples (about 1 s)")
    if len(inside) < MIN_SAMPLES:
        out.why_not = f"{len(inside)} power samples in the window (under {MIN_SAMPLES})"
        return out
    if thr is None:
        out.why_not = f"no idle/busy contrast (the point's power spans under {MIN_CONTRAST_W:g} W)"
        return out
    out.threshold_w = round(thr, 1)
    out.idle_share = sum(1 for w in inside if w < thr) / len(inside)
    pts = [(t, v) for t, v in counters if v is not None]
    nominal = -POWER_AVG_S / 2 if aligned else 0.0  # read the power of moment m at m + 0.5 s (its 1 s mean)
    shifts = [nominal + d for d in (ALIGNED_SHIFTS_S if aligned else ALIGN_SHIFTS_S)]
    idle, busy = _rates(power, pts, lo, hi, thr, nominal)
    out.idle_intervals, out.busy_intervals = len(idle), len(busy)
    out.gen_tok_s_idle, out.gen_tok_s_busy = _mean(idle), _mean(busy)
    ratios = []
    for shift in (nominal, *shifts):
        i, b = (_mean(x) for x in _rates(power, pts, lo, hi, thr, shift))
        ratios.append(i / b if i is not None and b else None)
    out.idle_over_busy_min = None if None in ratios else round(min(ratios), 3)
    gs = [(t, r, w) for t, r, w in gauges if r is not None and w is not None]
    if aligned and gs:
        gi, gb = _gauges(power, gs, lo, hi, thr, nominal)
        (out.running_idle, out.waiting_idle), (out.running_busy, out.waiting_busy) = _means(gi), _means(gb)
        ranged = [_means(_gauges(power, gs, lo, hi, thr, sh)[0])[0] for sh in (nominal, *shifts)]
        if None not in ranged:
            out.running_idle_range = [round(min(ranged), 1), round(max(ranged), 1)]
    return out
