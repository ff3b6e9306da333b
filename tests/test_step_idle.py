"""scripts/step_idle.py on committed H100 traces: SGLang's ShareGPT-like window waits on its host in bursts (some
light steps over 1 ms, the prefill steps ~10 ms), its fixed-length window in none; TurboMind's ShareGPT-like window
waits a steady ~0.7 ms a step (reports/h100-profile-sharegpt-c64/README.md)."""

from __future__ import annotations

from pathlib import Path

from script_module import load

ROOT = Path(__file__).resolve().parents[1]
si = load("step_idle")

SHAREGPT = ROOT / "reports/h100-profile-sharegpt-c64/qwen-highload-h200-20261206-222918"
FIXED = ROOT / "reports/h100-sglang-c64/three-engines-h200-20261206-162146"


def test_sglang_sharegpt_window_waits_in_bursts():
    s = si.summary(si.steps(str(SHAREGPT / "sglang.profile-p0.pid1400.trace.json.gz")))
    assert (s["steps"], s["light"], s["heavy"]) == (100, 92, 8)  # as run.json's profile record
    assert s["light_idle_median_ms"] < 0.3 and s["light_idle_over_1ms"] == 26 and s["light_idle_max_ms"] > 20
    assert 10.0 < s["heavy_idle_mean_ms"] < 10.6
    assert 0.30 < s["light_idle_share"] + s["heavy_idle_share"] < 0.32


def test_sglang_fixed_window_and_turbomind_sharegpt_window_wait_steadily():
    fixed = si.summary(si.steps(str(FIXED / "sglang.profile-p0.pid3988.trace.json.gz")))
    assert fixed["heavy"] == 0 and fixed["light_idle_max_ms"] < 0.3 and fixed["light_idle_over_1ms"] == 0
    tm = si.summary(si.steps(str(SHAREGPT / "turbomind.profile-p0.pid2008.trace.json.gz")))
    assert tm["heavy"] == 5 and 0.6 < tm["light_idle_median_ms"] < 0.8 and tm["light_idle_over_1ms"] == 2


def test_main_prints_each_trace(capsys):
    si.main([str(FIXED / "sglang.profile-p0.pid3988.trace.json.gz")])
    out = capsys.readouterr().out
    assert "140 steps, 140 light, 0 heavy" in out and "heavy steps' idle" not in out


def test_sglang_sharegpt_window_on_another_machine_has_no_bursts():
    """Session 30's window (another H100, same traffic): the bursts of session 29's window are not there, so one 1-s
    window does not say how often SGLang's host holds its GPU up (reports/h100-three-engines-c64/README.md)."""
    run = ROOT / "reports/h100-three-engines-c64/qwen-highload-h200-20261207-002100"
    s = si.summary(si.steps(str(run / "sglang.profile-p0.pid5855.trace.json.gz")))
    assert (s["steps"], s["light"], s["heavy"]) == (134, 121, 13)  # as run.json's profile record
    assert s["light_idle_median_ms"] < 0.3 and s["light_idle_over_1ms"] == 6
    assert s["light_idle_share"] + s["heavy_idle_share"] < 0.07
