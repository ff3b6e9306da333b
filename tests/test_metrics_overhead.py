"""scripts/metrics_overhead.py against the real vLLM CPU server: one start, sampling on and off interleaved."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_e2e_vllm import group_gone, run_dir_of, scenario_file

from llmcompare.report.build import build_report

pytestmark = pytest.mark.vllm
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "metrics_overhead.py"


def test_sampling_on_and_off_share_one_server_and_alternate(tmp_path, vllm_py, tiny_model):
    f = scenario_file(tmp_path, vllm_py, tiny_model, concurrency=[2])
    p = subprocess.run([sys.executable, str(SCRIPT), str(f), "vllm-cpu", "--pairs", "2", "--set",
                        "workload.num_prompts=4", "workload.output_len=8"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    d = run_dir_of(tmp_path)
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete" and sorted(run["engines"]) == ["vllm-cpu+metrics", "vllm-cpu-metrics"]
    on, off = run["engines"]["vllm-cpu+metrics"], run["engines"]["vllm-cpu-metrics"]
    assert on["pid"] == off["pid"] and on["starts"] == 1 and on["version"] == "0.32.0+cpu"  # one server
    assert group_gone(on["pid"])
    # as each point ended (an attempt measured again says so twice: one arm's turn)
    ended = re.findall(r"^(vllm-cpu[+-]metrics) c=2 in=64 out=8 #(\d)(?: \(attempt \d\))?: (?:complete|untrusted):",
                       p.stderr, re.M)
    said = [x for i, x in enumerate(ended) if i == 0 or x != ended[i - 1]]
    assert said == [("vllm-cpu+metrics", "1"), ("vllm-cpu-metrics", "1"), ("vllm-cpu-metrics", "2"),
                    ("vllm-cpu+metrics", "2")], p.stderr[-3000:]
    last = {(name, pt["repeat"]): pt for name, e in run["engines"].items() for pt in e["points"]}  # last attempts
    # untrusted: a loaded machine's client could not time it (not this test's subject)
    assert len(last) == 4 and all(pt["status"] in ("complete", "untrusted") and pt["metrics"]["completed"] == 4
                                  for pt in last.values())
    assert on["points"][0]["server_metrics"] and not off["points"][0]["server_metrics"]  # sampled, and not
    sampled = {json.loads(x)["repeat"] for x in (d / "vllm-cpu+metrics.metrics.jsonl").read_text().splitlines()}
    assert sampled == {0, 1} and not (d / "vllm-cpu-metrics.metrics.jsonl").exists()
    prompts = {name: {json.loads(x)["prompt_tokens"] for x in (d / f"{name}.requests.jsonl").read_text().splitlines()}
               for name in run["engines"]}
    assert prompts == {"vllm-cpu+metrics": {64}, "vllm-cpu-metrics": {64}}
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="vllm-cpu-metrics") / "report.md").read_text()
    head = md.split("## End to end", 1)[0]
    if all(pt["status"] == "complete" for e in run["engines"].values() for pt in e["points"]):
        assert "vllm-cpu+metrics" in head and "across 2 repeats" in md  # the cost, stated as a verdict
    else:  # an attempt the loaded machine's client could not time: no verdict, and the report says why
        assert "Left out of every verdict" in md and "untrusted" in md
