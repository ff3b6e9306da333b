#!/usr/bin/env python3
"""Re-analyses the kept traces of saved serve-bench runs' profiled passes (llmcompare/profile/timeline.py with the current
kernel classes, profile/kernel_class.py), each window's prefill share from the pass's saved requests, and each
trace's process role from its title (the engine kind's process_roles, engines/registry.py), and rewrites run.json
(atomically); for runs captured before a change of any of them.
A run's README says when it was applied. Nothing else in run.json changes.

  python scripts/reprofile.py RUN_DIR [RUN_DIR...] [--anchor SUBSTRING]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmcompare.engines import registry
from llmcompare.profile.timeline import analyze
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run, write_json
from llmcompare.serve.capture import role, set_window_phase


def reprofile(run_dir: str, anchor: str | None) -> None:
    run = load_run(run_dir)
    for name, e in run.engines.items():
        passes = request_lines.pass_records(run.dir, name)
        for prof in e.profiles:
            recs = passes.get(prof.index, [])
            if len(recs) == prof.requests and prof.window_s:  # one pass of the point on file: its window's phase
                set_window_phase(prof, recs)
                print(f"{name} {prof.label}: {prof.window_prefill_share} of the requests in flight mid-window "
                      "were before their first token")
            for t in prof.traces:
                if (r := role(t.title, registry.kind(e.kind).process_roles)) != t.role:
                    print(f"{name} {prof.label} pid {t.pid}: role {t.role} -> {r} ({t.title[:40]})")
                    t.role = r
                f = Path(run.dir) / t.file if t.file else None
                if not f or not f.exists():
                    print(f"{name} {prof.label} pid {t.pid}: no trace file kept")
                    continue
                before = t.steps.steps if t.steps else None
                t.steps = analyze(f, anchor)
                print(f"{name} {prof.label} pid {t.pid}: {before} -> {t.steps.steps} steps, anchor {t.steps.anchor}, "
                      f"step median {t.steps.step_ms_median} ms")
    write_json(Path(run.dir) / "run.json", run)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--anchor", help="a substring of the kernel that marks steps (profile.anchor)")
    a = ap.parse_args()
    for d in a.runs:
        reprofile(d, a.anchor)
