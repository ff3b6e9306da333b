"""load.interleave against real vLLM CPU servers: engines take turns by repeat (repeat 0 of each, then repeat 1),
a fresh server for a launched engine each turn; both engine records carry this machine, and the report compares
them (one machine). The second engine is an already-running vLLM started here (one start instead of two)."""

import json
import os
import subprocess
import time
import urllib.request

import pytest
import yaml

from llmcompare.analysis import verdict
from llmcompare.engines.server import free_port
from llmcompare.schema.files import load_run
from llmcompare.setup.host import boot_id

pytestmark = pytest.mark.vllm

ARGS = ["--dtype", "bfloat16", "--max-model-len", "1024", "--gpu-memory-utilization", "0.3"]
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}


def _serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_engines_take_turns_by_repeat_on_one_machine(tmp_path, vllm_py, tiny_model, cli):
    port = free_port()
    log = open(tmp_path / "running.log", "w")
    proc = subprocess.Popen(["nice", "-n", "10", vllm_py, "-m", "vllm.entrypoints.cli.main", "serve", tiny_model,
                             "--host", "127.0.0.1", "--port", str(port), *ARGS], env={**os.environ, **ENV},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while not _serving(port):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "running.log").read_text()[-2000:]
            time.sleep(1)
        f = tmp_path / "s.yaml"
        f.write_text(yaml.safe_dump({
            "name": "turns", "model": {"path": tiny_model},
            "engines": [{"name": "launched", "kind": "vllm", "python": vllm_py, "args": ARGS, "env": ENV,
                         "nice": 10, "startup_timeout_s": 400},
                        {"name": "running", "kind": "openai", "base_url": f"http://127.0.0.1:{port}"}],
            "workload": {"input_len": 32, "output_len": 8, "num_prompts": 4, "seed": 1},
            "load": {"concurrency": [2], "warmup_requests": 1, "repeats": 2, "interleave": True,
                     "max_attempts": 1, "metrics_interval_s": 0},
            "output_dir": str(tmp_path / "runs")}))
        p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=900)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a point untrusted on this loaded 2-core machine
    assert "about" in p.stderr and "server start-ups" in p.stderr  # the estimate counts a start per turn
    (d,) = (tmp_path / "runs").iterdir()
    run = json.loads((d / "run.json").read_text())
    la, ru = run["engines"]["launched"], run["engines"]["running"]
    assert la["status"] == ru["status"] == "complete" and la["starts"] == 2  # a fresh server for each of its turns
    turns = sorted([(pt["started_at"], name, pt["repeat"]) for name, e in run["engines"].items()
                    for pt in e["points"]])
    assert [(n, r) for _, n, r in turns] == [("launched", 0), ("running", 0), ("launched", 1), ("running", 1)]
    assert la["machine"]["key"] == ru["machine"]["key"] == f"boot {boot_id()}"  # this machine, no GPU
    assert la["machine"]["source"] == "recorded" and ru["machine"]["server_host"] == "local"
    # every point carries the machine it was measured on (a resume elsewhere is then judged cell by cell)
    assert {pt["machine_key"] for e in (la, ru) for pt in e["points"]} == {f"boot {boot_id()}"}
    assert la["machine"]["latest_key"] == la["machine"]["key"]
    r = subprocess.run([*cli, "report", str(d), "--baseline", "running", "--figures", "whole"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    text = open(os.path.join(r.stdout.strip(), "report.md")).read()
    # one machine: not refused (whether a verdict follows depends on trust, which a loaded 2-core machine may deny)
    assert "No verdict between" not in text and "measured on different machines" not in text
    recs = load_run(d).engines
    assert verdict.refused(recs["launched"], recs["running"], cross_machine=False) is None
