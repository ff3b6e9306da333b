import pytest

from llmcompare.engines import launch, lmdeploy, registry, vllm
from llmcompare.engines import log as engines_log
from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Engine


def test_vllm_command_line():
    e = Engine(name="v", kind="vllm", python="/envs/vllm/bin/python", args=["--quantization", "awq_marlin"])
    assert launch.server_command(e, "/m/qwen", 8001) == [
        "/envs/vllm/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/m/qwen",
        "--host", "127.0.0.1", "--port", "8001", "--quantization", "awq_marlin"]


def test_vllm_command_prefix_and_separate_tokenizer():
    e = Engine(name="v", kind="vllm", command=["vllm"], served_model_name="q")
    assert launch.server_command(e, "/m", 9, tokenizer="/tok") == [
        "vllm", "serve", "/m", "--host", "127.0.0.1", "--port", "9", "--tokenizer", "/tok", "--served-model-name", "q"]


def test_lmdeploy_command_line_defaults_to_turbomind():
    e = Engine(name="tm", kind="lmdeploy", python="/envs/lmd/bin/python", args=["--model-format", "awq"])
    assert launch.server_command(e, "/m/qwen", 23333) == [
        "/envs/lmd/bin/python", "-m", "lmdeploy", "serve", "api_server", "/m/qwen",
        "--server-name", "127.0.0.1", "--server-port", "23333", "--model-format", "awq", "--backend", "turbomind"]


def test_lmdeploy_backend_given_is_not_repeated_nor_overridden():
    e = Engine(name="tm", kind="lmdeploy", command=["lmdeploy"], args=["--backend", "pytorch"])
    cmd = launch.server_command(e, "/m", 1)
    assert cmd.count("--backend") == 1 and cmd[-2:] == ["--backend", "pytorch"] and "turbomind" not in cmd


def test_openai_kind_is_not_launched():
    with pytest.raises(ScenarioError, match="not launched"):
        launch.server_command(Engine(name="o", kind="openai", base_url="http://x"), "/m", 1)


def test_unknown_kind_lists_valid():
    with pytest.raises(ScenarioError, match="unknown engine kind 'tgi'; valid: vllm, lmdeploy, sglang, openai"):
        registry.kind("tgi")


def test_vllm_log_kernel_choice():
    log = ("(EngineCore pid=1) INFO 12-02 [awq_marlin.py:1] Using MacheteLinearKernel for AutoAWQMarlinLinearMethod\n"
           "(APIServer pid=2) INFO vLLM API server version 0.26.0\n")
    facts = vllm.vllm_log(log)
    assert facts.kernels == {"AutoAWQMarlinLinearMethod": "MacheteLinearKernel"}
    assert facts.version == "0.26.0"
    log2 = ("(EngineCore pid=1211) INFO [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: ...\n"
            "(EngineCore pid=1211) INFO [flash_attn.py:776] Using FlashAttention version 3\n")
    facts = vllm.vllm_log(log2)
    assert facts.version == "0.26.0" and facts.notes == ["Using FlashAttention version 3"]


def test_version_is_asked_of_the_engine_environment(tmp_path):
    import sys

    pkg = tmp_path / "site" / "vllm-0.0.1.dist-info"
    pkg.mkdir(parents=True)
    (pkg / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.1\n")
    e = Engine(name="v", kind="vllm", python=sys.executable, env={"PYTHONPATH": str(tmp_path / "site")})
    assert launch.engine_version(e) == "0.0.1"


def test_lmdeploy_fallback_is_an_error():
    log = "2026-12-02 WARNING turbomind: Fallback to pytorch engine because model arch is not supported\n"
    with pytest.raises(engines_log.EngineFallbackError, match="fell back from TurboMind"):
        lmdeploy.lmdeploy_log(log)
    assert lmdeploy.lmdeploy_log("INFO turbomind engine ready").kernels == {}


def _h200_log(name: str) -> list[str]:
    import lzma
    from pathlib import Path

    with lzma.open(Path(__file__).resolve().parent / "data" / name, "rt") as f:
        return f.readlines()


def test_a_served_turbomind_log_gives_its_gemm_choices_and_an_instrumented_note(tmp_path):
    """The real lmdeploy 0.18 server log of the H200 run, with the real GEMM lines TurboMind printed in kernel-bench
    inserted after its warm-up, then 10,000 decode steps' `[Gemm] plan` lines (the M=1 lines as plan). Copies in
    tests/data of reports/h200-versions/qwen-awq-h200-20261202-162119 and kernels-qwen-awq-h200-20261202-163848."""
    server = _h200_log("h200-versions-turbomind/turbomind.server.log.xz")
    gemm = [ln for ln in _h200_log("h200-versions-kernel-bench/worker-cublas-marlin-machete-turbomind.log.xz")
            if ln.startswith(("[Gemm]", "[tune]"))]
    plans = [ln.replace("tune", "plan", 1) for ln in gemm if ln.startswith("[Gemm] tune") and "_fff_1x" in ln.split()[2]]
    log = tmp_path / "turbomind.server.log"
    with open(log, "w") as f:
        f.writelines(server[:40] + gemm + plans * 10_000 + server[40:])
    facts = launch.read_log_file("lmdeploy", log)
    assert facts.max_model_len == 4096 and "turbomind backend" in facts.notes  # the rest of the log still read
    by = {(r["m"], r["n"], r["k"]): r for r in facts.gemm_choices}
    assert len(by) == 60 and by[(1, 3584, 18944)]["plan_lines"] == 10_000 and by[(1, 3584, 18944)]["tile"] == [8, 128, 64]
    (note,) = [n for n in facts.notes if n.startswith(engines_log.GEMM_VERBOSE_NOTE)]
    assert "40000 '[Gemm] plan' lines" in note and "instrumented" in note
    # the same log without the plan lines: choices from warm-up, no note
    with open(log, "w") as f:
        f.writelines(server[:40] + gemm + server[40:])
    facts = launch.read_log_file("lmdeploy", log)
    assert len(facts.gemm_choices) == 60 and not any(n.startswith(engines_log.GEMM_VERBOSE_NOTE) for n in facts.notes)
    # and the committed log as it is (TM_GEMM_VERBOSE was off): none
    with open(log, "w") as f:
        f.writelines(server)
    assert launch.read_log_file("lmdeploy", log).gemm_choices == []


def test_read_log_file_still_raises_on_a_fallback_and_reads_vllm_kernels(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("INFO x\nWARNING turbomind: Fallback to pytorch engine because ...\n")
    with pytest.raises(engines_log.EngineFallbackError):
        launch.read_log_file("lmdeploy", log)
    log.write_text("".join(_h200_log("h200-versions-vllm/vllm.server.log.xz")))
    facts = launch.read_log_file("vllm", log)
    assert facts.kernels == {"AutoAWQMarlinLinearMethod": "MacheteLinearKernel"} and facts.gemm_choices == []


def test_an_old_run_json_without_gemm_choices_reads_and_a_new_one_round_trips(tmp_path):
    import json
    from pathlib import Path

    from llmcompare.schema.files import load_run, write_json

    old = Path(__file__).resolve().parent / "data/h200-versions-turbomind"  # reports/h200-versions/...-162119
    assert "gemm_choices" not in json.loads((old / "run.json").read_text())["engines"]["turbomind"]
    run = load_run(old)
    assert run.engines["turbomind"].gemm_choices == [] and run.engines["turbomind"].version == "0.18.0"
    run.engines["turbomind"].gemm_choices = [{"m": 1, "n": 4608, "k": 3584, "tile": [8, 128, 64], "splits": 1}]
    write_json(tmp_path / "run.json", run)
    assert load_run(tmp_path).engines["turbomind"].gemm_choices[0]["tile"] == [8, 128, 64]


@pytest.mark.parametrize("args", [["--max-model-len", "4096"], ["--max-model-len=4096"], ["--max-model-len=9", "--max-model-len", "4096"]])
def test_context_length_is_read_from_the_engine_args_in_both_spellings(args):
    """Before a server starts, its context length comes from its own args; `--max-model-len=4096` is the same as
    `--max-model-len 4096` (argparse reads both; the last one given wins)."""
    assert launch.arg_max_len(Engine(name="v", kind="vllm", args=args)) == (4096, "its --max-model-len argument")
    assert launch.arg_max_len(Engine(name="t", kind="lmdeploy", args=["--session-len=2048"])) == (
        2048, "its --session-len argument")


def test_a_default_flag_is_not_added_when_the_args_give_it_with_an_equals_sign():
    cmd = launch.server_command(Engine(name="t", kind="lmdeploy", python="/py", args=["--backend=pytorch"]), "/m", 1)
    assert "turbomind" not in cmd and cmd[-1] == "--backend=pytorch"
