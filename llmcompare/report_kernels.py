"""The report's kernel sections: kernel-bench tables and charts, and the GEMM attribution of each gap."""

from __future__ import annotations

import re
from pathlib import Path

from . import attribution, charts, verdict
from .doc import Doc, fmt
from .results import KernelRun, read_jsonl


def kernel_section(doc: Doc, out: Path, kruns: list[KernelRun]) -> None:
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
        tag = Path(run.dir).name
        for key, ylabel, title, logy, hline in (
                ("graph_us", "µs per call", "GEMM time against M", True, None),
                ("speedup_vs_cublas", "speedup over cuBLAS fp16", "int4 speedup over cuBLAS fp16", False, 1.0),
                ("pct_roofline", "% of roofline floor", "Share of the roofline floor", False, None)):
            data = {sh["name"]: {b: [(p.m, getattr(p, key)) for p in pts if p.shape == sh["name"] and p.backend == b
                                     and getattr(p, key) is not None] for b in run.backends} for sh in run.shapes}
            doc.img(charts.panels(out / f"kernels_{key}_{tag}.png", data, "M (tokens)", ylabel, title, logy, hline),
                    f"{title} ({tag})")
        _allreduce_table(doc, run)
        small = [p for p in pts if p.kernels and p.m <= 64]
        if small:
            doc.p("What one call launches at small M (torch.profiler, µs of device time per call), and the share of "
                  "the copy bandwidth the call reaches (bytes it must move / time):")
            doc.table(["backend", "shape", "M", "graph µs", "eager µs", "largest kernel µs", "other device work µs",
                       "% of copy bandwidth", "kernels"],
                      [[p.backend, p.shape, p.m, p.graph_us, p.eager_us, p.gemm_kernel_us, p.other_kernels_us,
                        p.pct_copy_bw, (p.kernel_names or "")[:140]] for p in small])


def attribution_section(doc: Doc, out: Path, engines: dict, baseline: str, kruns: list[KernelRun]) -> None:
    """For every pair of engines (the earlier one as baseline) and load point: measured gap, GEMM-predicted
    gap, and the rest."""
    doc.h(2, "Attribution: how much of each gap the GEMM kernels explain")
    model = attribution.__doc__.split("Model (stated in every report):")[1]
    doc.p("Model: " + re.sub(r"\s+", " ", model).strip())
    table = attribution.KernelTable.from_run(kruns[-1])
    tp = f"; one GPU's share at tensor_parallel {table.tensor_parallel}" if table.tensor_parallel > 1 else ""
    comm = f"; all-reduce measured at M {[m for m, _ in table.allreduce_us]}" if table.allreduce_us else ""
    doc.p(f"Kernel table: {kruns[-1].dir} ({table.layers} layers, shapes "
          f"{[(s['name'], s['n'], s['k']) for s in table.shapes]}{tp}{comm}).")
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
        tp = sv.rec.tensor_parallel or (sv.scenario_engine or {}).get("tensor_parallel") or 1
        if tp != table.tensor_parallel:
            doc.p(f"WARNING: {sv.label} ran at tensor_parallel {tp}, the kernel table is at {table.tensor_parallel}.")
        for key, pts in sorted(verdict.usable_points(sv.rec).items(), key=lambda kv: kv[0].x or 0):
            g = attribution.gemm_time(attribution.point_profile(pts), table, b)
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


def _pair(doc: Doc, cand, base, table: attribution.KernelTable) -> list[list]:
    cb, how = attribution.engine_backend(cand.rec, cand.scenario_engine)
    bb, b_how = attribution.engine_backend(base.rec, base.scenario_engine)
    if not cb or not bb or not table.has(cb) or not table.has(bb):
        doc.p(f"{cand.label} against {base.label}: not attributed: the kernel table lacks {cb or '?'} or {bb or '?'}.")
        return []
    if attribution.shapes_match(table, base.run.model_config) is False:
        doc.p(f"WARNING: the kernel run's shapes or layer count differ from {base.label}'s model config.json; the "
              "prediction applies the kernel table as it is, so it is not about this model.")
    doc.p(f"{cand.label}: GEMM backend {cb} ({how}); {base.label}: {bb} ({b_how}).")
    cp, bp = verdict.usable_points(cand.rec), verdict.usable_points(base.rec)
    rows = []
    for key in sorted(set(cp) & set(bp), key=lambda k: k.x or 0):
        a = attribution.compare(key.label, attribution.point_profile(cp[key], _running(cand, cp[key][0].index)),
                                attribution.point_profile(bp[key], _running(base, bp[key][0].index)), table, cb, bb)
        rows.append([cand.label, base.label, key.label, a.batch_candidate, a.batch_baseline, a.measured_gap_pct,
                     a.gemm_predicted_gap_pct, a.not_explained_pct, 100 * a.gemm_share_candidate,
                     100 * a.gemm_share_baseline, a.batch_source])
    return rows
