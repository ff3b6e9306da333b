"""Intervals and significance (analysis/verdict.py), trust decisions (analysis/trust.py), and the report's verdict on saved files."""

import dataclasses
import math

import pytest

from llmcompare.analysis import trust, verdict
from llmcompare.report.build import build_report
from llmcompare.schema.files import RunFile, load_run
from llmcompare.schema.machine import Machine
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import EngineRecord, Metrics, PointResult, ServeRun, Steady, Trust


def test_t_quantiles():
    assert verdict.t975(2) == pytest.approx(4.303)
    assert verdict.t975(10) == pytest.approx(2.228)
    assert verdict.t975(60) == pytest.approx(2.000, abs=2e-3)  # tables: 2.000
    assert verdict.t975(1000) == pytest.approx(1.962, abs=1e-3)
    assert 2.776 > verdict.t975(4.5) > 2.571  # between df 4 and 5


def point(i, repeat, tok_s, steady_tok_s=None, status="complete", subs=()):
    m = Metrics(completed=10, output_throughput=tok_s, stats={"median_tpot_ms": 1000 / tok_s})
    st = Steady(0.0, 10.0, output_throughput=steady_tok_s, sub_output_throughput=list(subs)) if steady_tok_s else None
    return PointResult(index=i, repeat=repeat, concurrency=[1, 8][i], status=status, metrics=m, steady=st)


ONE = Machine(key="boot 1")  # every engine of these hand-made runs: one machine


def engine(name, values, **kw):
    return EngineRecord(name=name, kind="vllm", status="complete", machine=ONE,
                        points=[point(i, r, v, **kw) for i, vs in enumerate(values) for r, v in enumerate(vs)])


def test_interval_across_repeats_by_hand():
    e = verdict.estimate([point(0, r, v, v) for r, v in enumerate([100.0, 110.0, 120.0])])
    # mean 110, s 10, n 3: +- 4.303 * 10 / sqrt(3)
    assert e.mean == 110 and e.lo == pytest.approx(110 - 4.303 * 10 / math.sqrt(3), rel=1e-4)
    assert e.source == "steady-state window" and e.method == "across 3 repeats"


def test_one_run_falls_back_to_its_steady_window_parts_and_says_so():
    e = verdict.estimate([point(0, 0, 100.0, 100.0, subs=[90, 100, 110, 100, 100])])
    assert e.lo < 100 < e.hi and "within one run" in e.method and "not included" in e.method
    e = verdict.estimate([point(0, 0, 100.0)])  # no steady window, one repeat: no interval
    assert e.lo is None and e.method == "one value, no interval" and e.source == "whole point"


def test_gap_interval_and_words():
    a = verdict.estimate([point(0, r, v, v) for r, v in enumerate([130.0, 131.0, 129.0])])
    b = verdict.estimate([point(0, r, v, v) for r, v in enumerate([100.0, 101.0, 99.0])])
    g = verdict.gap(a, b)
    assert g.pct == pytest.approx(30.0) and g.lo_pct < 30 < g.hi_pct and g.word == "faster"
    assert verdict.gap(b, a).word == "slower"
    c = verdict.estimate([point(0, r, v, v) for r, v in enumerate([90.0, 115.0, 100.0])])
    assert verdict.gap(c, b).word == "no significant difference"
    # for a latency (lower is better) a positive difference is slower
    lat = verdict.gap(a, b, higher_is_better=False)
    assert lat.word == "slower"


def test_a_point_enters_a_verdict_only_when_every_repeat_counts():
    """One untrusted or partial repeat leaves the whole load point out (not a verdict on the repeats that
    passed), and says why."""
    e = EngineRecord(name="x", points=[point(0, 0, 100.0, 100.0), point(0, 1, 50.0, 50.0, status="untrusted"),
                                       point(0, 2, 90.0, 90.0, status="partial")])
    assert verdict.usable_points(e) == {}
    (why,) = verdict.left_out(e).values()
    assert why.startswith("repeat 2 attempt 1: untrusted")
    e = EngineRecord(name="x", points=[point(0, r, 100.0 + r, 100.0) for r in range(3)])
    assert [p.metrics.output_throughput for ps in verdict.usable_points(e).values() for p in ps] == [100, 101, 102]


def test_a_retry_of_an_untrusted_attempt_never_replaces_it():
    """The runner measures an untrusted attempt again; counting the retry would prefer whichever try happened to
    pass (slower ones, for the engine that streams more events): the first attempt counts, so the point is out."""
    first = point(0, 0, 120.0, 120.0, status="untrusted")
    retry = dataclasses.replace(point(0, 0, 90.0, 90.0), attempt=2)
    e = EngineRecord(name="x", points=[first, retry, point(0, 1, 100.0, 100.0)])
    assert verdict.counted(e)[(0, 0)] is first and verdict.usable_points(e) == {}
    # a cell finished by a resume after a cut attempt, or re-measured with --redo all: the later attempt counts
    cut = point(0, 0, 10.0, 10.0, status="partial")
    e = EngineRecord(name="x", points=[cut, dataclasses.replace(point(0, 0, 95.0, 95.0), attempt=2)])
    assert [p.attempt for ps in verdict.usable_points(e).values() for p in ps] == [2]


def test_failed_requests_or_missing_request_lines_keep_a_point_out():
    p = point(0, 0, 100.0, 100.0)
    p.metrics.failed = 2
    assert not p.usable and verdict.why_not_usable(p) == "repeat 1 attempt 1: 2 requests failed"
    p.failures_allowed = True
    assert p.usable
    q = point(0, 0, 100.0, 100.0)
    q.requests_on_file = 0
    assert not q.usable and "request lines are not on file" in verdict.why_not_usable(q)


def test_a_repeat_left_running_says_it_never_finished():
    """reports/h100-c512: the machine went back during vLLM's third repeat, whose record still says running."""
    p = point(0, 2, 80.0, 80.0, status="running")
    assert not p.usable
    assert verdict.why_not_usable(p) == ("repeat 3 attempt 1: running when the run's files were last written (still "
                                         "running, or the run stopped before it finished: --resume measures it again)")


def rec(reads, tokens, asked, events=None):
    """A finished stream: `events` token-carrying events (default one per read), the last read at 100 ms."""
    r = RequestRecord(0, 16, asked)
    r.success, r.reads, r.output_tokens = True, reads, tokens
    n = reads if events is None else events
    r.chunk_ms = [100.0 - 10.0 * (reads - 1 - min(k, reads - 1)) for k in range(n)]
    return r


def test_trust_single_reads_lag_and_wrong_lengths():
    m = Metrics(completed=2, stats={"median_tpot_ms": 20.0})
    assert trust.assess([rec(5, 8, 8), rec(3, 8, 8)], m, {"loop_lag_p99_ms": 1.2}, 0.5, True).trusted
    t = trust.assess([rec(5, 8, 8), rec(1, 8, 8, events=8)], m, {}, 0.5, True)  # 8 events in one read: read late
    assert not t.trusted and t.single_read_requests == 1 and "single read" in t.reasons[0] and trust.worth_retry(t)
    assert t.server_merged_requests == 0 and trust.merged_note(t, []) is None
    t = trust.assess([rec(5, 8, 8)], m, {"loop_lag_p99_ms": 7.0}, 0.5, True)  # 6.5 ms over, limit 5 ms
    assert not t.trusted and "6.5 ms late" in t.reasons[0] and t.loop_lag_excess_ms == pytest.approx(6.5)
    t = trust.assess([rec(5, 6, 8)], m, {}, 0.5, True)
    assert not t.trusted and "e.g. 6 of 8" in t.reasons[0] and not trust.worth_retry(t)
    assert trust.assess([rec(5, 6, 8)], m, {}, 0.5, ignore_eos=False).trusted


def test_a_stream_the_server_sent_as_one_event_is_timed_correctly():
    """One event carrying every token was one write by the server (it merged the deltas: vLLM's
    RequestOutputCollector): the point stays trusted, the stream is counted and the point says so."""
    m = Metrics(completed=3, stats={"median_tpot_ms": 20.0})
    recs = [rec(5, 8, 8), rec(1, 8, 8, events=1), rec(1, 300, 300, events=1)]
    t = trust.assess(recs, m, {}, 0.5, True)
    assert t.trusted and t.reasons == []
    assert (t.single_read_requests, t.server_merged_requests) == (2, 2)
    assert trust.merged_note(t, recs).startswith("2 of 3 streams came as one event carrying all their tokens")
    empty_end = rec(1, 8, 8, events=2)  # the tokens in one event, then an empty finishing event in the same read
    empty_end.empty_last_chunk = True
    assert trust.assess([empty_end], m, {}, 0.5, True).server_merged_requests == 1
    late = trust.assess([rec(1, 8, 8, events=2)], m, {}, 0.5, True)  # two events with tokens, read at once
    assert not late.trusted and late.server_merged_requests == 0 and "several events" in late.reasons[0]


def test_the_busy_note_names_the_client_processes_that_kept_a_core_busy():
    assert trust.busy_note({}, []) is None and trust.busy_note({"cpu_share": 0.5}, [{"cpu_share": 0.89}]) is None
    note = trust.busy_note({"cpu_share": 0.95}, [{"worker": 0, "cpu_share": 0.3}, {"worker": 1, "cpu_share": 1.01}])
    assert note.startswith("client processes busy over the point (share of one core): the workers' parent 0.95, "
                           "worker 1 1.01;") and "loop lag, not this, decides trust" in note
    assert trust.busy_note({"cpu_share": 0.92}, []).startswith("client processes busy over the point (share of one "
                                                               "core): the client 0.92;")


def write_run(tmp_path, engines):
    run = ServeRun(created_at="2026-12-02T00:00:00+00:00", scenario={"load": {"repeats": 3}},
                   engines={e.name: e for e in engines})
    d = tmp_path / "run"
    d.mkdir()
    RunFile(d, run)
    for e in engines:  # a request line per point: a point without its lines enters no verdict
        (d / f"{e.name}.requests.jsonl").write_text("".join(
            f'{{"point": {p.index}, "repeat": {p.repeat}, "attempt": {p.attempt}}}\n' for p in e.points))
    return d


def test_report_says_no_significant_difference_where_intervals_overlap(tmp_path):
    a = engine("a", [[100.0, 104.0, 96.0], [400.0, 404.0, 396.0]], steady_tok_s=None)
    b = engine("b", [[101.0, 99.0, 109.0], [300.0, 303.0, 297.0]])
    d = write_run(tmp_path, [a, b])
    assert load_run(d).engines["b"].points[0].trust == Trust()  # the file round-trips through the reader
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    head = md.split("## End to end", 1)[0]  # the verdict leads the report
    assert "## Verdict: output throughput against a" in head
    assert "b: slower than a at c=8 (-25.0% [" in head
    assert "no significant difference at c=1 (+3.0% [" in head  # (101 + 99 + 109) / 300 - 1
    row = next(ln for ln in head.splitlines() if ln.startswith("| b | c=1 |"))
    assert "no significant difference" in row and "across 3 repeats" in row


def test_report_baseline_must_be_one_of_the_engines(tmp_path):
    d = write_run(tmp_path, [engine("a", [[1.0], [1.0]]), engine("b", [[1.0], [1.0]])])
    with pytest.raises(ValueError, match="no engine named 'c' in these runs; engines: a, b"):
        build_report([str(d)], str(tmp_path / "r"), baseline="c")


def test_figures_whole_takes_whole_points_where_windows_exist(tmp_path):
    # windows say b is level with a at c=1; whole points say b is 25% slower: the choice is the reader's, stated
    def windowed(name, values):  # each repeat's window says what its whole point says
        return EngineRecord(name=name, kind="vllm", status="complete", machine=ONE,
                            points=[point(i, r, v, v) for i, vs in enumerate(values) for r, v in enumerate(vs)])

    a = windowed("a", [[100.0, 104.0, 96.0], [400.0, 404.0, 396.0]])
    b = windowed("b", [[101.0, 99.0, 100.0], [300.0, 303.0, 297.0]])
    for p in b.points:
        p.metrics.output_throughput *= 0.75
    auto = verdict.compare(b, a)
    whole = verdict.compare(b, a, figures="whole")
    assert auto[0].gap.word == "no significant difference" and auto[0].candidate.source == "steady-state window"
    assert whole[0].gap.word == "slower" and whole[0].candidate.source == "whole point"
    d = write_run(tmp_path, [a, b])
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a", figures="whole") / "report.md").read_text()
    assert "b: slower than a at c=1 (-25.0% [" in md
    with pytest.raises(ValueError, match="report --figures: 'x' is not valid; valid: auto, whole"):
        build_report([str(d)], str(tmp_path / "r2"), baseline="a", figures="x")


def test_the_verdict_table_gives_tail_latency_beside_throughput(tmp_path):
    a = engine("a", [[100.0, 104.0, 96.0], [400.0, 404.0, 396.0]])
    b = engine("b", [[101.0, 99.0, 109.0], [300.0, 303.0, 297.0]])
    for e, ttft in ((a, [50.0, 51.0, 49.0]), (b, [100.0, 102.0, 98.0])):  # b's p99 TTFT twice a's, at c=1 only
        for p in e.points:
            if p.index == 0:
                p.metrics.stats["p99_ttft_ms"] = ttft[p.repeat]
    md = (build_report([str(write_run(tmp_path, [a, b]))], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| engine | point | output tok/s"))
    assert "| TTFT p99 difference % | TPOT p99 difference % | traffic |" in head
    c1 = next(ln for ln in md.splitlines() if ln.startswith("| b | c=1 |")).split(" | ")
    assert c1[10] == "not checked: the verdict is on whole points"  # the length check's column
    assert c1[11] == "not checked: the verdict is on whole points"  # the wave-phase check's (fixed lengths)
    assert c1[12].startswith("no figure before the drain on file")  # the drain check's (whole points)
    assert c1[13].startswith("+100.0% [") and c1[13].endswith("] slower") and c1[14] == "–"
    c8 = next(ln for ln in md.splitlines() if ln.startswith("| b | c=8 |")).split(" | ")
    assert c8[13] == "–"  # no p99 TTFT at c=8: no verdict on it


def mser_point(i, repeat, whole, rate, half=None, no_steady=None):
    """A point whose steady state was found by MSER-5 (rate, its half-width), or none (no_steady: why)."""
    m = Metrics(completed=10, output_throughput=whole, stats={"median_tpot_ms": 1000 / whole})
    st = None if no_steady else Steady(20.0, 80.0, output_throughput=rate, sub_output_throughput=[rate] * 10,
                                       rule="mser-5", halfwidth_tok_s=half, batches=10)
    return PointResult(index=i, repeat=repeat, concurrency=1, status="complete", metrics=m, steady=st,
                       no_steady=no_steady)


def test_the_verdict_uses_the_steady_rate_says_why_and_keeps_the_whole_point_beside_it():
    # steady rates: b level with a; whole points (warm-up and drain in them): b 20% slower
    a = EngineRecord(name="a", kind="vllm", status="complete", machine=ONE,
                     points=[mser_point(0, r, 100.0 + r, 100.0 + r) for r in range(3)])
    b = EngineRecord(name="b", kind="vllm", status="complete", machine=ONE,
                     points=[mser_point(0, r, 80.0 + r, 100.0 + r) for r in range(3)])
    (row,) = verdict.compare(b, a)
    assert row.candidate.source == "steady-state rate (MSER-5)" and row.gap.pct == pytest.approx(0.0)
    assert "every repeat of both engines has a steady state" in row.why
    assert row.whole is not None and row.whole.pct == pytest.approx(100 * (81 / 101 - 1))
    # one repeat of b without a steady state: both engines fall back to whole points, and the row says which and why
    b.points[1] = mser_point(0, 1, 81.0, 0.0, no_steady="MSER-5's minimum lies in the second half")
    (row,) = verdict.compare(b, a)
    assert row.candidate.source == "whole point" and row.baseline.source == "whole point" and row.whole is None
    assert row.why == "b repeat 2 has no steady state (MSER-5's minimum lies in the second half)"


def test_one_run_uses_the_rules_own_half_width():
    e = verdict.estimate([mser_point(0, 0, 90.0, 100.0, half=3.0)])
    assert (e.lo, e.hi) == (97.0, 103.0) and "10 batch means" in e.method


def halves(name, rates, halfs):
    """An engine whose 3 repeats have steady rates `rates` and first-half steady rates `halfs` (None: not on file)."""
    points = []
    for r, (v, h) in enumerate(zip(rates, halfs, strict=True)):
        p = dataclasses.replace(mser_point(0, r, v, v), half_steady_tok_s=h)
        p.steady = dataclasses.replace(p.steady, warmup_s=20.0, end_reason="last send", rel_halfwidth=0.01,
                                       target_rel_halfwidth=0.02, converged=True)
        points.append(p)
    return EngineRecord(name=name, kind="vllm", status="complete", machine=ONE, points=points)


def test_the_length_check_compares_the_full_gap_with_the_first_halves_interval(tmp_path):
    a = halves("a", [100.0, 101.0, 99.0], [100.0, 101.0, 99.0])
    # b 10% behind over the whole points, and in their first halves too: the verdict holds at half the length
    (row,) = verdict.compare(halves("b", [90.0, 91.0, 89.0], [89.0, 91.0, 90.0]), a)
    assert row.gap.word == "slower" and row.half.word == "slower" and not row.moved_with_length
    assert row.half.lo_pct < row.gap.pct < row.half.hi_pct
    # b level with a in the first halves, 10% behind over the whole: the figure depends on the point's length
    (row,) = verdict.compare(halves("b", [90.0, 91.0, 89.0], [100.0, 102.0, 98.0]), a)
    assert row.moved_with_length and row.half.word == "no significant difference"
    d = write_run(tmp_path, [a, halves("b", [90.0, 91.0, 89.0], [100.0, 102.0, 98.0])])
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "first half of each point: gap % [95%]" in md and ": the full-length gap lies outside it" in md
    assert "Length check: the verdict moved with the point's length at b c=1 (-10.0% [" in md
    assert "Not yet verdicts that hold: at b c=1 it moved with the point's length (length check)" in md


def test_the_length_check_says_why_it_cannot_be_made():
    a = halves("a", [100.0, 101.0, 99.0], [100.0, 101.0, 99.0])
    b = halves("b", [90.0, 91.0, 89.0], [90.0, None, 90.0])
    (row,) = verdict.compare(b, a)
    assert row.half is None and row.half_why.startswith("no first-half figure on file (a run before session 20")
    b.points[1].half_no_steady = "too short for MSER-5: 13 observations, needs 20"
    (row,) = verdict.compare(b, a)
    assert row.half_why == "a repeat's first half has no steady state (too short for MSER-5: 13 observations, needs 20)"
    b.points[1] = mser_point(0, 1, 91.0, 0.0, no_steady="MSER-5's minimum lies in the second half")
    (row,) = verdict.compare(b, a)  # a whole-point verdict: its halves would hold no drain, so none is checked
    assert row.half is None and row.half_why == "not checked: the verdict is on whole points"
    (row,) = verdict.compare(b, a, "median_tpot_ms")  # latency verdicts: no length check
    assert row.half is None and row.half_why == ""


def phased(name, rates, waves):
    """An engine whose 3 repeats have steady rates `rates` and, over the whole waves of each window, `waves`."""
    e = halves(name, rates, rates)
    for p, w in zip(e.points, waves, strict=True):
        p.waves_steady_tok_s = w
    return e


def test_the_wave_phase_check_says_where_the_verdict_depends_on_how_its_windows_cut_the_waves(tmp_path):
    a = phased("a", [100.0, 101.0, 99.0], [100.0, 101.0, 99.0])
    (row,) = verdict.compare(phased("b", [90.0, 91.0, 89.0], [89.0, 91.0, 90.0]), a)  # 10% behind either way
    assert row.waves.word == "slower" and not row.moved_with_phase and row.waves.lo_pct < row.gap.pct < row.waves.hi_pct
    b = phased("b", [96.0, 96.5, 95.5], [90.0, 104.0, 97.0])  # 4% behind; over whole waves no significant difference
    (row,) = verdict.compare(b, a)
    assert row.gap.word == "slower" and row.waves.word == "no significant difference" and row.moved_with_phase
    md = (build_report([str(write_run(tmp_path, [a, b]))], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "steady windows over whole waves (fixed lengths): gap % [95%]" in md and ": the verdict's word differs" in md
    assert "Wave-phase check: the verdict depends on where its steady windows cut the waves at b c=1 (-4.0% [" in md
    assert ("Not yet verdicts that hold: at b c=1 it depends on where the steady windows cut the waves (wave-phase "
            "check) (Verdict, below).") in md  # said in the answer too


def test_the_wave_phase_check_says_why_it_cannot_be_made_and_holds_where_it_agrees(tmp_path):
    a = phased("a", [100.0, 101.0, 99.0], [100.0, 101.0, 99.0])
    b = phased("b", [90.0, 91.0, 89.0], [90.0, None, 90.0])  # a run before session 25, or a window without a wave
    (row,) = verdict.compare(b, a)
    assert row.waves is None and row.waves_why.startswith("a repeat has less than one whole wave in its steady window")
    b.points[1] = mser_point(0, 1, 91.0, 0.0, no_steady="MSER-5's minimum lies in the second half")
    (row,) = verdict.compare(b, a)  # a whole-point verdict: nothing to narrow
    assert row.waves is None and row.waves_why == ""
    agree = phased("b", [90.0, 91.0, 89.0], [89.0, 91.0, 90.0])
    md = (build_report([str(write_run(tmp_path, [a, agree]))], str(tmp_path / "r"), baseline="a")
          / "report.md").read_text()
    assert "Wave-phase check: at every fixed-length row checked (1 of 1) the same steady windows" in md


def test_a_crossover_resting_on_a_verdict_that_does_not_hold_says_so(tmp_path):
    """b is 20% ahead at c=1 over whole waves too, and 4% behind at c=8 only by the rule's windows: the win map's
    crossover and the answer say that its c=8 side does not hold yet (reports/h100-map-fixed at c=256)."""
    def two(name, rates1, waves1, rates8, waves8):
        e = phased(name, rates1, waves1)
        for r, (v, w) in enumerate(zip(rates8, waves8, strict=True)):
            p = dataclasses.replace(mser_point(1, r, v, v), concurrency=8, waves_steady_tok_s=w)
            p.steady = dataclasses.replace(p.steady, warmup_s=20.0, end_reason="last send", rel_halfwidth=0.01,
                                           target_rel_halfwidth=0.02, converged=True)
            e.points.append(p)
        return e
    a = two("a", [100.0, 101.0, 99.0], [100.0, 101.0, 99.0], [100.0, 101.0, 99.0], [100.0, 101.0, 99.0])
    b = two("b", [120.0, 121.0, 119.0], [120.0, 121.0, 119.0], [96.0, 96.5, 95.5], [90.0, 104.0, 97.0])
    md = (build_report([str(write_run(tmp_path, [a, b]))], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "; not yet a verdict that holds at c=8 (wave-phase check))" in md  # the win map's sentence
    assert "at 1 place (1 of them on a verdict that does not hold yet)" in md  # the answer's


def drained(name, wholes, befores):
    """An engine whose 3 repeats have no steady state (whole-point verdicts), whole-point rates `wholes` and rates
    before their drains `befores` (None: a file before session 31)."""
    points = [dataclasses.replace(mser_point(0, r, w, 0.0, no_steady="MSER-5's minimum lies in the second half"),
                                  before_drain_tok_s=b) for r, (w, b) in enumerate(zip(wholes, befores, strict=True))]
    return EngineRecord(name=name, kind="vllm", status="complete", machine=ONE, points=points)


def test_the_drain_check_says_where_a_whole_point_verdict_rests_on_the_drains(tmp_path):
    """reports/h100-three-engines-c64: TurboMind's whole points hold drains twice as long as the others'. Where the
    points with their drains left out give another word, the verdict would change as the points grow longer."""
    a = drained("a", [100.0, 101.0, 99.0], [110.0, 111.0, 109.0])
    (row,) = verdict.compare(drained("b", [80.0, 81.0, 79.0], [95.0, 96.0, 94.0]), a)  # slower either way
    assert row.gap.word == "slower" and row.drain.word == "slower" and not row.rests_on_drain
    assert row.drain.pct == pytest.approx(95.0 / 110.0 * 100 - 100) and row.failed_check is None
    b = drained("b", [90.0, 91.0, 89.0], [110.0, 112.0, 108.0])  # 10% slower whole; level before the drains
    (row,) = verdict.compare(b, a)
    assert row.gap.word == "slower" and row.drain.word == "no significant difference" and row.rests_on_drain
    assert row.failed_check == "drain check" and row.half is None
    md = (build_report([str(write_run(tmp_path, [a, b]))], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "drains left out (whole points): gap % [95%]" in md and ": the verdict's word differs" in md
    assert "Drain check: the verdict rests on the points' drains at b c=1 (-10.0% [" in md
    assert "it rests on the whole points' drains (drain check) (Verdict, below)." in md  # said in the answer too
    assert "Drain check (throughput verdicts on whole points)" in md  # the method


def test_the_drain_check_says_why_it_cannot_be_made_and_holds_where_it_agrees(tmp_path):
    a = drained("a", [100.0, 101.0, 99.0], [110.0, 111.0, 109.0])
    (row,) = verdict.compare(drained("b", [80.0, 81.0, 79.0], [95.0, None, 94.0]), a)  # a file before session 31
    assert row.drain is None and row.drain_why.startswith("no figure before the drain on file")
    steady_rows = verdict.compare(halves("b", [90.0, 91.0, 89.0], [90.0, 91.0, 89.0]),
                                  halves("a", [100.0, 101.0, 99.0], [100.0, 101.0, 99.0]))
    assert steady_rows[0].drain is None and steady_rows[0].drain_why == ""  # steady verdicts hold no drain
    (row,) = verdict.compare(drained("b", [80.0, 81.0, 79.0], [95.0, 96.0, 94.0]), a, "median_tpot_ms")
    assert row.drain is None and row.drain_why == ""  # latency verdicts: no drain check
    md = (build_report([str(write_run(tmp_path, [a, drained("b", [80.0, 81.0, 79.0], [95.0, 96.0, 94.0])]))],
                       str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "Drain check: at every whole-point row checked (1 of 1) the points with their drains left out" in md


def test_the_drain_check_on_committed_runs():
    """reports/h100-three-engines-c64 (ShareGPT-like, whole points): every word holds with the drains left out;
    reports/h100-sglang-fixed-c64 (fixed 512/256): TurboMind's −3.1% rests on its drains (−1.4% without them)."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "reports"
    three = load_run(root / "h100-three-engines-c64/qwen-highload-h200-20261207-000040").engines
    for cand in ("turbomind", "vllm"):
        (row,) = verdict.compare(three[cand], three["sglang"])
        assert row.candidate.source == "whole point" and row.drain.word == row.gap.word and not row.rests_on_drain
    fixed = load_run(root / "h100-sglang-fixed-c64/three-engines-h200-20261207-035111").engines
    (row,) = verdict.compare(fixed["turbomind"], fixed["sglang"])
    assert row.gap.word == "slower" and round(row.gap.pct, 1) == -3.1
    assert row.drain.word == "no significant difference" and round(row.drain.pct, 1) == -1.4 and row.rests_on_drain
