"""Verdicts: every figure with its 95% interval, every gap with its interval and a significance word.

The method is METHOD below (the report states it in its Method section).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from llmcompare.analysis import machines
from llmcompare.schema.run import EngineRecord, LoadKey, PointResult

METHOD = """Which value of a point: the steady-state rate when every repeat of both engines has a steady state (analysis/steady.py:
the warm-up cut by MSER-5 on the per-second output rate, the window ended before the drain; files written before
that rule carry the older wave window and are labelled so), else the whole-point figure (what vLLM bench serve
reports) for both; each verdict row says which and why (the point without a steady state, and the rule's reason),
and gives the whole-point gap beside it. Why the steady state first: the whole point holds the ramp-up and the drain,
so its rate moves with the point's length; the steady rate does not, once it has converged.

Which attempts: each repeat's counted attempt is its first one; an attempt made again because the one before it was
untrusted (the runner's own retry, or a resume's --redo untrusted) never replaces it, so the rule cannot prefer
the faster of two tries: whether an attempt counts is fixed before it is measured. A later attempt counts only
when the one before it was not untrusted (a cut-off cell finished by a resume, --redo all). A load point enters a
verdict only when the counted attempt of every repeat is usable (complete and trusted, no failed request unless
load.allow_failures, its request lines on file: run.PointResult.usable); otherwise the point is left out whole,
and the report says which and why, rather than a verdict resting on the repeats that happened to pass.

Interval of one engine's figure at one load point, from its values x_1..x_n:
  n >= 2 repeats   mean +- t(0.975, n-1) * s / sqrt(n)                       ("across n repeats")
  n == 1           the steady state's own batch-means interval (10 to 30 batch means of the window, widened when
                   their lag-1 autocorrelation is high; older files: the window's 5 equal parts): "within one run";
                   it leaves out run-to-run variance, so it is narrower than it should be, and says so
Gap of A against B: g = mean_A / mean_B - 1. Its interval is Welch's t interval on log(mean_A) - log(mean_B),
with the delta-method variance s_A^2 / (n_A mean_A^2) + s_B^2 / (n_B mean_B^2) and Welch-Satterthwaite degrees of
freedom, mapped back by exp(.) - 1. "no significant difference" when the interval holds 0.

Length check (throughput verdicts on steady-state rates): the same rule applied to the first half of each
repeat's requests (by index: what a point half as long would have sent up to its last send; run.json's
half_steady_tok_s, computed as the point is saved) gives a half-length gap with its interval, as above. Where the
full-length gap lies outside that interval, the verdict moved with the point's length, and the report says so; where
a repeat's first half has no steady state, the check cannot be made, and the report says why. The halves share
their requests with the full points, so agreement is a necessary condition, not a proof of invariance
(reports/h200-invariance measured 3- to 30-wave prefixes).

Wave-phase check (steady-state verdicts with fixed lengths in a closed loop, whose requests move in waves): each
steady window narrowed to the whole waves inside it (from its first wave boundary to its last; wave j ends at the jc-th
completion; run.json's waves_steady_tok_s) gives a gap with its interval, as above. With fixed lengths the rate
rises and falls once a wave, and the rule's windows start and end inside waves, so the figure weighs the phase
of the waves they cut. Where the verdict's word differs over whole waves, the verdict depends on that phase, and
the report says so (reports/h100-map-fixed: 10-wave points, the phase moved single points by -2.1% to +3.5%).

Drain check (throughput verdicts on whole points): a whole point holds its drain, the last seconds in which the
requests still in flight finish at ever smaller batches; the drain lasts about as long at any point length, so its
share of the point, and with it the whole-point gap, changes with the point's length
(reports/h100-three-engines-c64: TurboMind's drains lasted 9.4-15.0 s, 17-20% of its points, the others' 5.2-8.3 s).
Each point's output rate from its start to its drain's start (the end of the steady rule's search,
analysis/steady.end_bound; warm-up kept; run.json's before_drain_tok_s) gives a gap with its interval, as above.
Where its word differs from the verdict's, the verdict rests on the drain and would change as the points grow
longer, and the report says so. The warm-up stays in, so agreement is a necessary condition, not a proof of
invariance.
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
    method: str  # "across 3 repeats", "within one run (20 batch means of the steady window)", "one value, no interval"
    source: str  # "steady-state rate (MSER-5)" | "steady-state window" (older files' wave window) | "whole point"


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


def counted(e: EngineRecord) -> dict[tuple[int, int], PointResult]:
    """Per (point index, repeat), the attempt that counts (see METHOD): the first, or a later one measured after
    an attempt that was not untrusted."""
    by: dict[tuple[int, int], list[PointResult]] = {}
    for p in e.points:
        by.setdefault((p.index, p.repeat), []).append(p)
    out = {}
    for k, attempts in by.items():
        attempts.sort(key=lambda p: p.attempt)
        pick = attempts[0]
        for before, p in zip(attempts, attempts[1:], strict=False):
            if before.status != "untrusted":
                pick = p
        out[k] = pick
    return out


def usable_points(e: EngineRecord) -> dict[LoadKey, list[PointResult]]:
    """Per load key, the counted attempt of each repeat, when every one of them is usable (else the key is left
    out whole: left_out says why)."""
    by_key: dict[LoadKey, list[PointResult]] = {}
    for p in counted(e).values():
        by_key.setdefault(p.key, []).append(p)
    return {k: sorted(pts, key=lambda p: p.repeat) for k, pts in by_key.items() if all(p.usable for p in pts)}


def left_out(e: EngineRecord) -> dict[LoadKey, str]:
    """Per load key measured but not in usable_points: why (the first counted attempt that is not usable)."""
    by_key: dict[LoadKey, list[PointResult]] = {}
    for p in counted(e).values():
        by_key.setdefault(p.key, []).append(p)
    out = {}
    for k, pts in by_key.items():
        bad = next((p for p in sorted(pts, key=lambda p: p.repeat) if not p.usable), None)
        if bad is not None:
            out[k] = why_not_usable(bad)
    return out


def why_not_usable(p: PointResult) -> str:
    r = f"repeat {p.repeat + 1} attempt {p.attempt}"
    if p.requests_on_file == 0:
        return f"{r}: its request lines are not on file"
    if p.status == "complete" and p.metrics and p.metrics.failed and not p.failures_allowed:
        return f"{r}: {p.metrics.failed} requests failed"
    if p.status == "untrusted":
        return f"{r}: untrusted ({'; '.join(p.trust.reasons)[:200]})"
    if p.status == "running":  # saved as started, never as ended: the process was killed or the machine went away
        return f"{r}: running when the run's files were last written (still running, or the run stopped before it " \
               "finished: --resume measures it again)"
    return f"{r}: {p.status}"


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
    source = _source(points) if steady else "whole point"
    xs = [v for p in points if (v := _value(p, metric, steady)) is not None]
    if not xs:
        return None
    st = points[0].steady if steady else None
    if len(xs) >= 2:
        samples, method = xs, f"across {len(xs)} repeats"
    elif st and metric == "output_throughput" and len(st.sub_output_throughput) >= 2:
        samples = st.sub_output_throughput
        parts = "batch means" if st.rule else "parts"
        method = f"within one run ({len(samples)} {parts} of the steady window; run-to-run variance not included)"
        if st.halfwidth_tok_s is not None:  # the rule's own interval (widened when the batch means are correlated)
            return Estimate(xs[0], xs[0] - st.halfwidth_tok_s, xs[0] + st.halfwidth_tok_s, len(samples), samples,
                            method, source)
    else:
        return Estimate(xs[0], None, None, 1, xs, "one value, no interval", source)
    m, s = statistics.fmean(samples), statistics.stdev(samples)
    half = t975(len(samples) - 1) * s / math.sqrt(len(samples))
    return Estimate(statistics.fmean(xs), m - half, m + half, len(samples), samples, method, source)


def _source(points: list[PointResult]) -> str:
    return "steady-state rate (MSER-5)" if all(p.steady.rule for p in points) else "steady-state window"


def why_figure(cand: str, cp: list[PointResult], base: str, bp: list[PointResult], figures: str, steady: bool) -> str:
    """Why a verdict row uses the figure it uses (METHOD: the steady state first, else the whole point)."""
    if steady:
        older = "" if all(p.steady.rule for p in cp + bp) else "; some are the older wave window (files before MSER-5)"
        return f"every repeat of both engines has a steady state{older}"
    if figures == "whole":
        return "whole points asked for (--figures whole)"
    for name, pts in ((cand, cp), (base, bp)):
        if bad := next((p for p in pts if p.steady is None), None):
            why = bad.no_steady or "no steady-state window on file"
            return f"{name} repeat {bad.repeat + 1} has no steady state ({why})"
    return "a steady-state figure is missing for this metric"


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
    machines: str | None = None  # analysis/machines.difference, when the comparison was allowed across machines
    why: str = ""  # why the figure (why_figure)
    whole: Gap | None = None  # the whole-point gap, beside a steady-state verdict (None when the verdict is whole-point)
    half: Gap | None = None  # the length check's gap on the points' first halves (METHOD); None: half_why says why
    half_why: str = ""
    waves: Gap | None = None  # the wave-phase check's gap over whole waves (METHOD); None: waves_why says why
    waves_why: str = ""
    drain: Gap | None = None  # the drain check's gap with the drains left out (METHOD); None: drain_why says why
    drain_why: str = ""

    @property
    def moved_with_phase(self) -> bool:
        """Over whole waves the verdict's word differs (METHOD, wave-phase check)."""
        return bool(self.waves and self.waves.lo_pct is not None and self.waves.word != self.gap.word)

    @property
    def failed_check(self) -> str | None:
        """The check (METHOD) by which this verdict does not hold yet, or None."""
        return ("length check" if self.moved_with_length else "wave-phase check" if self.moved_with_phase
                else "drain check" if self.rests_on_drain else None)

    @property
    def rests_on_drain(self) -> bool:
        """With the drains left out the verdict's word differs (METHOD, drain check)."""
        return bool(self.drain and self.drain.lo_pct is not None and self.drain.word != self.gap.word)

    @property
    def moved_with_length(self) -> bool:
        """The full-length gap lies outside the first halves' interval (METHOD, length check)."""
        return bool(self.half and self.half.lo_pct is not None and not self.half.lo_pct <= self.gap.pct <= self.half.hi_pct)


FIGURES = ("auto", "whole")  # auto: steady-state windows where both engines have them; whole: whole points


def compare(cand: EngineRecord, base: EngineRecord, metric: str = "output_throughput",
            figures: str = "auto", cross_machine: bool = False) -> list[Row]:
    """figures 'whole' takes whole-point figures even where windows exist: with fixed lengths a closed-loop
    point's requests move in synchronized waves, and a window of one wave can sit anywhere in a wave's
    prefill/decode cycle (reports/h200-grid/README.md). A cell not shown to be one machine's (machines.cell_difference):
    no row (refused(), machine_left_out() say why), unless cross_machine (then its row says so)."""
    cp, bp = usable_points(cand), usable_points(base)
    rows = []
    for key in sorted(set(cp) & set(bp), key=point_order):
        apart = machines.cell_difference(cand, cp[key], base, bp[key])
        if apart and not cross_machine:
            continue
        both = figures == "auto" and has_steady(cp[key], metric) and has_steady(bp[key], metric)  # like with like
        a, b = estimate(cp[key], metric, both), estimate(bp[key], metric, both)
        if a and b:
            better = metric == "output_throughput"
            wa, wb = (estimate(cp[key], metric, False), estimate(bp[key], metric, False)) if both else (None, None)
            row = Row(key, a, b, gap(a, b, higher_is_better=better), apart,
                      why_figure(cand.name, cp[key], base.name, bp[key], figures, both),
                      gap(wa, wb, higher_is_better=better) if wa and wb else None)
            if both and better:
                row.half, row.half_why = half_gap(cp[key], bp[key])
                row.waves, row.waves_why = waves_gap(cp[key], bp[key])
            elif better:
                row.half_why = "not checked: the verdict is on whole points"
                row.drain, row.drain_why = drain_gap(cp[key], bp[key])
            rows.append(row)
    return rows


def from_values(xs: list[float], source: str = "") -> Estimate:
    """The estimate of one engine's figure from its repeats' values (the n >= 2 rule of METHOD; one value: no
    interval). Also scripts/prefix_study.py's."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return Estimate(m, None, None, len(xs), xs, "one value, no interval", source)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Estimate(m, m - half, m + half, len(xs), xs, f"across {len(xs)} repeats", source)


def half_gap(cp: list[PointResult], bp: list[PointResult]) -> tuple[Gap | None, str]:
    """The length check's gap of the candidate's points against the baseline's, on their first halves' steady
    rates; or None and why it cannot be made."""
    for p in cp + bp:
        if p.half_steady_tok_s is None:
            if p.half_no_steady:
                return None, f"a repeat's first half has no steady state ({p.half_no_steady})"
            return None, "no first-half figure on file (a run before session 20; scripts/resteady.py --half adds it)"
    src = "steady-state rate (first half)"
    g = gap(from_values([p.half_steady_tok_s for p in cp], src), from_values([p.half_steady_tok_s for p in bp], src))
    return (g, "") if g.lo_pct is not None else (None, "one repeat: no interval to check against")


def drain_gap(cp: list[PointResult], bp: list[PointResult]) -> tuple[Gap | None, str]:
    """The drain check's gap on the points' rates before their drains; or None and why it cannot be made."""
    if any(p.before_drain_tok_s is None for p in cp + bp):
        return None, "no figure before the drain on file (a run before session 31: scripts/resteady.py --drain adds it)"
    src = "whole point before its drain"
    g = gap(from_values([p.before_drain_tok_s for p in cp], src), from_values([p.before_drain_tok_s for p in bp], src))
    return (g, "") if g.lo_pct is not None else (None, "one repeat: no interval to check against")


def waves_gap(cp: list[PointResult], bp: list[PointResult]) -> tuple[Gap | None, str]:
    """The wave-phase check's gap on the steady windows narrowed to whole waves; or None and why it cannot be made."""
    if any(p.waves_steady_tok_s is None for p in cp + bp):
        return None, ("a repeat has less than one whole wave in its steady window, or no such figure on file (a run "
                      "before session 25: scripts/resteady.py --waves adds it; variable lengths: none)")
    src = "steady window over whole waves"
    g = gap(from_values([p.waves_steady_tok_s for p in cp], src), from_values([p.waves_steady_tok_s for p in bp], src))
    return (g, "") if g.lo_pct is not None else (None, "one repeat: no interval to check against")


def _apart_cells(cand: EngineRecord, base: EngineRecord) -> dict[LoadKey, str | None]:
    """Per cell both engines have usable points at: why they are not shown to be one machine's, or None."""
    cp, bp = usable_points(cand), usable_points(base)
    return {k: machines.cell_difference(cand, cp[k], base, bp[k]) for k in sorted(set(cp) & set(bp), key=point_order)}


def refused(cand: EngineRecord, base: EngineRecord, cross_machine: bool) -> str | None:
    """Why compare() gives no rows for this pair for want of one machine (at none of their common cells, or, with
    none in common, by their records); None when it does not refuse."""
    apart = [] if cross_machine else list(_apart_cells(cand, base).values()) or [machines.difference(cand, base)]
    return None if not apart or not all(apart) else (
        f"no verdict between {cand.name} and {base.name}: {apart[0]}. Compare engines measured on one machine "
        "(one serve-bench run, or load.interleave), or pass `report --cross-machine` to compare anyway")


def machine_left_out(cand: EngineRecord, base: EngineRecord, cross_machine: bool) -> str | None:
    """The cells compare() leaves out for want of one machine while it gives rows at others (a run resumed on
    another machine); None when none, or when refused() refuses the pair whole."""
    out = [] if cross_machine or refused(cand, base, False) else [
        f"{k.label} ({why})" for k, why in _apart_cells(cand, base).items() if why]
    return (f"{cand.name} against {base.name}: no verdict at {'; '.join(out)}: their points were not measured on one "
            "machine (pass `report --cross-machine` to compare anyway)") if out else None


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
