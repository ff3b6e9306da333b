"""The run directory as a shared resource (issue 27): what the exit code counts, one writer at a time, and no
write that follows a link planted in it."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import fakeserver  # tests/fakeserver.py
import pytest
import yaml

from llmcompare.engines.server import free_port
from llmcompare.serve import runner

DATA = Path(__file__).resolve().parent / "data"


def test_the_exit_code_counts_the_last_attempt_of_each_cell_not_every_attempt(tmp_path):
    # the committed H200 run: c=64 in=512 untrusted in both attempts of repeats 0 and 1 (the runner gave up on
    # them), c=256 in=512 repeat 1 untrusted once and trusted when measured again: 5 untrusted attempts, 2 cells
    d = tmp_path / "run"
    shutil.copytree(DATA / "h200-grid-vllm", d)
    assert runner.outcome(d) == (0, 2)
    run = json.loads((d / "run.json").read_text())  # `--resume --redo untrusted` measured both again, trusted
    pts = run["engines"]["vllm"]["points"]
    for r in (0, 1):
        again = next(p for p in pts if (p["index"], p["repeat"], p["attempt"]) == (6, r, 2))
        pts.append({**again, "attempt": 3, "status": "complete", "trust": {**again["trust"], "trusted": True}})
    (d / "run.json").write_text(json.dumps(run))
    assert runner.outcome(d) == (0, 0)


# ---- one writer at a time (item 4) --------------------------------------------------------------------------
@pytest.fixture
def stub_scenario(tmp_path, tiny_model):
    """A scenario against a fake server; mode 'slow' (50 ms a token) makes the run last a few seconds."""
    procs = []

    def make(mode: str = "ok", concurrency=(1, 2), output_len: int = 6, num_prompts: int = 4) -> Path:
        port = free_port()
        procs.append(fakeserver.launch(port, "--mode", mode))
        f = tmp_path / "s.yaml"
        f.write_text(yaml.safe_dump({
            "name": "rd", "model": {"path": tiny_model},
            "engines": [{"name": "stub", "kind": "openai", "base_url": f"http://127.0.0.1:{port}"}],
            "workload": {"input_len": 8, "output_len": output_len, "num_prompts": num_prompts},
            "load": {"concurrency": list(concurrency), "warmup_requests": 0, "metrics_interval_s": 0},
            "output_dir": str(tmp_path / "runs")}))
        return f

    yield make
    for p in procs:
        p.terminate()
        p.wait()


def test_a_run_directory_has_one_writer_the_second_is_refused_naming_it_and_the_pid(tmp_path):
    from llmcompare.errors import RunDirInUse
    from llmcompare.schema.files import RunLock

    with RunLock(tmp_path):
        with pytest.raises(RunDirInUse, match=f"run directory {tmp_path} is in use by another llmcompare "
                                              f"\\(pid {os.getpid()}\\)"):
            RunLock(tmp_path)
    with RunLock(tmp_path):  # released: the next one gets it
        pass


def test_resume_of_a_run_still_going_is_refused_at_once_and_the_run_is_untouched(tmp_path, cli, stub_scenario):
    f = stub_scenario("slow", concurrency=[1, 2], output_len=20, num_prompts=12)  # 1 s a request: 18 s
    first = subprocess.Popen([*cli, "serve-bench", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list((tmp_path / "runs").glob("*/stub.requests.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the first writer is measuring its first point
    (d,) = (tmp_path / "runs").iterdir()
    t = time.monotonic()
    p = subprocess.run([*cli, "serve-bench", str(f), "--resume", str(d)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"error: run directory {d} is in use by another llmcompare (pid {first.pid})" in p.stderr
    assert "resuming" not in p.stderr and time.monotonic() - t < 60
    assert first.poll() is None  # it was refused while the first was still writing
    out, err = first.communicate(timeout=120)
    assert first.returncode in (0, 4), err[-2000:]  # 4: the client could not time a point (not this test's subject)
    reqs = [json.loads(x) for x in (d / "stub.requests.jsonl").read_text().splitlines()]
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete" and run["resumed"] == []
    assert len(reqs) == sum(q["num_prompts"] for q in run["engines"]["stub"]["points"])  # no line twice


# ---- no write through a planted link (item 7) -----------------------------------------------------------------
def test_writers_refuse_a_link_planted_in_the_run_directory(tmp_path):
    from llmcompare.errors import ResultsWriteError
    from llmcompare.schema.files import append_jsonl, write_json

    outside = tmp_path / "outside"
    outside.write_text("keep\n")
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json.tmp").symlink_to(outside)
    with pytest.raises(ResultsWriteError, match="run.json.tmp: it is a symbolic link"):
        write_json(d / "run.json", {"a": 1})
    (d / "x.requests.jsonl").symlink_to(outside)
    with pytest.raises(ResultsWriteError, match="x.requests.jsonl: it is a symbolic link"):
        append_jsonl(d / "x.requests.jsonl", {"a": 1})
    assert outside.read_text() == "keep\n" and not (d / "run.json").exists()
    (d / "run.json.tmp").unlink()
    (d / "run.json.tmp").write_text("left by a crash")  # a plain leftover is replaced
    write_json(d / "run.json", {"a": 1})
    assert json.loads((d / "run.json").read_text()) == {"a": 1} and not (d / "run.json.tmp").exists()


@pytest.mark.parametrize("planted", ["stub.requests.jsonl", "run.json.tmp"])
def test_resume_refuses_a_run_directory_with_a_planted_link(tmp_path, cli, stub_scenario, planted):
    f = stub_scenario()
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 4), p.stderr[-2000:]
    (d,) = (tmp_path / "runs").iterdir()
    outside = tmp_path / "outside"
    outside.write_text("keep\n")
    (d / planted).unlink(missing_ok=True)
    (d / planted).symlink_to(outside)
    before = (d / "run.json").read_text()
    p = subprocess.run([*cli, "serve-bench", str(f), "--resume", str(d), "--redo", "all"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"--resume {d}: {planted} is a symbolic link" in p.stderr
    assert outside.read_text() == "keep\n" and (d / "run.json").read_text() == before
