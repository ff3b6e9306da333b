"""scripts/client_scaling.py's steady window (its figures leave out the opening burst and the drain) and the fake
server's lateness over a window of the shared monotonic clock, which the window's server figures read."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from llmcompare.engines.server import free_port
from llmcompare.schema.request import RequestRecord

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
spec = importlib.util.spec_from_file_location("client_scaling", ROOT / "scripts/client_scaling.py")
cs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cs)
import fakeserver  # noqa: E402 (tests/, on sys.path under pytest)


def rec(dispatch_s: float, chunk_ms: list[float]) -> RequestRecord:
    return RequestRecord(index=0, prompt_len=16, output_len=len(chunk_ms), dispatch_s=dispatch_s, chunk_ms=chunk_ms,
                         success=True)


def test_requests_last_the_planned_seconds():
    assert cs.n_requests(1024, 10.0) == 30568  # 10 s x 1024 streams / 0.335 s a stream
    assert cs.n_requests(16, 10.0) == 478
    assert cs.n_requests(1, 0.1) == 256  # never fewer than 256 nor 4 waves
    assert cs.n_requests(512, 0.1) == 2048


def test_window_counts_only_what_arrived_in_it():
    t0 = 100.0
    # a burst request at 0 s whose gaps are 50 ms, then steady ones with 5 ms gaps, the last dispatched at 6 s
    records = [rec(0.0, [20, 70, 120]), rec(3.0, [20, 25, 30]), rec(4.0, [20, 25]), rec(6.0, [20, 25, 30])]
    window = cs.steady_window(records, t0, warm_s=2.0)
    assert window == (102.0, 106.0)
    f = cs.window_figures(records, t0, window)
    assert f["window_s"] == [2.0, 6.0]
    assert f["events_per_s"] == pytest.approx(5 / 4.0)  # the burst's 3 and the one dispatched at 6 s: outside
    assert f["p99_itl_ms"] == pytest.approx(5.0)  # the 50 ms gaps of the opening burst are not in it


def row(workers: int, c: int, events: float, err_ms: float, late_ms: float = 1.1) -> dict:
    return {"client": "llmcompare", "loop": "uvloop", "repeat": 0, "workers": workers, "concurrency": c,
            "completed": 10, "failed": 0, "events_per_s": events, "added_p99_itl_error_ms": err_ms,
            "server_p99_late_ms_by_process": [late_ms]}


def test_a_client_that_reads_chunks_in_bulk_does_not_sustain_its_rate():
    """The H200 ladder of 2026-12-05: one worker at c=1024 had p99 ITL 0.0 ms (added error -6.15 ms) with a p99 loop
    lag of 1 s: far behind, reading chunks in bulk. Only an error within ±1 ms counts as keeping up."""
    rows = [row(1, 512, 80_832, 68.55), row(1, 1024, 74_683, -6.15), row(8, 512, 96_963, 0.89, late_ms=2.07),
            row(8, 1024, 149_680, 48.94)]
    assert cs.sustained(rows, "llmcompare (uvloop)", 1, 0, None) is None
    assert cs.sustained(rows, "llmcompare (uvloop)", 8, 0, None) == 96_963
    assert cs.sustained(rows, "llmcompare (uvloop)", 8, 0, cs.SERVER_ON_TIME_MS) is None  # a server process late
    sums = cs.summarise(rows, [1, 8], 1)
    assert sums["sustained"]["median"]["llmcompare (uvloop)"] == {1: 0.0, 8: 96_963}
    # a saved result's table is summarised again from its rows, by this rule (not the one it was saved with)
    saved = {"rows": rows, "sustained": {"median": {"llmcompare (uvloop)": {"1": 74_683}}}}
    assert "| llmcompare (uvloop) | 1 | none | none |" in cs.table(saved)


def test_no_window_in_a_point_too_short_for_one():
    assert cs.steady_window([rec(0.0, [20]), rec(2.5, [20])], 0.0, warm_s=2.0) is None


def test_server_lateness_over_a_window_of_the_monotonic_clock():
    port = free_port("127.0.0.1")
    proc = fakeserver.launch(port, "--ttft-ms", "5", "--itl-ms", "5")
    base = f"http://127.0.0.1:{port}"
    try:
        marks = []
        for _ in range(3):
            marks.append(time.monotonic())
            body = json.dumps({"model": fakeserver.MODEL, "prompt": "x", "max_tokens": 8, "stream": True}).encode()
            urllib.request.urlopen(urllib.request.Request(f"{base}/v1/completions", body,
                                                          {"Content-Type": "application/json"}), timeout=10).read()
        marks.append(time.monotonic())
        assert fakeserver.stats(base)["sends"] == 24
        assert fakeserver.stats(base, since=marks[1], until=marks[2])["sends"] == 8  # the second request's
        assert fakeserver.stats(base, since=marks[3])["sends"] == 0
        assert fakeserver.stats(base, reset=True)["sends"] == 24
        assert fakeserver.stats(base)["sends"] == 0
    finally:
        proc.terminate()
        proc.wait()


def test_a_peer_run_at_some_worker_counts_is_summarised_at_those_only():
    """--peer-workers 4 8: guidellm has no 1-worker row; its ratios are to its own first count, and the table has
    no empty guidellm row at 1 worker."""
    peer = [{**row(n, 512, ev, 0.5), "client": "guidellm", "itl_kind": "mean"} for n, ev in ((4, 20_000), (8, 30_000))]
    rows = [row(1, 512, 80_000, 0.5), row(4, 512, 90_000, 0.5), *peer]
    sums = cs.summarise(rows, [1, 4], 1)
    assert sums["sustained"]["median"]["guidellm"] == {4: 20_000}  # 8 is not in the workers asked for
    assert sums["sustained"]["ratio_to_first"]["guidellm"] == {4: 1.0}
    assert sums["sustained"]["ratio_to_first"]["llmcompare (uvloop)"] == {1: 1.0, 4: 1.125}
    text = cs.table({"rows": rows})
    assert "| guidellm | 1 |" not in text and "| guidellm | 8 | 30,000 (1.50) |" in text


def test_peer_workers_outside_the_workers_are_refused():
    p = subprocess.run([sys.executable, str(ROOT / "scripts/client_scaling.py"), "--workers", "1", "4",
                        "--peer-workers", "4", "8"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--peer-workers [8]: not among --workers [1, 4]" in p.stderr, p.stderr
