"""Whether the GPU waited (analysis/gpu_idle.py, report/telemetry.py): the idle share of a point's power samples and
the engine's generation counter over the idle seconds, on constructed series shaped like the H100 c=512 run
(reports/h100-c512-complete: idle ~125 W, busy ~700 W, 0.2 s power samples, 0.5 s counter samples)."""

import pytest
from test_report_timeline import served

from llmcompare.analysis import gpu_idle
from llmcompare.report.doc import Doc
from llmcompare.report.telemetry import idle_by_point, telemetry_section
from llmcompare.schema.files import append_jsonl
from llmcompare.schema.run import EngineCounters
from llmcompare.schema.telemetry import Sample, TelemetrySummary
from llmcompare.serve import telemetry

T0 = 1796485840.0  # Unix seconds, as nvidia-smi stamps them
WHOLE = [0.0, 30.0]  # a comparison window over the whole constructed point (the opening is left out anyway)


def power_rows(watts_at, seconds=30.0, gpus=(0,)):
    """Telemetry rows every 0.2 s; each GPU's line stamped 10 ms after the one before, as nvidia-smi does."""
    rows = []
    for i in range(int(seconds / 0.2)):
        for g in gpus:
            t = i * 0.2
            rows.append({"gpu": g, "t_s": T0 + t + 0.01 * g, "power_w": watts_at(t) / len(gpus)})
    return rows


def counters(rate_at, seconds=30.0):
    """generation_tokens_total every 0.5 s from the sampler's start, rising at rate_at(t) tok/s."""
    out, total = [], 0.0
    for i in range(int(seconds / 0.5)):
        t = i * 0.5
        out.append((t + 0.05, total))
        total += 0.5 * rate_at(t)
    return out


def waits(t):  # idle at the opening (0-2 s) and at 14-17 s; busy otherwise
    return 125.0 if t < 2 or 14 <= t < 17 else 700.0


def lags(t):  # the counter keeps rising while the GPU is idle at 14-17 s
    return 14000.0 if 14 <= t < 17 else 8000.0


def test_an_idle_stretch_with_the_counter_still_rising_is_found_and_measured():
    g = gpu_idle.compare(gpu_idle.power_series(power_rows(waits)), counters(lags), WHOLE)
    assert g.threshold_w == pytest.approx(125 + 0.4 * 575)
    assert g.samples == 125 and g.idle_share == pytest.approx(15 / 125)  # 3 of the 25 s after the opening
    assert g.idle_intervals == 6 and g.busy_intervals == 43
    assert g.gen_tok_s_idle == pytest.approx(14000.0) and g.gen_tok_s_busy == pytest.approx(8000.0)
    assert gpu_idle.counter_lagged(g) and g.idle_over_busy_min > 1.0  # holds at every alignment within 1 s


def test_a_lag_seen_at_one_alignment_only_is_not_claimed():
    # the counter is fast for 2 s around the idle stretch's start only: at the first samples' alignment the idle
    # intervals average 10,000 tok/s against ~8,100 busy, but with the power 1 s later the idle seconds are slower
    edge = gpu_idle.compare(gpu_idle.power_series(power_rows(waits)),
                            counters(lambda t: 14000.0 if 13 <= t < 15 else 8000.0), WHOLE)
    assert edge.gen_tok_s_idle == pytest.approx(10000.0) and edge.gen_tok_s_idle > edge.gen_tok_s_busy
    assert edge.idle_over_busy_min < 1.0 and not gpu_idle.counter_lagged(edge)


def test_a_counter_that_stops_with_the_gpu_reads_zero_in_the_idle_seconds():
    g = gpu_idle.compare(gpu_idle.power_series(power_rows(waits)), counters(lambda t: 0.0 if 14 <= t < 17 else 8000.0),
                         WHOLE)
    assert g.idle_share == pytest.approx(0.12) and g.gen_tok_s_idle == pytest.approx(0.0)


def test_a_gpu_busy_after_the_opening_has_no_idle_share_and_the_opening_is_left_out():
    g = gpu_idle.compare(gpu_idle.power_series(power_rows(lambda t: 125.0 if t < 2 else 690.0)), counters(lags), WHOLE)
    assert g.idle_share == 0.0 and g.idle_intervals == 0 and g.gen_tok_s_idle is None


def test_without_idle_busy_contrast_it_says_not_measured():
    g = gpu_idle.compare(gpu_idle.power_series(power_rows(lambda t: 690.0 + (t % 1))), counters(lags), WHOLE)
    assert g.idle_share is None and "no idle/busy contrast" in g.why_not
    assert gpu_idle.compare([], counters(lags), WHOLE) is None


def test_without_a_window_or_with_a_short_one_it_says_not_measured():
    power = gpu_idle.power_series(power_rows(waits))
    assert "no comparison window" in gpu_idle.compare(power, counters(lags), None).why_not  # runs before it
    g = gpu_idle.compare(power, counters(lags), [14.0, 17.0])  # 3 s: 16 samples, all idle, but too few to say
    assert g.idle_share is None and "under 25" in g.why_not


def test_two_gpus_are_summed_although_their_lines_are_stamped_apart():
    one = gpu_idle.power_series(power_rows(waits))
    two = gpu_idle.power_series(power_rows(waits, gpus=(0, 1)))
    assert len(two) == len(one) and [w for _, w in two] == pytest.approx([w for _, w in one])


def test_the_report_reads_the_files_and_says_where_the_counter_ran_behind_the_gpu(tmp_path):
    t = telemetry.Telemetry(200)
    t.why_not = None
    t.samples = [Sample(r["gpu"], r["t_s"], 1980.0, r["power_w"], 1000.0) for r in power_rows(waits)]
    tag = {"point": 0, "repeat": 0, "attempt": 1, "label": "c=4"}
    t.save(tmp_path / "tm.telemetry.jsonl.gz", tag, None)
    for ts, v in counters(lags):
        append_jsonl(tmp_path / "tm.metrics.jsonl", {**tag, "t_s": ts, "generation_tokens_total": v})
    assert idle_by_point(tmp_path, "tm", {(0, 0, 1): WHOLE})[(0, 0, 1)].idle_intervals == 6
    assert "no comparison window" in idle_by_point(tmp_path, "tm")[(0, 0, 1)].why_not
    sv = served(TelemetrySummary(available=True, samples=150, gpus=[0], duration_s=30.0, mean_power_w=600.0))
    sv.run.dir = str(tmp_path)
    sv.rec.points[0].engine_counters = EngineCounters(window_s=WHOLE)
    doc = Doc()
    telemetry_section(doc, {"tm": sv})
    md = doc.markdown()
    assert "| 12.0 | 14,000 (6); idle/busy at worst 1.45 | 8,000 |" in md
    assert "at every alignment of the clocks tried, in: tm c=4 #1" in md
    assert "| not read (clocks ~1 s apart) |" in md  # these counters carry no unix_s: the requests are not read
    assert "not measured here" in md
    assert not gpu_idle.counter_lagged(gpu_idle.compare(gpu_idle.power_series(power_rows(waits)),
                                                         counters(lambda t: 0.0 if 14 <= t < 17 else 8000.0), WHOLE))
    assert idle_by_point(tmp_path / "nowhere", "tm") == {}


def test_only_the_comparison_window_counts_so_a_drain_is_not_called_idle():
    power = gpu_idle.power_series(power_rows(waits))
    g = gpu_idle.compare(power, counters(lags), [6.0, 13.0])  # the idle stretch (14-17 s) lies after the window
    assert g.window_s == [6.0, 13.0] and g.idle_share == 0.0 and g.idle_intervals == 0
    g = gpu_idle.compare(power, counters(lags), [1.0, 20.0])  # never the opening: from 5 s
    assert g.window_s == [5.0, 20.0] and g.samples in (75, 76) and g.idle_share == pytest.approx(15 / g.samples)


ZERO = T0 + 0.3  # Unix time of the counters' t_s = 0: the power sampler started 0.3 s before the /metrics one


def averaged_power_rows(busy_at, seconds=30.0):
    """nvidia-smi's power.draw as on Ampere and newer: each 0.2 s sample is the mean of the last second's draw
    (125 W idle, 700 W busy, busy_at(t) on the counters' clock), stamped in Unix seconds."""
    rows = []
    for i in range(int(seconds / 0.2)):
        t = i * 0.2 - 0.3  # the counters' clock
        draw = [700.0 if busy_at(t - k * 0.05) else 125.0 for k in range(20)]  # the second before t
        rows.append({"gpu": 0, "t_s": ZERO + t, "power_w": sum(draw) / len(draw)})
    return rows


def starved(t):  # the GPU runs out of requests at 14-17 s (and waits at the opening)
    return not (t < 2 or 14 <= t < 17)


def gauges(seconds=30.0):
    """(t_s, running, waiting) every 0.5 s: 60 running and none waiting while the GPU is starved, 250 and 5 else."""
    return [(i * 0.5 + 0.05, 60.0 if not starved(i * 0.5 + 0.05) else 250.0,
             0.0 if not starved(i * 0.5 + 0.05) else 5.0) for i in range(int(seconds / 0.5))]


def test_matched_clocks_read_the_engines_requests_in_the_idle_seconds():
    power = gpu_idle.power_series(averaged_power_rows(starved), origin_s=ZERO)
    g = gpu_idle.compare(power, counters(lambda t: 0.0 if 14 <= t < 17 else 8000.0), WHOLE, aligned=True,
                         gauges=gauges())
    assert g.clocks == "matched by Unix time"
    assert g.running_idle == pytest.approx(60.0) and g.waiting_idle == pytest.approx(0.0)
    assert g.running_busy > 240.0 and g.waiting_busy > 4.5  # an edge sample of the idle stretch reads busy
    # at every alignment tried (the power 0.25-0.75 s later) the idle seconds stay far below the busy ones; at
    # one of them a sample just after the stretch falls inside it: the range says how much an edge moves it
    lo, hi = g.running_idle_range
    assert lo == 60.0 and 60.0 < hi < 125.0
    assert g.gen_tok_s_idle == pytest.approx(0.0) and not gpu_idle.counter_lagged(g)
    # read without the 0.5 s for the 1 s average, the idle seconds would take in busy ones: what the offset is for
    late = gpu_idle._gauges(power, gauges(), 5.0, 30.0, g.threshold_w, 0.0)[0]
    assert max(r for r, _ in late) == 250.0


def test_unmatched_clocks_do_not_read_the_requests():
    power = gpu_idle.power_series(averaged_power_rows(starved))  # from its own first sample
    g = gpu_idle.compare(power, counters(lags), WHOLE, gauges=gauges())
    assert g.clocks.startswith("from their first samples")
    assert g.running_idle is None and g.running_idle_range is None and g.idle_share > 0


def test_the_report_matches_the_clocks_where_the_counters_carry_unix_time(tmp_path):
    t = telemetry.Telemetry(200)
    t.why_not = None
    t.samples = [Sample(0, r["t_s"], 1980.0, r["power_w"], 1000.0) for r in averaged_power_rows(starved)]
    tag = {"point": 0, "repeat": 0, "attempt": 1, "label": "c=4"}
    t.save(tmp_path / "tm.telemetry.jsonl.gz", tag, None)
    rates = counters(lambda t: 0.0 if 14 <= t < 17 else 8000.0)
    for (ts, v), (_, run, wait) in zip(rates, gauges(), strict=True):
        append_jsonl(tmp_path / "tm.metrics.jsonl", {**tag, "t_s": ts, "unix_s": ZERO + ts, "generation_tokens_total": v,
                                                      "num_requests_running": run, "num_requests_waiting": wait})
    g = idle_by_point(tmp_path, "tm", {(0, 0, 1): WHOLE})[(0, 0, 1)]
    assert g.clocks == "matched by Unix time" and g.running_idle == pytest.approx(60.0)
    sv = served(TelemetrySummary(available=True, samples=150, gpus=[0], duration_s=30.0, mean_power_w=600.0))
    sv.run.dir = str(tmp_path)
    sv.rec.points[0].engine_counters = EngineCounters(window_s=WHOLE)
    doc = Doc()
    telemetry_section(doc, {"tm": sv})
    assert "| idle 60 / 0 (running 60-92 over the alignments); busy 246 / 5 |" in doc.markdown()
