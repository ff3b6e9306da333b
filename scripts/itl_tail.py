#!/usr/bin/env python3
"""Where an engine's inter-token gaps sit, from the client's own records: the gaps between a request's consecutive
chunks (ms), over the requests sent between --from and --to seconds into each point (the plateau of a closed loop),
as percentiles and as the share above --over ms with those gaps' mean. With a decode step of d ms and p passes
of another kind (SGLang's prefill passes) per decode pass, each inserted once between two decode passes, about
p of the gaps hold one, and they average d plus its length. reports/h100-three-engines-c64/README.md used it.

  python scripts/itl_tail.py RUN_DIR ENGINE [--over 10] [--from 10] [--to 45]
"""

from __future__ import annotations

import argparse
import statistics

from llmcompare.schema.request_lines import records


def gaps(run_dir: str, engine: str, start_s: float, end_s: float) -> list[float]:
    """Inter-chunk gaps (ms) of the successful requests dispatched in [start_s, end_s] of their point's sending."""
    out: list[float] = []
    for recs in records(run_dir, engine).values():
        for r in recs:
            if r.success and start_s <= r.dispatch_s <= end_s and r.chunk_ms:
                out += [b - a for a, b in zip(r.chunk_ms, r.chunk_ms[1:], strict=False)]
    return out


def summary(g: list[float], over_ms: float) -> dict:
    g = sorted(g)
    if len(g) < 2:
        raise SystemExit("fewer than two inter-chunk gaps in that span")
    q = statistics.quantiles(g, n=1000)
    tail = [x for x in g if x > over_ms]
    return {"gaps": len(g), "mean_ms": statistics.fmean(g), "p50_ms": q[499], "p90_ms": q[899], "p99_ms": q[989],
            "over_share": len(tail) / len(g), "over_mean_ms": statistics.fmean(tail) if tail else None}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("engine")
    ap.add_argument("--over", type=float, default=10.0, help="ms: the tail's threshold")
    ap.add_argument("--from", dest="start", type=float, default=10.0, help="s into the point")
    ap.add_argument("--to", dest="end", type=float, default=45.0, help="s into the point")
    a = ap.parse_args(argv)
    s = summary(gaps(a.run_dir, a.engine, a.start, a.end), a.over)
    tail = f", {s['over_mean_ms']:.1f} ms on average" if s["over_mean_ms"] is not None else ""
    print(f"{a.engine}: {s['gaps']} gaps; mean {s['mean_ms']:.2f}, p50 {s['p50_ms']:.2f}, p90 {s['p90_ms']:.2f}, "
          f"p99 {s['p99_ms']:.2f} ms; {100 * s['over_share']:.1f}% over {a.over:g} ms{tail}")


if __name__ == "__main__":
    main()
