"""scripts/ttft_sets.py: the client's mean TTFT of the requests whose first token came inside the engine-counter
window against that of the requests that finished inside it, beside the engine's unexplained remainder."""

import importlib.util
import json
from pathlib import Path

from llmcompare.schema.files import RunFile
from llmcompare.schema.run import EngineCounters, EngineRecord, PointResult, ServeRun

ROOT = Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("ttft_sets", ROOT / "scripts/ttft_sets.py")
ttft_sets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ttft_sets)


def line(index: int, dispatch_s: float, ttft_ms: float, e2el_ms: float) -> str:
    return json.dumps({"point": 0, "repeat": 0, "attempt": 1, "index": index, "prompt_len": 8, "output_len": 8,
                       "dispatch_s": dispatch_s, "chunk_ms": [ttft_ms, e2el_ms], "ttft_ms": ttft_ms,
                       "e2el_ms": e2el_ms, "output_tokens": 2, "success": True}) + "\n"


def test_the_two_request_sets_of_a_window_are_compared(tmp_path):
    c = EngineCounters(window_s=[10.0, 20.0], engine_mean_ttft_ms=3000.0, engine_mean_queue_ms=900.0,
                       engine_mean_prefill_ms=300.0)
    e = EngineRecord(name="vllm", points=[PointResult(index=0, concurrency=4, status="complete", engine_counters=c)])
    d = tmp_path / "run"
    d.mkdir()
    RunFile(d, ServeRun(created_at="2026-12-05T00:00:00+00:00", engines={"vllm": e}))
    (d / "vllm.requests.jsonl").write_text(
        line(0, 5.0, 2000.0, 8000.0)      # first token at 7 s (before), finished at 13 s: the finished set only
        + line(1, 9.0, 3000.0, 9000.0)    # first token at 12 s, finished at 18 s: both sets
        + line(2, 15.0, 4000.0, 9000.0))  # first token at 19 s, finished at 24 s (after): the first-token set only
    (row,) = ttft_sets.rows(d)
    assert row[0] == "vllm" and row[2:] == [1, 1800, 3500, 2500, 1000]  # (3000 + 4000) / 2 - (2000 + 3000) / 2
