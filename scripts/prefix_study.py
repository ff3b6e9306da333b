#!/usr/bin/env python3
"""Does a verdict move with the length of the point? Shorter closed-loop points studied as prefixes of long ones
(issue 26 item 5): for each engine and repeat of a saved serve-bench run, the first k x c requests of a point of
concurrency c (k waves) are exactly what a k-wave point would have sent up to its last send, so the steady-state
rule (analysis/steady.find: MSER-5 warm-up cut, ends at the last send) applied to them gives that shorter point's
steady-state rate. Their whole-point rate is also printed, marked approximate: a prefix's last requests ran under
the load of the waves that followed, not in a drain. Gaps between two engines per prefix length, with the verdict
module's Welch interval across repeats (analysis/verdict.gap). Writes a Markdown table to stdout.

  python scripts/prefix_study.py RUN_DIR CANDIDATE BASELINE [--waves 3 5 10]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmcompare.analysis import steady, verdict
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run


def rates(run_dir: Path, engine: str, point: int, waves: int) -> list[tuple[float | None, float, str]]:
    """Per counted repeat (first attempts): (steady tok/s or None, approximate whole tok/s, why no steady)."""
    run = load_run(run_dir)
    e = run.engines[engine]
    c = next(p.concurrency for p in e.points if p.index == point)
    cells = request_lines.records(run_dir, engine)
    if not cells:
        raise SystemExit(f"{run_dir}: no request file for {engine}")
    out = []
    for (_p, _rep, _a), all_recs in sorted((k, v) for k, v in cells.items() if k[0] == point and k[2] == 1):
        recs = [r for r in all_recs if r.index < waves * c]
        st, why = steady.find(recs, c)
        ok = [r for r in recs if r.success]
        end = max(r.dispatch_s + r.e2el_ms / 1000.0 for r in ok)
        out.append((st.output_throughput if st else None, sum(r.output_tokens for r in ok) / end, why))
    return out


def cell(xs: list[float]) -> str:
    e = verdict.from_values(xs)
    return f"{e.mean:,.0f} [{e.lo:,.0f}, {e.hi:,.0f}]" if len(xs) > 1 else f"{e.mean:,.0f}"


def gap_text(a: list[float], b: list[float]) -> str:
    g = verdict.gap(verdict.from_values(a), verdict.from_values(b))
    return f"{g.text()} {g.word}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("candidate")
    ap.add_argument("baseline")
    ap.add_argument("--point", type=int, default=0)
    ap.add_argument("--waves", type=int, nargs="+", default=[3, 5, 10])
    a = ap.parse_args()
    print(f"| waves | figure | {a.candidate} tok/s [95%] | {a.baseline} tok/s [95%] | gap of {a.candidate} | "
          "repeats without a steady state |")
    print("|---|---|---|---|---|---|")
    for k in a.waves:
        ca, ba = rates(a.run, a.candidate, a.point, k), rates(a.run, a.baseline, a.point, k)
        none = f"{a.candidate} {sum(s is None for s, _, _ in ca)}, {a.baseline} {sum(s is None for s, _, _ in ba)}"
        whys = "; ".join(sorted({w.split(":")[0] for s, _, w in ca + ba if s is None and w}))  # without the counts
        none = f"{none} ({whys})" if whys else none
        cs, bs = [s for s, _, _ in ca if s], [s for s, _, _ in ba if s]
        if cs and bs:
            print(f"| {k} | steady state | {cell(cs)} | {cell(bs)} | {gap_text(cs, bs)} | {none} |")
        else:
            print(f"| {k} | steady state | - | - | - | {none} |")
        cw, bw = [w for _, w, _ in ca], [w for _, w, _ in ba]
        print(f"| {k} | whole prefix (approximate) | {cell(cw)} | {cell(bw)} | {gap_text(cw, bw)} | |")


if __name__ == "__main__":
    main()
