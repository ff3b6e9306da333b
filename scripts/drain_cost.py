#!/usr/bin/env python3
"""What a point's drain costs its whole-point figure, from the client's own records: per repeat, the sending time
(to the last dispatch), the drain (from it to the last completion), the share of output tokens that arrived in the
drain, the rate before and during the drain, and the median inter-token gap over the drain's last --tail seconds
(its smallest batches). A whole point is tokens / (sending + drain); an engine whose small-batch step is slow drains
longer. reports/h100-three-engines-c64/README.md used it.

  python scripts/drain_cost.py RUN_DIR ENGINE [--tail 5]
"""

from __future__ import annotations

import argparse
import statistics

from llmcompare.analysis.keepup import keepup
from llmcompare.schema.request_lines import records


def drains(run_dir: str, engine: str, tail_s: float = 5.0) -> list[dict]:
    """One dict per (point, repeat, attempt) with successful requests, in file order; times in s, gaps in ms."""
    out = []
    for cell, recs in records(run_dir, engine).items():
        ok = [r for r in recs if r.success and r.chunk_ms]
        k = keepup(recs)  # its drain_s: last send to last reply, as the report's keep-up figures define it
        if not ok or k is None:
            continue
        send = max(r.dispatch_s for r in recs)
        end = send + k.drain_s
        tokens = sum(len(r.chunk_ms) for r in ok)  # chunks: ~1 token each here (the report's tokens/chunk)
        after = sum(1 for r in ok for c in r.chunk_ms if r.dispatch_s + c / 1000.0 > send)
        last = [b - a for r in ok for a, b in zip(r.chunk_ms, r.chunk_ms[1:], strict=False)
                if r.dispatch_s + a / 1000.0 > end - tail_s]
        out.append({"cell": cell, "send_s": send, "drain_s": end - send, "drain_share": after / tokens,
                    "chunks_per_s_before": (tokens - after) / send if send else None,
                    "chunks_per_s_drain": after / (end - send) if end > send else None,
                    "tail_gap_ms": statistics.median(last) if last else None})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("engine")
    ap.add_argument("--tail", type=float, default=5.0, help="s: the drain's last part, for its median gap")
    a = ap.parse_args(argv)
    for d in drains(a.run_dir, a.engine, a.tail):
        gap = f"{d['tail_gap_ms']:.2f}" if d["tail_gap_ms"] is not None else "–"
        print(f"{a.engine} {d['cell']}: sending {d['send_s']:.1f} s, drain {d['drain_s']:.1f} s "
              f"({100 * d['drain_s'] / (d['send_s'] + d['drain_s']):.0f}% of the point), "
              f"{100 * d['drain_share']:.1f}% of the chunks; chunks/s {d['chunks_per_s_before']:.0f} before, "
              f"{d['chunks_per_s_drain']:.0f} in the drain; median gap in its last {a.tail:g} s {gap} ms")


if __name__ == "__main__":
    main()
