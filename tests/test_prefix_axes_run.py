"""A shared-prefix grid over prefix_len and num_prefixes, run through serve-bench against tests/fakeserver.py
(no engine: what is checked is the client's side): every cell's requests carry that cell's prefix, run.json's
points their cell, and a resume that adds a prefix value measures only the new cells."""

import json
from pathlib import Path

import fakeserver  # tests/fakeserver.py
import pytest
import yaml

from llmcompare import runner, scenario
from llmcompare.results import load_run, read_jsonl
from llmcompare.server import free_port


@pytest.fixture
def server():
    port = free_port()
    proc = fakeserver.launch(port, "--ttft-ms", "2", "--itl-ms", "2")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait()


def write(tmp_path: Path, model: str, url: str, prefix_len, num_prefixes) -> Path:
    f = tmp_path / "sp.yaml"
    f.write_text(yaml.safe_dump({
        "name": "sp", "model": {"path": model},
        "engines": [{"name": "stub", "kind": "openai", "base_url": url}],
        "workload": {"dataset": "shared-prefix", "prefix_len": prefix_len, "num_prefixes": num_prefixes,
                     "input_len": 8, "output_len": 4, "num_prompts": 4},
        "load": {"concurrency": [2], "warmup_requests": 1, "metrics_interval_s": 0},
        "output_dir": str(tmp_path / "runs")}))
    return f


def test_each_cell_sends_its_own_prefix_and_a_resume_adds_cells(tmp_path, tiny_model, server):
    run_dir = runner.serve_bench(scenario.load(str(write(tmp_path, tiny_model, server, 12, [1, 3]))), ["test"])
    pts = load_run(run_dir).engines["stub"].points
    assert [(p.index, p.label, p.prefix_len, p.num_prefixes) for p in pts] == [
        (0, "c=2 in=8 out=4 prefix=12x1", 12, 1), (1, "c=2 in=8 out=4 prefix=12x3", 12, 3)]
    saved = json.loads((run_dir / "run.json").read_text())
    assert [p["label"] for p in saved["engines"]["stub"]["points"]] == [p.label for p in pts]

    s = scenario.load(str(write(tmp_path, tiny_model, server, [12, 30], [1, 3])))
    runner.serve_bench(s, ["test", "--resume"], resume=str(run_dir))
    pts = load_run(run_dir).engines["stub"].points
    assert [(p.index, p.label) for p in pts] == [
        (0, "c=2 in=8 out=4 prefix=12x1"), (1, "c=2 in=8 out=4 prefix=12x3"),  # kept, not measured again
        (2, "c=2 in=8 out=4 prefix=30x1"), (3, "c=2 in=8 out=4 prefix=30x3")]
    reqs = read_jsonl(run_dir / "stub.requests.jsonl")
    by_point = {}
    for r in reqs:
        by_point.setdefault(r["point"], set()).add(r["prompt_len"])
    assert by_point == {0: {20}, 1: {20}, 2: {38}, 3: {38}}  # prefix + 8 tokens of its own, per cell
    assert all(p.prefix_cache is not None for p in pts)  # per point: the fake server has no counters
