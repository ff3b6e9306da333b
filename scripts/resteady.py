#!/usr/bin/env python3
"""Recomputes the steady-state window (llmcompare/analysis/steady.py) of every point of saved serve-bench runs from their
<engine>.requests.jsonl, with the current definition, and rewrites run.json (atomically). For runs measured before
a change of that definition; a run's README says when it was applied. Nothing else in run.json changes.

  python scripts/resteady.py RUN_DIR [RUN_DIR...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmcompare.analysis import steady
from llmcompare.schema.codec import record
from llmcompare.schema.files import load_run, read_jsonl, write_json
from llmcompare.schema.request import RequestRecord


def resteady(run_dir: str) -> None:
    run = load_run(run_dir)
    for name, e in run.engines.items():
        f = Path(run.dir) / f"{name}.requests.jsonl"
        lines = read_jsonl(f) if f.exists() else []
        for p in e.points:
            recs = [record(RequestRecord, r) for r in lines
                    if (r["point"], r["repeat"], r["attempt"]) == (p.index, p.repeat, p.attempt)]
            before = p.steady.output_throughput if p.steady else None
            p.steady, why = steady.find(recs, p.concurrency) if recs and p.metrics else (None, "")
            p.no_steady = why or None
            after = p.steady.output_throughput if p.steady else None
            print(f"{name} {p.label} #{p.repeat + 1} attempt {p.attempt}: steady {before} -> {after}")
    write_json(Path(run.dir) / "run.json", run)


if __name__ == "__main__":
    for d in sys.argv[1:]:
        resteady(d)
