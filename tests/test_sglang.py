"""The engine kind `sglang` (engines/sglang.py), fast tier: its command line, flags, log, predicted kernel, setup
entry and the stream it sends. Where a test reads a real SGLang log or stream it is the one recorded from a real
SGLang 0.5.15 CPU server on this machine (tests/data/sglang-0.5.15-cpu/README.md); where it reads a line that a
CPU server cannot print (the AWQ kernel choice: AWQ runs only on CUDA, HIP and XPU in SGLang), the line is
composed from the format string in SGLang 0.5.15's source, quoted beside it. The real server itself:
tests/test_sglang_cpu.py (slow)."""

from pathlib import Path

import pytest

from llmcompare.analysis import attribution
from llmcompare.engines import gemm_backends, launch, registry, sglang
from llmcompare.errors import ScenarioError
from llmcompare.schema.gpu import Gpu
from llmcompare.schema.scenario import Engine
from llmcompare.serve.client import parse_event

DATA = Path(__file__).resolve().parent / "data" / "sglang-0.5.15-cpu"
AWQ = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                               "version": "gemm"}}
H200 = Gpu(0, "NVIDIA H200", "580.159.04", 9.0, 143771, 0)


def test_command_line_python_m_and_console():
    e = Engine(name="s", kind="sglang", python="/envs/sgl/bin/python", args=["--mem-fraction-static", "0.8"])
    assert launch.server_command(e, "/m/qwen", 30000) == [
        "/envs/sgl/bin/python", "-m", "sglang.launch_server", "--model-path", "/m/qwen", "--host", "127.0.0.1",
        "--port", "30000", "--mem-fraction-static", "0.8"]
    e = Engine(name="s", kind="sglang", command=["/envs/sgl/bin/sglang"], served_model_name="q")
    assert launch.server_command(e, "/m", 9, tokenizer="/tok") == [
        "/envs/sgl/bin/sglang", "serve", "--model-path", "/m", "--host", "127.0.0.1", "--port", "9",
        "--tokenizer-path", "/tok", "--served-model-name", "q"]


def test_tensor_parallel_and_context_length_flags():
    e = Engine(name="s", kind="sglang", python="/py", tensor_parallel=2, args=["--context-length=4096"])
    assert launch.server_command(e, "/m", 1)[-2:] == ["--tp-size", "2"]
    assert launch.arg_max_len(e) == (4096, "its --context-length argument")
    e = Engine(name="s", kind="sglang", args=["--tensor-parallel-size", "4"])
    with pytest.raises(ScenarioError, match="passes --tensor-parallel-size 4, but .* degree is 2"):
        launch.check_tensor_parallel("engines[s]", e, 2)


def test_prefix_cache_is_on_by_default_and_turned_off_with_disable_radix_cache():
    off = Engine(name="s", kind="sglang", python="/py", prefix_cache="off")
    assert launch.server_command(off, "/m", 1)[-1] == "--disable-radix-cache"
    on = Engine(name="s", kind="sglang", python="/py", prefix_cache="on")
    assert "--disable-radix-cache" not in launch.server_command(on, "/m", 1)
    given = Engine(name="s", kind="sglang", prefix_cache="on", args=["--disable-radix-cache"])
    with pytest.raises(ScenarioError, match="nothing: on is the engine default"):
        launch.check_prefix_cache("engines[s]", given)


def test_the_recorded_real_cpu_log():
    facts = launch.read_log_file("sglang", DATA / "server.log")
    assert facts.max_model_len == 512 and facts.kernels == {} and facts.version is None
    assert facts.notes == ["max_running_requests=4096", "attention_backend=torch_native", "tree cache RadixCache"]


def test_the_awq_kernel_lines_from_sglangs_source():
    # srt/layers/quantization/awq/awq.py: "The model is convertible to {} during runtime. Using {} kernel."
    line = ("[2026-12-04 01:33:10] The model is convertible to awq_marlin during runtime. Using awq_marlin kernel.\n")
    facts = sglang.sglang_log(line)
    assert facts.kernels == {"quantization": "awq_marlin"}
    assert gemm_backends.from_log_name("awq_marlin") == "sglang-marlin"
    rec = type("Rec", (), {"kernels": facts.kernels, "kind": "sglang"})()
    assert attribution.engine_backend(rec, None)[0] == "sglang-marlin"
    # the same file, --quantization awq: "Detected that the model can run with awq_marlin, however you specified
    # quantization=awq explicitly, so forcing awq. Use quantization=awq_marlin for faster inference"
    forced = sglang.sglang_log("[2026-12-04 01:33:10] Detected that the model can run with awq_marlin, however "
                               "you specified quantization=awq explicitly, so forcing awq. Use quantization="
                               "awq_marlin for faster inference\n")
    assert forced.kernels == {"quantization": "awq"} and gemm_backends.from_log_name("awq") is None
    rec = type("Rec", (), {"kernels": forced.kernels, "kind": "sglang"})()
    assert attribution.engine_backend(rec, None)[0] is None  # no kernel-bench backend for dequantize + matmul


def test_predicted_kernel():
    p = sglang.predict_kernel
    assert p(H200, AWQ, [], {}, False).kernel == "awq_marlin"
    assert p(H200, AWQ, ["--quantization", "awq_marlin"], {}, False).kernel == "awq_marlin"
    assert p(H200, AWQ, ["--quantization=awq"], {}, False).kernel == "awq"
    assert p(Gpu(0, "Tesla T4", "x", 7.5, 15360, 0), AWQ, [], {}, False).kernel == "awq"
    assert p(H200, {}, [], {}, False).kernel is None and p(H200, None, [], {}, False).kernel is None
    assert p(None, AWQ, [], {}, False).kernel is None
    assert p(H200, AWQ, ["--device", "cpu"], {}, True).why.startswith("SGLang's CPU backend")


def test_setup_entry_and_a_bare_setup_unchanged():
    pkg = registry.packages()["sglang"]
    assert (pkg.pypi, pkg.default, pkg.kind, pkg.gpu) == ("sglang", "0.5.15", "sglang", True)
    cpu = registry.packages()[pkg.without_gpu]  # a bare `setup sglang` without a GPU: SGLang for its CPU backend
    assert (cpu.pypi, cpu.default, cpu.kind, cpu.gpu, cpu.no_deps, cpu.by_default) == (
        "sglang", "0.5.15", "sglang", False, True, False)
    assert registry.default_setup(True) == ["vllm", "lmdeploy"] and registry.default_setup(False) == ["vllm"]
    k = registry.kind("sglang")
    assert (k.memory_flag, k.quant_flag, k.max_len_flag, k.awq_values[-1]) == (
        "--mem-fraction-static", "--quantization", "--context-length", "awq_marlin")


def test_the_recorded_real_stream_parses():
    """SGLang sends `"usage": null` in every choice chunk and `matched_stop`, then one usage chunk with no choices
    (and reasoning_tokens), then [DONE] (srt/entrypoints/openai/serving_completions.py)."""
    events = [parse_event(ln[len("data: "):]) for ln in (DATA / "completions-stream.txt").read_text().splitlines()
              if ln.startswith("data: ")]
    assert events[-1].done and sum(e.choice for e in events) == 8
    assert events[-4].finish_reason is None and events[-2].completion_tokens == 8
    assert [e.finish_reason for e in events if e.choice][-1] == "length" and events[-2].prompt_tokens == 2


def test_its_port_leaves_room_for_the_grpc_port_it_derives():
    """SGLang 0.5.15 refuses a port over 55535 (its gRPC port is port + 10000): seen on this machine."""
    from llmcompare.engines.server import free_port

    assert registry.kind("sglang").max_port == 55535 and registry.kind("vllm").max_port == 65535
    assert all(free_port("127.0.0.1", 55535) <= 55535 for _ in range(20))


def test_its_metrics_are_read_as_vllms():
    """SGLang 0.5.15's gauge and counter names (srt/observability/metrics_collector.py), in Prometheus' text format
    with its labels; composed, not recorded (the recorded server ran without --enable-metrics)."""
    from llmcompare.serve.engine_metrics import parse_prometheus

    page = ('# HELP sglang:num_running_reqs The number of running requests.\n'
            'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 3.0\n'
            'sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 1.0\n'
            'sglang:num_grammar_queue_reqs{model_name="m"} 7.0\n'
            'sglang:token_usage{model_name="m"} 0.25\n'
            'sglang:generation_tokens_total{model_name="m"} 96.0\n'
            'sglang:prompt_tokens_total{model_name="m"} 384.0\n')
    assert parse_prometheus(page) == {"num_requests_running": 3.0, "num_requests_waiting": 1.0,
                                      "kv_cache_usage_perc": 0.25, "generation_tokens_total": 96.0,
                                      "prompt_tokens_total": 384.0}


def test_its_prefix_cache_counters_give_the_hit_rate():
    """sglang:prompt_tokens_total and sglang:cached_tokens_total (one series per cache_source), as SGLang 0.5.15's
    metrics_collector.py names them; composed. Before a first hit the cached counter has no series: 0 hits."""
    from llmcompare.engines import prefix_cache

    before = prefix_cache.parse('sglang:prompt_tokens_total{model_name="m"} 100.0\n')
    after = prefix_cache.parse('sglang:prompt_tokens_total{model_name="m"} 500.0\n'
                               'sglang:cached_tokens_total{model_name="m",cache_source="device"} 150.0\n'
                               'sglang:cached_tokens_total{model_name="m",cache_source="host"} 50.0\n'
                               'sglang:generation_tokens_total{model_name="m"} 64.0\n')
    assert before == {"queries": 100.0, "hits": 0.0} and after == {"queries": 500.0, "hits": 200.0}
    pc = prefix_cache.delta(before, after)
    assert pc.reported and pc.queries_tokens == 400 and pc.hits_tokens == 200 and pc.hit_rate == 0.5


def test_two_tokens_of_its_context_are_refused_before_it_starts():
    """SGLang 0.5.15 serves a request at most context - 2 tokens (CONTEXT_RESERVE: its scheduler caps max_new_tokens
    at context_len - 1 - prompt - 1). On an H100 (session 26, reports/h100-sglang) every ShareGPT-like request with
    prompt + output = --context-length 2048 came back 2 tokens short. The check before the start says so."""
    from llmcompare.schema.scenario import Workload
    from llmcompare.serve.context_length import check_lengths
    from llmcompare.workload.prompts import Prompts

    class S:  # the two fields check_lengths reads of a scenario
        workload = Workload(dataset="synthetic-sharegpt", max_total_len=2048)

    prompts = Prompts(S.workload, None)  # synthetic lengths: no tokenizer is read for the longest request
    e = Engine(name="sgl", kind="sglang", args=["--context-length", "2048"])
    with pytest.raises(ScenarioError) as err:
        check_lengths(e, *launch.arg_max_len(e), S, prompts)
    assert str(err.value) == (
        "engines[sgl]: a request needs 2048 tokens (prompt + output) and the engine accepts 2046 (its --context-length "
        "argument says 2048, and sglang keeps 2 of them: engines/sglang.py); raise its context length (to 2050) or "
        "shorten workload.input_len/output_len/max_total_len")
    e.args = ["--context-length", "2050"]
    check_lengths(e, *launch.arg_max_len(e), S, prompts)  # fits
    v = Engine(name="v", kind="vllm", args=["--max-model-len", "2048"])
    check_lengths(v, *launch.arg_max_len(v), S, prompts)  # vLLM serves all 2048 (reserve 0)
    assert registry.kind("vllm").context_reserve == 0 and registry.kind("lmdeploy").context_reserve == 0
