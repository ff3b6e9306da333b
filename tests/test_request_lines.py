"""A measurement holds its request lines (schema/request_lines.py): counted per (point, repeat, attempt) from
requests.jsonl or its .xz, a complete point without them enters no verdict, and merging a device run refuses to
produce one (scripts/gpu/merge_run.sh)."""

import json
import lzma
import subprocess
import sys
from pathlib import Path

from llmcompare.analysis import verdict
from llmcompare.schema import request_lines
from llmcompare.schema.files import RunFile, load_run
from llmcompare.schema.machine import Machine
from llmcompare.schema.run import EngineRecord, Metrics, PointResult, ServeRun, now

ROOT = Path(__file__).resolve().parents[1]


def point(i, repeat, attempt=1):
    return PointResult(index=i, repeat=repeat, attempt=attempt, concurrency=[1, 8][i], status="complete",
                       metrics=Metrics(completed=2, output_throughput=100.0 + repeat, stats={}))


def line(i, repeat, attempt=1):
    return json.dumps({"point": i, "repeat": repeat, "attempt": attempt, "label": "x", "success": True}) + "\n"


def make_run(d: Path, cells, names=("a",)) -> Path:
    run = ServeRun(created_at=now(), status="complete")
    for name in names:
        run.engines[name] = EngineRecord(name=name, kind="vllm", status="complete", machine=Machine(key="boot 1"),
                                         points=[point(*c) for c in cells])
    d.mkdir(parents=True, exist_ok=True)
    RunFile(d, run)
    return d


def test_lines_are_counted_per_attempt_from_plain_and_xz_files(tmp_path):
    d = make_run(tmp_path / "r", [(0, 0), (0, 1), (1, 0, 2)])
    (d / "a.requests.jsonl").write_text(line(0, 0) * 2 + line(1, 0, 1) + '{"point": 1, "repe')  # cut short
    with lzma.open(d / "a.requests.jsonl.xz", "wt") as f:
        f.write(line(1, 0, 2) * 3)
        f.write(json.dumps({"label": "x", "attempt": 1, "repeat": 1, "point": 0}) + "\n")  # another key order
    n = request_lines.count(d, "a")
    assert n == {(0, 0, 1): 2, (1, 0, 1): 1, (1, 0, 2): 3, (0, 1, 1): 1}
    run = request_lines.attach(load_run(d))
    assert [p.requests_on_file for p in run.engines["a"].points] == [2, 1, 3]
    assert request_lines.missing(run) == []


def test_a_point_without_its_lines_enters_no_verdict_and_is_named(tmp_path):
    d = make_run(tmp_path / "r", [(0, 0), (0, 1), (0, 2)])
    (d / "a.requests.jsonl").write_text(line(0, 0) + line(0, 2))
    run = request_lines.attach(load_run(d))
    p = run.engines["a"].points[1]
    assert p.requests_on_file == 0 and not p.usable
    assert verdict.why_not_usable(p) == "repeat 2 attempt 1: its request lines are not on file"
    assert request_lines.missing(run) == ["a c=1 repeat 2 attempt 1"]
    r = subprocess.run([sys.executable, "-m", "llmcompare.schema.request_lines", str(d)], capture_output=True, text=True)
    assert r.returncode == 1 and "1 complete points have no request lines on file: a c=1 repeat 2 attempt 1" in r.stderr
    (d / "a.requests.jsonl").write_text(line(0, 0) + line(0, 1) + line(0, 2))
    assert subprocess.run([sys.executable, "-m", "llmcompare.schema.request_lines", str(d)]).returncode == 0


def test_the_report_reads_the_lines_and_leaves_such_a_point_out(tmp_path):
    from llmcompare.report.build import load_runs

    d = make_run(tmp_path / "r", [(0, 0), (0, 1)])
    (d / "a.requests.jsonl").write_text(line(0, 0))
    (serve,), _ = load_runs([str(d)])
    assert [p.requests_on_file for p in serve.engines["a"].points] == [1, 0]


def merge(new: Path, old: Path):
    return subprocess.run(["bash", str(ROOT / "scripts/gpu/merge_run.sh"), str(new), str(old)],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})


def test_merge_refuses_a_run_whose_new_point_has_no_lines_and_keeps_the_old_one(tmp_path):
    old = make_run(tmp_path / "old", [(0, 0)])
    with lzma.open(old / "a.requests.jsonl.xz", "wt") as f:
        f.write(line(0, 0) * 2)
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    new = make_run(tmp_path / "new", [(0, 0), (0, 1)])  # only run.json came back from the device
    r = merge(new, old)
    assert r.returncode == 1 and "a c=1 repeat 2 attempt 1" in r.stderr and "refused" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old"]  # no copy left behind
    (new / "a.requests.jsonl").write_text(line(0, 1) * 2)
    r = merge(new, old)
    assert r.returncode == 0, r.stderr
    assert request_lines.count(old, "a") == {(0, 0, 1): 2, (0, 1, 1): 2}
    assert len(load_run(old).engines["a"].points) == 2
