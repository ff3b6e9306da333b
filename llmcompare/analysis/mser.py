"""Steady state found from the data: MSER-5 warm-up truncation and a batch-means interval, on a rate series.

Pure functions over one series of observations x_1..x_n (here: a point's output tokens per second, one value per
1 s bin; analysis/steady.py makes the series and says where it ends). Nothing here knows about requests.

Warm-up truncation, MSER-5 (White 1997, "An effective truncation heuristic for bias reduction in simulation
output", Simulation 69(6); White, Cobb & Spratt 2000, "A comparison of five steady-state truncation heuristics
for simulation", Proc. Winter Simulation Conference):
  batch the series into k = floor(n / 5) batch means Z_1..Z_k of 5 observations each (the n - 5k observations
  left over are taken from the start, so the batches end where the series ends); for each truncation d (batches
  dropped from the start)
      MSER(d) = sum_{i>d} (Z_i - Zbar_d)^2 / (k - d)^2,    Zbar_d = the mean of Z_{d+1}..Z_k,
  and d* = argmin MSER(d). d* must lie in the first half (d* <= k / 2); if the minimum lies in the second half
  the series is still moving (a trend, or too short to show a steady level): no steady state, and we say so.
  Our choices, stated: d runs over 0..floor(3k / 4) (the last quarter is left out: with only a few batches
  left, MSER(d) is small by chance, and a stationary series would too often be called "no steady state"),
  and the series needs k >= MIN_BATCHES batches. The cost of the second-half rule on short series: of white-noise
  series of 60, 120 and 300 observations, about 26%, 11% and 0.1% are called "no steady state" (measured once
  with numpy's normal generator, 500-1000 series each); such a point falls back to its whole-point figures.

Interval, non-overlapping batch means (Schmeiser 1982, "Batch size effects in the analysis of simulation
output", Operations Research 30(3): 10 to 30 batches; Law & Kelton, "Simulation Modeling and Analysis",
the method of batch means and its lag-1 check):
  the m observations after truncation are cut into b = clamp(floor(sqrt(m)), 10, 30) batches of s = floor(m / b)
  observations (the m - b*s left over are dropped from the start); with Y_1..Y_b their means,
      rate = mean(Y),  half-width = t(0.975, b - 1) * sd(Y) / sqrt(b),  relative half-width = half-width / rate.
  The batch means should be nearly independent: their lag-1 autocorrelation r1 is checked against
  2 / sqrt(b) (about its 95% bound under independence); above it the half-width is widened by
  sqrt((1 + r1) / (1 - r1)) (the variance of the mean of an AR(1) sequence, large b) and flagged.
  Needs m >= MIN_BATCH_MEANS observations (one per batch at least).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmcompare.analysis.verdict import t975

BATCH = 5  # MSER-5: observations per batch mean
MIN_BATCHES = 4  # MSER needs at least this many batches of 5 (20 observations: 20 s of a per-second series)
MIN_BATCH_MEANS, MAX_BATCH_MEANS = 10, 30  # Schmeiser 1982: 10 to 30 batches for the interval


@dataclass
class Truncation:
    """MSER-5's answer: where the steady state starts, or why there is none."""

    skip: int | None  # observations to drop from the start (the leftover, then d* batches of 5); None: no steady state
    batches: int  # k, batches of 5 the series held
    d: int | None  # d*, batches truncated
    why_not: str = ""  # when skip is None


@dataclass
class BatchMeans:
    """The interval of the series' mean by non-overlapping batch means (the module's docstring: the rule)."""

    mean: float
    halfwidth: float  # 95%, after widening when autocorrelated; same unit as the series
    batches: int  # b
    batch_len: int  # s, observations per batch
    skipped: int  # observations dropped from the start so that b * s end where the series ends
    lag1: float | None  # lag-1 autocorrelation of the batch means (None: no variance)
    widened: bool  # lag1 above 2 / sqrt(b): the half-width was widened
    means: list[float]

    @property
    def rel_halfwidth(self) -> float:
        return self.halfwidth / self.mean if self.mean > 0 else math.inf


def mser_curve(z: np.ndarray) -> np.ndarray:
    """MSER(d) for d = 0..len(z) - 2 over batch means z (at least two batches are kept)."""
    k = len(z)
    out = np.empty(k - 1)
    for d in range(k - 1):
        tail = z[d:]
        out[d] = float(np.sum((tail - tail.mean()) ** 2)) / (k - d) ** 2
    return out


def truncate(x: np.ndarray | list[float]) -> Truncation:
    """MSER-5 on series x: the observations to drop as warm-up (the module's docstring: the rule)."""
    x = np.asarray(x, dtype=float)
    k = len(x) // BATCH
    if k < MIN_BATCHES:
        return Truncation(None, k, None, f"too short for MSER-5: {len(x)} observations, needs {MIN_BATCHES * BATCH}")
    lead = len(x) - k * BATCH
    z = x[lead:].reshape(k, BATCH).mean(axis=1)
    curve = mser_curve(z)[: 3 * k // 4 + 1]
    d = int(np.argmin(curve))
    if d > k // 2:
        return Truncation(None, k, d, f"MSER-5's minimum lies in the second half (batch {d} of "
                                      f"{k}); the rate is still moving")
    return Truncation(lead + d * BATCH, k, d)


def batch_means(x: np.ndarray | list[float]) -> BatchMeans | None:
    """The batch-means interval of x's mean; None when x has fewer than MIN_BATCH_MEANS observations."""
    x = np.asarray(x, dtype=float)
    m = len(x)
    if m < MIN_BATCH_MEANS:
        return None
    b = min(MAX_BATCH_MEANS, max(MIN_BATCH_MEANS, math.isqrt(m)))
    s = m // b
    skipped = m - b * s
    y = x[skipped:].reshape(b, s).mean(axis=1)
    mean, sd = float(y.mean()), float(y.std(ddof=1))
    half = t975(b - 1) * sd / math.sqrt(b)
    dev = y - mean
    ss = float(np.sum(dev**2))
    lag1 = float(np.sum(dev[:-1] * dev[1:]) / ss) if ss > 0 else None
    widened = lag1 is not None and lag1 > 2 / math.sqrt(b)
    if widened:
        half *= math.sqrt((1 + lag1) / max(1e-9, 1 - lag1))
    return BatchMeans(mean, half, b, s, skipped, lag1, widened, [float(v) for v in y])
