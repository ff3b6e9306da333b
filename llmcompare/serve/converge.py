"""load.converge, live: a point sends requests until its steady-state rate is known to the target, or its time is up.

Every CHECK_S seconds of the measured run the rule of analysis/mser.py (MSER-5 warm-up truncation, batch-means
interval) is applied to the output rate so far, and when the relative half-width is at most
load.converge.rel_halfwidth the point stops sending ("converged"); at load.converge.max_s it stops anyway ("time
up"). Requests in flight then finish normally (they are results, not cut off) and the point's recorded steady
state (analysis/steady.find, on every record) is computed as for any point.

The rate so far is counted per 1 s bin as each request finishes (its tokens where their chunks arrived), and only
up to the oldest request still in flight: before that moment every token that arrived belongs to a finished
request, so the series is complete where it is read (a request's tokens are known only when it finishes).
Counting as records arrive keeps each check to a few hundred bins, not a pass over every chunk of the point, so
the client's event loop (which timestamps the chunks) is not held up.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import numpy as np

from llmcompare.analysis import mser
from llmcompare.schema.request import RequestRecord

CHECK_S = 5.0  # s between two checks of the rate so far
# s of complete series a check must read before it may call the rate converged: what scenario/rules.py asks of
# max_s (MSER-5 and 10 batch means need at least 30 s). MSER-5 alone accepts 20 observations, and on an H100
# (session 24) a ShareGPT-like point stopped on a check that had read 21 s, the oldest request in flight having
# started then; its whole window gave ±2.8% against the 2% target (scripts/converge_replay.py).
MIN_SERIES_S = 30.0
BIN_S = 1.0  # s per observation, as analysis/steady.BIN_S


class Converger:
    """The rate so far of one point, and the decision to stop sending."""

    def __init__(self, rel_halfwidth: float, max_s: float):
        self.target, self.max_s = rel_halfwidth, max_s
        self.tokens = np.zeros(64)  # output tokens per BIN_S bin from the point's start (grown as needed)
        self.in_flight: dict[int, float] = {}  # request index -> its scheduled time (s), until it finishes
        self.decision: str | None = None  # "converged" | "time up", once decided
        self.decided_s: float | None = None  # s from the point's start when it decided (sending stopped)
        # the last check's reading: the batch-means relative half-width (None: no steady state yet) and the seconds
        # of series it read (up to the oldest request in flight). The point's recorded steady state is computed
        # again afterwards over its whole window, so the two can differ (the report shows both).
        self.live_rel_halfwidth: float | None = None
        self.live_series_s: float | None = None
        self.check_s = CHECK_S  # s between checks (watch)

    def started(self, index: int, scheduled_s: float) -> None:
        self.in_flight[index] = scheduled_s

    def finished(self, rec: RequestRecord) -> None:
        self.in_flight.pop(rec.index, None)
        c = rec.token_chunk_ms
        if not rec.success or not c or not rec.output_tokens:
            return
        idx = ((rec.dispatch_s + np.asarray(c) / 1000.0) / BIN_S).astype(int)
        if idx.max() >= len(self.tokens):
            self.tokens = np.concatenate([self.tokens, np.zeros(max(len(self.tokens), idx.max() + 1))])
        np.add.at(self.tokens, np.clip(idx, 0, None), rec.output_tokens / len(c))

    def decide(self, now_s: float) -> str | None:
        """At now_s (s from the point's start): "time up", "converged" or None (keep sending)."""
        if self.decision is None:
            if now_s >= self.max_s:
                self.decision = "time up"
            elif self.converged(now_s):
                self.decision = "converged"
            if self.decision is not None:
                self.decided_s = now_s
        return self.decision

    def converged(self, now_s: float) -> bool:
        until = min([now_s, *self.in_flight.values()])  # the series is complete only before the oldest in flight
        x = self.tokens[: int(until // BIN_S)] / BIN_S
        self.live_series_s, self.live_rel_halfwidth = len(x) * BIN_S, None
        cut = mser.truncate(x)
        if cut.skip is None:
            return False
        bm = mser.batch_means(x[cut.skip:])
        self.live_rel_halfwidth = bm.rel_halfwidth if bm is not None else None  # read even when too short to stop
        return bm is not None and bm.rel_halfwidth <= self.target and self.live_series_s >= MIN_SERIES_S


async def watch(conv: Converger, t0: float, enough: Callable[[str], None]) -> None:
    """Checks at check_s, 2·check_s, ... from t0 (the point's start, perf_counter; it may lie ahead: the worker
    pool starts its points 0.3 s ahead) and at max_s, and calls enough(decision) once. The times are counted from
    t0, not from the previous check: sleeping check_s from the watch's creation put every check 0.3 s early, so
    the first one at or past max_s came up to check_s late (session 24: 60 s points sent for 64.7 s)."""
    k = 1
    while True:
        due_s = min(k * conv.check_s, conv.max_s)
        await asyncio.sleep(max(0.0, t0 + due_s - time.perf_counter()))
        if decision := conv.decide(time.perf_counter() - t0):
            enough(decision)
            return
        k += 1


def closed_loop_requests(c: int, max_s: float, s_per_token: float, mean_output_tokens: float, have: int,
                         cap: int) -> tuple[int, str] | None:
    """How many requests a closed-loop point of concurrency c must have at hand to send for max_s when no warm-up
    ran at its load: c / E2EL a second, E2EL taken as s_per_token (the warm-up's E2EL per output token, at low
    load) x the workload's mean output length. E2EL only grows with load (each step carries more requests, and
    some wait for a slot), so this is an upper bound; the point stops sending at max_s or once converged anyway.
    None when `have` is already enough. On the H200 a ShareGPT-like point at c=256 planned its 2,048 prompts
    without this and ran out of them after 58 s of a 90 s max_s (reports/h200-converge)."""
    if s_per_token <= 0 or mean_output_tokens <= 0:
        return None
    n = math.ceil(max_s * c / (s_per_token * mean_output_tokens))
    if n <= have:
        return None
    n = min(n, cap)
    return n, (f"load.converge max_s {max_s:g} at the warm-up's {s_per_token * 1000:.1f} ms per output token at low "
               f"load x {mean_output_tokens:.0f} tokens (an upper bound)" + (" (capped)" if n == cap else ""))
