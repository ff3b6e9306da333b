"""The engine's running requests against the client's concurrency (analysis/agreement.py): a note only where the
engine ran at least one whole request fewer, with what its scheduler held and no claim about the rest."""

from __future__ import annotations

from llmcompare.analysis import agreement
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import EngineCounters


def test_no_note_for_the_gaps_between_sends_at_low_concurrency():
    # the demo on the CPU vLLM, 2026-12-05: c=1 averaged <1 running, and the old rule said "the rest waited"
    assert agreement.running_note(EngineCounters(mean_running=0.85, target_in_flight=1)) is None
    assert agreement.running_note(EngineCounters(mean_running=240.0, target_in_flight=256)) is None  # within 90%


def test_a_note_says_what_the_scheduler_held_and_not_where_the_rest_were():
    note = agreement.running_note(EngineCounters(mean_running=142.0, mean_waiting=90.5, target_in_flight=256))
    assert "ran 142.0 requests at once" in note and "kept 256 in flight" in note
    assert "90.5 waited in its scheduler" in note and "other ~23.5 were in neither gauge" in note
    assert "not measured which" in note
    bare = agreement.running_note(EngineCounters(mean_running=2.6, target_in_flight=4))
    assert "where the other ~1 were is not measured (no num_requests_waiting)" in bare


def test_mean_waiting_comes_from_the_points_samples():
    samples = [(0.5, {"num_requests_running": 3.0, "num_requests_waiting": 1.0}),
               (1.0, {"num_requests_running": 2.0, "num_requests_waiting": 0.0})]
    c = agreement.compare(samples, [], 4)
    assert (c.mean_running, c.mean_waiting, c.reported) == (2.5, 0.5, False)  # no token counters: not compared


def _ttft_samples():
    # two /metrics samples 4 s apart: 20 first tokens with 2.0 s of TTFT between them (100 ms each); 18 requests
    # finished, queued 0.09 s and prefilling 0.36 s in all (5 and 20 ms each)
    base = {"generation_tokens_total": 0.0, "time_to_first_token_seconds_sum": 1.0,
            "time_to_first_token_seconds_count": 10.0, "request_queue_time_seconds_sum": 0.01,
            "request_queue_time_seconds_count": 2.0, "request_prefill_time_seconds_sum": 0.04,
            "request_prefill_time_seconds_count": 2.0}
    end = {"generation_tokens_total": 400.0, "time_to_first_token_seconds_sum": 3.0,
           "time_to_first_token_seconds_count": 30.0, "request_queue_time_seconds_sum": 0.1,
           "request_queue_time_seconds_count": 20.0, "request_prefill_time_seconds_sum": 0.4,
           "request_prefill_time_seconds_count": 20.0}
    return [(1.0, base), (5.0, end)]


def _rec(i, dispatch_s, ttft_ms):
    return RequestRecord(index=i, prompt_len=8, output_len=8, dispatch_s=dispatch_s, ttft_ms=ttft_ms,
                         e2el_ms=ttft_ms + 10.0, chunk_ms=[ttft_ms, ttft_ms + 10.0], output_tokens=2, success=True)


def test_the_engines_ttft_is_split_from_the_clients_over_the_same_window():
    # the client's first tokens: two inside (1, 5] (300 and 500 ms), one before it and one after it (not counted);
    # the sends span 0.1-5.2 s, so both samples are inside the point
    recs = [_rec(0, 0.1, 200.0), _rec(1, 1.0, 300.0), _rec(2, 3.0, 500.0), _rec(3, 5.2, 100.0)]
    c = agreement.compare(_ttft_samples(), recs, 4)
    assert c.window_s == [1.0, 5.0]
    assert abs(c.engine_mean_ttft_ms - 100.0) < 1e-9
    assert abs(c.engine_mean_queue_ms - 5.0) < 1e-9 and abs(c.engine_mean_prefill_ms - 20.0) < 1e-9
    assert c.client_mean_ttft_ms == 400.0
    text = agreement.ttft_text(c)
    assert "client's mean 400 ms" in text and "engine's own 100 ms (queued 5 ms, prefill 20 ms)" in text
    assert "~300 ms a request outside the engine's clock" in text
    assert "~75 ms of the engine's own is in neither its queue nor its prefill" in text  # 100 - 5 - 20
    c.engine_mean_queue_ms = 90.0  # queue + prefill 110 ms > TTFT 100 ms: the windows' request sets differ
    text = agreement.ttft_text(c)
    assert "its queue and prefill together exceed its own TTFT by ~10 ms" in text and "~-" not in text
    assert "neither its queue" not in text
    c.client_mean_ttft_ms = 60.0
    assert "the client's is ~40 ms shorter" in agreement.ttft_text(c) and "~-" not in agreement.ttft_text(c)
    c.engine_mean_prefill_ms = None
    assert "neither its queue" not in agreement.ttft_text(c)  # not measured: not said
    assert "exceed its own TTFT" not in agreement.ttft_text(c)


def test_the_running_note_gives_the_ttft_split_where_measured_and_says_not_measured_where_not():
    c = EngineCounters(mean_running=150.0, mean_waiting=0.5, target_in_flight=256, engine_mean_ttft_ms=100.0,
                       client_mean_ttft_ms=2400.0)
    note = agreement.running_note(c)
    assert "~105.5 were in neither gauge" in note and "~2300 ms a request outside the engine's clock" in note
    assert "not measured which" not in note
    c.engine_mean_ttft_ms = None
    assert "not measured which" in agreement.running_note(c) and agreement.ttft_text(c) is None


def test_no_split_without_the_histograms_or_with_no_first_token_in_the_window():
    recs = [_rec(0, 0.5, 300.0), _rec(1, 5.5, 300.0)]
    samples = [(1.0, {"generation_tokens_total": 0.0}), (5.0, {"generation_tokens_total": 400.0})]
    c = agreement.compare(samples, recs, 4)
    assert c.window_s == [1.0, 5.0] and c.engine_mean_ttft_ms is None and c.client_mean_ttft_ms is None
    flat = [(t, {**v, "time_to_first_token_seconds_count": 10.0}) for t, v in _ttft_samples()]
    c = agreement.compare(flat, recs, 4)
    assert c.window_s == [1.0, 5.0] and c.engine_mean_ttft_ms is None  # no first token counted in the window
