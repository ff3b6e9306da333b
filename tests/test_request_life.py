"""scripts/request_life.py on the committed fixed-length SGLang/TurboMind run (reports/h100-sglang-fixed-c64): SGLang
spends ~0.86 s of a ~3.31 s request before its first token, TurboMind ~0.28 of ~3.33 s, and c x 256 / E2EL gives
their plateau rates, level within ~1%."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load

RUN = Path(__file__).resolve().parents[1] / "reports/h100-sglang-fixed-c64/three-engines-h200-20261207-035111"
life = load("request_life")


def test_where_the_two_engines_spend_a_request():
    sg, tm = life.lives(str(RUN), "sglang", 10, 50), life.lives(str(RUN), "turbomind", 10, 50)
    assert len(sg) == len(tm) == 3
    for r in sg:
        assert 0.84 < r["ttft_s"] < 0.89 and 3.29 < r["e2el_s"] < 3.33 and r["n"] > 700
        assert r["loop_tok_s"] == pytest.approx(64 * 256 / r["e2el_s"])
    for r in tm:
        assert 0.24 < r["ttft_s"] < 0.31 and 3.3 < r["e2el_s"] < 3.37 and r["after_first_s"] > 3.0
    ratio = sum(r["loop_tok_s"] for r in tm) / sum(r["loop_tok_s"] for r in sg)
    assert 0.98 < ratio < 1.0  # level within ~1% on the plateau


def test_cli_and_an_empty_span(capsys):
    life.main([str(RUN), "sglang"])
    assert "sglang point 0 repeat 1 attempt 1: " in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no successful sglang request sent between 900 and 901 s"):
        life.main([str(RUN), "sglang", "--from", "900", "--to", "901"])
