"""scripts/prefix_study.py on a closed loop whose timing is known: c = 4 slots, every request 10 tokens, one token
every 0.1 s from its send (E2EL 1 s), 5 waves, but the last wave's requests take 2 s: 40 tok/s from the first
send to the last finish of any prefix without the last wave, 200 tokens over 6 s with it."""

import importlib.util
import json
from pathlib import Path

import pytest

from llmcompare.schema.files import RunFile
from llmcompare.schema.run import EngineRecord, PointResult, ServeRun

ROOT = Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("prefix_study", ROOT / "scripts/prefix_study.py")
prefix_study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prefix_study)
C, WAVES, TOKENS = 4, 5, 10


def closed_loop_run(tmp_path: Path) -> Path:
    e = EngineRecord(name="e", points=[PointResult(index=0, repeat=0, attempt=1, concurrency=C)])
    d = tmp_path / "run"
    d.mkdir()
    RunFile(d, ServeRun(created_at="2026-12-04T00:00:00+00:00", engines={"e": e}))
    with open(d / "e.requests.jsonl", "w") as f:
        for i in range(C * WAVES):
            step_ms = 200.0 if i >= C * (WAVES - 1) else 100.0
            chunks = [step_ms * (k + 1) for k in range(TOKENS)]  # ms after the send
            f.write(json.dumps({"point": 0, "repeat": 0, "attempt": 1, "index": i, "prompt_len": 8,
                                "output_len": TOKENS, "dispatch_s": float(i // C), "chunk_ms": chunks,
                                "ttft_ms": chunks[0], "e2el_ms": chunks[-1], "reads": TOKENS,
                                "output_tokens": TOKENS, "success": True}) + "\n")
        f.write(json.dumps({"point": 0, "repeat": 0, "attempt": 2, "index": 0}) + "\n")  # a retry: never counted
    return d


@pytest.mark.parametrize(("waves", "tok_s"), [(1, 40.0), (4, 40.0), (5, 200 / 6)])
def test_a_prefix_holds_its_first_waves_and_its_rate(tmp_path, waves, tok_s):
    [(st, rate, why)] = prefix_study.rates(closed_loop_run(tmp_path), "e", 0, waves)
    assert rate == pytest.approx(tok_s)
    assert st is None and "too short" in why  # a few seconds: too few observations for MSER-5, and it says so
