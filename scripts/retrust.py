#!/usr/bin/env python3
"""Re-judges the single-read rule of saved serve-bench runs with the current definition (analysis/trust.py): a
stream the server sent as one event carrying every token was timed correctly and no longer makes its point
untrusted; several events read at once still do. Only that reason changes: every other reason a point has (loop
lag, wrong lengths, the engine's counters, failures) is kept, and a point leaves 'untrusted' only when no reason
is left. Reads <engine>.requests.jsonl and .xz (schema/request_lines.records); rewrites run.json atomically, and with --dry-run only prints.

  python scripts/retrust.py [--dry-run] RUN_DIR [RUN_DIR...]

Each changed point gets a warning saying the rule was re-applied and when.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from llmcompare.analysis import trust
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run, write_json
from llmcompare.schema.request import RequestRecord

OLD_PREFIX = "streams arrived in a single read (TTFT = E2EL): the client or the server was starved"


def rejudge(p, recs: list[RequestRecord], today: str) -> str | None:
    """Applies the current single-read rule to point p in place; a line saying what changed, or None."""
    new = trust.assess(recs, None, {}, None, False)  # only its single-read counts are used
    if p.trust.single_read_requests == 0 or (p.trust.server_merged_requests == new.server_merged_requests):
        return None
    old_status, late = p.status, new.single_read_requests - new.server_merged_requests
    kept = [r for r in p.trust.reasons if OLD_PREFIX not in r and "single read as several events" not in r]
    kept += [r for r in new.reasons if "single read" in r]
    p.trust.reasons, p.trust.trusted = kept, not kept
    p.trust.single_read_requests, p.trust.server_merged_requests = new.single_read_requests, new.server_merged_requests
    if p.status == "untrusted" and not kept:
        p.status = "complete"
    if note := trust.merged_note(p.trust, recs):
        p.warnings.append(note)
    p.warnings.append(f"trust re-judged on {today} by scripts/retrust.py (one event carrying every token is timed "
                      f"correctly): status {old_status} -> {p.status}")
    return (f"{p.label} #{p.repeat + 1} attempt {p.attempt}: {new.single_read_requests} single-read streams, "
            f"{new.server_merged_requests} sent as one event, {late} read late; {old_status} -> {p.status}")


def retrust(run_dir: Path, dry_run: bool) -> None:
    run, today = load_run(run_dir), dt.date.today().isoformat()
    changed = False
    for name, e in run.engines.items():
        cells = request_lines.records(run_dir, name)
        for p in e.points:
            recs = cells.get((p.index, p.repeat, p.attempt), [])
            if recs and (line := rejudge(p, recs, today)):
                changed = True
                print(f"{run_dir.name} {name} {line}")
    if changed and not dry_run:
        write_json(run_dir / "run.json", run)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("runs", nargs="+", type=Path)
    a = ap.parse_args()
    for d in a.runs:
        retrust(d, a.dry_run)
