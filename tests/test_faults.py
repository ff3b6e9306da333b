"""Faults: misbehaving servers (tests/fakeserver.py, for faults a real engine cannot be made to produce), a real vLLM server that
does not become ready in time, a port already taken, and a write error on the results."""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import fakeserver  # tests/fakeserver.py
import pytest
import yaml

from llmcompare.engines.server import free_port


@pytest.fixture
def fault_server():
    procs = []

    def start(mode: str) -> str:
        port = free_port()
        procs.append(fakeserver.launch(port, "--mode", mode))
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.terminate()
        p.wait()


def scenario(tmp_path, tiny_model, engines, **load) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({
        "name": "faults", "model": {"path": tiny_model}, "engines": engines,
        "workload": {"input_len": 8, "output_len": 6, "num_prompts": 4},
        "load": {"concurrency": [1, 2], "warmup_requests": 0, "metrics_interval_s": 0, **load},
        "output_dir": str(tmp_path / "runs")}))
    return f


def run_json(tmp_path) -> dict:
    (d,) = (tmp_path / "runs").iterdir()
    return json.loads((d / "run.json").read_text())


@pytest.mark.parametrize("mode,error", [
    ("500", "HTTP 500: "),
    ("cut", "stream closed before [DONE]"),  # or a payload error, depending on where the cut lands
    ("badjson", "malformed JSON in stream"),
    ("garbage", "no tokens in stream"),  # lines that are not SSE are ignored; the stream ends with [DONE]
])
def test_misbehaving_server_failures_are_recorded_not_raised(tmp_path, tiny_model, cli, fault_server, mode, error):
    url = fault_server(mode)
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai", "base_url": url}])
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr[-2000:]  # the run completed, but requests failed
    assert "8 requests failed" in p.stderr
    run = run_json(tmp_path)
    assert run["status"] == "complete"
    for pt in run["engines"]["stub"]["points"]:
        # never "complete" with failures in it (load.allow_failures: false): "failed", kept out of every verdict
        assert pt["status"] == "failed" and pt["metrics"]["failed"] == 4 and pt["metrics"]["completed"] == 0
        (msg,) = pt["metrics"]["errors"]
        assert msg.startswith(error) or (mode == "cut" and "Payload" in msg), msg


def test_port_already_taken_is_a_clear_error_before_launch(tmp_path, tiny_model, cli):
    # found by the checks before anything starts (issue 10 item 3): bad input, no run directory
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        f = scenario(tmp_path, tiny_model, [{"name": "v", "kind": "vllm", "python": sys.executable, "port": port}])
        p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"error: engines[0].port: {port} on 127.0.0.1 is already in use" in p.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.vllm
def test_real_vllm_not_ready_in_time_is_stopped(tmp_path, tiny_model, cli, vllm_py):
    f = scenario(tmp_path, tiny_model, [{"name": "slow", "kind": "vllm", "python": vllm_py, "startup_timeout_s": 8,
                                         "args": ["--gpu-memory-utilization", "0.3"]}])
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "slow server did not become ready within 8 s" in p.stderr and "last lines of" in p.stderr
    run = run_json(tmp_path)
    assert run["status"] == "failed"
    out = subprocess.run(["pgrep", "-f", f"vllm.entrypoints.cli.main serve {tiny_model}"], capture_output=True, text=True)
    assert out.stdout.strip() == "", "a vLLM process was left behind"


def test_write_error_on_results_ends_the_run_and_keeps_completed_points(tmp_path, tiny_model, cli, fault_server):
    url = fault_server("slow")  # 50 ms a token: each point takes ~1 s
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai", "base_url": url}], concurrency=[1, 2, 4])
    proc = subprocess.Popen([*cli, "serve-bench", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # once the first point is on disk, make the next request line unwritable (root ignores permissions: a
    # directory where the file should be does it)
    for _ in range(6000):
        runs = list((tmp_path / "runs").glob("*/run.json")) if (tmp_path / "runs").exists() else []
        if runs and '"label": "c=2 in=8 out=6"' in runs[0].read_text():
            req = runs[0].parent / "stub.requests.jsonl"
            req.rename(runs[0].parent / "stub.requests.jsonl.saved")
            req.mkdir()
            break
        time.sleep(0.01)
    else:
        proc.kill()
        pytest.fail("the second point never started")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "cannot write results file" in err and "stub.requests.jsonl" in err
    run = run_json(tmp_path)
    assert run["status"] == "failed"
    first = run["engines"]["stub"]["points"][0]
    assert first["label"] == "c=1 in=8 out=6" and first["status"] == "complete" and first["metrics"]["completed"] == 4
