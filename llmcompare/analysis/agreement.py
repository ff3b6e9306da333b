"""The client's figures against the engine's own: its Prometheus token counters over the same window.

Window: the engine's samples (t, counters) of the point (t in seconds from the point's start, on the client's
clock: a sample's time is when its /metrics answer arrived) that fall inside the point's steady-state window
(analysis/steady.window), else inside the whole point from its first send to its last send; the first and the
last of those samples bound it, and it needs MIN_WINDOW_S.
  engine generation rate  increase of <engine>:generation_tokens_total / window (vLLM; lmdeploy --enable-metrics)
  client rate             output tokens whose chunks reached the client inside the window / window
  shortfall               1 - client / engine: tokens the engine made that had not reached the client. Above
                          TOLERANCE_PCT the point is untrusted: its client-side figures are the delivery path's
                          (the server's streaming or the client), not the engine's. The check cannot tell those
                          two apart; the client's loop lag and its worker processes can (docs/metrics.md).
  running vs target       the engine's mean num_requests_running against the client's concurrency: below
                          RUNNING_SHORT of it, and at least SHORT_REQUESTS fewer, it ran fewer requests at once
                          than the client had in flight, and the report says so, with the engine's mean
                          num_requests_waiting (queued in its scheduler: for a batch slot or KV cache) where it
                          exports it. Where the others were (its API server, tokenizing, in transit, between
                          a reply and the client's next send, or an engine state neither gauge counts: SGLang
                          0.5.15 sets both only when a prefill batch's results are processed, its running count
                          then leaving out that batch's own sequences, and at each Decode batch log line, so a
                          scrape reads the last value set; docs/engines.md) is not measured.
  time to first token     where the engine exports per-request histograms (vLLM): the window's increase of each
                          one's _sum / increase of its _count, in ms: its own TTFT (from its API server's arrival
                          stamp to its processing of the first token), queue (waiting in its scheduler) and prefill
                          (scheduled to first token; vLLM observes queue and prefill when a request finishes, so
                          they are of the requests finished in the window), beside the client's mean TTFT of the
                          requests whose first token reached it inside the window. Client minus engine is time
                          outside the engine's clock: before its arrival stamp (HTTP handling; tokenizing, where
                          the version stamps after it) or after its first token was processed (the event's write,
                          transit, the client's read); the histograms do not split it further.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmcompare.analysis.steady import tokens_between, window
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import EngineCounters

TOLERANCE_PCT = 5.0  # client below engine by more than this over the window: untrusted
MIN_WINDOW_S = 2.0  # a shorter window (a few samples) is not compared
RUNNING_SHORT = 0.9  # mean running below 90% of the client's concurrency: said in the report ...
SHORT_REQUESTS = 1.0  # ... when that is at least one whole request (at c=1, 0.85 running is the gaps between sends)


def compare(samples: Sequence[tuple[float, dict[str, float]]], records: Sequence[RequestRecord],
            concurrency: int | None) -> EngineCounters:
    """The point's EngineCounters from its /metrics samples [(t_s from the point's start, values)]."""
    out = EngineCounters(target_in_flight=concurrency)
    running = [v["num_requests_running"] for _, v in samples if "num_requests_running" in v]
    out.mean_running = sum(running) / len(running) if running else None
    waiting = [v["num_requests_waiting"] for _, v in samples if "num_requests_waiting" in v]
    out.mean_waiting = sum(waiting) / len(waiting) if waiting else None
    counted = [(t, v) for t, v in samples if "generation_tokens_total" in v]
    if not counted:
        return out
    out.reported = True
    w = window(records, concurrency)
    if w is None:
        sends = [r.dispatch_s for r in records if not r.cut_off]
        w = (min(sends), max(sends)) if sends else None
    inside = [(t, v) for t, v in counted if w and w[0] <= t <= w[1]]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < MIN_WINDOW_S:
        return out
    (a, va), (b, vb) = inside[0], inside[-1]
    span = b - a
    out.window_s = [round(a, 4), round(b, 4)]
    out.engine_generation_tok_s = (vb["generation_tokens_total"] - va["generation_tokens_total"]) / span
    if "prompt_tokens_total" in va and "prompt_tokens_total" in vb:
        out.engine_prompt_tok_s = (vb["prompt_tokens_total"] - va["prompt_tokens_total"]) / span
    out.client_tok_s = tokens_between([r for r in records if r.success], a, b) / span
    if out.engine_generation_tok_s > 0:
        out.shortfall_pct = 100.0 * (1.0 - out.client_tok_s / out.engine_generation_tok_s)
    _ttft_split(out, va, vb, records, a, b)
    return out


def _mean_ms(va: dict[str, float], vb: dict[str, float], name: str) -> float | None:
    """A histogram's mean over the window in ms: increase of <name>_seconds_sum / increase of its _count."""
    s, n = f"{name}_seconds_sum", f"{name}_seconds_count"
    if not all(k in v for k in (s, n) for v in (va, vb)) or vb[n] - va[n] <= 0:
        return None
    return 1000.0 * (vb[s] - va[s]) / (vb[n] - va[n])


def _ttft_split(out: EngineCounters, va: dict[str, float], vb: dict[str, float], records: Sequence[RequestRecord],
                a: float, b: float) -> None:
    """The engine's own TTFT, queue and prefill means over the window (a, b], and the client's mean TTFT of the
    requests whose first token reached it in that window (the population the engine's TTFT histogram observed)."""
    out.engine_mean_ttft_ms = _mean_ms(va, vb, "time_to_first_token")
    if out.engine_mean_ttft_ms is None:
        return
    out.engine_mean_queue_ms = _mean_ms(va, vb, "request_queue_time")
    out.engine_mean_prefill_ms = _mean_ms(va, vb, "request_prefill_time")
    firsts = [r.ttft_ms for r in records
              if r.success and r.ttft_ms is not None and a < r.dispatch_s + r.ttft_ms / 1000.0 <= b]
    out.client_mean_ttft_ms = sum(firsts) / len(firsts) if firsts else None


def reasons(c: EngineCounters | None) -> list[str]:
    """Why a point's client-side figures disagree with the engine's own (empty: they agree, or not compared)."""
    if c is None or c.shortfall_pct is None or c.shortfall_pct <= TOLERANCE_PCT:
        return []
    return [f"the engine generated {c.engine_generation_tok_s:.0f} tok/s over {c.window_s[0]:.1f}-{c.window_s[1]:.1f} s "
            f"of the point and the client received {c.client_tok_s:.0f} ({c.shortfall_pct:.1f}% fewer, tolerance "
            f"{TOLERANCE_PCT:g}%): its client-side figures are the delivery path's, not the engine's"]


def running_note(c: EngineCounters | None) -> str | None:
    """A note when the engine ran fewer requests at once than the client kept in flight, with how many of the
    others its scheduler held; where the rest were is not measured."""
    if c is None or c.mean_running is None or not c.target_in_flight:
        return None
    short = c.target_in_flight - c.mean_running
    if c.mean_running >= RUNNING_SHORT * c.target_in_flight or short < SHORT_REQUESTS:
        return None
    head = (f"the engine ran {c.mean_running:.1f} requests at once on average (its num_requests_running) while the "
            f"client kept {c.target_in_flight} in flight")
    if c.mean_waiting is None:
        return head + f": where the other ~{short:.0f} were is not measured (no num_requests_waiting)"
    rest = max(0.0, short - c.mean_waiting)
    where = ttft_text(c)
    return (head + f": {c.mean_waiting:.1f} waited in its scheduler (num_requests_waiting); the other ~{rest:.1f} were "
            "in neither gauge (its API server, tokenizing, in transit, between a reply and the next send, or a state "
            "of the engine those gauges do not count, such as a prefill batch in progress where the engine sets them "
            "only between batches" + (f"). {where}" if where else ": not measured which)"))


def ttft_text(c: EngineCounters | None) -> str | None:
    """The client's mean TTFT against the engine's own over the window, in words; None where not measured."""
    if c is None or c.engine_mean_ttft_ms is None or c.client_mean_ttft_ms is None:
        return None
    parts = [f"{label} {v:.0f} ms" for label, v in (("queued", c.engine_mean_queue_ms),
                                                   ("prefill", c.engine_mean_prefill_ms)) if v is not None]
    inside = f" ({', '.join(parts)})" if parts else ""
    outside = c.client_mean_ttft_ms - c.engine_mean_ttft_ms
    where = (f"~{outside:.0f} ms a request outside the engine's clock (before its arrival stamp: HTTP handling or "
             "tokenizing; or after its first token: the event's write, transit, the client's read; not split further)"
             if outside >= 0 else
             f"the client's is ~{-outside:.0f} ms shorter, so none lies outside the engine's clock to the precision of "
             "the window's edges (the counters' sample times)")
    return (f"Time to first token over the window: the client's mean {c.client_mean_ttft_ms:.0f} ms, the engine's own "
            f"{c.engine_mean_ttft_ms:.0f} ms{inside}: {where}{_between(c)}")


def _between(c: EngineCounters) -> str:
    """The part of the engine's own TTFT in neither its queue nor its prefill interval, in words ('' where either is
    not measured). vLLM's TTFT runs from the arrival its API server process stamped to that process's handling of
    the first token, its queue and prefill intervals from its engine core's QUEUED, SCHEDULED and first-token
    stamps (vllm/v1/metrics/stats.py, IterationStats), so this part is the hand-off between the two processes,
    either way; on the H100 at c=512 it was ~1.8 s of vLLM's ~3 s (reports/h100-c512). vLLM counts queue and prefill
    as a request finishes and TTFT at its first token, so over a window the two sets of requests differ by one
    request's lifetime: the text says so; on that run the client's mean TTFT of the two sets differed by 18-122 ms."""
    if c.engine_mean_queue_ms is None or c.engine_mean_prefill_ms is None:
        return ""
    rest = c.engine_mean_ttft_ms - c.engine_mean_queue_ms - c.engine_mean_prefill_ms
    sets = ("where an engine counts queue and prefill as requests finish and TTFT at first tokens (vLLM does), a short "
            "window holds different requests in each")
    if rest < 0:  # measured on TurboMind at c=512 (reports/h100-c512-complete): -87 to +1 ms
        return (f"; its queue and prefill together exceed its own TTFT by ~{-rest:.0f} ms, so none of its TTFT lies "
                f"outside them to this precision ({sets})")
    return (f"; ~{rest:.0f} ms of the engine's own is in neither its queue nor its prefill (between its arrival stamp "
            "and its scheduler's queue, or between the first token and the engine's record of it; not split further; "
            f"{sets})")
