"""scripts/open_loop_keepup.py, scripts/counter_drift.py and scripts/ttft_by_inflight.py on open-loop runs whose timing is known: 2 requests/s
for 10 s, then 4 requests/s for 10 s, each 10 tokens; in one point every request is served in 1 s (the server
keeps up), in the other the server finishes one request a second, one after another (over the second half it
falls behind by 3 requests/s). A delay between two token counts shows only where the rate changes: the step."""

import importlib.util
import json
from pathlib import Path

import pytest

from llmcompare.analysis import keepup as keepup_mod
from llmcompare.schema.files import RunFile
from llmcompare.schema.run import EngineRecord, PointResult, ServeRun

ROOT = Path(__file__).parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"scripts/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


keepup, drift = _script("open_loop_keepup"), _script("counter_drift")
RATE, SECONDS, TOKENS = 2.0, 20, 10  # RATE: the points' nominal request rate


def _request(point: int, i: int, send: float, finish: float) -> dict:
    step = (finish - send) / TOKENS
    chunks = [1000.0 * step * (k + 1) for k in range(TOKENS)]
    return {"point": point, "repeat": 0, "attempt": 1, "index": i, "prompt_len": 8, "output_len": TOKENS,
            "dispatch_s": send, "chunk_ms": chunks, "ttft_ms": chunks[0], "e2el_ms": chunks[-1], "reads": TOKENS,
            "output_tokens": TOKENS, "success": True}


def open_loop_run(tmp_path: Path, delay_s: float = 0.5, extra: int = 0) -> Path:
    """extra: tokens the engine's counter counts beyond what it sends (from 5 s on)."""
    pts = [PointResult(index=i, repeat=0, attempt=1, concurrency=None, request_rate=RATE) for i in (0, 1)]
    d = tmp_path / "run"
    d.mkdir()
    RunFile(d, ServeRun(created_at="2026-12-05T00:00:00+00:00", engines={"e": EngineRecord(name="e", points=pts)}))
    sends = [i * 0.5 for i in range(20)] + [10.0 + i * 0.25 for i in range(40)]
    lines, busy_until = [], 0.0
    for i, s in enumerate(sends):
        lines.append(_request(0, i, s, s + 1.0))  # keeps up
        busy_until = max(s, busy_until) + 1.0  # one at a time, 1 s each: 1 request/s
        lines.append(_request(1, i, s, busy_until))
    (d / "e.requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    # the engine's counter of point 0: the client's token times shifted `delay_s` earlier (it counts before sending)
    times = sorted(r["dispatch_s"] + c / 1000.0 - delay_s for r in lines if r["point"] == 0 for c in r["chunk_ms"])
    with open(d / "e.metrics.jsonl", "w") as f:
        for k in range(-1, int((SECONDS + 2) / 0.5)):  # from before the first counted token (t < -delay_s + 0.1)
            t = 0.01 + 0.5 * k
            f.write(json.dumps({"point": 0, "repeat": 0, "attempt": 1, "t_s": t,
                                "generation_tokens_total": float(sum(x <= t for x in times) + extra * (t > 5))})
                    + "\n")
    return d


def test_keepup_tells_a_server_that_keeps_up_from_one_that_falls_behind(tmp_path):
    up, behind = keepup.rows(open_loop_run(tmp_path))  # points 0 and 1
    assert float(up[4]) == pytest.approx(4.0, abs=0.1) and float(up[6]) == pytest.approx(1.0, abs=0.1)
    assert float(behind[6]) == pytest.approx(0.25, abs=0.05)
    a, b = (int(x) for x in behind[7].split(" -> "))
    assert b - a == pytest.approx(30, abs=3)  # 3 requests/s more arrived than finished, over the 10 s half
    assert float(up[8]) == pytest.approx(1.0, abs=0.05)  # the drain: the last request's 1 s


def test_counter_drift_finds_a_constant_delay(tmp_path):
    d = open_loop_run(tmp_path, delay_s=0.5)
    recs = {k: v for k, v in drift.request_lines.records(d, "e").items() if k[0] == 0}
    r = drift.drift(recs[(0, 0, 1)], drift.samples(d, "e")[(0, 0, 1)])
    assert r["tau"] == pytest.approx(0.5, abs=0.06) and r["err"] < 2.0
    assert r["last"] - r["first"] == pytest.approx(0.5 * 20.0, abs=3)  # D rises by tau x the rate's step (20 tok/s)


def test_counter_drift_tells_a_late_count_from_an_overcount(tmp_path):
    """After the drain a counter that only counts early agrees with the client again; one that counted tokens the
    client never got does not."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    early, over = open_loop_run(tmp_path / "a", delay_s=0.5), open_loop_run(tmp_path / "b", delay_s=0.5, extra=7)
    for d, end in ((early, 0), (over, 7)):
        recs = drift.request_lines.records(d, "e")
        assert drift.drift(recs[(0, 0, 1)], drift.samples(d, "e")[(0, 0, 1)])["end"] == pytest.approx(end, abs=0.5)


def test_ttft_by_inflight_counts_what_was_in_flight_at_each_send(tmp_path):
    """Point 0 serves every request in 1 s: 1 request in flight at each send at 2 requests/s, 3 at 4 requests/s,
    TTFT flat at 100 ms. Point 1 serves one at a time and falls behind: the more in flight at a send, the longer
    its TTFT (each request waits for those ahead of it), bin after bin."""
    byif = _script("ttft_by_inflight")
    recs = byif.request_lines.records(open_loop_run(tmp_path), "e")
    up = byif.in_flight(recs[(0, 0, 1)])
    counts = [n for n, _ in up]  # the first send 0; 1 at 2/s (and at 10 s); 2 at 10.25 and 10.5 s; then 3
    assert {n: counts.count(n) for n in set(counts)} == {0: 1, 1: 20, 2: 2, 3: 37}
    assert all(t == pytest.approx(100.0) for _, t in up)
    behind = byif.bins(byif.in_flight(recs[(1, 0, 1)]), 4)
    medians = [med for _, med, _ in behind.values()]
    assert len(medians) >= 4 and medians == sorted(medians) and medians[-1] > 5 * medians[0], behind


def test_the_capacity_table_says_whether_each_repeat_kept_up(tmp_path):
    """The report's capacity rows carry analysis/keepup.py's figures per repeat, read from the request files: the
    point that keeps up completes ~1 request per arrival with a level count; the one that falls behind 0.25, +30."""
    from llmcompare.analysis import metrics
    from llmcompare.report.build import Served
    from llmcompare.report.capacity import _keepups
    from llmcompare.schema import request_lines
    from llmcompare.schema.files import load_run

    d = open_loop_run(tmp_path)
    run = load_run(d)
    cells = request_lines.records(d, "e")
    for p, rate in zip(run.engines["e"].points, (2.0, 3.0), strict=True):  # two probes
        p.request_rate, p.status = rate, "complete"
        p.metrics = metrics.compute(cells[(p.index, 0, 1)], 21.0, [50, 99], None)
    request_lines.attach(run)
    kept = _keepups(Served("e", run.engines["e"], run, {}), None)
    (up,), (behind,) = kept[2.0], kept[3.0]
    assert up.ratio == pytest.approx(1.0, abs=0.1) and abs(up.rise) <= 2
    assert behind.ratio == pytest.approx(0.25, abs=0.05) and behind.rise == pytest.approx(30, abs=3)
    assert keepup_mod.text(behind) == f"{behind.ratio:.2f} ({behind.in_flight_start} -> {behind.in_flight_end})"
    assert keepup_mod.text(None) == "–"
