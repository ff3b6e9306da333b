"""The workload never changes silently: prompt + output against each engine's context before any server starts,
and file datasets never send a prompt twice in a run unless the scenario allows it. No server is started."""

import json
import subprocess

import pytest
import yaml

from llmcompare import scenario
from llmcompare.errors import ScenarioError
from llmcompare.serve import measure
from llmcompare.serve.loadgen import plan
from llmcompare.workload.prompts import Prompts, load_tokenizer

pytestmark = pytest.mark.vllm  # the engine's python must be a real vLLM environment (preflight checks it)


def write(tmp_path, vllm_py, model, **over):
    s = {"name": "w", "model": {"path": model},
         "engines": [{"name": "v", "kind": "vllm", "python": vllm_py, "args": ["--max-model-len", "100"]}],
         "workload": {"dataset": "random", "input_len": 64, "output_len": 64, "num_prompts": 2},
         "load": {"concurrency": [1]}, "output_dir": str(tmp_path / "runs")}
    for k, v in over.items():
        s[k] = {**s.get(k, {}), **v} if isinstance(v, dict) else v
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump(s))
    return f


def test_prompt_and_output_beyond_the_engine_context_is_refused_before_it_starts(tmp_path, vllm_py, tiny_model, cli):
    f = write(tmp_path, vllm_py, tiny_model)
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert ("engines[v]: a request needs 128 tokens (prompt + output) and the engine accepts 100 (its "
            "--max-model-len argument)") in p.stderr
    assert not (tmp_path / "runs").exists()  # no run directory, no server


def test_a_file_dataset_too_small_for_the_run_is_an_error_unless_reuse_is_allowed(tmp_path, tiny_model):
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"hello number {i}", "output_len": 4}) + "\n" for i in range(10)))
    base = {"model": {"path": tiny_model}, "engines": [{"name": "v", "kind": "openai", "base_url": "http://x"}],
            "workload": {"dataset": "jsonl", "path": str(data), "num_prompts": 4},
            "load": {"concurrency": [1, 2], "warmup_requests": 1, "repeats": 2, "max_attempts": 1}}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(base))
    s = scenario.load(str(f))
    prompts = Prompts(s.workload, load_tokenizer(tiny_model))
    pts = plan(s.load.concurrency, [], None, 4, 0)
    with pytest.raises(ScenarioError, match=r"has 10 usable prompts, and this plan may send 20 .* without sending "
                                            r"one twice.*allow_prompt_reuse: true"):
        measure.prompt_blocks(s, prompts, pts)
    s.workload.num_prompts, pts = 1, plan(s.load.concurrency, [], None, 1, 0)  # 2 points x 2 repeats x (1 + 1) = 8
    blocks = measure.prompt_blocks(s, prompts, pts)
    sent = [p.prompt for sid, (start, n) in blocks.items() for p in prompts.sample(n, sid, (start, n))]
    assert len(sent) == 8 and len(set(sent)) == 8  # every stream its own prompts
    s.workload.allow_prompt_reuse, s.workload.num_prompts, pts = True, 4, plan(s.load.concurrency, [], None, 4, 0)
    assert len(measure.prompt_blocks(s, prompts, pts)) == 8  # allowed: wraps around the file


def test_profiled_passes_and_probes_never_resend_a_points_prompts(tmp_path, tiny_model):
    """A profiled pass once took the next point's first-repeat prompts (vLLM's prefix cache then hit 22-43% of
    them on the H200); now its stream is its own, and a file dataset gives it prompts no stream has."""
    from types import SimpleNamespace

    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"hello number {i}", "output_len": 4}) + "\n" for i in range(14)))
    base = {"model": {"path": tiny_model}, "engines": [{"name": "v", "kind": "openai", "base_url": "http://x"}],
            "workload": {"dataset": "jsonl", "path": str(data), "num_prompts": 1},
            "load": {"concurrency": [1, 2], "warmup_requests": 1, "repeats": 2, "max_attempts": 1}}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(base))
    s = scenario.load(str(f))
    prompts = Prompts(s.workload, load_tokenizer(tiny_model))
    pts = plan(s.load.concurrency, [], None, 1, 0)
    point_streams = {measure.stream_id(p, r, 1, w, s) for p in pts for r in range(2) for w in (True, False)}
    assert not point_streams & {measure.profile_stream(p) for p in pts}
    b = SimpleNamespace(s=s, prompts=prompts, blocks=measure.prompt_blocks(s, prompts, pts))
    planned = {p.prompt for sid, blk in list(b.blocks.items()) for p in prompts.sample(blk[1], sid, blk)}
    passes = [q.prompt for p in pts for q in measure._specs(b, p, 3, 0, 1, False, measure.profile_stream(p))]
    assert len(planned) == 8 and len(set(passes)) == 6 and not planned & set(passes)
    again = [q.prompt for q in measure._specs(b, pts[0], 3, 0, 1, False, measure.profile_stream(pts[0]))]
    assert again == passes[:3]  # the same pass on the next engine: the same prompts
    with pytest.raises(ScenarioError, match=r"has 14 usable prompts; the planned points took 14 and a profiled "
                                            r"pass or capacity probe needs 1 more"):
        measure._specs(b, pts[0], 1, 5, 1, False)  # a stream nobody reserved (a probe) past the file's end
