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
    # untrusted: a loaded machine's client could not time it (trust is not this test's subject); kept whole
    assert first["label"] == "c=1 in=8 out=6" and first["status"] in ("complete", "untrusted")
    assert first["metrics"]["completed"] == 4


# ---- issue 27: a stream of the wrong shape, without bounds, and /metrics that is not UTF-8 ---------------------
# what the client records for each of fakeserver.BAD_EVENTS (well-formed JSON of the wrong shape), in that order
BAD_EVENT_ERRORS = [
    "malformed stream event: choices is an object, not a list",
    "malformed stream event: choices[0] is a string, not an object",
    "malformed stream event: choices[0].text is a number, not a string",
    "malformed stream event: choices[0].finish_reason is a number, not a string or null",
    "malformed stream event: usage is a string, not an object",
    "malformed stream event: usage.prompt_tokens is a string ('16'), not a non-negative integer",
    "malformed stream event: usage.completion_tokens is a number (-6), not a non-negative integer",
    "error event: injected error event",
    "unexpected stream event: a list, not an object: '[1, 2]'",
    "malformed stream event: JSON nested deeper than 32 levels",
]


def serve_bench(cli, f: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)


def test_events_of_the_wrong_shape_are_each_a_recorded_failure(tmp_path, tiny_model, cli, fault_server):
    # the k-th request ends with the k-th malformed event: every class is a request's failure, with its reason
    assert len(BAD_EVENT_ERRORS) == len(fakeserver.BAD_EVENTS)
    n = len(fakeserver.BAD_EVENTS)
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai", "base_url": fault_server("bad-shapes")}],
                 concurrency=[1])
    spec = yaml.safe_load(f.read_text())
    spec["workload"]["num_prompts"] = n
    f.write_text(yaml.safe_dump(spec))
    p = serve_bench(cli, f)
    assert p.returncode == 3, p.stderr[-3000:]
    assert f"{n} requests failed" in p.stderr and "Traceback" not in p.stderr
    run = run_json(tmp_path)
    assert run["status"] == "complete"
    (pt,) = run["engines"]["stub"]["points"]
    assert pt["metrics"]["failed"] == n and pt["metrics"]["completed"] == 0
    errors = sorted(pt["metrics"]["errors"])
    assert len(errors) == n and all(pt["metrics"]["errors"][e] == 1 for e in errors)
    for want in BAD_EVENT_ERRORS:
        assert sum(e.startswith(want) for e in errors) == 1, (want, errors)


def test_a_stream_without_line_ends_is_cut_at_the_line_limit(tmp_path, tiny_model, cli, fault_server):
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai", "base_url": fault_server("no-newline")}])
    p = serve_bench(cli, f)
    assert p.returncode == 3, p.stderr[-3000:]
    run = run_json(tmp_path)
    assert run["status"] == "complete"
    for pt in run["engines"]["stub"]["points"]:
        assert pt["metrics"]["failed"] == 4
        (msg,) = pt["metrics"]["errors"]
        assert msg.startswith("an SSE line longer than 1 MiB"), msg


def test_a_stream_past_max_tokens_is_cut_off_and_keeps_no_more_timestamps(tmp_path, tiny_model, cli, fault_server):
    # the server sends choice chunks for as long as the client reads: cut at 2 x 6 + 64 events, not at the timeout
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai", "base_url": fault_server("endless")}],
                 request_timeout_s=20)
    t = time.monotonic()
    p = serve_bench(cli, f)
    assert p.returncode == 3, p.stderr[-3000:]
    assert time.monotonic() - t < 60
    run = run_json(tmp_path)
    assert run["status"] == "complete"
    for pt in run["engines"]["stub"]["points"]:
        assert pt["metrics"]["failed"] == 4
        (msg,) = pt["metrics"]["errors"]
        assert msg.startswith("stream cut off: more than 76 events for max_tokens 6"), msg
    (d,) = (tmp_path / "runs").iterdir()
    lines = [json.loads(x) for x in (d / "stub.requests.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and all(len(r["chunk_ms"]) <= 76 for r in lines)


def test_invalid_utf8_in_metrics_skips_the_bad_lines(tmp_path, tiny_model, cli, fault_server):
    # both readers of /metrics (the gauges sampled during a point, the prefix-cache counters around it)
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai",
                                         "base_url": fault_server("metrics-bad-utf8")}], metrics_interval_s=0.05)
    p = serve_bench(cli, f)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a point a loaded machine could not time (not this test)
    run = run_json(tmp_path)
    assert run["status"] == "complete"
    for pt in run["engines"]["stub"]["points"]:
        assert pt["status"] in ("complete", "untrusted") and pt["metrics"]["completed"] == 4
        # the line with model_name="fake\xff\xfe" (5 running) and the one starting "\xc3\x28" are left out
        assert pt["server_metrics"] == {"mean_num_requests_running": 2.0, "mean_num_requests_waiting": 1.0}
        assert pt["prefix_cache"]["reported"] and pt["prefix_cache"]["hit_rate"] == pytest.approx(0.25)


def test_an_unexpected_error_leaves_run_json_failed_not_running(tmp_path, tiny_model, fault_server, monkeypatch):
    # a bug (an exception no layer expects) still ends the run on disk: `failed`, with what it was
    from llmcompare import cli
    from llmcompare.serve import runner

    def bug(*a, **k):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(runner, "bench", bug)
    f = scenario(tmp_path, tiny_model, [{"name": "stub", "kind": "openai", "base_url": fault_server("ok")}])
    with pytest.raises(TypeError):
        cli.main(["serve-bench", str(f)])
    run = run_json(tmp_path)
    assert run["status"] == "failed" and run["error"].startswith("internal error: TypeError: unsupported operand")
    assert run["engines"]["stub"]["status"] == "failed"
