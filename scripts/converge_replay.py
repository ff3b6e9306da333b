#!/usr/bin/env python3
"""Replays load.converge's live rule (llmcompare/serve/converge.py) on a saved serve-bench run's request files: for
every point that sent under load.converge (first attempts), at each check time (every CHECK_S s from the point's
start, up to its last send) the rule is fed the requests that had been sent and had finished by then, exactly as
the live rule is, and the table gives what that check read: the seconds of series (up to the oldest request then
in flight), the batch-means relative half-width (or none), and whether it called the rate converged. Beside it,
the point's recorded steady state over its whole window (run.json), which is the point's figure.

What it tells apart: a point that stopped on a live check that read only a short head of the series (the oldest
request in flight started early: long ShareGPT-like outputs) from one whose live and whole-window readings agree.
It replays from the client's records, so a check's timing is the CHECK_S grid, not the live check's exact wake-up;
a failed request without an E2EL has no known end and stays in flight in the replay (the live rule saw it end);
and it applies today's rule: since 2026-12-06 a check must have read MIN_SERIES_S (30 s) of series to stop a point,
so a point that stopped as "converged" under the older rule can show "never" here.

  python scripts/converge_replay.py RUN_DIR [ENGINE ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run
from llmcompare.serve import converge


def replay(recs, target: float, until_s: float) -> list[tuple[float, float | None, float | None, bool]]:
    """[(check time s, series s read, relative half-width or None, converged)] at CHECK_S, 2·CHECK_S, ... until_s."""
    out, t = [], converge.CHECK_S
    while t <= until_s + 1e-9:
        conv = converge.Converger(target, float("inf"))
        for r in recs:
            if r.dispatch_s <= t:
                conv.started(r.index, r.scheduled_s)
            if r.e2el_ms is not None and r.dispatch_s + r.e2el_ms / 1000.0 <= t:
                conv.finished(r)
        ok = conv.converged(t)
        out.append((t, conv.live_series_s, conv.live_rel_halfwidth, ok))
        t += converge.CHECK_S
    return out


def rows(run_dir: Path, engines: list[str]) -> list[list[str]]:
    run = load_run(run_dir)
    cv = (run.scenario.get("load") or {}).get("converge")  # the scenario as run (a dict in run.json)
    if not cv:
        return []
    out = []
    for name, e in run.engines.items():
        if engines and name not in engines:
            continue
        cells = request_lines.records(run_dir, name)
        for p in e.points:
            recs = cells.get((p.index, p.repeat, p.attempt))
            if p.attempt != 1 or not recs or not p.converge_stop:
                continue
            last_send = max(r.dispatch_s for r in recs)
            checks = replay(recs, cv["rel_halfwidth"], last_send + converge.CHECK_S)
            first = next((c for c in checks if c[3]), None)
            whole = (f"±{100 * p.steady.rel_halfwidth:.1f}% ({p.steady.start_s:.0f}-{p.steady.end_s:.0f} s)"
                     if p.steady and p.steady.rel_halfwidth is not None else (p.no_steady or "none"))
            said = "; ".join(f"{t:.0f} s: {s:.0f} s read, " + (f"±{100 * h:.1f}%" if h is not None else "none")
                             for t, s, h, _ in checks[-3:])
            out.append([name, p.label, str(p.repeat + 1), p.converge_stop, f"{last_send:.1f}",
                        f"{first[0]:.0f} s ({first[1]:.0f} s read, ±{100 * first[2]:.1f}%)" if first else "never",
                        said, whole])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("engines", nargs="*")
    args = ap.parse_args(argv)
    head = ["engine", "point", "repeat", "load.converge", "last send s", "first check that converged",
            "the last three checks", "recorded steady state (whole window)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows(args.run, args.engines):
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
