"""Same work, same answer through serve-bench and the report, on fake servers (tests/fakeserver.py --answer): the
probe is sent once per engine before its first load point, its answer (or its failure) is kept in run.json, the run
goes on, and the report marks the engine whose answer disagrees."""

import json
import shutil
import subprocess
import sys

import fakeserver  # tests/fakeserver.py
import pytest
import yaml

from llmcompare.engines.server import free_port
from llmcompare.report.build import build_report
from llmcompare.schema.files import load_run

ANSWERS = {"ref": "fixed", "twin": "fixed", "shifted": "shifted", "bare": "none", "broken": "broken"}


@pytest.fixture(scope="module")
def fakes():
    procs, urls = [], {}
    for name, answer in ANSWERS.items():
        port = free_port()
        procs.append(fakeserver.launch(port, "--answer", answer))
        urls[name] = f"http://127.0.0.1:{port}"
    yield urls
    for p in procs:
        p.terminate()
        p.wait()


@pytest.fixture(scope="module")
def run(fakes, tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("same")
    f = tmp / "s.yaml"
    f.write_text(yaml.safe_dump({
        "name": "same", "model": {"path": tiny_model},
        "engines": [{"name": n, "kind": "openai", "base_url": u} for n, u in fakes.items()],
        "workload": {"input_len": 8, "output_len": 6, "num_prompts": 4},
        "load": {"concurrency": [1], "warmup_requests": 0, "metrics_interval_s": 0},
        "checks": {"same_answer": {"max_tokens": 4, "top_k": 5, "timeout_s": 20}},
        "output_dir": str(tmp / "runs")}))
    p = subprocess.run([*_cli(), "serve-bench", str(f)], capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a loaded machine left a point untrusted
    (d,) = (tmp / "runs").iterdir()
    return d, p.stderr, tmp


def _cli():  # conftest's cli fixture, for a module-scoped run
    exe = shutil.which("llmcompare")
    return [exe] if exe else [sys.executable, "-m", "llmcompare.cli"]


def test_each_engine_answers_the_probe_before_its_first_point_and_a_failure_is_recorded(run):
    d, err, _ = run
    raw = json.loads((d / "run.json").read_text())
    assert raw["status"] == "complete"
    ref = raw["engines"]["ref"]["answer"]
    assert ref["error"] is None and ref["logprobs_returned"] and ref["tokens"] == [" a"] * 4
    assert ref["top_logprobs"][0] == dict(fakeserver.FAKE_TOP[:5]) and ref["prompt_tokens"] == 16
    body = ref["request_body"]
    assert body["logprobs"] == 5 and body["max_tokens"] == 4 and body["stream"] is False and body["ignore_eos"]
    assert body["temperature"] == 0.0 and body["top_k"] == 1 and body["prompt"] == ref["prompt"]
    assert {e["answer"]["prompt"] for e in raw["engines"].values()} == {ref["prompt"]}  # one prompt for all
    bare = raw["engines"]["bare"]["answer"]
    assert bare["error"] is None and not bare["logprobs_returned"] and bare["text"] == " a" * 4
    assert "the server returned no logprobs" in bare["notes"][0]
    broken = raw["engines"]["broken"]["answer"]
    assert broken["error"] == "logprobs.top_logprobs is not a list"
    assert "broken: warning: the same-answer probe failed: logprobs.top_logprobs is not a list" in err
    for e in raw["engines"].values():  # the run went on: every engine measured its point
        assert e["status"] == "complete" and e["points"][-1]["metrics"]["completed"] == 4
    assert err.index("ref: same-answer probe: 4 tokens with their top-5 logprobs") < err.index("ref c=1")


def test_the_report_marks_the_engine_whose_answer_disagrees(run):
    d, _, tmp = run
    out = build_report([str(d)], str(tmp / "report"), baseline="ref")
    md = (out / "report.md").read_text()
    sec = md.split("\n## Same work, same answer\n", 1)[1].split("\n## ", 1)[0]
    rows = {r.split(" | ")[0].strip("| "): r.split(" | ") for r in sec.splitlines() if r.startswith("| ")}
    assert rows["ref"][1] == "reference" and rows["twin"][1] == "agrees" and rows["twin"][4] == "0"
    assert rows["shifted"][1] == "disagrees" and "KL" in rows["shifted"][7] and rows["shifted"][3] == "4 of 4"
    assert rows["bare"][1] == "agrees" and rows["bare"][2] == "text"
    assert rows["broken"][1] == "not checked" and "its probe failed" in rows["broken"][7]
    opening = md.split("\n## The answer", 1)[1].split("\n## ", 1)[0]
    assert "Same work, same answer: shifted does not give the answer ref gives" in opening
    verdicts = md.split("\n## Verdict", 1)[1].split("\n## ", 1)[0]
    # the mark where the engines are compared (these sub-second points have no steady state: one value each)
    assert "shifted [different answer]: no interval" in verdicts
    assert "twin [different answer]" not in md and "Same work, same answer (llmcompare/analysis/same_answer.py)" in md
    assert "[different answer]" in (out / "report.html").read_text()
    run_ = load_run(d)
    assert run_.engines["shifted"].answer.top_logprobs[0] == dict(fakeserver.SHIFTED_TOP[:5])
