"""Steady state and the per-second series of one load point, from its request records alone.

Window (see results.Steady):
  closed loop, concurrency c, N requests sent: each completion sends the next request, so the j-th completion
    is the (c + j)-th send. The window opens at the c-th completion (every slot has been refilled once: ramp-up
    over) and closes k * c completions later, k = floor((N - 2c) / c) >= 1, at or before the last send (after it
    the slots drain). A whole number of c completions matters: with fixed lengths the requests move in
    synchronized waves (prefill, then decode), and a window that cuts a wave short over-weights one phase.
    Needs N >= 3c.
  open loop: it opens one median E2EL after the first send (the requests in flight have reached their steady
    level) and closes at the last send.
Tokens are counted where their chunks arrived: a request's output tokens are spread evenly over the chunks
that carried them (vLLM sends one token per chunk; lmdeploy several under load).
Latency statistics of the window come from the requests sent and finished inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from llmcompare.analysis.metrics import tpot_ms
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Steady

SUB_WINDOWS = 5  # the window is cut in this many equal parts for a within-run interval (batch means)


def _token_times(r: RequestRecord) -> tuple[np.ndarray, float]:
    """Arrival times (s from the point's start) of the chunks carrying r's tokens, and tokens per chunk."""
    c = r.token_chunk_ms
    if not r.success or not c or not r.output_tokens:
        return np.zeros(0), 0.0
    return r.dispatch_s + np.asarray(c) / 1000.0, r.output_tokens / len(c)


def _finish_s(r: RequestRecord) -> float | None:
    return r.dispatch_s + r.e2el_ms / 1000.0 if r.success and r.e2el_ms is not None else None


def window(records: Sequence[RequestRecord], concurrency: int | None) -> tuple[float, float] | None:
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


def steady(records: Sequence[RequestRecord], concurrency: int | None) -> Steady | None:
    w = window(records, concurrency)
    if w is None:
        return None
    start, end = w
    length = end - start
    tokens = tokens_between(records, start, end)
    finished = [f for r in records if (f := _finish_s(r)) is not None and start <= f < end]
    inside = [r for r in records if r.success and r.dispatch_s >= start and (_finish_s(r) or math.inf) <= end]
    edges = np.linspace(start, end, SUB_WINDOWS + 1)
    subs = [tokens_between(records, a, b) / (b - a) for a, b in zip(edges, edges[1:], strict=False)]
    st: dict[str, float] = {}
    for name, vals in (("ttft", [r.ttft_ms for r in inside]), ("tpot", [t for r in inside if (t := tpot_ms(r))]),
                       ("itl", [g for r in inside for g in r.itl_ms()]), ("e2el", [r.e2el_ms for r in inside])):
        if vals:
            st[f"median_{name}_ms"] = float(np.median(vals))
            st[f"p99_{name}_ms"] = float(np.percentile(vals, 99))
    return Steady(start_s=start, end_s=end, output_tokens=tokens, output_throughput=tokens / length,
                  request_throughput=len(finished) / length, requests_inside=len(inside), stats=st,
                  sub_output_throughput=subs)


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
