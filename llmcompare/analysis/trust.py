"""Whether a load point can be believed, decided from what it recorded.

A point is untrusted when
  - any successful request of 4 or more tokens arrived in a single read of the socket (the client or the
    server was starved: its TTFT equals its E2EL and its TPOT reads 0, so its timestamps say nothing), or
  - the client's event loop woke up late by more than LAG_ABS_MS and LAG_SHARE of the point's median TPOT
    (p99 of 10 ms sleeps, above the idle floor measured before the engine's first point): every timestamp
    the client took may carry that delay, or
  - with ignore_eos, a request produced another number of tokens than it asked for (the engine shortened it,
    e.g. at its context limit, or ran long): the work differs from the other engines', or
  - the client received fewer tokens than the engine's own counters say it generated over the same window, by
    more than analysis/agreement.TOLERANCE_PCT (the reasons come from agreement.reasons).
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
    t.single_read_requests = len(single)
    if single:
        t.reasons.append(f"{len(single)} of {len(ok)} streams arrived in a single read (TTFT = E2EL): the client "
                         "or the server was starved of CPU, so their timestamps hold no timing")
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


def worth_retry(t: Trust) -> bool:
    """Timing problems may pass; a wrong length or the engine's counters will not."""
    return not t.trusted and t.wrong_length_requests == 0 and not t.counter_disagreement
