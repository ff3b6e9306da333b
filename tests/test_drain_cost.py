"""scripts/drain_cost.py on a committed H100 run (reports/h100-three-engines-c64): TurboMind's drains last about
twice SGLang's, its gap between tokens at the drain's small batches staying ~8 ms where SGLang's falls to ~4."""

from __future__ import annotations

from pathlib import Path

from script_module import load

ROOT = Path(__file__).resolve().parents[1]
dc = load("drain_cost")

RUN = str(ROOT / "reports/h100-three-engines-c64/qwen-highload-h200-20261207-000040")


def test_turbomind_drains_longer_at_a_slower_small_batch_step(capsys):
    tm, sg = dc.drains(RUN, "turbomind"), dc.drains(RUN, "sglang")
    assert len(tm) == len(sg) == 3  # one per repeat
    assert all(t["drain_s"] > 9 for t in tm) and all(s["drain_s"] < 8 for s in sg)
    assert all(7.5 < t["tail_gap_ms"] < 8.5 for t in tm) and all(3.5 < s["tail_gap_ms"] < 4.2 for s in sg)
    assert all(0.03 < x["drain_share"] < 0.07 for x in tm + sg)  # a like share of the tokens in either
    dc.main([RUN, "sglang"])
    assert capsys.readouterr().out.count("sglang (0, ") == 3
