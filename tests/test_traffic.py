"""Each verdict row says what traffic it was (analysis/traffic.py): fixed lengths in a closed loop are labelled
synchronized, in the verdict table and in the answer; variable lengths and open loops are not."""

import json
import math

from test_verdict import engine, write_run

from llmcompare.analysis import traffic
from llmcompare.report.build import build_report
from llmcompare.schema.run import LoadKey


def test_labels():
    c, r = LoadKey(concurrency=256, input_len=512, output_len=256), LoadKey(request_rate=4.0)
    assert traffic.label({}, 1.0, c) == "synchronized (fixed lengths, closed loop)"  # random is the default
    assert traffic.label({"dataset": "shared-prefix"}, 1.0, c).startswith("synchronized")
    assert traffic.label({"dataset": "random", "ignore_eos": False}, 1.0, c) == "variable lengths, closed loop"
    assert traffic.label({"dataset": "synthetic-sharegpt"}, 1.0, c) == "variable lengths, closed loop"
    assert traffic.label({"dataset": "synthetic-sharegpt"}, 1.0, r) == "open loop, Poisson arrivals, variable lengths"
    assert traffic.label({}, 0.5, r) == "open loop, gamma arrivals (burstiness 0.5), fixed lengths"
    assert traffic.label({}, 1.0, LoadKey(request_rate=math.inf)) == "every request at once, fixed lengths (synchronized)"
    assert not traffic.synchronized(traffic.label({"dataset": "jsonl"}, 1.0, c))


def test_the_report_labels_synchronized_verdicts(tmp_path):
    a = engine("a", [[100.0, 104.0, 96.0], [400.0, 404.0, 396.0]])
    b = engine("b", [[101.0, 99.0, 109.0], [300.0, 303.0, 297.0]])
    d = write_run(tmp_path, [a, b])  # scenario without a workload: random, fixed lengths
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    answer = md.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert "Every verdict above is of synchronized traffic (fixed lengths in a closed loop" in answer
    row = next(ln for ln in md.splitlines() if ln.startswith("| b | c=8 |"))
    assert row.rstrip(" |").endswith("synchronized (fixed lengths, closed loop)")
    assert "Rows marked synchronized are fixed lengths in a closed loop" in md


def test_variable_lengths_are_not_called_synchronized(tmp_path):
    a = engine("a", [[100.0, 104.0, 96.0], [400.0, 404.0, 396.0]])
    b = engine("b", [[101.0, 99.0, 109.0], [300.0, 303.0, 297.0]])
    d = write_run(tmp_path, [a, b])
    run = json.loads((d / "run.json").read_text())
    run["scenario"]["workload"] = {"dataset": "synthetic-sharegpt"}
    (d / "run.json").write_text(json.dumps(run))
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "synchronized" not in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| b | c=8 |"))
    assert row.rstrip(" |").endswith("variable lengths, closed loop")
