"""Steady state and the per-second series of one load point, from its request records alone.

The steady state (rule "mser-5", see schema/run.Steady and analysis/mser.py for the method and its sources):
  end   before the drain: the last send (closed and open loop), or earlier, in a closed loop of concurrency c,
        where the requests in flight fall below in_flight_floor(c) (min(c - 0.5, 0.95c), averaged over a second)
        and stay below it up to the last send (a slot left empty for good: the drain has begun, e.g. one client process has sent its share);
  rate  the output tokens per second in 1 s bins counted back from the end (tokens counted where their chunks
        arrived: a request's output tokens are spread evenly over the chunks that carried them; vLLM sends one
        token per chunk, lmdeploy several under load);
  start MSER-5's warm-up truncation of that series; no steady state when its minimum lies in the second half
        or the series is too short (the reason is kept on the point: PointResult.no_steady);
  interval batch means of the window (10 to 30 batches), converged when the relative half-width is at most the
        target (load.converge.rel_halfwidth, else DEFAULT_TARGET).
Latency statistics of the window come from the requests sent and finished inside it.
window() is the older wave window (the 2c-th send, whole waves of c), still used for the engine-counter
comparison (analysis/agreement.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from llmcompare.analysis import mser
from llmcompare.analysis.metrics import tpot_ms
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Steady

RULE = "mser-5"
BIN_S = 1.0  # s: one observation of the rate series per second
DEFAULT_TARGET = 0.02  # relative half-width a point's rate must reach to be called converged, without load.converge


def _token_times(r: RequestRecord) -> tuple[np.ndarray, float]:
    """Arrival times (s from the point's start) of the chunks carrying r's tokens, and tokens per chunk."""
    c = r.token_chunk_ms
    if not r.success or not c or not r.output_tokens:
        return np.zeros(0), 0.0
    return r.dispatch_s + np.asarray(c) / 1000.0, r.output_tokens / len(c)


def _finish_s(r: RequestRecord) -> float | None:
    return r.dispatch_s + r.e2el_ms / 1000.0 if r.success and r.e2el_ms is not None else None


def window(records: Sequence[RequestRecord], concurrency: int | None) -> tuple[float, float] | None:
    """The older wave window (the steady window of files written before MSER-5): closed loop, from the 2c-th send
    over whole waves of c; open loop, from one median E2EL after the first send to the last send. Still the window
    of the engine-counter comparison (analysis/agreement.py); not the steady state (find)."""
    sends = sorted(r.dispatch_s for r in records if not r.cut_off)
    if not sends:
        return None
    if concurrency is not None:
        c = concurrency
        k = (len(sends) - 2 * c) // c
        if k < 1:
            return None
        return sends[2 * c - 1], sends[(k + 2) * c - 1]
    else:
        e2el = [r.e2el_ms for r in records if r.success and r.e2el_ms is not None]
        if not e2el:
            return None
        start = sends[0] + float(np.median(e2el)) / 1000.0
    end = sends[-1]
    return (start, end) if end > start else None


def tokens_between(records: Sequence[RequestRecord], a: float, b: float) -> float:
    total = 0.0
    for r in records:
        t, per = _token_times(r)
        if per:
            total += per * int(np.count_nonzero((t >= a) & (t < b)))
    return total


def _spans(records: Sequence[RequestRecord]) -> np.ndarray:
    """(dispatch, finish) of every request not cut off, s from the point's start; a failed one without E2EL: 0 s."""
    out = [(r.dispatch_s, r.dispatch_s + (r.e2el_ms or 0.0) / 1000.0) for r in records if not r.cut_off]
    return np.asarray(out, dtype=float).reshape(-1, 2)


def in_flight_floor(c: int) -> float:
    """Requests in flight (mean over a bin) below which a closed loop of c is draining: c - 0.5, or 95% of c when
    that is lower. The slack: a slot stands empty between a request's last token (its E2EL, where its span ends)
    and the next send (the stream's end, the client's turn-around); in the committed H200 grid, lmdeploy at c=256
    finishing 32 requests a second averaged 255.0 in flight with no drain (one slot's worth)."""
    return min(c - 0.5, 0.95 * c)


def end_bound(records: Sequence[RequestRecord], concurrency: int | None,
              bin_s: float = BIN_S) -> tuple[float, str] | None:
    """Where the steady state must end, s from the point's start, and why: "last send", or (closed loop) "in flight
    below target": the end of the last bin (after the c-th send) whose mean requests in flight are at least
    in_flight_floor(c), when every later whole bin before the last send is below it (a slot left empty for good: the drain has
    begun, e.g. one client process has sent its share). A dip that recovers is not a drain: with synchronized
    waves a burst of completions leaves slots empty for a moment before they are refilled."""
    spans = _spans(records)
    if not len(spans):
        return None
    sends = np.sort(spans[:, 0])
    last = float(sends[-1])
    if not concurrency or len(sends) < concurrency:
        return last, "last send"
    starts = float(sends[concurrency - 1]) + bin_s * np.arange(int((last - sends[concurrency - 1]) // bin_s))
    full = [np.clip(np.minimum(spans[:, 1], t + bin_s) - np.maximum(spans[:, 0], t), 0, None).sum() / bin_s
            >= in_flight_floor(concurrency) for t in starts]
    if not full or full[-1]:
        return last, "last send"
    kept = [i for i, f in enumerate(full) if f]
    return (float(starts[kept[-1]] + bin_s) if kept else float(starts[0])), "in flight below target"


def rate_series(records: Sequence[RequestRecord], end_s: float, bin_s: float = BIN_S) -> tuple[np.ndarray, float]:
    """Output tok/s in bins of bin_s ending at end_s (as many whole bins as fit after 0), and the first edge."""
    m = int(end_s // bin_s)
    first = end_s - m * bin_s
    edges = first + bin_s * np.arange(m + 1)
    tokens = np.zeros(m)
    for r in records:
        t, per = _token_times(r)
        if per and m:
            tokens += per * np.histogram(t, bins=edges)[0]
    return tokens / bin_s, first


def find(records: Sequence[RequestRecord], concurrency: int | None, target: float = DEFAULT_TARGET,
         bin_s: float = BIN_S) -> tuple[Steady | None, str]:
    """The point's steady state by the module's rule, or None and why not."""
    bound = end_bound(records, concurrency, bin_s)
    if bound is None:
        return None, "no request was sent"
    end, reason = bound
    x, first = rate_series(records, end, bin_s)
    cut = mser.truncate(x)
    if cut.skip is None:
        return None, cut.why_not
    bm = mser.batch_means(x[cut.skip:])
    if bm is None:
        return None, (f"steady part too short for an interval: {len(x) - cut.skip} s after the warm-up, "
                      f"needs {mser.MIN_BATCH_MEANS}")
    warmup = first + cut.skip * bin_s
    start = warmup + bm.skipped * bin_s
    st = _inside(records, start, end)
    rel = bm.rel_halfwidth
    st.output_throughput, st.sub_output_throughput = bm.mean, bm.means
    st.rule, st.warmup_s, st.end_reason = RULE, warmup, reason
    st.halfwidth_tok_s, st.rel_halfwidth, st.batches, st.batch_s = bm.halfwidth, rel, bm.batches, bm.batch_len * bin_s
    st.lag1_autocorr, st.widened, st.target_rel_halfwidth = bm.lag1, bm.widened, target
    st.converged = bool(rel <= target)
    return st, ""


def first_half(records: Sequence[RequestRecord], concurrency: int | None) -> tuple[float | None, str | None]:
    """The steady-state rate (tok/s) of the point's first half by request index, the requests a point half as
    long would have sent (in a closed loop and in an open loop's arrival order alike), or None and why not: the
    verdict's length check (analysis/verdict.py). Its window ends at the half's last send, like a shorter point's."""
    n = len(records)
    st, why = find([r for r in records if r.index < n // 2], concurrency)
    return (st.output_throughput, None) if st else (None, why)


def before_drain(records: Sequence[RequestRecord], concurrency: int | None) -> float | None:
    """Output tok/s from the point's start to where its drain begins (end_bound: the last send, or where a closed
    loop's requests in flight fell below target for good): the whole point with its drain left out and its warm-up
    kept (PointResult.before_drain_tok_s), for the verdict's drain check (analysis/verdict.py). None: no request."""
    got = end_bound(records, concurrency)
    if got is None or got[0] <= 0:
        return None
    return tokens_between(records, 0.0, got[0]) / got[0]


def wave_edges(records: Sequence[RequestRecord], c: int | None) -> list[float]:
    """The wave boundaries of a closed loop of concurrency c, s from the point's start: 0, then the c-th, 2c-th, ...
    completion (wave j runs from the (j-1)c-th completion to the jc-th). [] for an open loop."""
    fin = sorted(f for r in records if (f := _finish_s(r)) is not None)
    return [0.0] + [fin[j * c - 1] for j in range(1, len(fin) // c + 1)] if c else []


def whole_waves(records: Sequence[RequestRecord], c: int | None, start_s: float, end_s: float
                ) -> tuple[float, float, float] | None:
    """[start_s, end_s] narrowed to the whole waves inside it: (from s, to s, output tok/s), or None with less than
    one whole wave. With fixed lengths in a closed loop the rate rises and falls once a wave (prefill, then decode),
    so a window that starts or ends inside a wave weighs that wave's phase; this figure does not (the report's
    wave-phase check, analysis/verdict.py)."""
    inside = [e for e in wave_edges(records, c) if start_s <= e <= end_s]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    return a, b, tokens_between(records, a, b) / (b - a)


def waves_rate(records: Sequence[RequestRecord], c: int | None, st: Steady | None) -> float | None:
    """The steady window narrowed to its whole waves, output tok/s (PointResult.waves_steady_tok_s); None without a
    steady window, in an open loop, or with less than one whole wave inside the window."""
    got = whole_waves(records, c, st.start_s, st.end_s) if st is not None and c else None
    return got[2] if got else None


def _inside(records: Sequence[RequestRecord], start: float, end: float) -> Steady:
    """The window's token and request counts and the latency statistics of the requests inside it."""
    length = end - start
    tokens = tokens_between(records, start, end)
    finished = [f for r in records if (f := _finish_s(r)) is not None and start <= f < end]
    inside = [r for r in records if r.success and r.dispatch_s >= start and (_finish_s(r) or math.inf) <= end]
    st: dict[str, float] = {}
    for name, vals in (("ttft", [r.ttft_ms for r in inside]), ("tpot", [t for r in inside if (t := tpot_ms(r))]),
                       ("itl", [g for r in inside for g in r.itl_ms()]), ("e2el", [r.e2el_ms for r in inside])):
        if vals:
            st[f"median_{name}_ms"] = float(np.median(vals))
            st[f"p99_{name}_ms"] = float(np.percentile(vals, 99))
    return Steady(start_s=start, end_s=end, output_tokens=tokens, output_throughput=tokens / length,
                  request_throughput=len(finished) / length, requests_inside=len(inside), stats=st)


def steady(records: Sequence[RequestRecord], concurrency: int | None, target: float = DEFAULT_TARGET) -> Steady | None:
    """find()'s window, without the reason."""
    return find(records, concurrency, target)[0]


def series(records: Sequence[RequestRecord], duration_s: float, samples: Sequence[tuple[float, dict]],
           bin_s: float = 1.0) -> list[dict]:
    """One row per second of the point: output tok/s, requests in flight (at mid-second), requests finished,
    and the engine's own gauges averaged over the samples taken in that second."""
    n = max(1, math.ceil(duration_s / bin_s))
    tokens = np.zeros(n)
    for r in records:
        t, per = _token_times(r)
        if per:
            idx = np.clip((t / bin_s).astype(int), 0, n - 1)
            np.add.at(tokens, idx, per)
    spans = [(r.dispatch_s, _finish_s(r) or r.dispatch_s) for r in records if not r.cut_off]
    done = np.zeros(n)
    for _, f in spans:
        done[min(n - 1, int(f / bin_s))] += 1
    rows = []
    for i in range(n):
        mid = (i + 0.5) * bin_s
        row = {"t_s": i * bin_s, "output_tok_per_s": tokens[i] / bin_s,
               "in_flight": sum(a <= mid < b for a, b in spans), "finished": int(done[i])}
        inbin = [v for t, v in samples if i * bin_s <= t < (i + 1) * bin_s]
        for key in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
            vals = [v[key] for v in inbin if key in v]
            if vals:
                row[key] = sum(vals) / len(vals)
        rows.append(row)
    return rows
