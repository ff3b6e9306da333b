"""Report section from the profiled passes (serve/capture.py, profile/timeline.py): where each engine's GPU time
goes per decode step, measured, beside what kernel-bench's table predicts for its int4 GEMMs at the window's decode
batch. (GPU telemetry and energy: report/telemetry.py.) Reads saved files only."""

from __future__ import annotations

from llmcompare.analysis import traffic
from llmcompare.analysis.attribution import KernelTable, below_table, engine_backend, point_profile
from llmcompare.profile.kernel_class import ORDER
from llmcompare.report.doc import Doc
from llmcompare.schema.kernel_run import KernelRun
from llmcompare.schema.profile import ProfileRecord, TraceFile
from llmcompare.schema.run import EngineRecord

REST = ("norm_act", "sampling", "copy", "other")  # "other kernels" of the table


def ms(v: float | None) -> str:
    """ms per step to the µs (decode steps are a few to tens of ms; idle and small classes are tenths)."""
    return "–" if v is None else f"{v:.3f}"


def _main_trace(p: ProfileRecord) -> TraceFile | None:
    """The process that ran the model: the one with the most analysed kernels (ops on a CPU build)."""
    ok = [t for t in p.traces if t.steps and t.steps.events]
    return max(ok, key=lambda t: t.steps.events) if ok else None


def _predicted(table: KernelTable | None, backend: str | None, batch: float | None,
               engine: EngineRecord) -> tuple[float | None, str]:
    """kernel-bench's int4 GEMM ms per decode step at M = batch (every layer's shapes; lm_head apart)."""
    if table is None:
        return None, "no kernel-bench run given"
    if not backend or not table.has(backend):
        return None, f"the kernel run has no {backend or 'known'} backend"
    if not batch:
        return None, "no batch (no measured repeat with figures)"
    if why := below_table(table, [backend], {"the decode batch": batch}):
        return None, why
    other = table.other_version(backend, engine)  # predicted from another version's kernels: said in the notes
    return (table.layers * sum(table.gemm_us(backend, s["name"], batch) for s in table.shapes) / 1000.0,
            f"predicted: {other}" if other else "")


PREFILL_PHASE = 0.2  # above this share of in-flight requests before their first token, a window is not decode


# above this ratio of the median step's int4 GEMM time to kernel-bench's at the decode batch, the steps carry
# prefill chunks (chunked prefill of other requests' prompts inside every step): on the H200 at c=256 with 1024-token
# prompts, 105-166 ms against 5-8 ms predicted, while only 12% of the requests in flight lacked a first token
MIXED_STEPS = 3.0


def mixed_ratio(gemm_ms_median: float | None, pred_ms: float | None) -> float | None:
    """The median step's int4 GEMM time over kernel-bench's at the decode batch when it exceeds MIXED_STEPS."""
    if not gemm_ms_median or not pred_ms:
        return None
    r = gemm_ms_median / pred_ms
    return r if r > MIXED_STEPS else None


def coverage(p: ProfileRecord, steps: int, step_ms_mean: float | None) -> float | None:
    """The share of the capture window that the timeline's whole steps cover (steps x mean step / window)."""
    if len(p.window_s) != 2 or not step_ms_mean:
        return None
    return steps * step_ms_mean / (1000.0 * (p.window_s[1] - p.window_s[0]))


# below this GPU-side cost (%) the uncaptured reference is the slower one: the profiler does not speed a GPU up, so
# something after the GPU limited the reference (H200, c=256: the reference reached the client at 11-14k tok/s while
# the captured engines decoded at 17.7-20.1k tok/s). What: on the H100 at c=512 vLLM's own token counter, in its API
# server process, ran as slowly as the client's while its GPU stepped at the full batch (reports/h100-c512-complete),
# so there its serving process's output path, not the client, was the limit; the note does not say which in general
LIMITED_REFERENCE = -5.0


def _decode_rate(p: ProfileRecord, steps: int, step_ms_mean: float | None, mixed: bool) -> float | None:
    """The window's decode rate from its own timeline, tok/s: requests decoding mid-window x 1000 / mean step ms;
    None when the window is a prefill phase, its steps carry prefill chunks (`mixed`), its steps cover under 80%
    of it (steps the anchor does not mark: vLLM at c=256 on the H200), or a figure is missing."""
    share, cov = p.window_prefill_share, coverage(p, steps, step_ms_mean)
    if (mixed or not step_ms_mean or not p.window_in_flight or share is None or share > PREFILL_PHASE or not cov
            or cov < 0.8):
        return None
    return p.window_in_flight * (1.0 - share) * 1000.0 / step_ms_mean


def step_cost_pct(p: ProfileRecord, steps: int, step_ms_mean: float | None, mixed: bool = False) -> float | None:
    """The capture's cost seen on the GPU, in %: the window's decode rate (_decode_rate) against the output tok/s
    the client received in the uncaptured window of the same pass (same phase, one wave earlier). Unlike the
    client-side cost it does not count tokens as they reach the client (an engine whose event loop the profiler's
    start blocks delivers them bunched). None without a decode rate or a reference, or below LIMITED_REFERENCE."""
    rate = _decode_rate(p, steps, step_ms_mean, mixed)
    if rate is None or not p.baseline_output_tok_s:
        return None
    cost = round(100.0 * (1.0 - rate / p.baseline_output_tok_s), 1)
    return cost if cost >= LIMITED_REFERENCE else None


def _limited_note(p: ProfileRecord, steps: int, step_ms_mean: float | None, mixed: bool) -> str:
    rate = _decode_rate(p, steps, step_ms_mean, mixed)
    if rate is None or not p.baseline_output_tok_s or step_cost_pct(p, steps, step_ms_mean, mixed) is not None:
        return ""
    return (f"capture cost not measured: the uncaptured window reached the client at {p.baseline_output_tok_s:,.0f} "
            f"tok/s, below the captured window's decode rate ({rate:,.0f} tok/s from its steps): something after the "
            "GPU limited the reference (the serving process's output path or the client; the client shortfall and "
            "the GPU-idle columns of the telemetry table tell which)")


def _variable_note(p: ProfileRecord, gpu_side: float | None) -> str:
    """Why a pass with variable lengths gets no capture cost: its captured and uncaptured windows are two different
    seconds of traffic whose requests differ in length and phase, and such seconds' rates differ by more than the
    capture costs (H100, ShareGPT-like c=64: windows 19.6% and 28% apart, reports/h100-profile-sharegpt-c64 and
    h100-three-engines-c64, where SGLang's own 40-step log intervals ran 7.9 to 10.1 ms a token, p10 to p90;
    capture costs with fixed lengths 0.9-3.5%, reports/h100-sglang-c64 and h100-sglang-vllm-c64), so neither
    difference is a cost."""
    said = [f"GPU-side {gpu_side:+.1f}%" if gpu_side is not None else "",
            f"client {p.overhead_pct:+.1f}%" if p.overhead_pct is not None else ""]
    said = ", ".join(x for x in said if x)
    return ("capture cost not given with variable lengths: the captured and the uncaptured window are two seconds "
            "of different requests, whose rates can differ by more than a capture costs (H100: by 28%), so their "
            "difference is not the capture's cost" +
            (f" (their rates' difference: {said})" if said else ""))


def decode_batch(p: ProfileRecord, usable: list) -> float | None:
    """M of the prediction: the requests decoding mid-window (in flight past their first token) when the pass's
    requests are on file and the window is a decode phase; else the point's mean decode batch (Little's law over
    its measured repeats)."""
    share = p.window_prefill_share
    if p.window_in_flight and share is not None and share <= PREFILL_PHASE:
        return round(p.window_in_flight * (1.0 - share), 1)
    return point_profile(usable).batch if usable else None


def _phase_note(share: float | None) -> str:
    if share is None or share <= PREFILL_PHASE:
        return ""
    return (f"the window fell in a wave's prefill phase ({100 * share:.0f}% of the requests in flight had no first "
            "token yet): its steps are prefill steps, not decode steps")


def _mixed_note(ratio: float | None, gemm_ms: float | None, pred_ms: float | None, batch) -> str:
    if ratio is None:
        return ""
    return (f"its steps carry prefill chunks: the median step's int4 GEMM ({gemm_ms:.1f} ms) is {ratio:.0f}x "
            f"kernel-bench's for a decode batch of {batch:.1f} ({pred_ms:.2f} ms): not a decode measurement")


def _coverage_note(p: ProfileRecord, s) -> str:
    cov = coverage(p, s.steps, s.step_ms_mean)
    if cov is None or cov >= 0.8:
        return ""
    return (f"the window's whole steps cover only {100 * cov:.0f}% of it (time outside the anchor-to-anchor steps: "
            "the start of the capture, or steps without the anchor kernel): per-step figures are of those steps only")


def _heavy_note(s) -> str:
    if not s.heavy_steps or s.heavy_step_ms_mean is None:
        return ""
    return (f"{s.heavy_steps} of {s.steps} steps heavy (int4 GEMM above {s.heavy_factor:g}x the median step's: a larger "
            f"M, from prefill tokens or a larger batch), {100 * (s.heavy_time_share or 0):.0f}% of the steps' time: "
            f"{s.heavy_step_ms_mean:.2f} ms a heavy step against {s.light_step_ms_mean:.2f} ms for the others")


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.0f}"


def _row(label: str, sv, p: ProfileRecord, table: KernelTable | None) -> list:
    t = _main_trace(p)
    pts = [x for x in sv.rec.points if x.index == p.index and x.metrics and x.metrics.completed]
    usable = [x for x in pts if x.usable] or pts
    batch = decode_batch(p, usable)
    backend, _ = engine_backend(sv.rec, sv.scenario_engine)
    pred, why = _predicted(table, backend, batch, sv.rec)
    if t is None or not t.steps.steps:
        note = p.error or (t.steps.note if t else "no trace analysed")
        return [label, p.label, "–", _pct(p.window_prefill_share), "–", "–", "–", "–", "–", ms(pred), batch, "–",
                "–", "–", "–", "–", None, p.overhead_pct, note]
    s = t.steps
    c = s.class_ms_mean
    gemm_med = s.class_ms_median.get("int4_gemm")
    mixed = mixed_ratio(gemm_med, pred)
    rest = sum(c.get(k, 0.0) for k in REST)
    cost = step_cost_pct(p, s.steps, s.step_ms_mean, mixed is not None)
    client_cost = p.overhead_pct
    if traffic.fixed_lengths(sv.run.scenario.get("workload", {})):
        bunched = ("client cost < 0: tokens reached the client bunched after the profiler's start blocked the "
                   "server's event loop (not a speed-up)" + ("; 'GPU-side cost' is the cost" if cost is not None else "")
                   if p.overhead_pct is not None and p.overhead_pct < 0 else "")
        limited = _limited_note(p, s.steps, s.step_ms_mean, mixed is not None)
    else:
        rate = _decode_rate(p, s.steps, s.step_ms_mean, mixed is not None)
        gpu_side = 100.0 * (1.0 - rate / p.baseline_output_tok_s) if rate and p.baseline_output_tok_s else None
        bunched, limited = "", _variable_note(p, gpu_side)
        cost = client_cost = None
    note = "; ".join(x for x in (why, f"{s.source} ops" if s.source == "cpu" else "", bunched, limited,
                                 _phase_note(p.window_prefill_share), _mixed_note(mixed, gemm_med, pred, batch),
                                 _coverage_note(p, s), _heavy_note(s), *p.warnings) if x)
    return [label, p.label, f"{t.role} {t.pid}", _pct(p.window_prefill_share), s.steps, ms(s.step_ms_median), ms(s.step_ms_mean),
            ms(c.get("int4_gemm")), ms(gemm_med), ms(pred), batch, ms(c.get("gemm")), ms(c.get("attention")),
            ms(c.get("comm")), ms(rest), ms(s.idle_ms_mean), cost,
            client_cost, note]


def timeline_section(doc: Doc, engines: dict, kruns: list[KernelRun]) -> None:
    profiled = [(lb, sv, p) for lb, sv in engines.items() for p in sv.rec.profiles]
    if profiled:
        table = KernelTable.from_run(kruns[-1]) if kruns else None
        doc.h(2, "Measured: GPU time per decode step (profiled passes)")
        doc.p("Each profiled point ran once more after its measured repeats, with torch.profiler (CUPTI kernels, or "
              "CPU ops on a CPU build) started inside the engine's own processes for the capture window; figures "
              "are means per step over the window (ms) of the process that ran the model (steps carrying a prefill "
              "chunk included: their GEMMs run at a larger M; the median step's int4 GEMM is the typical decode "
              "step's). Steps run from one "
              "anchor kernel (the lm_head GEMM unless profile.anchor names one) to the next. 'int4 GEMM' is "
              "measured; 'predicted' is kernel-bench's graph-replayed time of the engine's backend for every "
              "layer's shapes at M = the window's decode batch (the requests in flight mid-window past their first "
              "token; where the pass's requests are not on file or the window is a prefill phase, the point's mean "
              "decode batch by Little's law over its measured repeats). 'other "
              "GEMM' holds the lm_head; 'other kernels' are norms, activations, rotary, sampling, copies and the "
              "unclassified; 'idle' is the step minus the union of its kernels: the GPU waiting for the host. "
              "'in prefill %' is the share of the pass's requests in flight mid-window that had no first token yet "
              f"(above {100 * PREFILL_PHASE:.0f}% the window is a prefill phase, said in the notes). "
              "'GPU-side cost' is the capture's cost from the timeline: the window's decode rate (requests decoding "
              "mid-window x 1000 / mean step ms) against the output tok/s of an uncaptured window one wave earlier in "
              f"the same pass (not given below {LIMITED_REFERENCE:g}%: something after the GPU then limited the "
              "reference; nor with variable lengths, where two seconds of different requests can differ by more "
              "than a capture costs: the notes give their difference); "
              "'client cost' compares output tok/s reaching the client "
              "inside the window with an uncaptured window of the same pass, which is invalid when the profiler's "
              "start blocks the server's event loop (tokens then arrive bunched: the notes say so).")
        doc.table(["engine", "point", "process", "in prefill %", "steps", "step ms (median)", "step ms (mean)", "int4 GEMM ms",
                   "int4 GEMM ms (median step)", "predicted int4 GEMM ms", "batch", "other GEMM ms", "attention ms", "comm ms",
                   "other kernels ms", "idle ms", "GPU-side cost %", "client cost %", "notes"],
                  [_row(lb, sv, p, table) for lb, sv, p in profiled])
        for lb, _sv, p in profiled:
            t = _main_trace(p)
            if t and t.steps.top_kernels:
                more = len(t.steps.anchor_names) - 1
                also = f" and {more} other lm_head kernel{'s' if more > 1 else ''}" if more > 0 else ""
                doc.p(f"{lb} {p.label}: top kernels of {t.file} (of {len(p.traces)} traces; anchor "
                      f"{t.steps.anchor!r}{also}): " + "; ".join(f"{k['name'][:80]} [{k['class']}] {k['count']}x "
                                                         f"{k['ms']:.2f} ms" for k in t.steps.top_kernels[:6]))
        doc.p("Classes: " + ", ".join(ORDER) + " (llmcompare/profile/kernel_class.py).")
