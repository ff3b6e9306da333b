"""The table serve-bench prints last (serve/summary.py): its columns stay apart whatever the labels' lengths."""

from __future__ import annotations

from llmcompare.schema.run import EngineRecord, Metrics, PointResult, ServeRun
from llmcompare.serve import summary


def test_long_point_labels_and_engine_names_keep_their_columns():
    m = Metrics(completed=16, failed=0, output_throughput=51.9, stats={"median_ttft_ms": 72.4, "p99_ttft_ms": 76.1,
                                                                       "median_tpot_ms": 17.43, "p99_tpot_ms": 18.3,
                                                                       "p99_itl_ms": 22.57})
    pts = [PointResult(index=0, repeat=r, concurrency=1, input_len=128, output_len=32, status="complete", metrics=m)
           for r in range(2)]
    cut = PointResult(index=1, repeat=0, concurrency=256, input_len=1024, output_len=256, status="partial")
    name = "turbomind-0.17-awq-long"
    run = ServeRun(created_at="2026-12-05T00:00:00+00:00", scenario={"load": {"repeats": 2}},
                   engines={name: EngineRecord(name=name, kind="lmdeploy", status="complete", points=[*pts, cut])})
    lines = summary.summary(run).splitlines()
    # the demo printed "c=1 in=128 out=32complete": the label ran into the status
    assert lines[1].split()[:4] == [name, "c=1", "in=128", "out=32#1"] and lines[1].split()[4] == "complete"
    assert lines[3].split() == [name, "c=256", "in=1024", "out=256#1", "partial"]
    status_col = lines[0].index("status")
    assert all(line[status_col - 1] == " " for line in lines[1:4])  # a space before every status
