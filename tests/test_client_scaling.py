"""scripts/client_scaling.py's steady window (its figures leave out the opening burst and the drain) and the fake
server's lateness over a window of the shared monotonic clock, which the window's server figures read."""

from __future__ import annotations

import importlib.util
import json
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
