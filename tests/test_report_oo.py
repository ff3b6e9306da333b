"""`llmcompare report` under `python -OO` (docstrings stripped): the report's method texts are not docstrings, so
every section that states one still renders, with the same text as a plain interpreter writes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "tests/data/report-serve"
KERNELS = ROOT / "tests/data/h200-small/h200-kernels"

# a phrase of each method text: the verdict's intervals, the capacity's interval, the kernel facts, the GEMM model
METHOD_PHRASES = ("Welch-Satterthwaite degrees of freedom", "clipped to [lo, hi], as nothing outside the bracket",
                  "ceil(M / tile_m) * ceil(N / tile_n) output tiles", "by Little's law from the client's own")


def capacity_run(tmp: Path) -> Path:
    """report-serve's vllm-a points relabelled as two open-loop probes of a capacity search (1 and 4 req/s) under
    a TPOT SLO the first meets and the second does not: enough for the capacity section and its method text."""
    run = json.loads((SERVE / "run.json").read_text())
    run["scenario"]["slo"] = {"tpot_ms": 1000.0}
    run["scenario"]["load"]["capacity"] = {"slo_percentile": 99}
    e = run["engines"].pop("vllm-a")
    for p, rate in zip(e["points"], (1.0, 4.0), strict=True):
        p |= {"label": f"rate={rate:g}", "concurrency": None, "request_rate": rate}
        p["metrics"]["p99_tpot_ms"] = 500.0 if rate == 1.0 else 2000.0
    run["engines"] = {"vllm-cap": e}
    run["scenario"]["engines"] = [{**run["scenario"]["engines"][0], "name": "vllm-cap"}]
    d = tmp / "capacity-run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(run))
    # a request line per probe (serve-bench/1 names a point by its load label)
    (d / "vllm-cap.requests.jsonl").write_text("".join(json.dumps({"point": p["label"]}) + "\n" for p in e["points"]))
    return d


def report_md(tmp: Path, runs: list[Path], *flags: str) -> str:
    out = tmp / f"report{''.join(flags)}"
    code = f"import sys; from llmcompare.cli import main; sys.exit(main({['report', *map(str, runs), '--out', str(out)]!r}))"
    r = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, f"llmcompare report {' '.join(flags)} failed:\n{r.stderr[-3000:]}"
    return (out / "report.md").read_text()


def test_report_under_python_OO_states_every_method(tmp_path):
    runs = [SERVE, KERNELS, capacity_run(tmp_path)]
    optimized = report_md(tmp_path, runs, "-OO")
    for phrase in METHOD_PHRASES:
        assert phrase in optimized, phrase
    assert "## Capacity" in optimized and "## Attribution" in optimized
    assert optimized == report_md(tmp_path, runs)  # the same report as without -OO
    shutil.rmtree(tmp_path / "report-OO")


def test_capacity_section_names_the_probe_it_stopped_at(tmp_path):
    """A probe without a usable repeat is where the search stopped: the capacity sentence names it and why, and
    the rest is said from the usable probes (here only the one at 1 req/s: 'at least 1')."""
    d = capacity_run(tmp_path)
    run = json.loads((d / "run.json").read_text())
    p = run["engines"]["vllm-cap"]["points"][1]
    p["status"] = "untrusted"
    (d / "run.json").write_text(json.dumps(run))
    md = report_md(tmp_path, [d])
    line = next(x for x in md.splitlines() if x.startswith("At TPOT p99 < 1000 ms"))
    assert "holds at least 1 req/s (the highest probe passed) (1 probe)." in line
    assert "Probed but left out: 4 req/s (repeat 1 attempt 1: untrusted (" in line


def test_two_capacities_are_compared_where_each_lies(tmp_path):
    """Two engines' searches in one run: one passes both probes (at least 4 req/s), the other fails at 4 (its
    capacity between 1 and 4): the answer says which holds the higher rate and where each lies; with both failing
    at 4 their spans overlap and it says there is no verdict."""
    d = capacity_run(tmp_path)
    run = json.loads((d / "run.json").read_text())
    strong = json.loads(json.dumps(run["engines"]["vllm-cap"]))
    strong["points"][1]["metrics"]["p99_tpot_ms"] = 800.0
    run["engines"]["vllm-strong"] = strong
    run["scenario"]["engines"].append({**run["scenario"]["engines"][0], "name": "vllm-strong"})
    (d / "run.json").write_text(json.dumps(run))
    shutil.copy(d / "vllm-cap.requests.jsonl", d / "vllm-strong.requests.jsonl")
    md = report_md(tmp_path, [d])
    line = next(x for x in md.splitlines() if "Capacity: " in x)
    assert "holds a higher request rate within the SLOs than" in line and "at least 4" in line, line
    assert line.index("vllm-strong") < line.index("than"), line
    strong["points"][1]["metrics"]["p99_tpot_ms"] = 2000.0
    (d / "run.json").write_text(json.dumps(run))
    shutil.rmtree(tmp_path / "report")
    line = next(x for x in report_md(tmp_path, [d]).splitlines() if "Capacity: " in x)
    assert "no verdict between" in line and "lie in overlap" in line, line
    run["scenario"]["slo"] = {"tpot_ms": 900.0}  # another run with other SLOs: not compared
    other = tmp_path / "other-run"
    shutil.copytree(d, other)
    (other / "run.json").write_text(json.dumps(run))
    shutil.rmtree(tmp_path / "report")
    lines = [x for x in report_md(tmp_path, [d, other]).splitlines() if x.startswith("- Capacity: ")]
    assert any("had different SLOs, SLO percentile, max_concurrency or workload" in x for x in lines), lines


def test_searches_of_one_engine_in_two_runs_on_one_machine_are_joined(tmp_path):
    """One engine searched in two runs on one machine (1 passes, 4 fails; then 2 passes, 8 fails): the report
    pools their probes into one search (passes at 2, fails at 4) beside the two. Not joined across machines, nor
    when the engine's scenario entry differs."""
    machine = {"key": "gpus GPU-test", "hostname": "h", "gpu_uuids": ["GPU-test"], "source": "recorded"}
    a = capacity_run(tmp_path)
    run = json.loads((a / "run.json").read_text())
    run["engines"]["vllm-cap"]["machine"] = machine
    (a / "run.json").write_text(json.dumps(run))
    b = tmp_path / "second-search"
    shutil.copytree(a, b)
    for p, rate in zip(run["engines"]["vllm-cap"]["points"], (2.0, 8.0), strict=True):
        p |= {"label": f"rate={rate:g}", "request_rate": rate}
    (b / "run.json").write_text(json.dumps(run))
    (b / "vllm-cap.requests.jsonl").write_text("".join(json.dumps({"point": f"rate={r:g}"}) + "\n" for r in (2, 8)))
    joined = [x for x in report_md(tmp_path, [a, b]).splitlines() if x.startswith("At ") and "runs joined" in x]
    assert joined and joined[0].startswith("At TPOT p99 < 1000 ms, vllm-cap, 2 runs joined"), joined
    assert "between 2 and 4 req/s" in joined[0] and "passes at 2, fails at 4" in joined[0], joined[0]
    for change in ({"machine": {**machine, "key": "gpus GPU-other", "gpu_uuids": ["GPU-other"]}},
                   {"scenario": {"args": ["--max-num-seqs", "8"]}}):
        other = json.loads(json.dumps(run))
        other["engines"]["vllm-cap"] |= change.get("machine") and {"machine": change["machine"]} or {}
        if "scenario" in change:
            other["scenario"]["engines"][0]["args"] = change["scenario"]["args"]
        (b / "run.json").write_text(json.dumps(other))
        shutil.rmtree(tmp_path / "report")
        assert "runs joined" not in report_md(tmp_path, [a, b]), change
