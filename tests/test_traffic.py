"""Each verdict row says what traffic it was (analysis/traffic.py): fixed lengths in a closed loop are labelled
synchronized, in the verdict table and in the answer; variable lengths and open loops are not."""

import json
import math

from test_verdict import ONE, engine, write_run

from llmcompare.analysis import traffic
from llmcompare.report.build import build_report
from llmcompare.schema.run import EngineRecord, LoadKey, Metrics, PointResult


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


def _open_loop(name: str, durations_s: list[float], tokens: int = 300_000):
    """An engine with one open-loop point (16 req/s) whose repeats returned `tokens` in `durations_s` each."""
    pts = [PointResult(index=0, repeat=r, concurrency=None, request_rate=16.0, status="complete",
                       metrics=Metrics(completed=480, duration_s=d, total_output_tokens=tokens,
                                       output_throughput=tokens / d, stats={"median_tpot_ms": 10.0}))
           for r, d in enumerate(durations_s)]
    return EngineRecord(name=name, kind="vllm", status="complete", machine=ONE, points=pts)


def test_an_open_loop_whole_point_gap_is_said_to_be_the_ratio_of_durations(tmp_path):
    """The H100 capacity run's rate=32 row: 'vLLM faster +19.8%' came from drains of ~8 s against ~15 s after the
    same 30 s of sending. The report says so, with both durations; the gap is exactly their ratio."""
    assert traffic.open_loop(LoadKey(request_rate=16.0)) and not traffic.open_loop(LoadKey(request_rate=math.inf))
    assert not traffic.open_loop(LoadKey(concurrency=8))
    a, b = _open_loop("a", [45.0, 46.0, 44.0]), _open_loop("b", [38.0, 38.5, 37.5])
    assert traffic.durations(b.points) == (38.0, 300_000)
    assert traffic.same_work_durations(b, a, LoadKey(request_rate=16.0)) == (38.0, 45.0)
    d = write_run(tmp_path, [a, b])
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "Open-loop rows on whole points:" in md and "b rate=16: 38.0 s against 45.0 s." in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| b | rate=16 |"))
    assert "+18.4%" in row  # 45 / 38 - 1 (the mean of tokens / duration per repeat, to one decimal)
    answer = md.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert "At the open-loop points (rate=16) both engines were sent the same requests at the same times" in answer


def test_no_duration_sentence_where_the_tokens_differ(tmp_path):
    a, b = _open_loop("a", [45.0, 46.0, 44.0]), _open_loop("b", [38.0, 38.5, 37.5], tokens=250_000)
    d = write_run(tmp_path, [a, b])
    md = (build_report([str(d)], str(tmp_path / "r"), baseline="a") / "report.md").read_text()
    assert "## Verdict" in md and "Open-loop rows on whole points" not in md
    assert "At the open-loop points" not in md  # not the same work: the gap is not the durations' ratio alone
