"""Service-level capacity: per engine, the highest sustained request rate at which the scenario's SLOs hold at
one percentile (vLLM `bench sweep serve_sla`, guidellm's goodput search). Scenario:

  slo: {ttft_ms: 1000, tpot_ms: 50}          # which SLOs (any of ttft_ms, tpot_ms, e2el_ms)
  load: {capacity: {slo_percentile: 99, min_rate: 0.5, max_rate: 64, tolerance: 0.1, max_probes: 12}}

Each probe is an open-loop load point at request rate r (Poisson arrivals, load.burstiness, load.max_concurrency;
max(workload.num_prompts, r * load.min_duration_s) requests), measured load.repeats times like any point and
saved in the run files as it goes. The search (per engine):
  bracket  min_rate, then x2 until a probe fails (or max_rate passes: capacity >= max_rate)
  bisect   at the geometric mean of the highest passing rate lo and the lowest failing rate hi, until
           hi / lo - 1 <= tolerance or max_probes probes have run (usable or not)
  around   a probe none of whose repeats is usable (untrusted, partial, failed to run) says neither pass nor
           fail, so the search goes on around it: at the geometric mean of it and hi, else of lo and it (in the
           doubling phase: of lo and it); a rate is never probed twice. Whether a probe is usable does not
           depend on its SLO figures, so leaving it out moves no bracket either way; it can leave one wider.
           (Until session 21 the search stopped there: on an H100, TurboMind's search ended at 32-64 req/s,
           reports/h100-capacity.)
When a probe passes, and the capacity and its interval: METHOD below (the report states it in its Method section).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from llmcompare.analysis.verdict import t975, usable_points
from llmcompare.schema.scenario import SLO_METRICS, Capacity

METHOD = """A probe passes when no request failed and, averaged over its repeats, the worst SLO ratio R = max over the SLOs
set of p<slo_percentile>(metric) / limit is below 1.
Capacity and its interval, from the saved probes only (assess(); the report recomputes it from the files):
  estimate   the rate where R crosses 1, interpolated linearly in rate between lo (mean R < 1) and hi (mean R >= 1)
  interval   the same crossing with R at lo and at hi replaced by their 95% bounds across repeats (mean +- t s /
             sqrt(n), verdict.t975): the low end from the upper bounds, the high end from the lower bounds;
             clipped to [lo, hi], as nothing outside the bracket was measured. One repeat: the bracket [lo, hi].
  unbisected where the search stopped before hi / lo - 1 reached load.capacity.tolerance (max_probes, or no rate
             left around the probes with no usable repeat), no estimate: the capacity lies in [lo, hi] and nothing
             narrower is said. R is far from linear in the rate across a wide bracket (flat below saturation, steep
             past it), so a straight line through its ends would put the crossing too low (on the H100 run,
             reports/h100-capacity: passes at 32, fails at 64, line crossing at 35 req/s, where a probe at 45 had
             met the SLOs in the client's figures but was left out as untrusted).
  joined     searches of one engine configuration (the same scenario entry, version and model) on one machine,
             with the same SLOs, percentile, max_concurrency and workload, in several runs (a search run again
             lower or higher with what a session had left): their probes pooled by rate (the repeats of a rate
             probed in two runs together), tolerance the smallest of theirs, and assessed as above. The spread
             across repeats then includes the server's restart between the runs.
"""


def slo_text(slo, q: float) -> str:
    """'TTFT p99 < 1000 ms and TPOT p99 < 50 ms'."""
    return " and ".join(f"{m.split('_')[0].upper()} p{q:g} < {getattr(slo, m):g} ms" for m in SLO_METRICS
                        if getattr(slo, m) is not None)


def ratio(point, slo, q: float) -> float:
    """The worst SLO ratio of one measured run of a probe: max over the SLOs set of p<q>(metric) / limit; inf
    when a request failed or a figure is missing."""
    m = point.metrics
    if m is None or m.failed or not m.completed:
        return math.inf
    out = 0.0
    for name in SLO_METRICS:
        limit = getattr(slo, name)
        if limit is not None:
            v = m.stat(f"p{q:g}_{name}")
            out = max(out, math.inf if v is None else v / limit)
    return out


@dataclass
class Probe:
    rate: float  # req/s
    ratios: list[float]  # worst SLO ratio per repeat

    @property
    def mean(self) -> float:
        return statistics.fmean(self.ratios) if all(map(math.isfinite, self.ratios)) else math.inf

    @property
    def passed(self) -> bool:
        return self.mean < 1.0

    def bounds(self) -> tuple[float, float]:

        if len(self.ratios) < 2 or not math.isfinite(self.mean):
            return self.mean, self.mean
        half = t975(len(self.ratios) - 1) * statistics.stdev(self.ratios) / math.sqrt(len(self.ratios))
        return self.mean - half, self.mean + half


@dataclass
class Result:
    lo: float | None  # highest passing rate (None: even min_rate failed)
    hi: float | None  # lowest failing rate above it (None: max_rate passed)
    estimate: float | None
    low: float | None  # 95% interval of the estimate
    high: float | None
    probes: list[Probe]
    unbisected: float | None = None  # the tolerance the bracket was not narrowed to (no estimate then)

    def text(self) -> str:
        if self.lo is None and self.hi is None:  # on a loaded machine every repeat of a probe may be untrusted
            return "not known: no probe had a usable repeat (complete and trusted)"
        if self.lo is None:
            return f"below {self.hi:.3g} req/s (the lowest probe failed)"
        if self.hi is None:
            return f"at least {self.lo:.3g} req/s (the highest probe passed)"
        if self.unbisected is not None:
            return (f"between {self.lo:.3g} and {self.hi:.3g} req/s, no figure inside that: the search stopped before "
                    f"bisecting it to {self.unbisected:.0%}")
        return f"{self.estimate:.2f} [{self.low:.2f}, {self.high:.2f}] req/s"


def span(r: Result) -> tuple[float, float] | None:
    """Where the capacity lies, req/s: the estimate's 95% interval, else the bracket (an open end as 0 or inf);
    None when no probe was usable."""
    if r.lo is None and r.hi is None:
        return None
    if r.lo is None:
        return 0.0, r.hi
    if r.hi is None:
        return r.lo, math.inf
    return (r.lo, r.hi) if r.estimate is None else (r.low, r.high)


def higher(a: Result, b: Result) -> int | None:
    """1 when a's capacity lies above b's (a's span starts where b's ends or above it: at a shared end one engine
    passed the rate the other failed, or the intervals meet), -1 when below, 0 when the spans overlap (no
    verdict), None when either is unknown."""
    sa, sb = span(a), span(b)
    if sa is None or sb is None:
        return None
    return 1 if sa[0] >= sb[1] else -1 if sb[0] >= sa[1] else 0


def _cross(a: float, ra: float, b: float, rb: float) -> float:
    """Where the line through (a, ra) and (b, rb) reaches R = 1, clipped to [a, b]."""
    if rb <= ra:  # no rise between them (noise): the end on the side R says
        return a if ra >= 1 else b
    return min(max(a + (1 - ra) * (b - a) / (rb - ra), a), b)


def assess(probes: list[Probe], tolerance: float | None = None) -> Result:
    """tolerance: load.capacity.tolerance; a bracket wider than it gets no estimate (METHOD, unbisected)."""
    probes = sorted(probes, key=lambda p: p.rate)
    passing = [p for p in probes if p.passed]
    failing = [p for p in probes if not p.passed and (not passing or p.rate > passing[-1].rate)]
    lo = max(passing, key=lambda p: p.rate) if passing else None
    hi = min(failing, key=lambda p: p.rate) if failing else None
    if lo is None or hi is None:
        return Result(lo.rate if lo else None, hi.rate if hi else None, None, None, None, probes)
    if tolerance is not None and hi.rate / lo.rate - 1 > tolerance + 1e-9:
        return Result(lo.rate, hi.rate, None, lo.rate, hi.rate, probes, unbisected=tolerance)
    if not math.isfinite(hi.mean):  # failed requests at hi: no ratio to interpolate, the bracket only
        return Result(lo.rate, hi.rate, lo.rate, lo.rate, hi.rate, probes)
    (lo_lo, lo_hi), (hi_lo, hi_hi) = lo.bounds(), hi.bounds()
    est = _cross(lo.rate, lo.mean, hi.rate, hi.mean)
    if len(lo.ratios) < 2 or len(hi.ratios) < 2:
        return Result(lo.rate, hi.rate, est, lo.rate, hi.rate, probes)
    return Result(lo.rate, hi.rate, est, _cross(lo.rate, lo_hi, hi.rate, hi_hi), _cross(lo.rate, lo_lo, hi.rate, hi_lo),
                  probes)


def next_rate(cap: Capacity, probes: list[Probe], unusable: frozenset[float] = frozenset()) -> float | None:
    """The next rate to probe, or None when the search is over. probes: the usable ones; unusable: the rates
    probed with no usable repeat (the module's 'around')."""
    if len(probes) + len(unusable) >= cap.max_probes:
        return None
    if not probes:
        return None if cap.min_rate in unusable else cap.min_rate
    r = assess(probes)
    if r.lo is None:
        return None  # min_rate fails: below the range
    if r.hi is None:
        if r.lo >= cap.max_rate:
            return None
        up = min(r.lo * 2, cap.max_rate)
        return _first_new([up, _mid(r.lo, up)], r.lo, math.inf, cap.tolerance, unusable)
    if r.hi / r.lo - 1 <= cap.tolerance:
        return None
    m = _mid(r.lo, r.hi)
    return _first_new([m, _mid(m, r.hi), _mid(r.lo, m)], r.lo, r.hi, cap.tolerance, unusable)


def _mid(a: float, b: float) -> float:
    return round(math.sqrt(a * b), 4)


def _first_new(rates: list[float], lo: float, hi: float, tolerance: float, unusable: frozenset[float]) -> float | None:
    """The first of rates strictly inside (lo, hi), not probed unusably before, and more than half the tolerance
    above lo (a probe closer to lo would hardly narrow the bracket); None if none is."""
    for x in rates:
        if lo < x < hi and x not in unusable and x / lo - 1 > tolerance / 2:
            return x
    return None


def pooled(searches: list[list[Probe]]) -> list[Probe]:
    """The probes of several searches of one engine as one search (METHOD, joined): the repeats of a rate probed
    in more than one, in search order, under that rate."""
    by_rate: dict[float, list[float]] = {}
    for probes in searches:
        for p in probes:
            by_rate.setdefault(round(p.rate, 4), []).extend(p.ratios)
    return [Probe(r, ratios) for r, ratios in sorted(by_rate.items())]


def probes_of(rec, max_concurrency: int | None, slo, q: float) -> list[Probe]:
    """The engine's open-loop points at a finite rate (the last attempt of each repeat, complete and trusted) as
    probes; a rate none of whose repeats is usable is left out."""

    out = []
    for key, pts in usable_points(rec).items():
        r = key.request_rate
        if r is not None and math.isfinite(r) and key.max_concurrency == max_concurrency:
            out.append(Probe(r, [ratio(p, slo, q) for p in sorted(pts, key=lambda p: p.repeat)]))
    return sorted(out, key=lambda p: p.rate)
