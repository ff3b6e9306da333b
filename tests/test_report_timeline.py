"""The report's per-step table (report/timeline.py): measured int4 GEMM per step beside kernel-bench's prediction
at the point's batch, the rest named with numbers; telemetry rows and the 'unavailable' line."""

from pathlib import Path

import pytest
from test_attribution import table
from test_timeline import kernel_events

from llmcompare.profile import timeline
from llmcompare.report import timeline as R
from llmcompare.report.build import Served, build_report
from llmcompare.report.doc import Doc
from llmcompare.report.telemetry import telemetry_section
from llmcompare.schema import profile
from llmcompare.schema.profile import ProfileRecord, TraceFile
from llmcompare.schema.run import EngineRecord, Metrics, PointResult, ServeRun
from llmcompare.schema.telemetry import TelemetrySummary


def served(telemetry: TelemetrySummary | None = None) -> Served:
    # 4 req/s, 0.9 s decoding each: batch 3.6 (Little's law)
    m = Metrics(completed=8, total_output_tokens=80, total_input_tokens=160, duration_s=2.0, output_throughput=40.0,
                request_throughput=4.0, stats={"mean_e2el_ms": 1000.0, "mean_ttft_ms": 100.0})
    pt = PointResult(index=0, concurrency=4, status="complete", metrics=m, telemetry=telemetry)
    steps = timeline.summarize(*timeline.events({"traceEvents": kernel_events(5)}))
    prof = ProfileRecord(index=0, label="c=4", concurrency=4, status="complete", overhead_pct=3.5,
                         traces=[TraceFile("e.profile-p0.pid9.trace.json.gz", 9, "api-server", steps=steps),
                                 TraceFile("e.profile-p0.pid7.trace.json.gz", 7, "other",
                                           steps=profile.StepSummary())])
    rec = EngineRecord(name="tm", kind="lmdeploy", points=[pt], profiles=[prof])
    return Served("tm", rec, ServeRun(), {"gemm_backend": "fast"})


def test_row_puts_measured_int4_gemm_beside_the_prediction_at_the_batch():
    row = R._row("tm", served(), served().rec.profiles[0], table())
    (eng, point, proc, in_prefill, steps, med, mean, int4, int4_med, pred, batch, gemm, attn, comm, rest, idle, step_cost, cost,
     note) = row
    assert (eng, point, proc, in_prefill, steps) == ("tm", "c=4", "api-server 9", "–", 4)
    assert int4 == int4_med == "0.045"  # 3 layers x (10 + 5) µs, measured from the trace
    assert pred == "0.040"  # the table's 2 layers x 2 shapes x 10 µs ("fast" at M = 3.6)
    assert batch == pytest.approx(3.6) and gemm == "0.030" and attn == "0.060" and comm == "–"
    assert rest == f"{(5 * 3 + 4 + 1) / 1000:.3f}" and idle == "0.050" and cost == 3.5 and note == ""
    assert step_cost is None  # no mean TPOT on file
    sv = served()
    sv.rec.profiles[0].window_prefill_share = 0.44
    row = R._row("tm", sv, sv.rec.profiles[0], table())
    assert row[3] == "44" and "the window fell in a wave's prefill phase (44% of the requests" in row[-1]


def test_gpu_side_cost_is_the_windows_decode_rate_against_the_uncaptured_window():
    # TurboMind 0.18, c=64 on the H200: 64 decoding, 9.839 ms mean step, 6,881 tok/s one wave earlier
    p = ProfileRecord(window_in_flight=64, window_prefill_share=0.0, baseline_output_tok_s=6881.462,
                      window_s=[10.0, 11.0])
    assert R.step_cost_pct(p, 105, 9.8394) == round(100 * (1 - 64 * 1000 / 9.8394 / 6881.462), 1) == 5.5
    assert R.step_cost_pct(p, 26, 17.6) is None  # its steps cover 46% of the window (vLLM, c=256)
    p.window_prefill_share = 0.44  # a prefill phase: no decode rate
    assert R.step_cost_pct(p, 105, 9.8394) is None
    no_base = ProfileRecord(window_in_flight=4, window_prefill_share=0.0, window_s=[0.0, 1.0])
    assert R.step_cost_pct(no_base, 200, 5.0) is None
    p.window_prefill_share = 0.0
    assert R.step_cost_pct(p, 105, 9.8394, mixed=True) is None  # steps carrying prefill chunks: no decode rate


def test_a_reference_slower_than_the_captured_decode_rate_gives_no_cost_and_says_why():
    # vLLM 0.26, c=256 in=1024 on the H200 (2026-12-03): 79 steps of 12.745 ms with 256 decoding (20,086 tok/s)
    # in the window; the uncaptured window one wave earlier reached the client at 11,311 tok/s
    p = ProfileRecord(window_in_flight=256, window_prefill_share=0.0, baseline_output_tok_s=11311.101,
                      window_s=[28.8055, 29.8283])
    assert R.step_cost_pct(p, 79, 12.745) is None  # -77.6%: something after the GPU limited the reference
    assert R._limited_note(p, 79, 12.745, False) == (
        "capture cost not measured: the uncaptured window reached the client at 11,311 tok/s, below the captured "
        "window's decode rate (20,086 tok/s from its steps): something after the GPU limited the reference (the "
        "serving process's output path or the client; the client shortfall and the GPU-idle columns of the "
        "telemetry table tell which)")
    p.baseline_output_tok_s = 19500.0  # -3.0%: within noise of no cost, given
    assert R.step_cost_pct(p, 79, 12.745) == -3.0 and R._limited_note(p, 79, 12.745, False) == ""


def test_the_prediction_is_at_the_windows_decode_batch_when_the_passs_requests_say_it():
    sv = served()  # Little's law over its measured repeat: 3.6
    p = sv.rec.profiles[0]
    usable = sv.rec.points
    assert R.decode_batch(p, usable) == pytest.approx(3.6)
    p.window_in_flight, p.window_prefill_share = 4, 0.0  # every request in flight decoding mid-window
    assert R.decode_batch(p, usable) == 4.0
    row = R._row("tm", sv, p, table())
    assert row[10] == 4.0
    p.window_in_flight, p.window_prefill_share = 256, 0.12  # 12% before their first token: 225.3 decoding
    assert R.decode_batch(p, usable) == 225.3
    p.window_prefill_share = 0.44  # a prefill phase: the point's mean decode batch
    assert R.decode_batch(p, usable) == pytest.approx(3.6)


def test_steps_whose_int4_gemm_is_far_above_a_decode_batchs_are_called_mixed():
    # H200, c=256 in=1024, the window 12% before first tokens: TurboMind's median step 105.5 ms of int4 GEMM
    # against kernel-bench's 8.43 ms at its decode batch; c=64: 7.22 against 7.04
    assert R.mixed_ratio(105.493, 8.426) == 105.493 / 8.426
    assert R.mixed_ratio(7.215, 7.037) is None and R.mixed_ratio(None, 7.0) is None and R.mixed_ratio(7.0, None) is None
    note = R._mixed_note(R.mixed_ratio(105.493, 8.426), 105.493, 8.426, 156.6)
    assert note == ("its steps carry prefill chunks: the median step's int4 GEMM (105.5 ms) is 13x kernel-bench's "
                    "for a decode batch of 156.6 (8.43 ms): not a decode measurement")


def test_section_renders_steps_and_telemetry():
    doc = Doc()
    tel = TelemetrySummary(available=True, samples=10, gpus=[0], duration_s=2.0, mean_power_w=500.0,
                           energy_j=1000.0, j_per_output_token=12.5, sm_clock_mhz_mean=1900.0, sm_clock_mhz_min=1755)
    R.timeline_section(doc, {"tm": served(tel)}, [])
    telemetry_section(doc, {"tm": served(tel)})
    md = doc.markdown()
    assert "## Measured: GPU time per decode step" in md and "no kernel-bench run given" in md
    assert "| tm | c=4 | api-server 9 | – | 4 |" in md and "sm90_xmma_gemm_f16f16_f32" in md
    assert "## GPU telemetry" in md and "| 12.500 |" in md  # J/token, 3 decimals
    doc = Doc()
    telemetry_section(doc, {"tm": served(TelemetrySummary(why_not="nvidia-smi not on PATH"))})
    assert "Telemetry unavailable for some points: nvidia-smi not on PATH." in doc.markdown()


def test_heavy_steps_and_other_lm_head_kernels_are_said():
    sv = served()
    s = sv.rec.profiles[0].traces[0].steps
    s.heavy_factor, s.heavy_steps, s.heavy_step_ms_mean, s.light_step_ms_mean, s.heavy_time_share = \
        1.25, 1, 0.9, 0.2, 0.53
    s.anchor_names = [s.anchor, "nvjet_sm90_hsh_128x256"]
    note = R._row("tm", sv, sv.rec.profiles[0], table())[-1]
    assert note == ("1 of 4 steps heavy (int4 GEMM above 1.25x the median step's: a larger M, from prefill "
                    "tokens or a larger batch), 53% of the steps' time: 0.90 ms a heavy step against 0.20 ms for the others")
    doc = Doc()
    R.timeline_section(doc, {"tm": sv}, [])
    assert "anchor 'sm90_xmma_gemm_f16f16_f32' and 1 other lm_head kernel)" in doc.markdown()
    assert R._heavy_note(profile.StepSummary()) == ""  # an older file: no heavy-step figures, nothing said


def test_variable_lengths_get_no_capture_cost_and_the_note_gives_the_windows_difference():
    sv = served()
    sv.run.scenario = {"workload": {"dataset": "synthetic-sharegpt"}}
    p = sv.rec.profiles[0]
    p.window_in_flight, p.window_prefill_share, p.baseline_output_tok_s = 4, 0.0, 20_000.0
    p.window_s = [0.0, 4 * p.traces[0].steps.step_ms_mean / 1000]  # its 4 steps cover the window
    row = R._row("tm", sv, p, table())
    assert row[-3] is None and row[-2] is None  # neither column: two seconds of different requests
    assert row[-1].startswith("capture cost not given with variable lengths: the captured and the uncaptured window")
    rate = 4 * 1000 / sv.rec.profiles[0].traces[0].steps.step_ms_mean
    assert f"(their rates' difference: GPU-side {100 * (1 - rate / 20_000):+.1f}%, client +3.5%)" in row[-1]
    sv.run.scenario = {"workload": {"dataset": "random"}}  # fixed lengths: the costs as before
    assert R._row("tm", sv, p, table())[-2] == 3.5


def test_a_committed_sharegpt_pass_reports_its_windows_difference_not_a_cost(tmp_path):
    """vLLM's and SGLang's ShareGPT-like passes on one H100 (session 30): the windows 2.7% and 28% apart."""
    run = Path(__file__).resolve().parents[1] / "reports/h100-three-engines-c64/qwen-highload-h200-20261207-002100"
    md = (Path(build_report([str(run)], str(tmp_path / "r"))) / "report.md").read_text()
    rows = {r.split(" | ")[0][2:]: r for r in md.splitlines() if "| c=64 | engine-core" in r or "| c=64 | scheduler" in r}
    assert "(their rates' difference: GPU-side +2.7%, client +3.5%)" in rows["vllm"]
    assert "(their rates' difference: GPU-side -28.0%, client -6.3%)" in rows["sglang"]
    assert all("| – | – | no kernel-bench run given; capture cost not given" in r for r in rows.values())


def test_a_predicted_step_from_another_version_of_the_backend_says_so():
    from llmcompare.analysis.attribution import KernelTable
    from llmcompare.report.timeline import _predicted
    from llmcompare.schema.run import EngineRecord

    t = KernelTable({"turbomind": {"a": [(1, 10.0), (256, 40.0)]}}, [{"name": "a", "n": 8, "k": 8}], layers=2,
                    versions={"turbomind": {"lmdeploy": "0.17.0"}})
    same = EngineRecord(name="turbomind-0.17", kind="lmdeploy", version="0.17.0")
    other = EngineRecord(name="turbomind", kind="lmdeploy", version="0.18.0")
    assert _predicted(t, "turbomind", 256, same) == (pytest.approx(0.08), "")  # 2 layers x 40 µs, in ms
    pred, why = _predicted(t, "turbomind", 256, other)  # another version's kernels: predicted, and said so
    assert pred == pytest.approx(0.08)
    assert why.startswith("predicted: the kernel run timed turbomind with lmdeploy 0.17.0, and turbomind served")
