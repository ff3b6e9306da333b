"""The report's capacity section: per engine of a run with load.capacity, the highest request rate meeting the
SLOs, recomputed from the saved probes (capacity.assess: estimate, interval and their definition there)."""

from __future__ import annotations

import math

from llmcompare.analysis import capacity
from llmcompare.analysis.verdict import left_out
from llmcompare.report.doc import Doc
from llmcompare.schema import scenario
from llmcompare.schema.codec import record
from llmcompare.schema.scenario import Slo


def capacity_results(engines: dict) -> tuple[list[str], list[list]]:
    """engines: report.Served by label. (One sentence per engine with a capacity search, the probes' rows.)"""
    said, rows = [], []
    for lb, sv in engines.items():
        sc = sv.run.scenario
        cfg = (sc.get("load") or {}).get("capacity")
        if not cfg:
            continue
        cap, slo = record(scenario.Capacity, cfg), record(Slo, sc.get("slo") or {})
        q, mc = cap.slo_percentile, (sc.get("load") or {}).get("max_concurrency")
        probes = capacity.probes_of(sv.rec, mc, slo, q)
        if not probes:
            continue
        res = capacity.assess(probes, cap.tolerance)
        said.append(f"At {capacity.slo_text(slo, q)}, {sv.title} holds {res.text()}" +
                    (f" (bracket: passes at {res.lo:.3g}, fails at {res.hi:.3g} req/s; {_n(probes)})."
                     if res.lo is not None and res.hi is not None else f" ({_n(probes)}).") +
                    _unusable(sv.rec, mc))
        rows += [[lb, f"{p.rate:.3g}", len(p.ratios), f"{p.mean:.2f}", "passes" if p.passed else "fails",
                  ", ".join(f"{r:.2f}" for r in p.ratios)] for p in probes]
    return said, rows


def _n(probes: list) -> str:
    return f"{len(probes)} probe{'' if len(probes) == 1 else 's'}"


def _unusable(rec, max_concurrency) -> str:
    """' Probed but left out: <rate> req/s (why); ...' for the probes no figure above uses ('' if none): they
    passed or failed nothing, and the search went on around them (analysis/capacity.py, 'around')."""
    out = [f"{k.request_rate:.4g} req/s ({why})" for k, why in left_out(rec).items()
           if k.request_rate is not None and math.isfinite(k.request_rate) and k.max_concurrency == max_concurrency]
    return f" Probed but left out: {'; '.join(out)}." if out else ""


def capacity_section(doc: Doc, engines: dict, results: tuple[list[str], list[list]] | None = None) -> list[str]:
    """engines: report.Served by label; results: capacity_results(engines) when already computed. Returns the
    sentences it wrote; the method goes to the Method section."""
    said, rows = results or capacity_results(engines)
    if said:
        doc.h(2, "Capacity: the highest request rate that meets the SLOs")
        for s in said:
            doc.p(s)
        doc.table(["engine", "rate req/s", "repeats", "worst SLO ratio (mean)", "probe", "per repeat"], rows)
        doc.p("How: Method, capacity (below).")
        doc.method("Capacity: the highest request rate meeting the SLOs (llmcompare/analysis/capacity.py)",
                   capacity.METHOD)
    return said
