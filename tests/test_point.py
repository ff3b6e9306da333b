"""One load point through the load loop (loadgen.run_point) against tests/fakeserver.py's known schedule: the closed
and open loops, max_concurrency, queue time, abort -> partial with cut-off requests, lmdeploy-style chunks, and the
steady-state window and per-second series computed from what it recorded."""

import asyncio
import math

import aiohttp
import fakeserver  # tests/fakeserver.py
import pytest

from llmcompare.analysis import steady
from llmcompare.analysis.metrics import compute
from llmcompare.engines.registry import GREEDY
from llmcompare.engines.server import free_port
from llmcompare.schema.request import RequestSpec
from llmcompare.schema.run import LoadKey
from llmcompare.serve import converge, loadgen
from llmcompare.serve.client import body_template


@pytest.fixture(scope="module")
def server():
    """TTFT 20 ms, then one token every 5 ms."""
    port = free_port()
    proc = fakeserver.launch(port, "--ttft-ms", "20", "--itl-ms", "5")
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def lmdeploy_like():
    """Two tokens per chunk (a chunk every 10 ms) and an end chunk without a token, as lmdeploy streams under load."""
    port = free_port()
    proc = fakeserver.launch(port, "--ttft-ms", "10", "--itl-ms", "10", "--tokens-per-chunk", "2",
                             "--empty-final-chunk")
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def specs(n: int, out: int = 8) -> list[RequestSpec]:
    return [RequestSpec(f"prompt {i}", 16, out) for i in range(n)]


def run(base: str, key: LoadKey, n: int, out: int = 8, abort=None, burstiness: float = 1.0):
    async def go():
        req = loadgen.Request(f"{base}/v1/completions", fakeserver.MODEL, body_template(GREEDY, True), 30.0)
        async with aiohttp.ClientSession() as s:
            return await loadgen.run_point(s, req, key, specs(n, out), burstiness, seed=1, abort=abort)

    return asyncio.run(go())


def spans(pr):
    return [(r.dispatch_s, r.dispatch_s + r.e2el_ms / 1000) for r in pr.records if r.success]


def max_in_flight(pr) -> int:
    events = sorted([(a, 1) for a, _ in spans(pr)] + [(b, -1) for _, b in spans(pr)], key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def test_closed_loop_keeps_c_in_flight_and_times_the_schedule(server):
    pr = run(server, LoadKey(concurrency=4), 16)
    assert not pr.partial and len(pr.records) == 16 and all(r.success for r in pr.records)
    assert max_in_flight(pr) == 4
    for r in pr.records:
        assert len(r.chunk_ms) == 8 and r.reads >= 2 and r.output_tokens == 8
        assert 19 <= r.ttft_ms < 60  # the server's 20 ms, plus the client and the loop
        assert 54 <= r.e2el_ms < 120  # the last token is due at 20 + 7 * 5 ms (absolute deadlines: a late first
        # chunk does not push the others back)
        assert r.queue_ms < 20  # each worker sends as soon as its last request ended
    m = compute(pr.records, pr.duration_s, [50])
    assert m.stat("median_itl_ms") == pytest.approx(5.0, abs=2.5)
    assert m.mean_tokens_per_chunk == 1.0
    assert 0 < pr.client_health()["cpu_share"] < 2.5  # the in-process client's CPU over the point, of one core


def test_open_loop_with_max_concurrency_queues_in_the_client(server):
    pr = run(server, LoadKey(request_rate=math.inf, max_concurrency=2), 6)
    assert len(pr.records) == 6 and max_in_flight(pr) == 2
    queued = sorted(r.queue_ms for r in pr.records)
    # all 6 are due at 0; two at a time run ~55 ms each: the last pair waited two rounds in the client
    assert queued[0] < 15 and queued[-1] > 80


def test_open_loop_sends_on_the_seeded_schedule(server):
    n, rate = 12, 40.0
    pr = run(server, LoadKey(request_rate=rate), n)
    due = loadgen.arrivals(n, rate, 1.0, 1)
    by_index = sorted(pr.records, key=lambda r: r.index)
    # sent when due (no cap: nothing to wait for), within 20 ms plus the most the client's own loop woke late in
    # this point (a loaded machine delays every timer alike: the fast tier runs 4 processes on 2 cores)
    late_s = 0.02 + max(pr.loop_lag_ms, default=0.0) / 1000
    for r, t in zip(by_index, due, strict=True):
        assert r.scheduled_s == pytest.approx(t)
        assert 0 <= r.dispatch_s - t < late_s
    assert max_in_flight(pr) > 1  # 40/s of ~60 ms requests overlap


def test_abort_stops_sending_and_marks_requests_in_flight_as_cut_off(server):
    async def go():
        t0 = asyncio.get_running_loop().time()
        req = loadgen.Request(f"{server}/v1/completions", fakeserver.MODEL, body_template(GREEDY, True), 30.0)
        async with aiohttp.ClientSession() as s:
            return await loadgen.run_point(
                s, req, LoadKey(concurrency=2), specs(40, out=64), abort=lambda: (
                    "server gone" if asyncio.get_running_loop().time() - t0 > 0.5 else None))

    pr = asyncio.run(go())
    assert pr.partial and pr.abort_reason == "server gone"
    finished = [r for r in pr.records if not r.cut_off]
    assert 0 < len(finished) < 40 and pr.unfinished == 40 - len(finished)
    # the fake server does not die, so the requests in flight finish normally here and are kept as results
    assert all(r.success for r in finished)


def test_lmdeploy_style_chunks_count_tokens_not_chunks(lmdeploy_like):
    pr = run(lmdeploy_like, LoadKey(concurrency=2), 4, out=8)
    for r in pr.records:
        assert len(r.chunk_ms) == 5 and r.empty_last_chunk  # 4 chunks of 2 tokens, then the end chunk
        assert r.tokens_per_chunk == 2.0 and len(r.itl_ms()) == 3 and len(r.itl_all_chunks_ms()) == 4
    m = compute(pr.records, pr.duration_s, [50])
    assert m.mean_tokens_per_chunk == 2.0 and m.stat("median_itl_ms") == pytest.approx(10.0, abs=4)  # a chunk / 10 ms


def test_steady_window_excludes_ramp_up_and_drain(server):
    c, n = 4, 24
    pr = run(server, LoadKey(concurrency=c), n)
    sends = sorted(r.dispatch_s for r in pr.records)
    first22 = sorted(pr.records, key=lambda r: r.dispatch_s)[:22]  # 22 = 2c + 3.5c: 3 whole waves of c
    assert steady.window(first22, c) == (sends[2 * c - 1], sends[5 * c - 1])  # the wave window (engine counters)
    st, why = steady.find(pr.records, c)  # a fraction of a second: too short for MSER-5's 20 s
    assert st is None and "too short" in why
    rows = steady.series(pr.records, pr.duration_s, [])
    assert sum(r["output_tok_per_s"] for r in rows) == pytest.approx(n * 8)  # 1 s bins: every token once
    assert max(r["in_flight"] for r in rows) <= c


def test_mser_finds_the_steady_state_of_a_desynchronized_closed_loop(server):
    """Output lengths 4..12 (mean 8) keep the c requests out of step, so the rate is level after the start and
    MSER-5 on 5 ms observations finds it. (With one fixed length the requests move in waves: a 6-wave point's
    5 ms series put MSER-5's minimum in its second half in 6 of 20 runs on a loaded 2-core machine.)"""
    c, n = 4, 96
    async def go():
        req = loadgen.Request(f"{server}/v1/completions", fakeserver.MODEL, body_template(GREEDY, True), 30.0)
        todo = [RequestSpec(f"prompt {i}", 16, 4 + (5 * i) % 9) for i in range(n)]
        async with aiohttp.ClientSession() as s:
            return await loadgen.run_point(s, req, LoadKey(concurrency=c), todo, seed=1)

    pr = asyncio.run(go())
    sends = sorted(r.dispatch_s for r in pr.records)
    st, why = steady.find(pr.records, c, bin_s=0.005)  # 5 ms observations: enough of them
    assert st is not None, why
    assert st.end_s == pytest.approx(sends[-1]) and st.end_reason == "last send"
    # inside it c requests are always in flight: about c x (tokens per request / E2EL) tok/s
    tok_s = c * sum(r.output_tokens for r in pr.records) / (sum(r.e2el_ms for r in pr.records) / 1000)
    assert st.output_throughput == pytest.approx(tok_s, rel=0.25)


class StopAfter(converge.Converger):
    """Decides "converged" once `after` requests have finished (the stopping, not the rule, is tested here)."""

    def __init__(self, after: int):
        super().__init__(0.02, 600.0)
        self.after, self.check_s, self.seen = after, 0.05, 0

    def converged(self, now_s: float) -> bool:
        return self.seen >= self.after

    def finished(self, rec) -> None:
        super().finished(rec)
        self.seen += 1


def test_load_converge_stops_sending_and_lets_the_requests_in_flight_finish(server, capsys):
    conv = StopAfter(6)

    async def go():
        req = loadgen.Request(f"{server}/v1/completions", fakeserver.MODEL, body_template(GREEDY, True), 30.0)
        async with aiohttp.ClientSession() as s:
            return await loadgen.run_point(s, req, LoadKey(concurrency=2), specs(2000, 32), conv=conv,
                                           desc="p (until ±2% or 600 s)")

    pr = asyncio.run(go())
    assert pr.converge_stop == "converged" and 6 <= len(pr.records) < 2000
    assert max(r.dispatch_s for r in pr.records) <= conv.decided_s + 0.05  # when (s from the point's start): nothing sent after
    # its bar counts requests without a total: the 2,000 at hand are only an upper bound (no "/2000", no ETA)
    bar = capsys.readouterr().err
    assert "p (until ±2% or 600 s)" in bar and "req" in bar and "/2000" not in bar, bar
    assert not pr.partial and pr.unfinished == 0  # not due: the point is complete with what it sent
    assert all(r.success and not r.cut_off for r in pr.records)


def test_prompts_for_duration_from_the_warm_up():
    p = loadgen.LoadPoint(0, LoadKey(concurrency=2), 8, "num_prompts")
    q = loadgen.prompts_for_duration(p, 30.0, 1.5, cap=1000)  # 2 slots, 1.5 s each: 40 requests in 30 s
    assert q.num_prompts == 40 and "min_duration_s 30" in q.num_prompts_why
    assert loadgen.prompts_for_duration(p, 30.0, 1.5, cap=25).num_prompts == 25
    assert loadgen.prompts_for_duration(p, 1.0, 1.5, cap=1000) is p  # already long enough
    assert loadgen.prompts_for_duration(p, 30.0, None, cap=1000) is p  # no warm-up: nothing to go by


def test_plan_identifies_points_by_index_and_key():
    pts = loadgen.plan([1, 8], [2.0, math.inf], 4, num_prompts=10, prompts_per_concurrency=3)
    assert [(p.index, p.key.label, p.num_prompts) for p in pts] == [
        (0, "c=1", 10), (1, "c=8", 24), (2, "rate=2,max=4", 12), (3, "rate=inf,max=4", 12)]


def test_a_converging_point_has_requests_for_its_max_s_without_a_warm_up_at_its_load():
    """On the H200 a ShareGPT-like point at c=256 (2 warm-up requests) planned only its 2,048 prompts and ran out
    of them after 58 s of a 90 s max_s: now the warm-up's E2EL per token at low load bounds the need from above."""
    from types import SimpleNamespace

    from llmcompare.scenario.loader import load
    from llmcompare.scenario.overrides import parse_set
    from llmcompare.schema.request import RequestRecord
    from llmcompare.serve import converge, measure

    assert converge.closed_loop_requests(256, 90.0, 0.01, 256, 2560, 20000) == (
        9000, "load.converge max_s 90 at the warm-up's 10.0 ms per output token at low load x 256 tokens (an upper bound)")
    assert converge.closed_loop_requests(256, 90.0, 0.01, 256, 10000, 20000) is None  # enough at hand
    assert converge.closed_loop_requests(256, 90.0, 0.01, 256, 2560, 5000)[0] == 5000  # capped
    warm = []
    for e2el_ms in (2000.0, 3000.0):  # 250 tokens each: 10 ms a token
        r = RequestRecord(0, 512, 250)
        r.success, r.e2el_ms, r.output_tokens = True, e2el_ms, 250
        warm.append(r)
    s = load("converge-h200", parse_set(["load.converge={rel_halfwidth: 0.02, max_s: 90}"]))
    p = loadgen.LoadPoint(0, LoadKey(concurrency=256, input_len=512, output_len=256), 2560, "num_prompts")
    q = measure._planned(SimpleNamespace(s=s), p, warm)
    assert q.num_prompts == 9000 and "upper bound" in q.num_prompts_why  # 90 s x 256 / (10 ms x 256 tokens)
    s = load("converge-h200", parse_set(["workload.dataset=synthetic-sharegpt", "workload.prompts_per_concurrency=0",
                                         "load.converge={rel_halfwidth: 0.02, max_s: 90}"]))
    q = measure._planned(SimpleNamespace(s=s), loadgen.LoadPoint(0, LoadKey(concurrency=256), 2048, "num_prompts"), warm)
    assert 6000 < q.num_prompts < 8000  # the ShareGPT-like mean output, ~330 tokens
    assert measure._planned(SimpleNamespace(s=load("converge-h200")), p, warm) is p  # no load.converge: as planned
