"""`llmcompare report RUN...`: report.md, report.html and PNG charts from saved serve-bench and kernel-bench runs.
Reads result files only; measures nothing. It opens with the answer (a few sentences made from the verdicts: who is
faster, where, by how much, how sure; report/answer.py) and the win map, then the details (analysis/verdict.py's
figures with 95% intervals, serve-bench, kernels), the provenance, and the method of every figure last."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from llmcompare import scenario
from llmcompare.analysis import verdict
from llmcompare.errors import ResultsReadError
from llmcompare.report import charts, same_answer, win_map
from llmcompare.report.answer import answer_section
from llmcompare.report.capacity import capacity_results, capacity_section
from llmcompare.report.doc import Doc
from llmcompare.report.kernels import attribution_section, gemm_verbose, kernel_section, served_gemm_section
from llmcompare.report.references import references_section
from llmcompare.report.serve import latency_verdicts, serve_details, verdict_section
from llmcompare.report.telemetry import telemetry_section
from llmcompare.report.timeline import timeline_section
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run
from llmcompare.schema.kernel_run import KernelRun
from llmcompare.schema.run import EngineRecord, ServeRun


@dataclass
class Served:
    """One engine of one run, as the report names it."""

    label: str  # the engine's name, prefixed by its run where names repeat across runs
    rec: EngineRecord
    run: ServeRun
    scenario_engine: dict
    mark: str = ""  # same_answer.MARK when its answer disagrees with the baseline's

    @property
    def title(self) -> str:
        t = f"{self.label} ({self.rec.version})" if self.rec.version else self.label
        return t + (" [instrumented: TM_GEMM_VERBOSE]" if gemm_verbose(self.rec) else "") + \
            (f" [{self.mark}]" if self.mark else "")


def load_runs(paths: list[str]) -> tuple[list[ServeRun], list[KernelRun]]:
    serve, kernel = [], []
    for p in paths:
        run = load_run(p)
        if isinstance(run, KernelRun):
            kernel.append(run)
        else:  # a point whose request lines are not on file enters no verdict (run.PointResult.usable)
            serve.append(request_lines.attach(run))
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


PROVENANCE = ("engine", "version", "status", "kernels from its log", "context", "command", "request body", "run",
              "created", "host", "GPUs", "machine (key)", "repeats")


def provenance(doc: Doc, engines: dict[str, Served], paths: list[str], n_serve: int, n_kernel: int) -> None:
    """What each engine was and how it ran, side by side (a column per engine), and the files read."""
    doc.h(2, "Provenance")
    cols = []
    for sv in engines.values():
        e, run = sv.rec, sv.run
        gpus = ", ".join(str(g.get("name")) for g in run.host.get("gpus", [])) or "none"
        cols.append([e.kind, e.version or "(version not known)", e.status, str(e.kernels or "none reported"),
                     f"{e.max_model_len} ({e.max_model_len_source})",
                     " ".join(e.command) if e.command else f"(not launched: base URL {e.base_url})",
                     str(e.request_body), run.dir, str(run.created_at), str(run.host.get("hostname")), gpus,
                     f"{e.machine.describe()} ({e.machine.key or 'not one machine'})" if e.machine else "not recorded",
                     str(run.scenario.get("load", {}).get("repeats", 1))])
    if engines:
        doc.table(["", *engines], [[f, *(c[i] for c in cols)] for i, f in enumerate(PROVENANCE)], cls="wide")
    doc.p(f"From {n_serve} serve-bench and {n_kernel} kernel-bench run(s): " + ", ".join(paths) +
          ". Every number in this report is read from those files.")


def default_baseline(engines: dict[str, Served], baseline: str | None) -> str:
    if baseline is None:
        return next(iter(engines))
    if baseline not in engines:
        raise ResultsReadError(f"report --baseline: no engine named {baseline!r} in these runs; "
                               f"engines: {', '.join(engines) or 'none (no serve-bench run among them)'}")
    return baseline


def build_report(paths: list[str], out_dir: str | None = None, baseline: str | None = None,
                 references_from: str | None = None, figures: str = "auto", cross_machine: bool = False) -> Path:
    """figures: verdict.FIGURES (auto: steady-state windows where both engines have them; whole: whole points).
    cross_machine: give verdicts between engines not shown to be measured on one machine (each says so)."""
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
    sections(doc, out, engines, kruns, baseline, figures, refs, cross_machine)
    provenance(doc, engines, paths, len(serve), len(kruns))
    doc.method_section()
    (out / "report.md").write_text(doc.markdown())
    (out / "report.html").write_text(doc.html("llmcompare report"))
    return out


def _dataset_names(engines: dict[str, Served]) -> str:
    """The workload datasets of the runs (a workload without lengths of its own is named by its dataset)."""
    names = sorted({str(sv.run.scenario.get("workload", {}).get("dataset") or "") for sv in engines.values()} - {""})
    return " / ".join(names) or win_map.UNNAMED


def sections(doc: Doc, out: Path, engines: dict[str, Served], kruns: list[KernelRun], baseline: str | None,
             figures: str, refs: list[dict], cross_machine: bool = False) -> None:
    """The answer and the win map first, then the details: verdicts, capacity, serve-bench, kernels."""
    colours = charts.Colours(engines)
    cap = capacity_results(engines, baseline, cross_machine)
    found = same_answer.checks(engines, baseline) if len(engines) > 1 else {}
    same_answer.mark(engines, found)  # before any title is written
    if len(engines) > 1 or cap[0]:
        answer_section(doc, engines, baseline, figures, cap[0], same_answer.said(engines, baseline, found),
                       cross_machine)
    if len(engines) > 1:
        win_map.map_section(doc, out, {lb: sv.rec for lb, sv in engines.items()}, figures, colours, cross_machine,
                            _dataset_names(engines))
    same_answer.section(doc, engines, baseline, found)
    gaps = verdict_section(doc, out, engines, baseline, figures, colours, cross_machine) if len(engines) > 1 else {}
    if engines:
        capacity_section(doc, engines, cap)
        latency_verdicts(doc, engines, baseline, figures, cross_machine)
        serve_details(doc, out, engines, refs, colours)
        served_gemm_section(doc, engines)
        timeline_section(doc, engines, kruns)
        telemetry_section(doc, engines)
    if kruns:
        kernel_section(doc, out, kruns, engines, colours)
    if len(engines) > 1 and kruns:
        attribution_section(doc, out, engines, baseline, kruns)
    references_section(doc, refs, {lb: [(r.key.x, r.gap.pct) for r in rows if r.key.x] for lb, rows in gaps.items()},
                       kruns, baseline)
