"""scripts/sglang_decode_log.py on committed SGLang server logs from H100 runs: with fixed 512/256 lengths its
intervals' median matches the profiled decode step (7.16-7.18 ms, reports/h100-sglang-vllm-c64), with ShareGPT-like
lengths it is ~8.8 ms, the time its separate prefill passes take between decode steps included
(reports/h100-three-engines-c64/README.md); its prefill of full chunks ran at ~22k prompt tokens a second in
reports/h100-sglang-fixed-c64."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).resolve().parents[1]
sdl = load("sglang_decode_log")

SHAREGPT = ROOT / "reports/h100-three-engines-c64/qwen-highload-h200-20261207-000040/sglang.server.log.xz"
FIXED = ROOT / "reports/h100-sglang-vllm-c64/three-engines-h200-20261206-185301/sglang.server.log.xz"
WAVES = ROOT / "reports/h100-sglang-fixed-c64/three-engines-h200-20261207-035111/sglang.server.log.xz"


def test_fixed_length_intervals_match_the_profiled_step():
    s = sdl.summary(sdl.read(str(FIXED))[0])
    assert s["lines"] == 253 and s["min_running"] == 57
    assert 7.10 < s["median_ms"] < 7.25  # the profiled pass's decode step: 7.156 ms


def test_sharegpt_intervals_are_longer_than_the_decode_step():
    log = sdl.read(str(SHAREGPT))
    rows, prefill, every = log.rows, log.prefill, log.every
    s = sdl.summary(rows)
    assert s["lines"] == 660 and s["intervals"] == 487
    assert 8.6 < s["median_ms"] < 9.1 and s["p10_ms"] > 7.5
    decode, per_s, seconds = sdl.passes_per_s(rows, prefill, every, s["min_running"])
    assert every == 40 and seconds > 150 and 105 < decode < 118 and 17 < per_s < 21  # ~19 prefill passes a second
    # fixed lengths prefill only at the waves' starts
    fixed = sdl.read(str(FIXED))
    assert sdl.passes_per_s(fixed.rows, fixed.prefill, fixed.every, 57)[1] < 4


def test_parse_and_errors(tmp_path, capsys):
    log = tmp_path / "sglang.server.log"
    log.write_text("[2026-12-07 00:09:58] Decode batch, #running-req: 64, #token: 9, token usage: 0.02, cuda graph: "
                   "True, gen throughput (token/s): 8000.00, #queue-req: 0\n"
                   "[2026-12-07 00:09:58] Prefill batch, #new-seq: 1, #new-token: 8, #running-req: 63\n")
    assert sdl.read(str(log)) == ([("2026-12-07 00:09:58", 64, 8000.0)], ["2026-12-07 00:09:58"], 40, None, [], None)
    sdl.main([str(log)])
    out = capsys.readouterr().out
    assert "median 8.00" in out and "over 1 plateau seconds: decode 40.0, prefill 1.0" in out
    assert "mixed chunk on" not in out and sdl.read(str(log)).mixed is None
    mixed = tmp_path / "mixed.server.log"
    mixed.write_text("[2026-12-07 00:09:00] server_args=ServerArgs(model_path='m', enable_mixed_chunk=True, "
                     "decode_log_interval=40)\n" + log.read_text())
    sdl.main([str(mixed)])
    assert "mixed chunk on" in capsys.readouterr().out
    assert sdl.read(str(SHAREGPT)).mixed is False  # SGLang as shipped
    with pytest.raises(SystemExit, match="at least 65 requests"):
        sdl.summary(sdl.read(str(log))[0], min_running=65)
    with pytest.raises(SystemExit, match="no Decode batch line"):
        sdl.summary([])


def test_full_chunk_prefill_rate_of_fixed_length_waves(capsys):
    """64 prompts of 512 tokens a wave: 4 full 8,192-token chunks, at ~22k prompt tokens a second (the Marlin GEMMs
    alone allow 24.5k at M = 4,096: reports/h100-sglang-fixed-c64/README.md)."""
    log = sdl.read(str(WAVES))
    chunk, rates = log.chunk, log.chunk_rates
    assert chunk == 8192 and len(rates) == 141
    assert 21_500 < sorted(rates)[len(rates) // 2] < 23_000
    sdl.main([str(WAVES)])
    assert "prefill of full 8192-token chunks (141 passes): prompt tok/s p10 2" in capsys.readouterr().out


MIXED_RUN = ROOT / "reports/h100-sglang-mixed-chunk-c64/qwen-highload-h200-20261207-093424"


def test_mixed_chunk_trades_decode_passes_for_prefill_passes_that_also_decode(capsys):
    """The session-33 pair on one H100 (reports/h100-sglang-mixed-chunk-c64/README.md): with --enable-mixed-chunk
    a running request gets a token in every decode and every (mixed) prefill pass, 120 a second against 113 as
    shipped, where the client measured a 6.2% shorter median TPOT."""
    shipped, mixed = (sdl.read(str(MIXED_RUN / f"{e}.server.log.xz")) for e in ("sglang", "sglang-mixed-chunk"))
    assert shipped.mixed is False and mixed.mixed is True
    d0, p0, _ = sdl.passes_per_s(shipped.rows, shipped.prefill, shipped.every, sdl.summary(shipped.rows)["min_running"])
    d1, p1, _ = sdl.passes_per_s(mixed.rows, mixed.prefill, mixed.every, sdl.summary(mixed.rows)["min_running"])
    assert 110 < d0 < 117 and 97 < d1 < 103 and 17 < p0 < 19.5 < p1 < 21.5
    assert 1.04 < (d1 + p1) / d0 < 1.08  # tokens a second for a running request, mixed against shipped
    # what is left of a second per other pass, at the client's median gaps (7.24 and 7.11 ms): ~9.6 and ~14.4 ms
    assert 9.3 < sdl.other_pass_ms(d0, p0, 7.24) < 9.9 and 14.1 < sdl.other_pass_ms(d1, p1, 7.11) < 14.7
    assert sdl.other_pass_ms(d0, 0.0, 7.24) is None
    sdl.main([str(MIXED_RUN / "sglang-mixed-chunk.server.log.xz"), "--step-ms", "7.11"])
    out = capsys.readouterr().out
    assert "mixed chunk on" in out and "each mixed pass and what runs between passes takes 14.4 ms" in out
