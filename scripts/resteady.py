#!/usr/bin/env python3
"""Recomputes the steady-state window (llmcompare/analysis/steady.py) of every point of saved serve-bench runs from their
<engine>.requests.jsonl (or .jsonl.xz), with the current definition, and rewrites run.json (atomically). For runs
measured before a change of that definition; a run's README says when it was applied. Nothing else in run.json
changes. With --half only the length check's first-half figures (PointResult.half_steady_tok_s, half_no_steady:
files before session 20 lack them) are added, and the steady state is left as it is. With --waves only the
wave-phase check's figure (PointResult.waves_steady_tok_s: the point's steady window as on file, narrowed to its
whole waves; fixed lengths only; files before session 25 lack it) is added. With --drain only the drain check's
figure (PointResult.before_drain_tok_s: the whole point with its drain left out; files before session 31 lack it) is
added. A point without request lines (or without metrics) is
left as it is in every mode.

  python scripts/resteady.py [--half | --waves | --drain] RUN_DIR [RUN_DIR...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmcompare.analysis import steady, traffic
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run, write_json


def resteady(run_dir: str, half_only: bool = False, waves_only: bool = False, drain_only: bool = False) -> None:
    run = load_run(run_dir)
    only = half_only or waves_only or drain_only
    for name, e in run.engines.items():
        cells = request_lines.records(Path(run.dir), name)
        for p in e.points:
            recs = cells.get((p.index, p.repeat, p.attempt), [])
            if not recs or not p.metrics:
                continue
            what = f"{name} {p.label} #{p.repeat + 1} attempt {p.attempt}"
            if not only or drain_only:
                p.before_drain_tok_s = steady.before_drain(recs, p.concurrency)
                print(f"{what}: before the drain {p.before_drain_tok_s}")
            if not only or half_only:
                p.half_steady_tok_s, p.half_no_steady = steady.first_half(recs, p.concurrency)
                print(f"{what}: first half {p.half_steady_tok_s or p.half_no_steady}")
            if not only:
                before = p.steady.output_throughput if p.steady else None
                p.steady, why = steady.find(recs, p.concurrency)
                p.no_steady = why or None
                after = p.steady.output_throughput if p.steady else None
                print(f"{what}: steady {before} -> {after}")
            if (not only or waves_only) and traffic.fixed_lengths(run.scenario.get("workload", {})):  # requests in waves
                p.waves_steady_tok_s = steady.waves_rate(recs, p.concurrency, p.steady)
                print(f"{what}: over whole waves {p.waves_steady_tok_s}")
    write_json(Path(run.dir) / "run.json", run)


if __name__ == "__main__":
    args = sys.argv[1:]
    flags = {"--half", "--waves", "--drain"}
    if sum(f in args for f in flags) > 1:
        sys.exit("resteady.py: --half, --waves and --drain each add one figure; give one of them, or none for all")
    for d in (a for a in args if a not in flags):
        resteady(d, "--half" in args, "--waves" in args, "--drain" in args)
