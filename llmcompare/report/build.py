"""`llmcompare report RUN...`: report.md, report.html and PNG charts from saved serve-bench and kernel-bench runs.
Reads result files only; measures nothing. It leads with the verdict (who is faster, where, by how much, with
95% intervals and a significance word: analysis/verdict.py), then the details and the provenance."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from llmcompare import scenario
from llmcompare.analysis import verdict
from llmcompare.errors import ResultsReadError
from llmcompare.report import charts, win_map
from llmcompare.report.capacity import capacity_section
from llmcompare.report.doc import Doc, fmt
from llmcompare.report.kernels import attribution_section, gemm_verbose, kernel_section, served_gemm_section
from llmcompare.report.references import references_section
from llmcompare.report.timeline import timeline_section
from llmcompare.schema.files import load_run, read_jsonl
from llmcompare.schema.kernel_run import KernelRun
from llmcompare.schema.run import EngineRecord, ServeRun


@dataclass
class Served:
    """One engine of one run, as the report names it."""

    label: str  # the engine's name, prefixed by its run where names repeat across runs
    rec: EngineRecord
    run: ServeRun
    scenario_engine: dict

    @property
    def title(self) -> str:
        t = f"{self.label} ({self.rec.version})" if self.rec.version else self.label
        return t + (" [instrumented: TM_GEMM_VERBOSE]" if gemm_verbose(self.rec) else "")


def load_runs(paths: list[str]) -> tuple[list[ServeRun], list[KernelRun]]:
    serve, kernel = [], []
    for p in paths:
        run = load_run(p)
        (kernel if isinstance(run, KernelRun) else serve).append(run)
    return serve, kernel


def engines_of(serve: list[ServeRun]) -> dict[str, Served]:
    names = [n for r in serve for n in r.engines]
    out = {}
    for r in serve:
        for name, e in r.engines.items():
            label = name if names.count(name) == 1 else f"{Path(r.dir).name}/{name}"
            sc = next((x for x in r.scenario.get("engines", []) if x.get("name") == name), {})
            out[label] = Served(label, e, r, sc)
    return out


def _ci(e: verdict.Estimate | None, nd: int = 1) -> str:
    if e is None:
        return "–"
    if e.lo is None:
        return fmt(e.mean, nd)
    return f"{fmt(e.mean, nd)} [{fmt(e.lo, nd)}, {fmt(e.hi, nd)}]"


def line_name(engine: str, key, multi: bool) -> str:
    """A chart line: the engine, and its workload cell when the runs hold several (one line per cell)."""
    return f"{engine} {key.workload_label}" if multi and key.workload_label else engine


def several_workloads(engines: dict[str, Served]) -> bool:
    return len({p.key.workload for sv in engines.values() for p in sv.rec.points}) > 1


def verdict_section(doc: Doc, out: Path, engines: dict[str, Served], baseline: str, figures: str = "auto") -> dict:
    """The answer first: per candidate, where it is faster or slower than the baseline, by how much."""
    doc.h(2, f"Verdict: output throughput against {engines[baseline].title}")
    base = engines[baseline].rec
    gaps: dict[str, list] = {}
    for lb, sv in engines.items():
        if lb == baseline:
            continue
        rows = verdict.compare(sv.rec, base, figures=figures)
        doc.p(verdict.sentence(sv.title, engines[baseline].title, rows))
        gaps[lb] = rows
    all_rows = [(lb, r) for lb, rows in gaps.items() for r in rows]
    if not all_rows:
        doc.p("No load point has complete, trusted results for two engines: no verdict.")
        return {}
    multi, lines = several_workloads(engines), {}
    for lb, r in all_rows:
        if r.key.x is not None:
            lines.setdefault(line_name(lb, r.key, multi), []).append((r.key.x, r.gap.pct, r.gap.lo_pct, r.gap.hi_pct))
    doc.img(charts.bands(out / "gap.png", lines, "concurrency (or request rate)", f"output throughput gap vs {baseline} (%)",
                         f"Gap against {baseline}, with 95% intervals", hline0=True),
            f"Output-throughput gap against {baseline}; bars are 95% intervals")
    doc.table(["engine", "point", "output tok/s", f"{baseline} output tok/s", "gap % [95% interval]", "verdict",
               "from", "interval"],
              [[lb, r.key.label, _ci(r.candidate), _ci(r.baseline), r.gap.text(), r.gap.word, r.candidate.source,
                r.candidate.method] for lb, r in all_rows])
    doc.p("How: " + " ".join(verdict.METHOD.split()))
    return gaps


def latency_verdicts(doc: Doc, engines: dict[str, Served], baseline: str, figures: str = "auto") -> None:
    rows = []
    for lb, sv in engines.items():
        if lb == baseline:
            continue
        for metric in ("median_tpot_ms", "median_ttft_ms"):
            for r in verdict.compare(sv.rec, engines[baseline].rec, metric, figures):
                rows.append([lb, r.key.label, metric, _ci(r.candidate, 2), _ci(r.baseline, 2), r.gap.text(),
                             r.gap.word])
    if rows:
        doc.h(3, f"Latency against {baseline}")
        doc.table(["engine", "point", "metric", "engine ms", f"{baseline} ms", "difference % [95%]", "verdict"], rows)


def serve_details(doc: Doc, out: Path, engines: dict[str, Served], refs: list[dict]) -> None:
    doc.h(2, "End to end: serve-bench")
    rows, thr, lat, multi = [], {}, {}, several_workloads(engines)
    for lb, sv in engines.items():
        for key, pts in sorted(verdict.usable_points(sv.rec).items(), key=lambda kv: verdict.point_order(kv[0])):
            e_thr, e_tpot = verdict.estimate(pts), verdict.estimate(pts, "median_tpot_ms")
            if key.x is not None:
                thr.setdefault(line_name(lb, key, multi), []).append((key.x, e_thr.mean, e_thr.lo, e_thr.hi))
            lat.setdefault(line_name(lb, key, multi), []).append((e_thr.mean, e_tpot.mean if e_tpot else None))
        for p in sv.rec.points:
            m = p.metrics
            st = p.steady
            rows.append([lb, p.label, p.repeat + 1, p.attempt, p.status, m.completed if m else None,
                         m.failed if m else None, m.output_throughput if m else None,
                         st.output_throughput if st else None, m.stat("median_ttft_ms") if m else None,
                         m.stat("p99_ttft_ms") if m else None, m.stat("median_tpot_ms") if m else None,
                         m.stat("p99_tpot_ms") if m else None, m.stat("median_itl_ms") if m else None,
                         m.stat("p99_itl_ms") if m else None, m.mean_tokens_per_chunk if m else None,
                         p.server_metrics.get("mean_num_requests_running"), cache_hit(p),
                         "; ".join(p.trust.reasons) if not p.trust.trusted else ""])
    doc.img(charts.bands(out / "throughput.png", thr, "concurrency (or request rate)", "output tokens/s",
                         "Output throughput (95% intervals)",
                         refs=[{"label": r["label"], "points": r["chart_points"]} for r in refs
                               if r["metric"] == "output_throughput"]),
            "Output throughput against load, per engine (published series in grey)")
    doc.img(charts.lines(out / "latency_throughput.png", lat, "output tokens/s", "median TPOT (ms)",
                         "Latency against throughput", logx=False), "Median TPOT against output throughput")
    doc.p("Every point, repeat and attempt (whole-point figures as vLLM bench serve computes them; 'steady' is "
          "the steady-state window's output tok/s; ITL is between chunks carrying tokens, read beside tokens per "
          "chunk). Points that are not complete and trusted are listed but enter no verdict.")
    doc.table(["engine", "point", "repeat", "attempt", "status", "ok", "failed", "output tok/s", "steady tok/s",
               "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "ITL p50 ms", "ITL p99 ms",
               "tokens/chunk", "running (engine)", "prefix cache hit %", "why untrusted"], rows)
    series_charts(doc, out, engines)


def cache_hit(p) -> str | None:
    """The point's prefix-cache hit rate in %, as its engine reported it (engines/prefix_cache.py); None for older files."""
    c = p.prefix_cache
    if c is None:
        return None
    if not c.reported:
        return "not reported"
    return f"{100 * c.hit_rate:.1f}" if c.hit_rate is not None else "no lookups"


def series_charts(doc: Doc, out: Path, engines: dict[str, Served]) -> None:
    """Per-second output tok/s of each point's first repeat, per engine, with its steady-state window shaded."""
    panels: dict[str, dict] = {}
    windows: dict[str, tuple[float, float] | None] = {}
    for lb, sv in engines.items():
        f = Path(sv.run.dir) / f"{sv.rec.name}.series.jsonl"
        if not f.exists():
            continue
        rows = read_jsonl(f)
        for p in sv.rec.points:
            if p.repeat != 0 or p.metrics is None:
                continue
            pts = [(r["t_s"], r["output_tok_per_s"]) for r in rows
                   if (r["point"], r["repeat"], r["attempt"]) == (p.index, p.repeat, p.attempt)]
            if pts:
                panels.setdefault(p.label, {})[lb] = pts
                windows[f"{p.label}|{lb}"] = (p.steady.start_s, p.steady.end_s) if p.steady else None
    if panels:
        doc.img(charts.timelines(out / "series.png", panels, windows, "output tok/s",
                                 "Output tokens per second through each point (first repeat; steady window shaded)"),
                "Per-second output throughput: warm-up, steady state and drain")


def provenance(doc: Doc, engines: dict[str, Served]) -> None:
    doc.h(2, "Provenance")
    for lb, sv in engines.items():
        e, run = sv.rec, sv.run
        gpus = [g.get("name") for g in run.host.get("gpus", [])] or "none"
        doc.p(f"{lb}: {e.kind} {e.version or '(version not known)'}, status {e.status}; kernels from its log: "
              f"{e.kernels or 'none reported'}; context {e.max_model_len} ({e.max_model_len_source}); "
              f"command: {' '.join(e.command) if e.command else '(not launched: base URL ' + str(e.base_url) + ')'}; "
              f"request body: {e.request_body}; run {run.dir}, {run.created_at}, host {run.host.get('hostname')}, "
              f"GPUs {gpus}, repeats {run.scenario.get('load', {}).get('repeats', 1)}.")


def default_baseline(engines: dict[str, Served], baseline: str | None) -> str:
    if baseline is None:
        return next(iter(engines))
    if baseline not in engines:
        raise ResultsReadError(f"report --baseline: no engine named {baseline!r} in these runs; "
                               f"engines: {', '.join(engines) or 'none (no serve-bench run among them)'}")
    return baseline


def build_report(paths: list[str], out_dir: str | None = None, baseline: str | None = None,
                 references_from: str | None = None, figures: str = "auto") -> Path:
    """figures: verdict.FIGURES (auto: steady-state windows where both engines have them; whole: whole points)."""
    if figures not in verdict.FIGURES:
        raise ResultsReadError(f"report --figures: {figures!r} is not valid; valid: {', '.join(verdict.FIGURES)}")
    serve, kruns = load_runs(paths)
    engines = engines_of(serve)
    if engines or baseline is not None:
        baseline = default_baseline(engines, baseline)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Path(paths[0]).resolve().parent / f"report-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    doc = Doc()
    doc.h(1, "llmcompare report")
    refs = [r for run in serve for r in run.scenario.get("references", [])]
    if references_from:  # published series kept in another scenario file (e.g. qwen-awq)

        refs += [dataclasses.asdict(r) for r in scenario.load(references_from).references]
    for r in refs:
        r["chart_points"] = [(p["x"], p["y"]) for p in r["points"]]
    gaps = verdict_section(doc, out, engines, baseline, figures) if len(engines) > 1 else {}
    if len(engines) > 1:
        win_map.map_section(doc, out, {lb: sv.rec for lb, sv in engines.items()}, figures)
    if engines:
        capacity_section(doc, engines)
        latency_verdicts(doc, engines, baseline, figures)
        serve_details(doc, out, engines, refs)
        served_gemm_section(doc, engines)
        timeline_section(doc, engines, kruns)
    if kruns:
        kernel_section(doc, out, kruns, engines)
    if len(engines) > 1 and kruns:
        attribution_section(doc, out, engines, baseline, kruns)
    references_section(doc, refs, {lb: [(r.key.x, r.gap.pct) for r in rows if r.key.x] for lb, rows in gaps.items()},
                       kruns, baseline)
    if engines:
        provenance(doc, engines)
    doc.p(f"From {len(serve)} serve-bench and {len(kruns)} kernel-bench run(s): " + ", ".join(paths) +
          ". Every number above is read from those files.")
    (out / "report.md").write_text(doc.markdown())
    (out / "report.html").write_text(doc.html("llmcompare report"))
    return out
