"""`llmcompare report RUN...`: report.md, report.html and PNG charts from saved serve-bench and kernel-bench runs.
Reads result files only; measures nothing. Tables print the saved numbers (rounded for reading)."""

from __future__ import annotations

import datetime as dt
import html
import math
import re
from pathlib import Path

from . import attribution, charts
from .references import references_section
from .results import load_run, read_jsonl


def fmt(v, nd: int = 1) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


class Doc:
    """Blocks rendered to both Markdown and HTML."""

    def __init__(self):
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str):
        self.blocks.append(("h", level, text))

    def p(self, text: str):
        self.blocks.append(("p", text))

    def table(self, head: list[str], rows: list[list]):
        self.blocks.append(("table", head, [[fmt(c) if not isinstance(c, str) else c for c in r] for r in rows]))

    def img(self, name: str, alt: str):
        self.blocks.append(("img", name, alt))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                out.append("| " + " | ".join(b[1]) + " |\n|" + "---|" * len(b[1]))
                out[-1] += "".join("\n| " + " | ".join(r) + " |" for r in b[2])
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1]})")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        e = html.escape
        body = []
        for b in self.blocks:
            if b[0] == "h":
                body.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                body.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "table":
                head = "".join(f"<th>{e(c)}</th>" for c in b[1])
                rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in b[2])
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            elif b[0] == "img":
                body.append(f'<figure><img src="{e(b[1])}" alt="{e(b[2])}"><figcaption>{e(b[2])}</figcaption></figure>')
        # the script lets a headless browser confirm every chart loaded (the tests read the title)
        script = ("window.addEventListener('load',()=>{const i=[...document.images];const ok=i.filter(x=>x.complete"
                  "&&x.naturalWidth>0).length;document.title='charts '+ok+'/'+i.length;});")
        style = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}table{border-collapse:collapse;"
                 "font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
                 "img{max-width:100%}figcaption{font-size:11px;color:#555}")
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{style}</style>"
                f"<script>{script}</script></head><body>{''.join(body)}</body></html>\n")


def _x(point: dict) -> float | None:
    if point.get("concurrency"):
        return float(point["concurrency"])
    r = point.get("request_rate")
    return None if r in (None, "inf") else float(r)


def load_runs(paths: list[str]) -> tuple[list[dict], list[dict]]:
    serve, kernel = [], []
    for p in paths:
        run = load_run(p)
        (kernel if run["schema"].startswith("llmcompare.kernel-bench") else serve).append(run)
    return serve, kernel


def engines_of(serve: list[dict]) -> dict[str, dict]:
    """label -> engine record (with its run); labels are engine names, prefixed by run where names repeat."""
    names = [n for r in serve for n in r["engines"]]
    out = {}
    for r in serve:
        for name, e in r["engines"].items():
            label = name if names.count(name) == 1 else f"{Path(r['_dir']).name}/{name}"
            sc = next((x for x in r["scenario"].get("engines", []) if x.get("name") == name), {})
            out[label] = {**e, "_run": r, "_scenario_engine": sc, "_name": name}
    return out


def serve_section(doc: Doc, out: Path, engines: dict[str, dict], baseline: str | None, refs: list[dict]) -> dict:
    doc.h(2, "End to end: serve-bench")
    rows = []
    for label, e in engines.items():
        run = e["_run"]
        doc.p(f"{label}: {e.get('kind')} {e.get('version') or ''}, status {e.get('status')}; "
              f"kernels from its log: {e.get('kernels') or 'none reported'}; command: {' '.join(e.get('command') or [])}"
              f"{'; base URL ' + e['base_url'] if e.get('kind') == 'openai' else ''}; run {run['_dir']}, "
              f"{run['created_at']}, host {run['host'].get('hostname')}, GPUs {[g.get('name') for g in run['host'].get('gpus', [])] or 'none'}.")
        for pt in e["points"]:
            m = pt.get("metrics") or {}
            rows.append([label, pt["label"], pt["status"], m.get("completed"), m.get("failed"),
                         m.get("request_throughput"), m.get("output_throughput"), m.get("total_token_throughput"),
                         m.get("median_ttft_ms"), m.get("p99_ttft_ms"), m.get("median_tpot_ms"), m.get("p99_tpot_ms"),
                         m.get("median_itl_ms"), m.get("p99_itl_ms"), m.get("median_e2el_ms"),
                         (pt.get("server_metrics") or {}).get("mean_num_requests_running")])
    doc.table(["engine", "point", "status", "ok", "failed", "req/s", "output tok/s", "total tok/s", "TTFT p50 ms",
               "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "ITL p50 ms", "ITL p99 ms", "E2EL p50 ms",
               "running (engine's /metrics)"], rows)
    thr = {lb: [(_x(p), p["metrics"]["output_throughput"]) for p in e["points"] if p.get("metrics") and _x(p)]
           for lb, e in engines.items()}
    doc.img(charts.lines(out / "throughput.png", thr, "concurrency (or request rate)", "output tokens/s",
                         "Output throughput", refs=[{"label": r["label"], "points": r["chart_points"]}
                               for r in refs if r["metric"] == "output_throughput"]),
            "Output throughput against load, per engine (published series dotted)")
    lat = {lb: [(p["metrics"]["output_throughput"], p["metrics"]["median_tpot_ms"]) for p in e["points"] if p.get("metrics")]
           for lb, e in engines.items()}
    doc.img(charts.lines(out / "latency_throughput.png", lat, "output tokens/s", "median TPOT (ms)",
                         "Latency against throughput", logx=False), "Median TPOT against output throughput")
    pct = {name: {lb: [(_x(p), p["metrics"][f"median_{name.lower()}_ms"], p["metrics"].get(f"p99_{name.lower()}_ms"))
                       for p in e["points"] if p.get("metrics") and _x(p) and p["metrics"].get(f"p99_{name.lower()}_ms") is not None]
                  for lb, e in engines.items()} for name in ("TTFT", "TPOT", "ITL")}
    doc.img(charts.percentiles(out / "percentiles.png", pct, "concurrency"), "TTFT, TPOT and ITL, p50 and p99")
    gaps: dict[str, list[tuple[float, float]]] = {}
    if baseline and len(engines) > 1:
        base = {p["label"]: p for p in engines[baseline]["points"] if p.get("metrics")}
        grow = []
        for lb, e in engines.items():
            if lb == baseline:
                continue
            for p in e["points"]:
                b = base.get(p["label"])
                if b and p.get("metrics") and b["metrics"]["output_throughput"]:
                    g = 100 * (p["metrics"]["output_throughput"] / b["metrics"]["output_throughput"] - 1)
                    gaps.setdefault(lb, []).append((_x(p), g))
                    grow.append([lb, p["label"], p["metrics"]["output_throughput"], b["metrics"]["output_throughput"], g])
        doc.h(3, f"Gap against {baseline}")
        doc.table(["engine", "point", "output tok/s", f"{baseline} output tok/s", "gap %"], grow)
    return gaps


def kernel_section(doc: Doc, out: Path, kruns: list[dict]) -> None:
    doc.h(2, "Kernels: kernel-bench")
    for run in kruns:
        w = (run.get("workers") or [{}])[0]
        c = w.get("ceilings") or {}
        doc.p(f"Run {run['_dir']} ({run['created_at']}): GPU {(w.get('gpu') or {}).get('name')}, "
              f"driver {(w.get('gpu') or {}).get('driver_version')}, versions {(w.get('env') or {}).get('versions')}; "
              f"ceilings measured in the run: copy {fmt(c.get('copy_gbps'), 0)} GB/s, cuBLAS fp16 "
              f"{fmt(c.get('fp16_tflops'), 0)} TFLOP/s. Correctness bound: relative error {run['rtol']} against fp32.")
        for b, info in run["backends"].items():
            if info.get("status") != "complete":
                doc.p(f"{b}: {info.get('status')}: {info.get('reason', '')}")
        pts = [p for p in run["points"] if p.get("m") is not None]
        ms = sorted({p["m"] for p in pts})
        by = {(p["shape"], p["backend"], p["m"]): p for p in pts}
        rows = []
        for sh in run["shapes"]:
            for b in run["backends"]:
                if any((sh["name"], b, m) in by for m in ms):
                    rows.append([sh["name"], f"{sh['n']}x{sh['k']}", b] + [
                        (by[(sh["name"], b, m)].get("graph_us") if by.get((sh["name"], b, m), {}).get("status") == "ok"
                         else by.get((sh["name"], b, m), {}).get("status", "–")) for m in ms])
        doc.p("Graph-replayed µs per call (operands rotated beyond L2):")
        doc.table(["shape", "N x K", "backend"] + [f"M={m}" for m in ms], rows)
        tag = Path(run["_dir"]).name
        for key, ylabel, title, logy, hline in (
                ("graph_us", "µs per call", "GEMM time against M", True, None),
                ("speedup_vs_cublas", "speedup over cuBLAS fp16", "int4 speedup over cuBLAS fp16", False, 1.0),
                ("pct_roofline", "% of roofline floor", "Share of the roofline floor", False, None)):
            data = {}
            for sh in run["shapes"]:
                data[sh["name"]] = {b: [(p["m"], p[key]) for p in pts if p["shape"] == sh["name"] and p["backend"] == b
                                        and p.get(key) is not None] for b in run["backends"]}
            doc.img(charts.panels(out / f"kernels_{key}_{tag}.png", data, "M (tokens)", ylabel, title, logy, hline),
                    f"{title} ({tag})")
        around = [p for p in pts if p.get("kernels") and p["m"] <= 64]
        if around:
            doc.p("What one call launches at small M (torch.profiler, µs of device time per call):")
            doc.table(["backend", "shape", "M", "graph µs", "eager µs", "largest kernel µs", "other device work µs",
                       "kernels"], [[p["backend"], p["shape"], p["m"], p.get("graph_us"), p.get("eager_us"),
                                     p.get("gemm_kernel_us"), p.get("other_kernels_us"),
                                     (p.get("kernel_names") or "")[:140]] for p in around])


def attribution_section(doc: Doc, engines: dict[str, dict], baseline: str | None,
                        kruns: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Per candidate engine and load point: measured gap, GEMM-predicted gap, the rest. Returns the predicted
    gap series for the gap chart."""
    doc.h(2, "Attribution: how much of the gap the GEMM kernels explain")
    model = attribution.__doc__.split("Model (stated in every report):")[1]
    doc.p("Model: " + re.sub(r"\s+", " ", model).strip())
    if not baseline or len(engines) < 2:
        doc.p("Needs at least two engines.")
        return {}
    table = attribution.KernelTable.from_run(kruns[-1])
    doc.p(f"Kernel table: {kruns[-1]['_dir']} ({table.layers} layers, shapes "
          f"{[(s['name'], s['n'], s['k']) for s in table.shapes]}).")
    predicted: dict[str, list[tuple[float, float]]] = {}
    rows = []
    b_eng = engines[baseline]
    b_backend, b_how = attribution.engine_backend(b_eng, b_eng["_scenario_engine"])
    match = attribution.shapes_match(table, b_eng["_run"].get("model_config"))
    if match is False:
        doc.p("WARNING: the kernel run's shapes or layer count differ from the served model's config.json; the "
              "prediction below applies the kernel table as it is, so it is not about this model.")
    samples_cache: dict[str, list[dict]] = {}

    def samples(e: dict) -> list[dict]:
        f = Path(e["_run"]["_dir"]) / f"{e['_name']}.metrics.jsonl"
        key = str(f)
        if key not in samples_cache:
            samples_cache[key] = read_jsonl(f) if f.exists() else []
        return samples_cache[key]

    for lb, e in engines.items():
        if lb == baseline:
            continue
        backend, how = attribution.engine_backend(e, e["_scenario_engine"])
        doc.p(f"{lb}: GEMM backend {backend} ({how}); baseline {baseline}: {b_backend} ({b_how}).")
        if not backend or not b_backend or not table.has(backend) or not table.has(b_backend):
            doc.p(f"{lb}: not attributed: the kernel table lacks {backend or '?'} or {b_backend or '?'}.")
            continue
        base_pts = {p["label"]: p for p in b_eng["points"] if p.get("metrics") and p["metrics"]["completed"]}
        for p in e["points"]:
            bp = base_pts.get(p["label"])
            if not bp or not p.get("metrics") or not p["metrics"]["completed"]:
                continue
            r = attribution.compare(p["label"], attribution.point_profile(p, samples(e)),
                                    attribution.point_profile(bp, samples(b_eng)), table, backend, b_backend)
            predicted.setdefault(f"{lb} (GEMM-predicted)", []).append((_x(p), r["gemm_predicted_gap_pct"]))
            rows.append([lb, p["label"], r["batch_candidate"], r["batch_baseline"], r["measured_gap_pct"],
                         r["gemm_predicted_gap_pct"], r["not_explained_pct"], 100 * r["gemm_share_candidate"],
                         100 * r["gemm_share_baseline"], r["batch_source"]])
    doc.table(["engine", "point", "batch", f"{baseline} batch", "measured gap %", "GEMM-predicted gap %",
               "not explained by GEMM (pp)", "GEMM share of time %", f"{baseline} GEMM share %", "batch from"], rows)
    return predicted


def build_report(paths: list[str], out_dir: str | None = None, baseline: str | None = None,
                 references_from: str | None = None) -> Path:
    serve, kruns = load_runs(paths)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Path(paths[0]).resolve().parent / f"report-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    doc = Doc()
    doc.h(1, "llmcompare report")
    doc.p(f"From {len(serve)} serve-bench and {len(kruns)} kernel-bench run(s): " + ", ".join(paths) +
          ". Every number below is read from those files.")
    engines = engines_of(serve)
    if baseline is None and engines:
        baseline = next((lb for lb, e in engines.items() if e.get("kind") == "vllm"), next(iter(engines)))
    refs = [r for run in serve for r in run["scenario"].get("references", [])]
    if references_from:  # published series kept in another scenario file (e.g. qwen-awq)
        import dataclasses

        from . import scenario

        refs += [dataclasses.asdict(r) for r in scenario.load(references_from).references]
    for r in refs:
        r["chart_points"] = [(p["x"], p["y"]) for p in r["points"]]
    gaps = serve_section(doc, out, engines, baseline, refs) if serve else {}
    if kruns:
        kernel_section(doc, out, kruns)
    predicted = attribution_section(doc, engines, baseline, kruns) if serve and kruns else {}
    if gaps:
        doc.img(charts.lines(out / "gap.png", gaps, "concurrency", f"output throughput gap vs {baseline} (%)",
                             f"Gap against {baseline}: measured (solid), GEMM-predicted (dashed)", hline0=True,
                             refs=[{"label": r["label"], "points": r["chart_points"]}
                                   for r in refs if r["metric"] == "gap_pct"], dashed=predicted),
                "Measured and GEMM-predicted gap, with published gaps")
    references_section(doc, refs, gaps, kruns, baseline)
    (out / "report.md").write_text(doc.markdown())
    (out / "report.html").write_text(doc.html("llmcompare report"))
    return out
