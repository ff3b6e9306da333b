"""scripts/resteady.py --waves on a saved run: the wave-phase check's figure (PointResult.waves_steady_tok_s) is
added from the point's request lines and its steady window as on file, which stays as it is."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmcompare.schema.files import RunFile, load_run
from llmcompare.schema.run import EngineRecord, Metrics, PointResult, ServeRun, Steady

ROOT = Path(__file__).parents[1]
C, WAVES, WAVE_S = 4, 12, 0.5 + 49 * 0.02  # 0.5 s to the first token, then 20 ms a token, 50 tokens


def synchronized_run(tmp_path: Path, window: tuple[float, float]) -> Path:
    """One fixed-length closed-loop point of C slots moving in WAVES waves, with a steady window on file."""
    st = Steady(*window, output_throughput=123.0, rule="mser-5")
    p = PointResult(index=0, repeat=0, attempt=1, concurrency=C, input_len=8, output_len=50, status="complete",
                    metrics=Metrics(completed=C * WAVES, output_throughput=100.0), steady=st)
    d = tmp_path / "run"
    d.mkdir()
    RunFile(d, ServeRun(created_at="2026-12-06T00:00:00+00:00", engines={"e": EngineRecord(name="e", points=[p])}))
    chunks = [500.0 + 20.0 * k for k in range(50)]
    lines = [{"point": 0, "repeat": 0, "attempt": 1, "index": i, "prompt_len": 8, "output_len": 50,
              "dispatch_s": (i // C) * WAVE_S, "chunk_ms": chunks, "ttft_ms": chunks[0], "e2el_ms": chunks[-1],
              "reads": 50, "output_tokens": 50, "success": True} for i in range(C * WAVES)]
    (d / "e.requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def _resteady():
    spec = importlib.util.spec_from_file_location("resteady", ROOT / "scripts/resteady.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.resteady


def test_waves_adds_the_whole_wave_rate_and_leaves_the_steady_window(tmp_path):
    d = synchronized_run(tmp_path, (2 * WAVE_S + 0.7, (WAVES - 1) * WAVE_S))  # from inside wave 3 to the last send
    assert load_run(d).engines["e"].points[0].waves_steady_tok_s is None  # a file before session 25
    _resteady()(str(d), waves_only=True)
    (p,) = load_run(d).engines["e"].points
    assert p.waves_steady_tok_s == pytest.approx(C * 50 / WAVE_S, rel=1e-6)  # waves 4 to 11, whole
    assert p.steady.output_throughput == 123.0 and p.half_steady_tok_s is None  # nothing else rewritten


def test_waves_leaves_variable_lengths_alone(tmp_path):
    d = synchronized_run(tmp_path, (2 * WAVE_S + 0.7, (WAVES - 1) * WAVE_S))
    run = json.loads((d / "run.json").read_text())
    run["scenario"]["workload"] = {"dataset": "synthetic-sharegpt"}  # lengths vary: no waves to narrow to
    (d / "run.json").write_text(json.dumps(run))
    _resteady()(str(d), waves_only=True)
    assert load_run(d).engines["e"].points[0].waves_steady_tok_s is None


def test_half_and_waves_together_are_refused(tmp_path):
    d = synchronized_run(tmp_path, (0.0, (WAVES - 1) * WAVE_S))
    r = subprocess.run([sys.executable, str(ROOT / "scripts/resteady.py"), "--half", "--waves", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "give one of them" in r.stderr


def test_drain_adds_the_rate_before_the_drain_and_nothing_else(tmp_path):
    d = synchronized_run(tmp_path, (2 * WAVE_S + 0.7, (WAVES - 1) * WAVE_S))
    assert load_run(d).engines["e"].points[0].before_drain_tok_s is None  # a file before session 31
    _resteady()(str(d), drain_only=True)
    (p,) = load_run(d).engines["e"].points
    # every slot busy up to the last send (wave 12's start): waves 1-11 whole, C * 50 tokens a wave
    assert p.before_drain_tok_s == pytest.approx(C * 50 / WAVE_S, rel=0.01)
    assert p.steady.output_throughput == 123.0 and p.half_steady_tok_s is None and p.waves_steady_tok_s is None
    r = subprocess.run([sys.executable, str(ROOT / "scripts/resteady.py"), "--half", "--drain", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "give one of them" in r.stderr
