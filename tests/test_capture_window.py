"""Where a profiled pass's capture window falls (serve/capture.py): in the decode phase of a wave, and how much of the
window's traffic was still before its first token."""

from llmcompare.schema.profile import ProfileRecord
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Metrics, PointResult
from llmcompare.serve.capture import all_decoding, decode_cap_s, pass_requests, set_window_phase


def point(e2el_ms: float, p99_ttft_ms: float) -> PointResult:
    m = Metrics(completed=4, stats={"median_e2el_ms": e2el_ms, "p99_ttft_ms": p99_ttft_ms})
    return PointResult(index=0, concurrency=4, status="complete", metrics=m)


def test_the_window_waits_for_every_request_in_flight_to_be_past_its_first_token():
    def live(*chunks):
        return [RequestRecord(index=i, prompt_len=8, output_len=8, chunk_ms=list(c)) for i, c in enumerate(chunks)]
    assert all_decoding(live([10.0], [12.0, 20.0], [30.0]), 3)
    assert not all_decoding(live([10.0], [], [30.0]), 3)  # one prompt still in prefill (or queued)
    assert not all_decoding(live([10.0], [12.0]), 3)  # not a full load: the pass's tail
    assert all_decoding([], 0)


def test_the_wait_for_the_decode_phase_is_capped_at_the_points_median_e2el():
    # c=256, 1024-token prompts on the H200: E2EL 11.6 s (medians of the repeats)
    assert decode_cap_s([point(11600, 8300), point(11700, 8200), point(11500, 8400)]) == 11.6
    assert decode_cap_s([]) == 60.0


def test_a_profiled_pass_is_the_points_length_or_profile_waves_and_never_under_four_waves():
    assert pass_requests([2560, 2560, 2560], 256, None) == 2560  # 10 waves: as the point's repeats sent
    assert pass_requests([5120, 5120], 512, 4) == 2048  # profile.waves: 4 x c, shorter than the point
    assert pass_requests([5120], 512, 12) == 6144  # or longer
    assert pass_requests([768], 256, None) == 1024  # a 3-wave point: its pass still gets four waves
    assert pass_requests([], 8, None) == 32


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
