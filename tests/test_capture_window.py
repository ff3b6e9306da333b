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


def test_profile_window_wave_moves_the_windows_and_lengthens_the_pass():
    import asyncio

    from llmcompare.serve import capture

    assert pass_requests([768], 256, None, 10) == 12 * 256  # window_wave + 2 waves at least
    assert pass_requests([5000], 64, None, 10) == 5000

    class Cap:
        started_at_done = None

        async def start(self):
            Cap.started_at_done = st.done
            return [1]

        def stop(self, pids):
            pass

    st = capture._Pass(c=4, t0=0.0, window_wave=5)
    # c requests in flight, every one past its first token: each moment is a decode moment
    st.live = {i: RequestRecord(index=i, prompt_len=8, output_len=8, chunk_ms=[1.0]) for i in range(4)}
    rec = ProfileRecord()

    async def run():
        task = asyncio.create_task(capture._windows(st, Cap(), rec, 0.01, 1.0))
        for _ in range(30):  # requests finish one by one, 20 ms apart
            await asyncio.sleep(0.02)
            st.done += 1
        await task

    asyncio.run(run())
    assert 20 <= Cap.started_at_done <= 22  # the captured window once 5 waves of 4 have finished, not 2
    assert st.base and st.base[1] <= st.window[0] and rec.delay_s < 0.5 and not rec.warnings


def test_profile_window_wave_is_checked():
    import pytest

    from llmcompare.errors import ScenarioError
    from llmcompare.scenario.rules import check_profile
    from llmcompare.schema.scenario import Profile

    check_profile(Profile(points=[64], window_wave=10, waves=12), [64], [512], [256])
    with pytest.raises(ScenarioError, match=r"profile\.waves.*window_wave \+ 2"):
        check_profile(Profile(points=[64], window_wave=10, waves=11), [64], [512], [256])
    with pytest.raises(ScenarioError, match=r"profile\.window_wave"):
        check_profile(Profile(points=[64], window_wave=1), [64], [512], [256])
