"""The steady-state rule (analysis/mser.py, analysis/steady.find) on synthetic series and synthetic request records
with a known warm-up and a known drain: MSER-5 finds the warm-up, the window ends before the drain, the batch-means
interval narrows with length, and a point that is still moving (or too short) is not called converged."""

import heapq

import numpy as np
import pytest

from llmcompare.analysis import mser, steady
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Steady
from llmcompare.serve import converge


def ramp_then_flat(n=300, ramp=20, level=100.0, noise=3.0, seed=1):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return np.where(t < ramp, level * t / ramp, level) + rng.normal(0, noise, n)


def test_mser5_finds_a_known_warm_up():
    cut = mser.truncate(ramp_then_flat())
    assert cut.skip is not None and 15 <= cut.skip <= 40  # the ramp is 20 s (MSER may take a batch or few more)
    assert mser.truncate(ramp_then_flat(ramp=60)).skip >= 55  # a longer ramp: a later start


def test_mser5_refuses_a_trending_series_and_a_short_one():
    rng = np.random.default_rng(2)
    trend = np.linspace(50, 150, 300) + rng.normal(0, 3, 300)
    cut = mser.truncate(trend)
    assert cut.skip is None and "second half" in cut.why_not
    short = mser.truncate(ramp_then_flat(n=15))
    assert short.skip is None and "too short" in short.why_not


def test_mser_curve_is_the_formula():
    z = np.array([1.0, 5.0, 5.0, 6.0])
    want = [np.sum((z[d:] - z[d:].mean()) ** 2) / (4 - d) ** 2 for d in range(3)]
    assert mser.mser_curve(z) == pytest.approx(want)


def test_batch_means_halfwidth_shrinks_with_length():
    rng = np.random.default_rng(3)
    x = 100 + rng.normal(0, 5, 3600)
    short, long = mser.batch_means(x[:100]), mser.batch_means(x)
    assert short.batches == 10 and long.batches == 30  # floor(sqrt(n)) clamped to 10..30
    assert long.halfwidth < short.halfwidth / 2
    assert long.mean == pytest.approx(100, abs=long.halfwidth * 2)
    assert mser.batch_means(x[:9]) is None  # fewer observations than batches


def test_batch_means_widens_and_flags_autocorrelated_batches():
    rng = np.random.default_rng(4)
    x = np.empty(400)
    x[0] = 0.0
    for i in range(1, 400):  # AR(1) with phi 0.995: batch means of 20 s still strongly correlated
        x[i] = 0.995 * x[i - 1] + rng.normal()
    bm = mser.batch_means(100 + x)
    assert bm.widened and bm.lag1 > 2 / np.sqrt(bm.batches)
    plain = mser.batch_means(100 + rng.normal(0, 1, 400))
    assert not plain.widened


def closed_loop(c, n, speed, out=50, itl_s=0.02, stop_early=None, pause=None, seed=0):
    """Synthetic closed loop: c slots, n requests; each token's gap is itl_s / speed(t) with 20% jitter.
    stop_early: (slots, after_s): those slots send nothing after after_s (one client process ran out early).
    pause: (slots, at_s, for_s): those slots wait for_s before their first send after at_s (a slow refill)."""
    rng = np.random.default_rng(seed)
    slots = [(0.0, i) for i in range(c)]
    heapq.heapify(slots)
    recs, paused = [], set()
    while len(recs) < n and slots:
        t0, slot = heapq.heappop(slots)
        if stop_early and slot < stop_early[0] and t0 > stop_early[1]:
            continue
        if pause and slot < pause[0] and t0 > pause[1] and (slot, "paused") not in paused:
            paused.add((slot, "paused"))
            t0 += pause[2]
        t, chunks = t0 + 0.05, []
        for _ in range(out):
            t += itl_s / speed(t) * rng.lognormal(0, 0.2)
            chunks.append((t - t0) * 1000)
        recs.append(RequestRecord(index=len(recs), prompt_len=10, output_len=out, dispatch_s=t0, ttft_ms=chunks[0],
                                  e2el_ms=chunks[-1], chunk_ms=chunks, output_tokens=out, success=True))
        heapq.heappush(slots, (t, slot))
    return recs


def test_steady_state_of_a_closed_loop_skips_a_known_warm_up_and_ends_at_the_last_send():
    warm = lambda t: 0.25 + 0.75 * min(1.0, t / 20)  # noqa: E731  a quarter speed at 0, full from 20 s
    recs = closed_loop(8, 1000, warm)
    st, why = steady.find(recs, 8)
    last = max(r.dispatch_s for r in recs)
    assert why == "" and st.rule == "mser-5" and st.end_reason == "last send"
    assert 15 <= st.warmup_s <= 35 and st.start_s >= st.warmup_s
    assert st.end_s == pytest.approx(last)
    full = 8 * 50 / (0.05 + 50 * 0.02 * np.exp(0.02))  # 8 slots at full speed (lognormal mean e^(sigma^2/2))
    assert st.output_throughput == pytest.approx(full, rel=0.03)
    assert st.halfwidth_tok_s > 0 and st.rel_halfwidth == pytest.approx(st.halfwidth_tok_s / st.output_throughput)
    assert 10 <= st.batches <= 30 and st.converged  # 8 streams of 1 s requests: a narrow interval
    whole = sum(r.output_tokens for r in recs) / max(r.dispatch_s + r.e2el_ms / 1000 for r in recs)
    assert whole < 0.97 * st.output_throughput  # the whole point holds the slow warm-up and the drain


def test_the_window_ends_where_the_requests_in_flight_fall_below_the_target():
    recs = closed_loop(8, 1000, lambda t: 1.0, stop_early=(4, 60.0))  # 4 of 8 slots stop sending after 60 s
    st, _ = steady.find(recs, 8)
    assert st.end_reason == "in flight below target"
    assert 59.0 <= st.end_s <= 62.0 < max(r.dispatch_s for r in recs)
    assert steady.in_flight_floor(1) == 0.5 and steady.in_flight_floor(256) == pytest.approx(243.2)  # 5% slack


def test_a_dip_in_flight_that_recovers_is_not_the_drain():
    recs = closed_loop(8, 1000, lambda t: 1.0, pause=(4, 40.0, 2.0))  # 4 slots refill 2 s late once, after 40 s
    st, _ = steady.find(recs, 8)
    assert st.end_reason == "last send" and st.end_s == pytest.approx(max(r.dispatch_s for r in recs))


def test_not_converged_when_short_or_still_moving():
    recs = closed_loop(2, 40, lambda t: 1.0)  # about 20 s of 2 streams
    st, why = steady.find(recs, 2, target=0.001)
    assert st is None or not st.converged, why
    slowing = closed_loop(8, 1500, lambda t: 1.0 / (1 + t / 30))  # the engine keeps slowing down
    st, why = steady.find(slowing, 8)
    assert st is None and "second half" in why
    none, why = steady.find([], 4)
    assert none is None and why


def test_open_loop_steady_state_ends_at_the_last_send():
    rng = np.random.default_rng(5)
    recs, t = [], 0.0
    for i in range(1500):  # Poisson arrivals at 5 req/s, 300 s, 1 s requests of 50 tokens: ~250 tok/s after ~1 s
        t += rng.exponential(0.2)
        chunks = list(np.cumsum(np.full(50, 20.0)))
        recs.append(RequestRecord(index=i, prompt_len=10, output_len=50, dispatch_s=t, ttft_ms=chunks[0],
                                  e2el_ms=chunks[-1], chunk_ms=chunks, output_tokens=50, success=True))
    st, why = steady.find(recs, None)
    assert why == "" and st.end_reason == "last send" and st.end_s == pytest.approx(t)
    assert st.output_throughput == pytest.approx(5 * 50, rel=0.1)
    assert st.halfwidth_tok_s > 0


def test_the_live_rule_converges_on_a_flat_rate_and_not_while_it_is_moving():
    flat = converge.Converger(0.02, 600.0)
    for r in closed_loop(8, 1000, lambda t: 1.0):
        flat.finished(r)
    assert not flat.converged(15.0)  # 15 s: too short for MSER-5
    assert not flat.converged(25.0)  # MSER-5 has its 20 observations, but under MIN_SERIES_S (30 s) is too little
    assert flat.converged(100.0) and flat.decide(100.0) == "converged"
    moving = converge.Converger(0.02, 600.0)
    for r in closed_loop(8, 1500, lambda t: 1.0 / (1 + t / 30)):
        moving.finished(r)
    assert not moving.converged(150.0) and moving.decide(150.0) is None
    assert moving.decide(600.0) == "time up"


def test_the_live_rule_records_when_it_stopped_and_what_its_last_check_read():
    flat = converge.Converger(0.02, 600.0)
    for r in closed_loop(8, 1000, lambda t: 1.0):
        flat.finished(r)
    assert flat.decided_s is None and flat.live_rel_halfwidth is None
    assert not flat.converged(15.0)  # too short for MSER-5: the check read 15 s and found no steady state
    assert flat.live_series_s == 15.0 and flat.live_rel_halfwidth is None
    assert flat.decide(100.0) == "converged" and flat.decided_s == 100.0
    assert flat.live_series_s == 100.0 and 0 < flat.live_rel_halfwidth <= 0.02
    moving = converge.Converger(0.02, 600.0)
    for r in closed_loop(8, 1500, lambda t: 1.0 / (1 + t / 30)):
        moving.finished(r)
    assert moving.decide(150.0) is None and moving.decided_s is None
    assert moving.live_series_s == 150.0 and (moving.live_rel_halfwidth is None or moving.live_rel_halfwidth > 0.02)
    assert moving.decide(600.0) == "time up" and moving.decided_s == 600.0  # the last check's reading is kept


def test_the_watch_stops_at_max_s_on_the_points_clock_not_a_check_later():
    """Session 24: with the pool's start 0.3 s ahead, checks every 5 s from the watch's creation fell at 4.7, 9.7,
    ..., 59.7 s, and the 60 s points stopped at 64.7 s. Now the checks are counted from t0 and the last is at max_s."""
    import asyncio
    import time

    conv = converge.Converger(0.02, 0.5)
    conv.check_s = 0.2
    said: list[tuple[str, float]] = []

    async def go():
        t0 = time.perf_counter() + 0.15  # the pool's t0 lies ahead of the watch's start (old checks: 0.05, ..., 0.65 s)
        await converge.watch(conv, t0, lambda d: said.append((d, time.perf_counter() - t0)))

    asyncio.run(go())
    (decision, at_s), = said
    assert decision == "time up" and 0.5 <= at_s < 0.6, at_s
    assert conv.decided_s == pytest.approx(at_s, abs=0.01)


def test_the_live_rule_reads_only_before_the_oldest_request_in_flight():
    conv = converge.Converger(0.02, 600.0)
    for r in closed_loop(8, 1000, lambda t: 1.0):
        conv.finished(r)
    conv.started(99999, 10.0)  # a request sent at 10 s is still in flight: only 10 s of series are complete
    assert not conv.converged(100.0)


def test_the_report_states_the_rule_its_cut_and_whether_it_converged():
    from llmcompare.report.serve import steady_note
    from llmcompare.schema.run import PointResult

    st, _ = steady.find(closed_loop(8, 1000, lambda t: 0.25 + 0.75 * min(1.0, t / 20)), 8)
    note = steady_note(PointResult(steady=st, converge_stop="converged"))
    assert note.startswith("mser-5: warm-up ") and "to last send at" in note and "; converged (±" in note
    assert note.endswith("load.converge: converged")
    live = PointResult(steady=st, converge_stop="converged", converge_stop_s=40.2, converge_live_rel_halfwidth=0.0193,
                       converge_live_series_s=33.0)
    assert steady_note(live).endswith("load.converge: converged at 40 s (its last live check: ±1.9% over the first 33 s)")
    early = PointResult(steady=st, converge_stop="time up", converge_stop_s=60.0, converge_live_series_s=55.0)
    assert steady_note(early).endswith("time up at 60 s (its last live check: no steady state yet over the first 55 s)")
    assert steady_note(PointResult(no_steady="too short for MSER-5")) == "too short for MSER-5"


def test_files_written_before_the_rule_still_read():
    from llmcompare.schema.codec import record
    from llmcompare.schema.run import PointResult

    old = {"index": 0, "concurrency": 4, "status": "complete",  # a point's steady window as files before the rule
           "steady": {"start_s": 1.0, "end_s": 9.0, "output_tokens": 800.0, "output_throughput": 100.0,
                      "request_throughput": 2.0, "requests_inside": 12, "stats": {}, "sub_output_throughput": [99.0]}}
    p = record(PointResult, old)
    assert p.steady.rule == "" and p.steady.converged is None and p.steady.halfwidth_tok_s is None
    assert p.no_steady is None and p.converge_stop is None


def test_a_reason_is_worded_once_in_new_and_older_files():
    """MSER-5's reason began "no steady state: " before 2026-12-05, and the warning and the verdict put "no steady
    state (...)" around it: new reasons lack it, and reading an older run drops it (schema/upgrade.py)."""
    from pathlib import Path

    from llmcompare.analysis import verdict
    from llmcompare.schema.files import load_run

    trend = np.linspace(50, 150, 300) + np.random.default_rng(2).normal(0, 3, 300)
    assert mser.truncate(trend).why_not.startswith("MSER-5's minimum lies in the second half")
    run_dir = Path(__file__).resolve().parents[1] / "reports/h200-converge/converge-h200-20261204-200123"
    assert "no steady state: MSER-5" in (run_dir / "run.json").read_text()  # as that run wrote it
    tm = load_run(run_dir).engines["turbomind"]
    assert tm.points[1].no_steady.startswith("MSER-5's minimum lies in the second half (batch 7 of 13)")
    (row,) = verdict.compare(load_run(run_dir).engines["vllm"], tm, cross_machine=True)
    assert "has no steady state (MSER-5's minimum" in row.why


def test_the_rate_before_the_drain_keeps_the_warm_up_and_leaves_out_the_drain():
    """The drain check's figure (PointResult.before_drain_tok_s): from the point's start to where the steady rule's
    search ends (the last send here; where 4 of 8 slots stopped, with a client process done early)."""
    warm = lambda t: 0.25 + 0.75 * min(1.0, t / 20)  # noqa: E731  as above: a quarter speed at 0, full from 20 s
    recs = closed_loop(8, 1000, warm)
    last = max(r.dispatch_s for r in recs)
    rate = steady.before_drain(recs, 8)
    assert rate == pytest.approx(steady.tokens_between(recs, 0.0, last) / last)
    whole = sum(r.output_tokens for r in recs) / max(r.dispatch_s + r.e2el_ms / 1000 for r in recs)
    st = steady.steady(recs, 8)
    assert whole < rate < st.output_throughput  # the drain out, the warm-up in
    early = closed_loop(8, 1000, lambda t: 1.0, stop_early=(4, 60.0))
    end = steady.find(early, 8)[0].end_s  # in flight below target from ~60 s
    assert steady.before_drain(early, 8) == pytest.approx(steady.tokens_between(early, 0.0, end) / end)
    assert steady.before_drain([], 8) is None


def test_the_first_half_is_what_a_point_half_as_long_would_have_measured():
    # full speed for the first ~60 s (the first ~480 of 1,000 requests), then 20% slower: the first half's steady
    # rate is the full-speed rate, the whole point's lower; a point too short for the rule says why
    recs = closed_loop(8, 1000, lambda t: 1.0 if t < 65 else 0.8)
    rate, why = steady.first_half(recs, 8)
    full = 8 * 50 / (0.05 + 50 * 0.02 * np.exp(0.02))
    assert why is None and rate == pytest.approx(full, rel=0.03)
    whole = sum(r.output_tokens for r in recs) / max(r.dispatch_s + r.e2el_ms / 1000 for r in recs)
    st, why_full = steady.find(recs, 8)
    assert whole < 0.95 * rate and (st is None or st.output_throughput < 0.95 * rate), why_full
    assert steady.first_half(recs[:800], 8)[0] == steady.find(recs[:400], 8)[0].output_throughput  # by index
    rate, why = steady.first_half(closed_loop(2, 40, lambda t: 1.0), 2)
    assert rate is None and why.startswith("too short for MSER-5")


def test_converge_replay_reads_what_the_live_rule_read_at_each_check():
    """scripts/converge_replay.py feeds the live rule, at each check time, what had been sent and had finished."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("converge_replay",
                                                  Path(__file__).parents[1] / "scripts/converge_replay.py")
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    recs = closed_loop(8, 1000, lambda t: 1.0)  # 8 slots of ~1 s requests: a flat rate
    for r in recs:
        r.scheduled_s = r.dispatch_s  # a closed loop's request is due when its slot frees (loadgen._closed)
    checks = replay.replay(recs, 0.02, 60.0)
    assert [c[0] for c in checks] == [5.0 * k for k in range(1, 13)]
    assert not checks[2][3] and checks[2][2] is None  # 15 s: too short for MSER-5
    assert checks[-1][3] and checks[-1][1] >= 58  # by 60 s converged, on nearly all of it (the requests are short)
    slow = [r for r in recs if r.index != 0] + [RequestRecord(0, 8, 50, dispatch_s=0.0, scheduled_s=0.0, e2el_ms=1e6)]
    assert all(c[1] == 0 for c in replay.replay(slow, 0.02, 60.0))  # one request in flight from 0 s: nothing read


def test_a_steady_window_narrowed_to_whole_waves_of_a_synchronized_point():
    """The wave-phase check's figure (analysis/steady.whole_waves, also in scripts/steady_rule.py's tables): with fixed lengths the rate rises and falls once a wave (a 0.5 s prefill
    with no tokens, then decode), so a window that starts inside a wave, after its prefill, reads high; narrowed to
    the whole waves inside it, it reads the per-wave rate."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("steady_rule", Path(__file__).parents[1] / "scripts/steady_rule.py")
    rule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rule)
    c, n, wave_s = 8, 8 * 20, 0.5 + 49 * 0.02  # 20 waves of 8 requests: 0.5 s to the first token, then 20 ms a token
    chunks = [500.0 + 20.0 * k for k in range(50)]
    recs = [RequestRecord(index=i, prompt_len=10, output_len=50, dispatch_s=(i // c) * wave_s, ttft_ms=chunks[0],
                          e2el_ms=chunks[-1], chunk_ms=chunks, output_tokens=50, success=True) for i in range(n)]
    per_wave = c * 50 / wave_s
    assert rule.waves(recs, c)[1:] == pytest.approx([per_wave] * 19, rel=1e-6)  # (wave 1 lacks its last tokens,
    # which arrive at its end and count in wave 2: a wave is [from, to))
    start, end = 3 * wave_s + 0.6, 19 * wave_s  # from inside wave 4, after its prefill, to the last send
    cut = steady.tokens_between(recs, start, end) / (end - start)
    assert cut > 1.015 * per_wave  # the cut wave's prefill is left out: the window reads high
    a, b, rate = steady.whole_waves(recs, c, start, end)
    assert (a, b) == pytest.approx((4 * wave_s, 19 * wave_s)) and rate == pytest.approx(per_wave, rel=1e-6)
    assert steady.whole_waves(recs, c, start, start + 0.5 * wave_s) is None  # no whole wave inside
    window = Steady(start, end, output_throughput=cut)
    assert steady.waves_rate(recs, c, window) == pytest.approx(per_wave, rel=1e-6)  # PointResult.waves_steady_tok_s
    assert steady.waves_rate(recs, None, window) is None and steady.waves_rate(recs, c, None) is None
