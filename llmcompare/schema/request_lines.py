"""The request lines a run directory holds for each measurement: `<engine>.requests.jsonl`, or its `.xz` as
committed under reports/ (both are read when both exist: a merge may leave an appended plain file beside one).

A point's figures are computed from these lines when it is measured; a point whose lines are not on file cannot
be checked or re-analysed (steady state, trust, per-request failures), so a verdict does not use it
(run.PointResult.usable) and merging a device run refuses to produce one (scripts/gpu/merge_run.sh calls
`missing` through `python -m llmcompare.schema.request_lines RUN`).
"""

from __future__ import annotations

import json
import lzma
import re
import sys
from collections import Counter
from pathlib import Path

from llmcompare.schema.codec import record
from llmcompare.schema.files import load_run
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import ServeRun

# every line starts with its tag (serve/measure.py writes {"point", "repeat", "attempt", "label", ...} first);
# the regex spares parsing whole lines of a large file, json is the fallback for any other order
_TAG = re.compile(r'^\{"point": (\d+), "repeat": (\d+), "attempt": (\d+)')

Cell = tuple  # (point index, repeat, attempt); serve-bench/1 lines: ("load", "c=1"), its point's load label


def _lines(path: Path):
    opener = lzma.open if path.suffix == ".xz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            yield from f
    except (OSError, EOFError, lzma.LZMAError):
        return  # unreadable or cut short: what was read counts, the rest is not on file


def _tag(line: str) -> Cell | None:
    m = _TAG.match(line)
    if m:
        return int(m[1]), int(m[2]), int(m[3])
    try:
        d = json.loads(line)
        if isinstance(d["point"], str):  # serve-bench/1: one repeat, the point named by its load label
            return "load", d["point"]
        return int(d["point"]), int(d.get("repeat", 0)), int(d.get("attempt", 1))
    except (ValueError, KeyError, TypeError):
        return None  # a line cut short by a crash


def count(run_dir: str | Path, engine: str) -> Counter[Cell]:
    """Request lines per (point, repeat, attempt) of one engine of a run directory."""
    out: Counter[Cell] = Counter()
    for name in (f"{engine}.requests.jsonl", f"{engine}.requests.jsonl.xz"):
        path = Path(run_dir) / name
        if path.is_file():
            out.update(t for line in _lines(path) if (t := _tag(line)) is not None)
    return out


def records(run_dir: str | Path, engine: str) -> dict[Cell, list[RequestRecord]]:
    """One engine's request records per (point, repeat, attempt), for re-analysis (scripts/steady_rule.py,
    retrust.py, prefix_study.py); a line that is not a whole record (cut short, or a tag alone) is left out."""
    out: dict[Cell, list[RequestRecord]] = {}
    for name in (f"{engine}.requests.jsonl", f"{engine}.requests.jsonl.xz"):
        path = Path(run_dir) / name
        for line in _lines(path) if path.is_file() else ():
            try:
                d = json.loads(line)
                rec = record(RequestRecord, d)
            except (ValueError, KeyError, TypeError):
                continue
            out.setdefault(_tag(line), []).append(rec)
    return out


def pass_records(run_dir: str | Path, engine: str) -> dict[int, list[RequestRecord]]:
    """One engine's profiled passes' request records (<engine>.profile.requests.jsonl, or its .xz), per point
    index (serve/capture.py tags each line with its point); a line that is not a whole record is left out."""
    out: dict[int, list[RequestRecord]] = {}
    for name in (f"{engine}.profile.requests.jsonl", f"{engine}.profile.requests.jsonl.xz"):
        path = Path(run_dir) / name
        for line in _lines(path) if path.is_file() else ():
            try:
                d = json.loads(line)
                out.setdefault(int(d["point"]), []).append(record(RequestRecord, d))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def attach(run: ServeRun) -> ServeRun:
    """Sets every point's requests_on_file from the run's directory (the report's reader calls this)."""
    for name, rec in run.engines.items():
        n = count(run.dir, name)
        for p in rec.points:
            p.requests_on_file = n.get((p.index, p.repeat, p.attempt), 0) or (
                n.get(("load", p.key.load_label), 0) if p.repeat == 0 and p.attempt == 1 else 0)
    return run


def missing(run: ServeRun) -> list[str]:
    """The complete points whose request lines are not on file, named ("vllm c=1 in=128 out=64 repeat 2
    attempt 1"): after attach()."""
    return [f"{name} {p.label} repeat {p.repeat + 1} attempt {p.attempt}"
            for name, rec in run.engines.items() for p in rec.points
            if p.status == "complete" and p.requests_on_file == 0]


def main(argv: list[str] | None = None) -> int:
    """`python -m llmcompare.schema.request_lines RUN`: exit 1 naming the complete points without request lines."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m llmcompare.schema.request_lines RUN_DIR", file=sys.stderr)
        return 2
    run = load_run(args[0])
    if not isinstance(run, ServeRun):
        print(f"{args[0]}: a kernel-bench run (no request lines)", file=sys.stderr)
        return 2
    gone = missing(attach(run))
    if gone:
        print(f"{args[0]}: {len(gone)} complete points have no request lines on file: " + "; ".join(gone[:20])
              + ("; ..." if len(gone) > 20 else ""), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
