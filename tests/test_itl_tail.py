"""scripts/itl_tail.py on a committed H100 run (reports/h100-three-engines-c64): SGLang's inter-token gaps over
10 ms are as many as its own log's prefill passes per decode pass (~17%), and average a decode step plus one ~11 ms
pass; vLLM's, whose prefill rides inside its decode steps, are few."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).resolve().parents[1]
it = load("itl_tail")

RUN = str(ROOT / "reports/h100-three-engines-c64/qwen-highload-h200-20261207-000040")


def test_sglang_gaps_over_10ms_match_its_prefill_passes():
    s = it.summary(it.gaps(RUN, "sglang", 10, 45), 10.0)
    assert 6.9 < s["p50_ms"] < 7.2  # its decode step (7.04 ms profiled)
    assert 0.16 < s["over_share"] < 0.19  # its log: 19.3 prefill passes per 111.6 decode passes = 0.173
    assert 17.5 < s["over_mean_ms"] < 20.0  # a step plus one ~11 ms pass
    assert 8.8 < s["mean_ms"] < 9.1  # 1000 / 111.6 decode passes a second


def test_vllm_has_few_long_gaps_and_main_prints(capsys):
    s = it.summary(it.gaps(RUN, "vllm", 10, 45), 10.0)
    assert s["over_share"] < 0.06 and s["p99_ms"] < 17
    it.main([RUN, "vllm", "--over", "10"])
    assert "vllm: " in capsys.readouterr().out
    with pytest.raises(SystemExit, match="fewer than two"):
        it.summary([], 10.0)
