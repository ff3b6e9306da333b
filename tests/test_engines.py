import pytest

from llmcompare import engines
from llmcompare.scenario import Engine, ScenarioError


def test_vllm_command_line():
    e = Engine(name="v", kind="vllm", python="/envs/vllm/bin/python", args=["--quantization", "awq_marlin"])
    assert engines.server_command(e, "/m/qwen", 8001) == [
        "/envs/vllm/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/m/qwen",
        "--host", "127.0.0.1", "--port", "8001", "--quantization", "awq_marlin"]


def test_vllm_command_prefix_and_separate_tokenizer():
    e = Engine(name="v", kind="vllm", command=["vllm"], served_model_name="q")
    assert engines.server_command(e, "/m", 9, tokenizer="/tok") == [
        "vllm", "serve", "/m", "--host", "127.0.0.1", "--port", "9", "--tokenizer", "/tok", "--served-model-name", "q"]


def test_lmdeploy_command_line_defaults_to_turbomind():
    e = Engine(name="tm", kind="lmdeploy", python="/envs/lmd/bin/python", args=["--model-format", "awq"])
    assert engines.server_command(e, "/m/qwen", 23333) == [
        "/envs/lmd/bin/python", "-m", "lmdeploy", "serve", "api_server", "/m/qwen",
        "--server-name", "127.0.0.1", "--server-port", "23333", "--model-format", "awq", "--backend", "turbomind"]


def test_lmdeploy_backend_given_is_not_repeated_nor_overridden():
    e = Engine(name="tm", kind="lmdeploy", command=["lmdeploy"], args=["--backend", "pytorch"])
    cmd = engines.server_command(e, "/m", 1)
    assert cmd.count("--backend") == 1 and cmd[-2:] == ["--backend", "pytorch"] and "turbomind" not in cmd


def test_openai_kind_is_not_launched():
    with pytest.raises(ScenarioError, match="not launched"):
        engines.server_command(Engine(name="o", kind="openai", base_url="http://x"), "/m", 1)


def test_unknown_kind_lists_valid():
    with pytest.raises(ScenarioError, match="unknown engine kind 'tgi'; valid: vllm, lmdeploy, openai"):
        engines.kind("tgi")


def test_vllm_log_kernel_choice():
    log = ("(EngineCore pid=1) INFO 12-02 [awq_marlin.py:1] Using MacheteLinearKernel for AutoAWQMarlinLinearMethod\n"
           "(APIServer pid=2) INFO vLLM API server version 0.26.0\n")
    facts = engines.vllm_log(log)
    assert facts.kernels == {"AutoAWQMarlinLinearMethod": "MacheteLinearKernel"}
    assert facts.version == "0.26.0"
    log2 = ("(EngineCore pid=1211) INFO [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: ...\n"
            "(EngineCore pid=1211) INFO [flash_attn.py:776] Using FlashAttention version 3\n")
    facts = engines.vllm_log(log2)
    assert facts.version == "0.26.0" and facts.notes == ["Using FlashAttention version 3"]


def test_version_is_asked_of_the_engine_environment(tmp_path):
    import sys

    pkg = tmp_path / "site" / "vllm-0.0.1.dist-info"
    pkg.mkdir(parents=True)
    (pkg / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.1\n")
    e = Engine(name="v", kind="vllm", python=sys.executable, env={"PYTHONPATH": str(tmp_path / "site")})
    assert engines.engine_version(e) == "0.0.1"


def test_lmdeploy_fallback_is_an_error():
    log = "2026-12-02 WARNING turbomind: Fallback to pytorch engine because model arch is not supported\n"
    with pytest.raises(engines.EngineFallbackError, match="fell back from TurboMind"):
        engines.lmdeploy_log(log)
    assert engines.lmdeploy_log("INFO turbomind engine ready").kernels == {}
