"""Verdicts: every figure with its 95% interval, every gap with its interval and a significance word.

The method is METHOD below (the report states it in its Method section).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from llmcompare.schema.run import EngineRecord, LoadKey, PointResult

METHOD = """Which value of a point: the steady-state window's figure when every repeat of both engines has one (analysis/steady.py),
else the whole-point figure (what vLLM bench serve reports) for both; the verdict says which. Only complete, trusted points
enter (results.PointResult.usable); the last attempt of each repeat counts.

Interval of one engine's figure at one load point, from its values x_1..x_n:
  n >= 2 repeats   mean +- t(0.975, n-1) * s / sqrt(n)                       ("across n repeats")
  n == 1           the same over the steady window's SUB_WINDOWS equal parts (batch means: "within one run";
                   it leaves out run-to-run variance, so it is narrower than it should be, and says so)
Gap of A against B: g = mean_A / mean_B - 1. Its interval is Welch's t interval on log(mean_A) - log(mean_B),
with the delta-method variance s_A^2 / (n_A mean_A^2) + s_B^2 / (n_B mean_B^2) and Welch-Satterthwaite degrees of
freedom, mapped back by exp(.) - 1. "no significant difference" when the interval holds 0.
"""

# two-sided 95%: t(0.975, df) for df = 1..30; beyond, the Cornish-Fisher expansion around z
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


_Z975 = 1.959964


def t975(df: float) -> float:
    """Student's t quantile at 0.975; fractional df interpolated linearly in 1/df (exact at integers)."""
    if df <= 1:
        return _T975[0]
    if df >= 30:
        z = _Z975
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    lo, hi = math.floor(df), math.ceil(df)
    if lo == hi:
        return _T975[lo - 1]
    f = (1 / lo - 1 / df) / (1 / lo - 1 / hi)
    return _T975[lo - 1] + f * (_T975[hi - 1] - _T975[lo - 1])


@dataclass
class Estimate:
    mean: float
    lo: float | None  # 95% interval; None when it cannot be computed (one value, no steady window)
    hi: float | None
    n: int  # values it rests on
    samples: list[float]
    method: str  # "across 3 repeats", "within one run (5 parts of the steady window)", "one value, no interval"
    source: str  # "steady-state window" | "whole point"


@dataclass
class Gap:
    pct: float
    lo_pct: float | None
    hi_pct: float | None
    word: str  # faster | slower | no significant difference | no interval
    method: str

    def text(self, nd: int = 1) -> str:
        if self.lo_pct is None:
            return f"{self.pct:+.{nd}f}% (no interval)"
        return f"{self.pct:+.{nd}f}% [{self.lo_pct:+.{nd}f}, {self.hi_pct:+.{nd}f}]"


def usable_points(e: EngineRecord) -> dict[LoadKey, list[PointResult]]:
    """Per load key, the last attempt of each repeat, if it is complete and trusted."""
    last: dict[tuple[int, int], PointResult] = {}
    for p in e.points:
        k = (p.index, p.repeat)
        if k not in last or p.attempt >= last[k].attempt:
            last[k] = p
    out: dict[LoadKey, list[PointResult]] = {}
    for p in last.values():
        if p.usable:
            out.setdefault(p.key, []).append(p)
    return out


def _value(p: PointResult, metric: str, steady: bool) -> float | None:
    if steady:
        return p.steady.output_throughput if metric == "output_throughput" else p.steady.stats.get(metric)
    return p.metrics.output_throughput if metric == "output_throughput" else p.metrics.stat(metric)


def has_steady(points: list[PointResult], metric: str = "output_throughput") -> bool:
    return bool(points) and all(p.steady is not None and _value(p, metric, True) is not None for p in points)


def estimate(points: list[PointResult], metric: str = "output_throughput", steady: bool | None = None) -> Estimate | None:
    """metric: output_throughput, or a stat key such as median_tpot_ms / median_ttft_ms. steady: use the
    steady-state windows (default: when every point has one)."""
    if not points:
        return None
    if steady is None:
        steady = has_steady(points, metric)
    source = "steady-state window" if steady else "whole point"
    xs = [v for p in points if (v := _value(p, metric, steady)) is not None]
    if not xs:
        return None
    if len(xs) >= 2:
        samples, method = xs, f"across {len(xs)} repeats"
    elif steady and metric == "output_throughput" and len(points[0].steady.sub_output_throughput) >= 2:
        samples = points[0].steady.sub_output_throughput
        method = f"within one run ({len(samples)} parts of the steady window; run-to-run variance not included)"
    else:
        return Estimate(xs[0], None, None, 1, xs, "one value, no interval", source)
    m, s = statistics.fmean(samples), statistics.stdev(samples)
    half = t975(len(samples) - 1) * s / math.sqrt(len(samples))
    return Estimate(statistics.fmean(xs), m - half, m + half, len(samples), samples, method, source)


def gap(a: Estimate, b: Estimate, higher_is_better: bool = True) -> Gap:
    """A against B, in % of B; the word says whether A is faster (throughput up, or latency down)."""
    pct = 100 * (a.mean / b.mean - 1) if b.mean else math.nan
    if a.lo is None or b.lo is None or len(a.samples) < 2 or len(b.samples) < 2 or min(a.samples + b.samples) <= 0:
        return Gap(pct, None, None, "no interval", "needs two or more values per engine")
    ma, mb = statistics.fmean(a.samples), statistics.fmean(b.samples)
    va = statistics.variance(a.samples) / (len(a.samples) * ma**2)
    vb = statistics.variance(b.samples) / (len(b.samples) * mb**2)
    se = math.sqrt(va + vb)
    if se == 0:
        lo = hi = pct
    else:
        df = (va + vb) ** 2 / (va**2 / (len(a.samples) - 1) + vb**2 / (len(b.samples) - 1))
        d = math.log(ma) - math.log(mb)
        lo, hi = (100 * (math.exp(d + sign * t975(df) * se) - 1) for sign in (-1, 1))
    if lo <= 0 <= hi:
        word = "no significant difference"
    else:
        word = "faster" if (lo > 0) == higher_is_better else "slower"
    return Gap(pct, lo, hi, word, f"Welch t on log ratio ({a.method} vs {b.method})")


@dataclass
class Row:
    """One load point of one candidate against the baseline."""

    key: LoadKey
    candidate: Estimate
    baseline: Estimate
    gap: Gap


FIGURES = ("auto", "whole")  # auto: steady-state windows where both engines have them; whole: whole points


def compare(cand: EngineRecord, base: EngineRecord, metric: str = "output_throughput",
            figures: str = "auto") -> list[Row]:
    """figures 'whole' takes whole-point figures even where windows exist: with fixed lengths a closed-loop
    point's requests move in synchronized waves, and a window of one wave can sit anywhere in a wave's
    prefill/decode cycle (reports/h200-grid/README.md)."""
    cp, bp = usable_points(cand), usable_points(base)
    rows = []
    for key in sorted(set(cp) & set(bp), key=point_order):
        both = figures == "auto" and has_steady(cp[key], metric) and has_steady(bp[key], metric)  # like with like
        a, b = estimate(cp[key], metric, both), estimate(bp[key], metric, both)
        if a and b:
            rows.append(Row(key, a, b, gap(a, b, higher_is_better=metric == "output_throughput")))
    return rows


def point_order(k: LoadKey) -> tuple:
    """Workload cell, then load (closed-loop concurrency or rate; rate=inf last)."""
    return (k.workload, k.x is None, k.x or 0, k.label)


def sentence(cand: str, base: str, rows: list[Row]) -> str:
    """'A is slower than B at c=1, c=16 (...); no significant difference at c=256 (...)'."""
    if not rows:
        return f"{cand} against {base}: no load point where both have complete, trusted results."
    parts = []
    for word in ("faster", "slower", "no significant difference", "no interval"):
        rs = [r for r in rows if r.gap.word == word]
        if rs:
            where = ", ".join(f"{r.key.label} ({r.gap.text()})" for r in rs)
            lead = {"faster": f"faster than {base}", "slower": f"slower than {base}",
                    "no significant difference": "no significant difference",
                    "no interval": "no interval (one value each)"}[word]
            parts.append(f"{lead} at {where}")
    return f"{cand}: " + "; ".join(parts) + "."
