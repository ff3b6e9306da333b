#!/usr/bin/env python3
"""TTFT against the requests in flight when each request was sent, from a saved serve-bench run (one engine).
A request's "in flight" count is how many of the same measured run's requests had been sent before it and had
not yet received their last token (the client's own records: dispatch_s + e2el_ms); requests without an E2EL
(failed before their end) are left out of both sides. Per measured run, the median and p90 TTFT (ms) of the
requests whose count falls in each bin of --bin requests.

What it tells apart: a cap on requests in flight ahead of the TTFT clock (TTFT flat up to the cap, then rising
with the excess) from a server whose TTFT grows with load everywhere (rising well below any cap). What it does
not: where inside the server the time went (the engine's own TTFT histogram, run.json engine_counters, says how
much of it lies inside the engine's clock).

  python scripts/ttft_by_inflight.py RUN_DIR ENGINE [--bin 16] [--from 0]
"""

from __future__ import annotations

import argparse
import bisect
import statistics
from pathlib import Path

from llmcompare.schema import request_lines


def in_flight(recs) -> list[tuple[int, float]]:
    """[(requests in flight when it was sent, its TTFT ms)] for each request with a TTFT and an E2EL."""
    done = [r for r in recs if r.ttft_ms is not None and r.e2el_ms is not None]
    starts = sorted(r.dispatch_s for r in done)
    ends = sorted(r.dispatch_s + r.e2el_ms / 1000.0 for r in done)
    return [(bisect.bisect_left(starts, r.dispatch_s) - bisect.bisect_right(ends, r.dispatch_s), r.ttft_ms)
            for r in done]


def bins(pairs: list[tuple[int, float]], width: int) -> dict[int, tuple[int, float, float]]:
    """Bin start -> (requests, median TTFT ms, p90 TTFT ms)."""
    by: dict[int, list[float]] = {}
    for n, ttft in pairs:
        by.setdefault(n // width * width, []).append(ttft)
    out = {}
    for b, v in sorted(by.items()):
        v.sort()
        out[b] = (len(v), statistics.median(v), v[min(len(v) - 1, int(0.9 * len(v)))])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("engine")
    ap.add_argument("--bin", type=int, default=16, help="requests per bin (default 16)")
    ap.add_argument("--from", dest="start", type=int, default=0, help="leave out bins below this count")
    a = ap.parse_args(argv)
    if a.bin < 1:
        ap.error(f"--bin: {a.bin} is not valid; give a positive number of requests")
    print("| point | repeat | attempt | in flight at send | requests | median TTFT ms | p90 TTFT ms |")
    print("|---|---|---|---|---|---|---|")
    for k, recs in sorted(request_lines.records(a.run, a.engine).items()):
        for b, (n, med, p90) in bins(in_flight(recs), a.bin).items():
            if b >= a.start:
                print(f"| {k[0]} | {k[1] + 1} | {k[2]} | {b}-{b + a.bin - 1} | {n} | {med:,.0f} | {p90:,.0f} |")


if __name__ == "__main__":
    main()
