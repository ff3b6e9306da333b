"""Whether a load point can be believed, decided from what it recorded.

A point is untrusted when
  - any successful request of 4 or more tokens arrived in a single read of the socket as several events (the
    reader was late: the events queued in the socket and were read at once, so its TTFT equals its E2EL and its
    timestamps say nothing), or
  - the client's event loop woke up late by more than LAG_ABS_MS and LAG_SHARE of the point's median TPOT
    (p99 of 10 ms sleeps, above the idle floor measured before the engine's first point): every timestamp
    the client took may carry that delay, or
  - with ignore_eos, a request produced another number of tokens than it asked for (the engine shortened it,
    e.g. at its context limit, or ran long): the work differs from the other engines', or
  - the client received fewer tokens than the engine's own counters say it generated over the same window, by
    more than analysis/agreement.TOLERANCE_PCT (the reasons come from agreement.reasons).
A stream that came as one event carrying all its tokens is not a timing fault and leaves the point trusted: the
client parses every server-sent event on its own (serve/client.StreamRecorder), so one event was one write by the
server, which merged the tokens before sending them. vLLM does this when its API server's task for a stream runs
behind the engine: RequestOutputCollector.put (vllm/v1/engine/output_processor.py) adds each new delta to the one
not yet taken. The client timed that event correctly, and its TTFT = E2EL is what a user of the server saw. These
streams are counted (Trust.server_merged_requests) and the point says so (merged_note). Seen on the H200: 1 of 2,560
vLLM streams at c=256 with 512/256 tokens, 61 of 2,048 with ShareGPT-like lengths (reports/h200-converge).
Failed requests are counted here (Trust.failed_requests) and make the point's status "failed", not
"complete", unless load.allow_failures (serve/measure.py): a complete point never hides failures.
The idle floor is the lower of the engine's and the point's own (serve/measure._floor), each capped
(loadgen.FLOOR_CAP_MS). Timing reasons (loop lag, single reads) are worth measuring again, with more client
processes; a wrong length, failed requests and a shortfall against the engine's counters are not: they are the
engine's or its delivery path's. Verdicts use each repeat's first attempt only (analysis/verdict.counted).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Metrics, Trust

SINGLE_READ_MIN_TOKENS = 4


LAG_ABS_MS = 1.0  # the loop's timers wake in whole milliseconds: below this, lag is noise


LAG_SHARE = 0.25  # of the median TPOT


def assess(records: Sequence[RequestRecord], metrics: Metrics | None, client: dict, idle_lag_ms: float | None,
           ignore_eos: bool, counter_reasons: Sequence[str] = ()) -> Trust:
    t = Trust()
    ok = [r for r in records if r.success and not r.cut_off]
    single = [r for r in ok if r.reads == 1 and (r.output_tokens or 0) >= SINGLE_READ_MIN_TOKENS]
    late = [r for r in single if len(r.token_chunk_ms) > 1]  # several events read at once: the reader was late
    t.single_read_requests, t.server_merged_requests = len(single), len(single) - len(late)
    if late:
        t.reasons.append(f"{len(late)} of {len(ok)} streams arrived in a single read as several events (TTFT = "
                         "E2EL): the client was late to read them, so their timestamps hold no timing")
    lag = client.get("loop_lag_p99_ms")
    if lag is not None and ok:  # without a successful request there is no timing to distrust
        t.loop_lag_excess_ms = max(0.0, lag - (idle_lag_ms or 0.0))
        tpot = metrics.stat("median_tpot_ms") if metrics else None
        limit = max(LAG_ABS_MS, LAG_SHARE * tpot) if tpot else LAG_ABS_MS
        if t.loop_lag_excess_ms > limit:
            t.reasons.append(f"the client's event loop woke up {t.loop_lag_excess_ms:.1f} ms late (p99, above its "
                             f"idle floor), more than {limit:.1f} ms ({LAG_SHARE:.0%} of the median TPOT, at least "
                             f"{LAG_ABS_MS:g} ms): the client was too busy to time this point")
    if ignore_eos:
        wrong = [r for r in ok if r.output_tokens is not None and r.output_tokens != r.output_len]
        t.wrong_length_requests = len(wrong)
        if wrong:
            r = wrong[0]
            t.reasons.append(f"{len(wrong)} of {len(ok)} requests produced another number of tokens than asked "
                             f"(e.g. {r.output_tokens} of {r.output_len}): the engine shortened or lengthened them")
    t.failed_requests = sum(not r.success and not r.cut_off for r in records)
    t.counter_disagreement = bool(counter_reasons)
    t.reasons += list(counter_reasons)
    t.trusted = not t.reasons
    return t


def merged_note(t: Trust, records: Sequence[RequestRecord]) -> str | None:
    """The point's warning about streams the server sent as one event (see above), or None."""
    if not t.server_merged_requests:
        return None
    ok = sum(r.success and not r.cut_off for r in records)
    return (f"{t.server_merged_requests} of {ok} streams came as one event carrying all their tokens (TTFT = E2EL): "
            "the server merged them before sending (its delivery ran behind its generation); timed correctly, "
            "kept in the figures")


BUSY_CPU_SHARE = 0.9  # a client process that used this much of a core over a point had little to spare


def busy_note(client: dict, workers: Sequence[dict]) -> str | None:
    """The point's note naming the client processes that kept a core busy over it (run.json `client.cpu_share`,
    `client_workers[].cpu_share`), or None. Not a trust decision (a busy process that kept its timers is still
    on time: the loop lag decides); it says which process to look at when the client is suspected."""
    busy = [f"worker {w.get('worker')} {w['cpu_share']:.2f}" for w in workers
            if (w.get("cpu_share") or 0) >= BUSY_CPU_SHARE]
    share = client.get("cpu_share")
    if share is not None and share >= BUSY_CPU_SHARE:
        who = "the workers' parent" if workers else "the client"
        busy.insert(0, f"{who} {share:.2f}")
    if not busy:
        return None
    return (f"client processes busy over the point (share of one core): {', '.join(busy)}; "
            "its loop lag, not this, decides trust")


def worth_retry(t: Trust) -> bool:
    """Timing problems may pass; a wrong length or the engine's counters will not."""
    return not t.trusted and t.wrong_length_requests == 0 and not t.counter_disagreement
