"""End to end against a real SGLang 0.5.15 server on its CPU backend (the tiny random-weight Qwen2), slow tier.
Needs the environment `llmcompare setup sglang-cpu` makes (scripts/install_sglang_cpu.sh; scripts/test.sh makes
it, and CI sets LLMCOMPARE_REQUIRE_SGLANG=1 so that it cannot skip), or LLMCOMPARE_SGLANG_PYTHON; skipped without."""

import json
import os
import subprocess

import pytest
import yaml

from llmcompare.engines import environments
from llmcompare.errors import ScenarioError

pytestmark = pytest.mark.slow


def sglang_python() -> str | None:
    if given := os.environ.get("LLMCOMPARE_SGLANG_PYTHON"):
        return environments.resolve_python(given, "LLMCOMPARE_SGLANG_PYTHON")  # asked for: an error if absent
    try:
        return environments.resolve_python("sglang-cpu==0.5.15", "the sglang-cpu environment")
    except ScenarioError:
        return None


@pytest.fixture(scope="module")
def sglang_py():
    if (py := sglang_python()) is None:
        if os.environ.get("LLMCOMPARE_REQUIRE_SGLANG"):
            pytest.fail("LLMCOMPARE_REQUIRE_SGLANG is set but there is no SGLang CPU environment: run "
                        "scripts/install_sglang_cpu.sh (llmcompare setup sglang-cpu==0.5.15)")
        pytest.skip("no SGLang CPU environment (scripts/install_sglang_cpu.sh makes one)")
    return py


def scenario(tmp_path, py, model, prefix_cache="off", context=1024):
    # SGLANG_USE_CPU_ENGINE=1 and --device cpu: its CPU backend (srt/utils/common.py is_cpu); torch_native
    # attention (its default on x86, intel_amx, needs sgl_kernel's CPU build); --max-total-tokens bounds the KV
    # pool (tokens): by default it takes --mem-fraction-static (0.72 here) of the machine's free memory, 13 GB
    s = {"name": "sglang-cpu", "model": {"path": model},
         "engines": [{"name": "sglang-cpu", "kind": "sglang", "python": py, "prefix_cache": prefix_cache,
                      "args": ["--device", "cpu", "--attention-backend", "torch_native", "--context-length", str(context),
                               "--max-total-tokens", "8192", "--skip-server-warmup", "--enable-metrics"],
                      "env": {"SGLANG_USE_CPU_ENGINE": "1"}, "nice": 10, "startup_timeout_s": 400}],
         "workload": {"dataset": "random", "input_len": 64, "output_len": 16, "num_prompts": 6, "seed": 3},
         "load": {"concurrency": [1, 3], "warmup_requests": 1}, "output_dir": str(tmp_path / "runs")}
    f = tmp_path / "sglang.yaml"
    f.write_text(yaml.safe_dump(s))
    return f


def test_serve_bench_against_a_real_sglang_cpu_server(tmp_path, sglang_py, tiny_model, cli):
    # --context-length 82: 64 + 16 tokens a request, the most SGLang serves in full (context - 2: CONTEXT_RESERVE;
    # at 2048 - 2 + 2 an H100 run got every such request 2 tokens short, reports/h100-sglang)
    p = subprocess.run([*cli, "serve-bench", str(scenario(tmp_path, sglang_py, tiny_model, context=82))],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a point untrusted on a loaded machine, not the subject
    (d,) = (tmp_path / "runs").iterdir()
    run = json.loads((d / "run.json").read_text())
    eng = run["engines"]["sglang-cpu"]
    assert run["status"] == "complete" and eng["version"] == "0.5.15" and eng["kind"] == "sglang"
    assert "attention_backend=torch_native" in eng["log_notes"] and "tree cache ChunkCache" in eng["log_notes"]
    assert "--disable-radix-cache" in eng["command"] and eng["command"][4:6] == ["-m", "sglang.launch_server"]
    assert eng["max_model_len"] == 82  # its /v1/models says max_model_len (as vLLM's does)
    body = eng["request_body"]
    assert body["temperature"] == 0.0 and body["top_k"] == 1 and body["ignore_eos"] and body["max_tokens"] == 16
    last = {pt["index"]: pt for pt in eng["points"]}
    assert len(last) == 2 and all(pt["metrics"]["completed"] == 6 for pt in last.values())
    # ignore_eos is honoured and context - 2 is served in full: every request received its 16 tokens, counted by
    # the server's usage
    assert all(pt["metrics"]["total_output_tokens"] == 6 * 16 for pt in last.values())
    # its /metrics (--enable-metrics) read as vLLM's: sglang:num_running_reqs and its token counter
    samples = [json.loads(x) for x in (d / "sglang-cpu.metrics.jsonl").read_text().splitlines()]
    assert samples and any("num_requests_running" in x for x in samples)
    assert any("generation_tokens_total" in x for x in samples)
    # its prefix-cache counters, with the cache off: every prompt token looked up, none found
    for pt in last.values():
        pc = pt["prefix_cache"]
        assert pc["reported"] and pc["queries_tokens"] == 6 * 64 and pc["hits_tokens"] == 0, pc


def test_its_prefix_cache_on_finds_each_shared_prefix(tmp_path, sglang_py, tiny_model, cli):
    """RadixAttention on (its default; prefix_cache: on passes nothing): 2 prefixes of 256 tokens, seen in the
    warm-up, each measured request finds its prefix, by SGLang's own counters."""
    f = scenario(tmp_path, sglang_py, tiny_model, prefix_cache="on")
    data = yaml.safe_load(f.read_text())
    data["workload"] = {"dataset": "shared-prefix", "prefix_len": 256, "num_prefixes": 2, "input_len": 16,
                        "output_len": 4, "num_prompts": 6, "seed": 1}
    data["load"] = {"concurrency": [2], "warmup_requests": 2}
    f.write_text(yaml.safe_dump(data))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 4), p.stderr[-3000:]
    (d,) = (tmp_path / "runs").iterdir()
    eng = json.loads((d / "run.json").read_text())["engines"]["sglang-cpu"]
    assert "--disable-radix-cache" not in eng["command"] and "tree cache RadixCache" in eng["log_notes"]
    (pt,) = {x["index"]: x for x in eng["points"]}.values()
    pc = pt["prefix_cache"]
    assert pc["reported"] and pc["queries_tokens"] == 6 * (256 + 16), pc
    assert 6 * 250 <= pc["hits_tokens"] <= 6 * (256 + 16) and pc["hit_rate"] > 0.9, pc


def test_a_request_in_its_last_two_tokens_of_context_is_refused_before_it_starts(tmp_path, sglang_py, tiny_model, cli):
    """At --context-length 81 SGLang would serve 64 + 16 one token short: refused before any server starts."""
    p = subprocess.run([*cli, "serve-bench", str(scenario(tmp_path, sglang_py, tiny_model, context=81))],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert ("a request needs 80 tokens (prompt + output) and the engine accepts 79 (its --context-length argument "
            "says 81, and sglang keeps 2 of them") in p.stderr
    assert not (tmp_path / "runs").exists()


def test_a_profiled_pass_names_its_scheduler_and_keeps_its_trace(tmp_path, sglang_py, tiny_model, cli):
    # the capture hook in every Python process of a real SGLang server: the scheduler (which runs the model) is
    # named by its process title (engines/sglang.py PROCESS_ROLES), and its trace holds the model's CPU ops
    f = scenario(tmp_path, sglang_py, tiny_model)
    s = yaml.safe_load(f.read_text())
    s["workload"].update(num_prompts=12, output_len=32)
    s["load"] = {"concurrency": [3], "warmup_requests": 1, "max_attempts": 1}
    s["profile"] = {"points": [3], "seconds": 1.0, "waves": 8}
    f.write_text(yaml.safe_dump(s))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 4), p.stderr[-3000:]
    (d,) = (tmp_path / "runs").iterdir()
    (prof,) = json.loads((d / "run.json").read_text())["engines"]["sglang-cpu"]["profiles"]
    assert prof["status"] == "complete", prof
    roles = {t["role"]: t for t in prof["traces"]}
    assert roles["scheduler"]["title"] == "sglang::scheduler" and roles["detokenizer"]["title"] == "sglang::detokenizer"
    assert "sglang.launch_server" in roles["api-server"]["title"]
    assert all(t["file"] and t["error"] is None for t in prof["traces"]), prof["traces"]
    # the model ran in the scheduler: its trace is the big one (on an H100 56 MB against 10 kB for the others)
    assert roles["scheduler"]["json_bytes"] > 10 * max(roles["detokenizer"]["json_bytes"], roles["api-server"]["json_bytes"])
    assert "other" not in roles
