"""Report section from GPU telemetry (serve/telemetry.py): power, clocks and energy per output token per measured
run, and whether the GPU waited (analysis/gpu_idle.py) with the engine's own generation counter over the same
seconds. Reads saved files only (run.json's summaries, <engine>.telemetry.jsonl.gz, <engine>.metrics.jsonl)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from llmcompare.analysis import gpu_idle
from llmcompare.report.doc import Doc
from llmcompare.schema.files import read_jsonl
from llmcompare.schema.request_lines import Cell
from llmcompare.schema.telemetry import GpuIdle


def _by_cell(rows: list[dict]) -> dict[Cell, list[dict]]:
    out: dict[Cell, list[dict]] = {}
    for r in rows:  # tags as request_lines reads them: no repeat is 0, no attempt is 1
        out.setdefault((r.get("point"), r.get("repeat", 0), r.get("attempt", 1)), []).append(r)
    return out


def _telemetry_rows(path: Path) -> list[dict]:
    """Tolerates a gzip member or a last line cut short by a crash."""
    out = []
    try:
        with gzip.open(path, "rt") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except (OSError, EOFError):
        pass
    return out


def idle_by_point(run_dir: str | Path, engine: str, windows: dict[Cell, list[float]] | None = None
                  ) -> dict[Cell, GpuIdle]:
    """Each measured run's GpuIdle from the engine's telemetry and /metrics files ({} where either is missing), over
    each cell's comparison window where `windows` has one."""
    tel, met = Path(run_dir) / f"{engine}.telemetry.jsonl.gz", Path(run_dir) / f"{engine}.metrics.jsonl"
    if not tel.exists() or not met.exists():
        return {}
    counters = _by_cell(read_jsonl(met))
    out = {}
    for cell, rows in _by_cell(_telemetry_rows(tel)).items():
        ms = counters.get(cell, [])
        c = [(m["t_s"], m.get("generation_tokens_total")) for m in ms]
        zero = _unix_zero(ms)  # files from session 20 on: the counters' clock in Unix time
        g = gpu_idle.compare(gpu_idle.power_series(rows, zero), c, (windows or {}).get(cell), aligned=zero is not None,
                             gauges=[(m["t_s"], m.get("num_requests_running"), m.get("num_requests_waiting"))
                                     for m in ms])
        if g is not None:
            out[cell] = g
    return out


def _unix_zero(ms: list[dict]) -> float | None:
    """The Unix time of the counters' t_s = 0 (the median of unix_s - t_s over the samples), or None where the
    samples carry no unix_s (files before session 20)."""
    d = sorted(m["unix_s"] - m["t_s"] for m in ms if m.get("unix_s") is not None)
    return d[len(d) // 2] if d else None


def _requests_cell(g: GpuIdle) -> str:
    """The engine's running / waiting requests, GPU idle against busy (matched clocks only)."""
    if g.running_idle is None:
        return "–" if g.clocks.startswith("matched") or not g.idle_share else "not read (clocks ~1 s apart)"
    span = g.running_idle_range
    spread = f" (running {span[0]:,.0f}-{span[1]:,.0f} over the alignments)" if span else ""
    busy = f"{g.running_busy:,.0f} / {g.waiting_busy:,.0f}" if g.running_busy is not None else "–"
    return f"idle {g.running_idle:,.0f} / {g.waiting_idle:,.0f}{spread}; busy {busy}"


def _idle_cells(g: GpuIdle | None) -> list:
    if g is None:
        return [None, None, None, None]
    if g.idle_share is None:
        return [g.why_not, None, None, None]
    rate = (f"{g.gen_tok_s_idle:,.0f} ({g.idle_intervals})" if g.gen_tok_s_idle is not None else "–")
    if g.idle_over_busy_min is not None:
        rate += f"; idle/busy at worst {g.idle_over_busy_min:.2f}"
    busy = f"{g.gen_tok_s_busy:,.0f}" if g.gen_tok_s_busy is not None else "–"
    return [f"{100 * g.idle_share:.1f}", rate, busy, _requests_cell(g)]


def telemetry_section(doc: Doc, engines: dict) -> None:
    rows, missing, waited = [], set(), []
    for lb, sv in engines.items():
        idle = idle_by_point(sv.run.dir, sv.rec.name, {
            (p.index, p.repeat, p.attempt): p.engine_counters.window_s for p in sv.rec.points
            if p.engine_counters is not None and p.engine_counters.window_s})
        for p in sv.rec.points:
            t = p.telemetry
            if t is None:
                continue
            if not t.available:
                missing.add(t.why_not or "unavailable")
                continue
            tok_s = p.metrics.output_throughput if p.metrics else None
            j_tok = f"{t.j_per_output_token:.3f}" if t.j_per_output_token is not None else None  # J/token: 3 decimals
            g = idle.get((p.index, p.repeat, p.attempt))
            rows.append([lb, p.label, p.repeat + 1, p.status, tok_s, t.mean_power_w, t.energy_j, j_tok,
                         t.sm_clock_mhz_mean, t.sm_clock_mhz_min, t.memory_used_mib_max, *_idle_cells(g)])
            if gpu_idle.counter_lagged(g):
                waited.append(f"{lb} {p.label} #{p.repeat + 1}")
    if not rows and not missing:
        return
    doc.h(2, "GPU telemetry: power, clocks, energy per output token, and whether the GPU waited")
    if rows:
        doc.p("nvidia-smi sampled during each measured run (every GPU of the host, summed); energy = power "
              "integrated over the samples; J/token = energy / the point's output tokens. 'GPU idle %': the share of "
              "power samples in the point's comparison window (the engine-counter window: the steady state's start "
              f"to the last send, never the first {gpu_idle.OPENING_S:g} s; a run without one is not measured) "
              f"below its idle threshold ({100 * gpu_idle.IDLE_FRACTION:.0f}% of the way from its lowest draw, the "
              "idle GPU at the opening, to its 95th percentile, the busy GPU): the GPU was at or near its idle draw "
              "although requests were in flight. 'engine gen tok/s, GPU idle (intervals)': the engine's own "
              "generation counter over the /metrics intervals whose midpoint's power was idle, against the other "
              "intervals, and the lowest ratio of the two over the clocks' alignments tried. Clocks: runs from "
              "session 20 on stamp each /metrics sample with its Unix time, so power and counters are matched on "
              "the host's clock, the power of a moment read from the sample 0.5 s later (nvidia-smi's power is "
              "the mean over the last second), alignments tried within 0.25 s of that; older runs are matched "
              "from each series' first sample, about 1 s coarse, alignments within 1 s either way, and their "
              "engine requests in the idle seconds are not read. 'engine running / waiting': the engine's "
              "num_requests_running and _waiting, mean over its samples while the GPU was idle and while busy "
              "(requests the client had in flight but the engine neither ran nor queued were still in its "
              "serving process or in transit). Only shares and mean rates are given, never single seconds. "
              "Where the counter rose faster while the GPU was "
              "idle than while it was busy at every alignment, it ran behind the GPU (it counts tokens as the "
              "serving process handles them; vLLM's, in its API server process): those tokens had been generated "
              "earlier and were still on their way out (llmcompare/analysis/gpu_idle.py).")
        doc.table(["engine", "point", "repeat", "status", "output tok/s", "mean power W", "energy J", "J/token",
                   "SM clock MHz (mean)", "SM clock MHz (min)", "memory MiB (max)", "GPU idle %",
                   "engine gen tok/s, GPU idle (intervals)", "engine gen tok/s, GPU busy",
                   "engine running / waiting, GPU idle vs busy"], rows)
    if waited:
        doc.p("The engine's counter rose faster while the GPU drew idle power than while it was busy, at every "
              "alignment of the clocks tried, in: "
              + "; ".join(waited) + ". In those seconds the GPU was idle while the serving process was still "
              "delivering tokens generated earlier, so the GPU did not set the pace (in a closed loop the next "
              "requests wait for those completions); which part of the output path held the tokens (the hand-off "
              "from the process that runs the model, detokenizing, the HTTP stream) is not measured here.")
    if missing:
        doc.p("Telemetry unavailable for some points: " + "; ".join(sorted(missing)) + ".")
