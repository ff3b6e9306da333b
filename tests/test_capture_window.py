"""Where a profiled pass's capture window falls (capture.py): in the decode phase of a wave, and how much of the
window's traffic was still before its first token."""

from llmcompare.capture import decode_delay_s, set_window_phase
from llmcompare.client import RequestRecord
from llmcompare.profiles import ProfileRecord
from llmcompare.results import Metrics, PointResult


def point(e2el_ms: float, p99_ttft_ms: float) -> PointResult:
    m = Metrics(completed=4, stats={"median_e2el_ms": e2el_ms, "p99_ttft_ms": p99_ttft_ms})
    return PointResult(index=0, concurrency=4, status="complete", metrics=m)


def test_delay_skips_the_next_waves_prefill_and_keeps_the_window_inside_the_wave():
    # c=256, 1024-token prompts on the H200: p99 TTFT 8.3 s of an 11.6 s E2EL (medians of the repeats)
    assert decode_delay_s([point(11600, 8300), point(11700, 8200), point(11500, 8400)], 1.0) == 9.125
    assert decode_delay_s([point(2000, 40)], 1.0) == 0.53  # c=1: 40 ms + (2 s - 40 ms) / 4
    assert decode_delay_s([point(1200, 1000)], 1.0) == 0.2  # no room: the window still ends inside the wave
    assert decode_delay_s([], 1.0) == 0.0


def rec(dispatch_s: float, ttft_ms: float, e2el_ms: float) -> RequestRecord:
    return RequestRecord(index=0, prompt_len=8, output_len=8, dispatch_s=dispatch_s, ttft_ms=ttft_ms,
                         e2el_ms=e2el_ms, success=True)


def phase(rs: list, window: list[float]) -> tuple:
    p = ProfileRecord(window_s=window)
    set_window_phase(p, rs)
    return p.window_in_flight, p.window_prefill_share


def test_prefill_share_counts_requests_in_flight_before_their_first_token():
    rs = [rec(0.0, 100, 5000), rec(0.0, 3000, 5000), rec(1.0, 2500, 5000), rec(4.0, 100, 500)]
    # mid-window 2.5 s: the first three are in flight; the 2nd (first token at 3.0 s) and 3rd (3.5 s) wait
    assert phase(rs, [2.0, 3.0]) == (3, round(2 / 3, 3))
    assert phase(rs, [4.2, 4.4]) == (4, 0.0)  # all four past their first tokens at 4.3 s
    assert phase(rs, [9.0, 10.0]) == (None, None) and phase(rs, []) == (None, None)
