"""The report's kernel sections: kernel-bench tables and charts, and the GEMM attribution of each gap."""

from __future__ import annotations

from pathlib import Path

from llmcompare.analysis import attribution, kernel_facts, verdict
from llmcompare.engines import registry
from llmcompare.engines.log import GEMM_VERBOSE_NOTE
from llmcompare.report import charts
from llmcompare.report.doc import Doc, fmt
from llmcompare.schema.files import read_jsonl
from llmcompare.schema.kernel_run import KernelRun
from llmcompare.schema.run import EngineRecord


def kernel_section(doc: Doc, out: Path, kruns: list[KernelRun], engines: dict | None = None,
                   colours: charts.Colours | None = None) -> None:
    colours = colours or charts.Colours()
    doc.h(2, "Kernels: kernel-bench")
    for run in kruns:
        w = run.workers[0] if run.workers else {}
        c, gpu = w.get("ceilings") or {}, w.get("gpu") or {}
        doc.p(f"Run {run.dir} ({run.created_at}): GPU {gpu.get('name')}, driver {gpu.get('driver_version')}, "
              f"versions {[x.get('env', {}) and x['env'].get('versions') for x in run.workers]}; ceilings measured "
              f"in the run: copy {fmt(c.get('copy_gbps'), 0)} GB/s, cuBLAS fp16 {fmt(c.get('fp16_tflops'), 0)} "
              f"TFLOP/s. Correctness bound: relative error {run.rtol} against fp32.")
        for b, info in run.backends.items():
            if info.get("status") != "complete":
                doc.p(f"{b}: {info.get('status')}: {info.get('reason', '')}")
        pts = [p for p in run.points if p.m is not None]
        ms = sorted({p.m for p in pts})
        by = {(p.shape, p.backend, p.m): p for p in pts}
        rows = []
        for sh in run.shapes:
            for b in run.backends:
                if any((sh["name"], b, m) in by for m in ms):
                    cells = []
                    for m in ms:
                        p = by.get((sh["name"], b, m))
                        cells.append(p.graph_us if p and p.status == "ok" else (p.status if p else "–"))
                    rows.append([sh["name"], f"{sh['n']}x{sh['k']}", b] + cells)
        doc.p("Graph-replayed µs per call (operands rotated beyond L2):")
        doc.table(["shape", "N x K", "backend"] + [f"M={m}" for m in ms], rows)
        _kernel_charts(doc, out, run, pts, _backend_colours(doc, run, engines or {}, colours))
        _allreduce_table(doc, run)
        small = [p for p in pts if p.kernels and p.m <= 64]
        if small:
            doc.p("What one call launches at small M (torch.profiler, µs of device time per call), and the share of "
                  "the copy bandwidth the call reaches (bytes it must move / time):")
            doc.table(["backend", "shape", "M", "graph µs", "eager µs", "largest kernel µs", "other device work µs",
                       "% of copy bandwidth", "kernels"],
                      [[p.backend, p.shape, p.m, p.graph_us, p.eager_us, p.gemm_kernel_us, p.other_kernels_us,
                        p.pct_copy_bw, (p.kernel_names or "")[:140]] for p in small])
        facts_section(doc, run, engines or {})


def _backend_colours(doc: Doc, run: KernelRun, engines: dict, colours: charts.Colours) -> charts.Colours:
    """Each backend in the colour of the one engine that runs it (where one does), the others apart; said."""
    labels, _, _ = _engines_by_backend(run, engines)
    like = {kb: lbs[0] for kb, lbs in labels.items() if len(lbs) == 1}
    if like:
        doc.p("Colours: each backend in the colour of the engine that runs it ("
              + "; ".join(f"{kb}: {lb}" for kb, lb in like.items()) + "), the others in colours no engine has.")
    return colours.derived(list(run.backends), like)


def _kernel_charts(doc: Doc, out: Path, run: KernelRun, pts: list, colours: charts.Colours) -> None:
    tag = Path(run.dir).name
    for key, ylabel, title, logy, hline in (
            ("graph_us", "µs per call", "GEMM time against M", True, None),
            ("speedup_vs_cublas", "speedup over cuBLAS fp16", "int4 speedup over cuBLAS fp16", False, 1.0),
            ("pct_roofline", "% of roofline floor", "Share of the roofline floor", False, None)):
        data = {sh["name"]: {b: [(p.m, getattr(p, key)) for p in pts if p.shape == sh["name"] and p.backend == b
                                 and getattr(p, key) is not None] for b in run.backends} for sh in run.shapes}
        # a shape only some backends time (lm_head: cuBLAS) draws only the series it has
        data = {sh: {b: v for b, v in series.items() if v} for sh, series in data.items()}
        data = {sh: series for sh, series in data.items() if series}
        doc.img(charts.panels(out / f"kernels_{key}_{tag}.png", data, "M (tokens)", ylabel, title, logy, hline,
                              colours), f"{title} ({tag})")


def gemm_verbose(rec: EngineRecord) -> str | None:
    """Why an engine's throughput is instrumented by its own logging, or None: its log holds `[Gemm] plan` lines
    (engines.GEMM_VERBOSE_NOTE), or its kind says its env switches such logging on (EngineKind.instrumented:
    lmdeploy's TM_GEMM_VERBOSE, engines/lmdeploy.py)."""
    if note := next((n for n in rec.log_notes if n.startswith(GEMM_VERBOSE_NOTE)), None):
        return note
    k = registry.ENGINES.get(rec.kind)
    return k.instrumented(rec.env, rec.version) if k and k.instrumented else None


def served_gemm_section(doc: Doc, engines: dict) -> None:
    """The kernel each served TurboMind linear layer ran, from its log (EngineRecord.gemm_choices)."""
    rows, notes = [], []
    for lb, sv in engines.items():
        if w := gemm_verbose(sv.rec):
            notes.append(f"{lb}: {w}.")
        for r in sv.rec.gemm_choices:
            tile = "x".join(map(str, r["tile"])) if r.get("tile") else "not in the name"
            rows.append([lb, f"{r['m']}x{r['n']}x{r['k']}", r["kernel"], r["source"], tile, r.get("stages"),
                         r.get("splits"), r["seen"], r["plan_lines"], r["candidates"]])
    if not rows and not notes:
        return
    doc.h(3, "The kernel of each served GEMM (TurboMind's log)")
    for n in notes:
        doc.p(n)
    if rows:
        doc.p("Per problem (M x N x K: tokens x output x input features) that the server's log names, the kernel it "
              "kept (`[Gemm]` line, else the fastest `[tune]` candidate), its CTA tile m x n x k and stages from the "
              "kernel name, its split-K, and how many lines named it (seen; `[Gemm] plan` lines are one per forward "
              "pass with TM_GEMM_VERBOSE=1 in 0.18; candidates are `[tune]` lines, 0.17 with TM_GEMM_TUNE_VERBOSE=1).")
        doc.table(["engine", "M x N x K", "kernel", "from", "CTA tile", "stages", "split-K", "seen", "plan lines",
                   "candidates"], rows)


def _engines_by_backend(run: KernelRun, engines: dict) -> tuple[dict, dict, set[int]]:
    """kernel-run backend -> engine labels, -> a served engine's gemm_choices; and the measured Ms covering the
    batches the served runs reached (Little's law, attribution.point_profile)."""
    labels: dict[str, list[str]] = {}
    served: dict[str, list[dict]] = {}
    ms: set[int] = set()
    for lb, sv in engines.items():
        b, _ = attribution.engine_backend(sv.rec, sv.scenario_engine)
        kb = kernel_facts.run_backend(run, b, sv.rec) if b else None
        if kb is None:
            continue
        labels.setdefault(kb, []).append(lb)
        if sv.rec.gemm_choices:
            served.setdefault(kb, sv.rec.gemm_choices)
        for pts in verdict.usable_points(sv.rec).values():
            if (m := kernel_facts.covering_m(run, attribution.point_profile(pts).batch)) is not None:
                ms.add(m)
    return labels, served, ms


def facts_section(doc: Doc, run: KernelRun, engines: dict) -> None:
    """Per backend, model shape and decode M: the kernel, its time, and the tile/SM/bandwidth facts behind it."""
    labels, served, ms = _engines_by_backend(run, engines)
    fs = kernel_facts.facts(run, served, labels, ms)
    if not fs:
        return
    doc.p("Why each kernel takes its time at decode sizes (M <= 64"
          + (f", and M = {sorted(ms)}: the measured M at or above each batch the served runs reached" if ms else "")
          + "). Columns: Method, kernel facts (below). SMs: "
          + "; ".join(sorted({f"{f.backend} {f.sms} ({f.sms_from})" for f in fs})) + ".")
    doc.method("Kernel facts: why a GEMM kernel takes its time (llmcompare/analysis/kernel_facts.py)",
               kernel_facts.FACTS)
    rows = []
    for f in fs:
        tile = "x".join(map(str, f.tile)) + (" (transposed)" if f.transposed else "") if f.tile else (
            "tile not reported" if f.kernel else "–")
        split = str(f.splits) if f.splits else (f.split_note or "not reported")
        rows.append([f.backend, ", ".join(f.engines) or "–", f.shape, f"{f.n}x{f.k}", f.m, f.graph_us,
                     f.kernel or "–", f.kernel_from, tile, split, f.tiles, f"{f.per_sm:.2f}" if f.per_sm else "–",
                     f.bytes / 1e6, f.pct_copy_bw, f.why()])
    doc.table(["backend", "engines", "shape", "N x K", "M", "graph µs", "kernel", "kernel from", "CTA tile",
               "split-K", "tiles", "CTAs per SM", "MB moved", "% of copy bandwidth", "why slow (computed)"], rows)


def attribution_section(doc: Doc, out: Path, engines: dict, baseline: str, kruns: list[KernelRun]) -> None:
    """For every pair of engines (the earlier one as baseline) and load point: measured gap, GEMM-predicted
    gap, and the rest."""
    doc.h(2, "Attribution: how much of each gap the GEMM kernels explain")
    doc.p("The model: Method, attribution (below).")
    doc.method("Attribution: the GEMM model of a gap (llmcompare/analysis/attribution.py)", attribution.MODEL)
    table = attribution.KernelTable.from_run(kruns[-1])
    tp = f"; one GPU's share at tensor_parallel {table.tensor_parallel}" if table.tensor_parallel > 1 else ""
    comm = f"; all-reduce measured at M {[m for m, _ in table.allreduce_us]}" if table.allreduce_us else ""
    doc.p(f"Kernel table: {kruns[-1].dir} ({table.layers} layers, shapes "
          f"{[(s['name'], s['n'], s['k']) for s in table.shapes]}{tp}{comm}; lm_head "
          f"{'measured (cuBLAS fp16, added to every engine)' if table.lm_head else 'not measured: left out'}).")
    labels = list(engines)
    labels.remove(baseline)
    labels.insert(0, baseline)
    rows = []
    for i, b_lb in enumerate(labels):
        for c_lb in labels[i + 1:]:
            rows += _pair(doc, engines[c_lb], engines[b_lb], table)
    doc.table(["engine", "against", "point", "batch", "baseline batch", "measured gap %", "GEMM-predicted gap %",
               "not explained by GEMM (pp)", "GEMM share of time %", "baseline GEMM share %", "batch from"], rows)
    if table.allreduce_us:
        _time_split(doc, engines, table)


def _allreduce_table(doc: Doc, run: KernelRun) -> None:
    if not run.collectives and not run.collectives_worker:
        return
    w = run.collectives_worker
    doc.p(f"All-reduce over {run.tensor_parallel} GPUs (torch.distributed, NCCL, eager; what each layer runs twice): "
          f"{w.get('status')}{': ' + w['reason'] if w.get('reason') else ''}; env {w.get('env')}.")
    if run.collectives:
        doc.table(["M", "bytes per GPU", "µs per call", "p20", "p80", "bus GB/s", "status"],
                  [[c.m, c.bytes, c.us, c.us_p20, c.us_p80, c.busbw_gbps, c.status] for c in run.collectives])


def _time_split(doc: Doc, engines: dict, table: attribution.KernelTable) -> None:
    """Each engine's time per point as the model splits it: GEMM (its backend), all-reduce, and the rest."""
    doc.p(f"Time per engine and point: GEMM with the engine's backend, communication ({attribution.ALLREDUCES_PER_LAYER}"
          " all-reduces per layer at the step's M, from the kernel run's table) and the rest (seconds of the "
          "point's duration, mean over its usable repeats).")
    rows = []
    for sv in engines.values():
        b, _ = attribution.engine_backend(sv.rec, sv.scenario_engine)
        if not b or not table.has(b):
            continue
        if why := table.other_version(b, sv.rec):
            doc.p(f"WARNING: {why}. {sv.label}'s GEMM time below is that version's.")
        tp = sv.rec.tensor_parallel or (sv.scenario_engine or {}).get("tensor_parallel") or 1
        if tp != table.tensor_parallel:
            doc.p(f"WARNING: {sv.label} ran at tensor_parallel {tp}, the kernel table is at {table.tensor_parallel}.")
        for key, pts in sorted(verdict.usable_points(sv.rec).items(), key=lambda kv: verdict.point_order(kv[0])):
            pg = attribution.point_profile(pts)
            if why := attribution.below_table(table, [b], _needed_m(pg, sv.label)):
                rows.append([sv.label, key.label, b, pg.duration_s, f"not modelled: {why}"] + ["–"] * 5)
                continue
            g = attribution.gemm_time(pg, table, b)
            row = [sv.label, key.label, b, g.duration_s]
            for x in (g.gemm_s, g.comm_s, g.rest_s):
                row += [x, 100 * x / g.duration_s if g.duration_s else None]
            rows.append(row)
    doc.table(["engine", "point", "GEMM backend", "duration s", "GEMM s", "GEMM %", "comm s", "comm %", "rest s",
               "rest %"], rows)


def _running(sv, index: int) -> list[float]:
    f = Path(sv.run.dir) / f"{sv.rec.name}.metrics.jsonl"
    if not f.exists():
        return []
    return [s["num_requests_running"] for s in read_jsonl(f)
            if s.get("point") == index and s.get("num_requests_running", 0) > 0]


def _needed_m(pg: attribution.PointGemm, label: str) -> dict[str, float]:
    """The M values the model runs a point's GEMMs at: its decode batch and its mean prompt length."""
    return {f"{label}'s decode batch": pg.batch, f"{label}'s mean prompt": max(1.0, pg.input_len)}


def _pair(doc: Doc, cand, base, table: attribution.KernelTable) -> list[list]:
    cb, how = attribution.engine_backend(cand.rec, cand.scenario_engine)
    bb, b_how = attribution.engine_backend(base.rec, base.scenario_engine)
    if not cb or not bb or not table.has(cb) or not table.has(bb):
        doc.p(f"{cand.label} against {base.label}: not attributed: the kernel table lacks {cb or '?'} or {bb or '?'}.")
        return []
    for why in filter(None, (table.other_version(cb, cand.rec), table.other_version(bb, base.rec))):
        doc.p(f"WARNING: {why}. The prediction for {cand.label} against {base.label} applies the kernels as timed, "
              "so it is not about the version served.")
    if attribution.shapes_match(table, base.run.model_config) is False:
        doc.p(f"WARNING: the kernel run's shapes or layer count differ from {base.label}'s model config.json; the "
              "prediction applies the kernel table as it is, so it is not about this model.")
    doc.p(f"{cand.label}: GEMM backend {cb} ({how}); {base.label}: {bb} ({b_how}).")
    cp, bp = verdict.usable_points(cand.rec), verdict.usable_points(base.rec)
    rows = []
    for key in sorted(set(cp) & set(bp), key=verdict.point_order):
        c_pg = attribution.point_profile(cp[key], _running(cand, cp[key][0].index))
        b_pg = attribution.point_profile(bp[key], _running(base, bp[key][0].index))
        a = attribution.compare(key.label, c_pg, b_pg, table, cb, bb)
        if why := attribution.below_table(table, [cb, bb], _needed_m(c_pg, cand.label) | _needed_m(b_pg, base.label)):
            rows.append([cand.label, base.label, key.label, a.batch_candidate, a.batch_baseline, a.measured_gap_pct,
                         f"not modelled: {why}", "–", "–", "–", a.batch_source])
            continue
        rows.append([cand.label, base.label, key.label, a.batch_candidate, a.batch_baseline, a.measured_gap_pct,
                     a.gemm_predicted_gap_pct, a.not_explained_pct, 100 * a.gemm_share_candidate,
                     100 * a.gemm_share_baseline, a.batch_source])
    return rows
