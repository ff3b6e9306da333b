"""Shared-prefix cells against the real vLLM CPU server, its prefix cache on and off: prefix_len as a grid axis
(each cell's prompts carry its own prefix, as the engine counts them), and the hit rate the engine reports is
recorded per cell (engines/prefix_cache.py) and is > 0 only with the cache on."""

import json
import subprocess

import pytest
import yaml

pytestmark = pytest.mark.vllm


def test_shared_prefix_hit_rate_with_the_prefix_cache_on_and_off(tmp_path, vllm_py, tiny_model, cli):
    engine = {"kind": "vllm", "python": vllm_py,
              "args": ["--dtype", "bfloat16", "--max-model-len", "1024", "--gpu-memory-utilization", "0.3"],
              "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"},
              "nice": 10, "startup_timeout_s": 400}
    s = {"name": "prefix", "model": {"path": tiny_model},
         "engines": [{**engine, "name": "on", "prefix_cache": "on"}, {**engine, "name": "off", "prefix_cache": "off"}],
         # 2 prefixes of 256 (then 512) tokens (whole KV blocks), 16 tokens of each request's own
         "workload": {"dataset": "shared-prefix", "prefix_len": [256, 512], "num_prefixes": 2, "input_len": 16,
                      "output_len": 4, "num_prompts": 6, "seed": 5},
         "load": {"concurrency": [2], "warmup_requests": 2}, "output_dir": str(tmp_path / "runs")}
    f = tmp_path / "prefix.yaml"
    f.write_text(yaml.safe_dump(s))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a point untrusted (a loaded machine); not the subject
    (d,) = (tmp_path / "runs").iterdir()
    run = json.loads((d / "run.json").read_text())
    on, off = run["engines"]["on"], run["engines"]["off"]
    assert "--enable-prefix-caching" in on["command"] and "--no-enable-prefix-caching" in off["command"]
    # the last attempt of each point (on a loaded machine an untrusted point is measured again)
    last = {name: list({p["index"]: p for p in run["engines"][name]["points"]}.values()) for name in ("on", "off")}
    assert [p["label"] for p in last["on"]] == ["c=2 in=16 out=4 prefix=256x2", "c=2 in=16 out=4 prefix=512x2"]
    for name in ("on", "off"):
        reqs = [json.loads(x) for x in (d / f"{name}.requests.jsonl").read_text().splitlines()]
        for pt, plen in zip(last[name], (256, 512), strict=True):
            assert pt["metrics"]["completed"] == 6 and pt["prefix_len"] == plen
            # the engine's own count of each request's prompt: this cell's prefix and 16 tokens of its own
            assert {r["prompt_tokens"] for r in reqs if r["point"] == pt["index"]} == {plen + 16}, name
    for c_on, c_off, plen in zip([p["prefix_cache"] for p in last["on"]],
                                 [p["prefix_cache"] for p in last["off"]], (256, 512), strict=True):
        # the warm-up saw both prefixes; each measured request finds its prefix (of plen + 16) in the cache
        assert c_on["reported"] and c_on["queries_tokens"] >= 6 * plen and c_on["hit_rate"] > 0.5, c_on
        assert c_off["hit_rate"] in (None, 0.0) and not c_off["hits_tokens"], c_off
    md = subprocess.run([*cli, "report", str(d), "--out", str(tmp_path / "rep")], capture_output=True, text=True,
                        timeout=300)
    assert md.returncode == 0, md.stderr[-2000:]
    assert "prefix cache hit %" in (tmp_path / "rep" / "report.md").read_text()


def test_a_small_llama_checkpoint_with_its_tokenizer_serves_on_real_vllm(tmp_path, vllm_py, cli):
    """make-model's Llama architecture (llama3-8b's, shrunk to what vLLM's CPU build serves) with the Llama-3-sized
    tokenizer: vLLM loads it and answers exact-length random prompts (synthetic-sharegpt lengths, clipped)."""
    from llmcompare.models import checkpoint

    shape = checkpoint.Shape(256, 512, 2, 4, 2, vocab_size=128256, max_position_embeddings=4096, arch="llama",
                             rope_theta=500000.0)
    model = checkpoint.make_model(tmp_path / "llama-small", preset="llama-small", shape=shape)
    s = {"name": "llama", "model": {"path": str(model)},
         "engines": [{"name": "v", "kind": "vllm", "python": vllm_py,
                      "args": ["--dtype", "bfloat16", "--max-model-len", "1024", "--gpu-memory-utilization", "0.3"],
                      "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"},
                      "nice": 10, "startup_timeout_s": 400}],
         "workload": {"dataset": "synthetic-sharegpt", "max_total_len": 300, "num_prompts": 4, "seed": 2},
         "load": {"concurrency": [2], "warmup_requests": 1}, "output_dir": str(tmp_path / "runs")}
    f = tmp_path / "llama.yaml"
    f.write_text(yaml.safe_dump(s))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: untrusted timing on a busy CPU; the answers are what count
    (d,) = (tmp_path / "runs").iterdir()
    reqs = [json.loads(x) for x in (d / "v.requests.jsonl").read_text().splitlines()]
    assert len(reqs) >= 4 and all(r["success"] for r in reqs)
    from llmcompare.schema.scenario import Workload
    from llmcompare.workload.prompts import Prompts, load_tokenizer

    want = Prompts(Workload(dataset="synthetic-sharegpt", max_total_len=300, seed=2), load_tokenizer(str(model)))
    first = sorted((r["prompt_tokens"], r["output_tokens"]) for r in reqs if r["attempt"] == 1 and r["point"] == 0)
    # stream 1 is the first point's measured run (measure.stream_id): the server counted exactly those lengths
    assert first == sorted((x.prompt_len, x.output_len) for x in want.sample(4, 1))
