#!/usr/bin/env python3
"""Did an engine keep up with an open-loop arrival rate? For every open-loop point of a saved serve-bench run
(first attempts), over the second half of the sending window (from halfway between the first and the last send
to the last send): requests that arrived (were sent) per second, requests that completed per second, their
ratio, and the requests in flight at both ends of that half. An engine that keeps up completes about as many as
arrive and its in-flight count stays level; one past its capacity completes fewer and the count climbs by the
difference. The first half is left out: it holds the ramp from an empty server, when in-flight requests pile up
whatever the engine. Also the drain: from the last send to the last reply (s). Writes a Markdown table. The
figures are llmcompare/analysis/keepup.py's, which the report's capacity table also shows.

  python scripts/open_loop_keepup.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from llmcompare.analysis.keepup import keepup
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run


def rows(run_dir: Path) -> list[list[str]]:
    run = load_run(run_dir)
    out = []
    for name, e in run.engines.items():
        rates = {p.index: p.request_rate for p in e.points}
        cells = request_lines.records(run_dir, name)
        for (point, rep, attempt), recs in sorted(cells.items()):
            rate = rates.get(point)
            if attempt != 1 or rate is None or not math.isfinite(rate) or len(recs) < 4:
                continue
            k = keepup(recs)
            if k is None:
                continue
            out.append([run_dir.name, name, f"{rate:g}", str(rep + 1), f"{k.arrivals_per_s:.1f}",
                        f"{k.completions_per_s:.1f}", f"{k.ratio:.2f}",
                        f"{k.in_flight_start} -> {k.in_flight_end}", f"{k.drain_s:.1f}"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    head = ["run", "engine", "rate req/s", "repeat", "arrived /s", "completed /s", "completed / arrived",
            "in flight (start -> end of the half)", "drain s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for d in args.runs:
        for r in rows(d):
            print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
