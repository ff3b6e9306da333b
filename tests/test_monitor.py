from llmcompare.serve.engine_metrics import parse_prometheus

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 7.0
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="m"} 0.0
lmdeploy:num_requests_running 2.0
lmdeploy:gpu_cache_usage_perc 0.5
"""


def test_gauges_are_summed_and_named_without_the_engine_prefix():
    # vLLM and lmdeploy pages parse alike; lmdeploy's gpu_cache_usage_perc is the KV-cache use
    assert parse_prometheus(PAGE) == {"num_requests_running": 5.0, "num_requests_waiting": 1.0,
                                      "kv_cache_usage_perc": 0.75}


def test_the_first_token_histograms_sum_and_count_are_read_and_their_buckets_are_not():
    page = PAGE + (
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 12.5\n'
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 50.0\n'
        'vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 0.5\n'
        'vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 40.0\n'
        'vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 40.0\n'
        'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 99.0\n')
    got = parse_prometheus(page)
    assert got["time_to_first_token_seconds_sum"] == 12.5 and got["time_to_first_token_seconds_count"] == 50.0
    assert got["request_queue_time_seconds_sum"] == 0.5 and got["request_prefill_time_seconds_count"] == 40.0
    assert "e2e_request_latency_seconds_sum" not in got and not any("bucket" in k for k in got)
