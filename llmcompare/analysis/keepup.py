"""Did an engine keep up with an open-loop arrival rate? (issue 26 item 4: a capacity probe that passes its SLOs
while a backlog grows passes only for its length; reports/h200-capacity: TurboMind at 47.57 req/s.)

Over the second half of the sending window (from halfway between the first and the last send to the last send):
requests that arrived (were sent) per second, requests that completed per second, their ratio, and the requests
in flight at both ends of that half. An engine that keeps up completes about as many as arrive and its in-flight
count stays level; one past its capacity completes fewer and the count climbs by the difference. The first half
is left out: it holds the ramp from an empty server, when requests in flight pile up whatever the engine. Poisson
arrivals alone move the count by about ±sqrt(arrivals in the half) (for 1,000 arrivals ±32), so a rise of that
size is not a backlog. Also the drain: from the last send to the last reply (s).

These figures describe a probe; they are not part of its pass/fail rule (analysis/capacity.py).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from llmcompare.schema.request import RequestRecord


@dataclass(frozen=True)
class KeepUp:
    arrivals_per_s: float  # requests sent per second over the second half of the sending window
    completions_per_s: float  # successful requests that finished in that half, per second
    ratio: float  # completions / arrivals over the half (nan without arrivals)
    in_flight_start: int  # requests sent and not finished at the half's start
    in_flight_end: int  # ... at its end (the last send)
    drain_s: float  # last send to last reply, s (nan without a successful request)

    @property
    def rise(self) -> int:
        return self.in_flight_end - self.in_flight_start


def keepup(recs: list[RequestRecord]) -> KeepUp | None:
    """recs: one measured run's records (dispatch_s, e2el_ms, success). None with fewer than 4 or one send time."""
    sends = sorted(r.dispatch_s for r in recs)
    if len(sends) < 4 or sends[-1] <= sends[0]:
        return None
    ends = sorted(r.dispatch_s + r.e2el_ms / 1000.0 for r in recs if r.success and r.e2el_ms is not None)
    a, b = (sends[0] + sends[-1]) / 2, sends[-1]
    arrived = bisect.bisect_right(sends, b) - bisect.bisect_left(sends, a)
    done = bisect.bisect_right(ends, b) - bisect.bisect_left(ends, a)

    def in_flight(t: float) -> int:
        return bisect.bisect_right(sends, t) - bisect.bisect_right(ends, t)

    return KeepUp(arrived / (b - a), done / (b - a), done / arrived if arrived else math.nan, in_flight(a),
                  in_flight(b), (ends[-1] - b) if ends else math.nan)


def text(k: KeepUp | None) -> str:
    """'0.98 (212 -> 240)': completed / arrived (in flight at the half's start -> end); '–' without one."""
    return "–" if k is None else f"{k.ratio:.2f} ({k.in_flight_start} -> {k.in_flight_end})"
