import pytest

from llmcompare.analysis.metrics import compute, fill_token_counts
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.scenario import Slo


def rec(i, chunks, out_tokens, ok=True, prompt_tokens=10):
    r = RequestRecord(i, prompt_len=10, output_len=out_tokens)
    r.chunk_ms = chunks
    if ok:
        r.success, r.ttft_ms, r.e2el_ms = True, chunks[0], chunks[-1]
        r.output_tokens, r.output_tokens_source, r.prompt_tokens = out_tokens, "usage", prompt_tokens
    else:
        r.error = "HTTP 500: boom"
    return r


def test_hand_computed_point():
    # request 0: chunks at 100, 110, 130 ms, 3 tokens -> TTFT 100, E2EL 130, TPOT (130-100)/2 = 15, ITL 10, 20
    # request 1: chunks at 50, 90 ms, 2 tokens -> TTFT 50, E2EL 90, TPOT 40, ITL 40
    # request 2: failed
    rs = [rec(0, [100.0, 110.0, 130.0], 3), rec(1, [50.0, 90.0], 2), rec(2, [], 0, ok=False)]
    m = compute(rs, duration_s=2.0, percentiles=[50, 99], slo=Slo(ttft_ms=60)).to_json()  # vLLM's key names
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["total_input_tokens"] == 20 and m["total_output_tokens"] == 5
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["output_throughput"] == pytest.approx(2.5)
    assert m["total_token_throughput"] == pytest.approx(12.5)
    assert m["mean_ttft_ms"] == pytest.approx(75.0) and m["median_ttft_ms"] == pytest.approx(75.0)
    assert m["std_ttft_ms"] == pytest.approx(25.0)
    assert m["mean_tpot_ms"] == pytest.approx(27.5)
    assert m["mean_itl_ms"] == pytest.approx(70 / 3)  # gaps 10, 20, 40
    assert m["median_itl_ms"] == pytest.approx(20.0)
    assert m["p99_e2el_ms"] == pytest.approx(90 + 0.99 * 40)  # numpy linear interpolation over [90, 130]
    assert m["good_requests"] == 1 and m["request_goodput"] == pytest.approx(0.5)  # only request 1 has TTFT <= 60
    assert m["errors"] == {"HTTP 500: boom": 1}


def test_single_token_output_has_no_tpot_and_counts_as_good():
    m = compute([rec(0, [40.0], 1)], 1.0, [50], Slo(tpot_ms=1.0)).to_json()
    assert m["mean_tpot_ms"] == 0.0 and m["good_requests"] == 1


def test_no_slo_means_no_goodput():
    assert compute([rec(0, [1.0, 2.0], 2)], 1.0, [50]).request_goodput is None


def test_missing_usage_is_retokenized_and_said():
    r = rec(0, [1.0, 2.0, 3.0], 3)
    r.output_tokens, r.output_tokens_source, r.text = None, "none", "a b c d"
    src = fill_token_counts([r], lambda t: len(t.split()))
    assert r.output_tokens == 4 and src == {"usage": 0, "retokenized": 1}
    m = compute([r], 1.0, [50])
    assert m.output_tokens_retokenized == 1 and m.output_tokens_from_usage == 0


def test_lmdeploy_style_stream_end_chunk_is_no_gap_and_tokens_per_chunk_are_counted():
    # 6 tokens in 3 chunks of 2 (at 100, 120, 140 ms), then an end chunk without a token at 141 ms
    r = rec(0, [100.0, 120.0, 140.0, 141.0], 6)
    r.empty_last_chunk = True
    m = compute([r], 1.0, [50])
    assert m.stat("mean_itl_ms") == pytest.approx(20.0)  # gaps 20, 20: the end chunk is not a token
    assert m.stat("mean_itl_all_chunks_ms") == pytest.approx(41 / 3)  # vLLM bench serve's: 20, 20, 1
    assert m.mean_tokens_per_chunk == pytest.approx(2.0)
    assert m.stat("mean_e2el_ms") == pytest.approx(141.0)  # E2EL stays vLLM's: the last chunk with a choice


def test_cut_off_requests_are_neither_results_nor_failures():
    cut = rec(1, [], 0, ok=False)
    cut.cut_off = True
    m = compute([rec(0, [1.0, 2.0], 2), cut], 1.0, [50])
    assert m.completed == 1 and m.failed == 0 and m.errors == {}
