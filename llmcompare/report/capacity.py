"""The report's capacity section: per engine of a run with load.capacity, the highest request rate meeting the
SLOs, recomputed from the saved probes (capacity.assess: estimate, interval and their definition there)."""

from __future__ import annotations

import dataclasses
import math

from llmcompare.analysis import capacity, keepup, machines
from llmcompare.analysis.verdict import left_out, refused, usable_points
from llmcompare.report.doc import Doc
from llmcompare.schema import request_lines, scenario
from llmcompare.schema.codec import record
from llmcompare.schema.scenario import Slo


def capacity_results(engines: dict, baseline: str | None = None,
                     cross_machine: bool = False) -> tuple[list[str], list[list]]:
    """engines: report.Served by label. (One sentence per engine with a capacity search, one per engine searched
    in several runs on one machine (joined()), then one per engine against the baseline's capacity
    (comparison()); the probes' rows.)"""
    said, rows, results, found = [], [], {}, {}
    for lb, sv in engines.items():
        if (f := _search(sv)) is None:
            continue
        found[lb] = f
        cap, slo, mc, probes = f
        results[lb] = res = capacity.assess(probes, cap.tolerance)
        said.append(_holds(sv.title, slo, cap.slo_percentile, res, probes) + _unusable(sv.rec, mc))
        kept = _keepups(sv, mc)
        rows += [[lb, f"{p.rate:.3g}", len(p.ratios), f"{p.mean:.2f}", "passes" if p.passed else "fails",
                  ", ".join(f"{r:.2f}" for r in p.ratios), "; ".join(map(keepup.text, kept.get(p.rate, [])))]
                 for p in probes]
    engines, results = dict(engines), dict(results)
    for sv, members, res in joined(engines, found):
        cap, slo = found[members[0]][0], found[members[0]][1]
        said.append(f"{_holds(sv.title, slo, cap.slo_percentile, res, res.probes)} Its searches "
                    f"({', '.join(members)}) are of one engine configuration on one machine under the same SLOs and "
                    "workload, so their probes are pooled (Method, capacity: joined).")
        for lb in members:
            results.pop(lb)
        engines[sv.label], results[sv.label] = sv, res
        baseline = sv.label if baseline in members else baseline
    return said + comparison(engines, results, baseline, cross_machine), rows


def joined(engines: dict, found: dict) -> list[tuple]:
    """engines: report.Served by label; found: _search() by label. Per engine configuration searched in more than
    one run on one machine under the same terms (_same_search): (a Served labelled '<name>, N runs joined', the
    members' labels, capacity.assess of their pooled probes at the smallest of their tolerances)."""
    groups: list[list[str]] = []
    for lb in found:
        g = next((g for g in groups if _same_search(engines[g[0]], engines[lb])), None)
        if g is None:
            groups.append([lb])
        else:
            g.append(lb)
    out = []
    for g in (g for g in groups if len(g) > 1):
        first = engines[g[0]]
        res = capacity.assess(capacity.pooled([found[lb][3] for lb in g]), min(found[lb][0].tolerance for lb in g))
        label = f"{first.label.rsplit('/', 1)[-1]}, {len(g)} runs joined"
        taken = set(engines) | {sv.label for sv, _, _ in out}
        label = label if label not in taken else f"{label} ({g[0]})"  # one name, two configurations
        out.append((dataclasses.replace(first, label=label), g, res))
    return out


def _same_search(a, b) -> bool:
    """a, b: report.Served. One engine configuration (scenario entry, version, model) searched on one machine
    under the same terms (_terms) in two runs (Method, capacity: joined)."""
    return (a.run is not b.run and a.rec.kind == b.rec.kind and a.rec.version == b.rec.version
            and a.scenario_engine == b.scenario_engine and a.run.scenario.get("model") == b.run.scenario.get("model")
            and _terms(a) == _terms(b) and machines.difference(a.rec, b.rec) is None)


def _keepups(sv, max_concurrency: int | None) -> dict[float, list]:
    """sv: report.Served. Per probe rate, keepup.keepup of each usable repeat's requests (in repeat order; None
    where its request lines are not on file), from the run's request files."""
    cells = request_lines.records(sv.run.dir, sv.rec.name) if sv.run.dir else {}
    out: dict[float, list] = {}
    for key, pts in usable_points(sv.rec).items():
        r = key.request_rate
        if r is not None and math.isfinite(r) and key.max_concurrency == max_concurrency:
            out[r] = [keepup.keepup(cells.get((p.index, p.repeat, p.attempt), []))
                      for p in sorted(pts, key=lambda p: p.repeat)]
    return out


def _holds(title: str, slo: Slo, q: float, res: capacity.Result, probes: list) -> str:
    """'At <SLOs>, <engine> holds <capacity> (bracket: ...; N probes).'"""
    return (f"At {capacity.slo_text(slo, q)}, {title} holds {res.text()}" +
            (f" (bracket: passes at {res.lo:.3g}, fails at {res.hi:.3g} req/s; {_n(probes)})."
             if res.lo is not None and res.hi is not None else f" ({_n(probes)})."))


def comparison(engines: dict, results: dict, baseline: str | None, cross_machine: bool = False) -> list[str]:
    """engines: report.Served by label; results: capacity.Result by label. One sentence per engine with a capacity
    beside the baseline's: which holds the higher rate (capacity.higher: its span lies above the other's) or that
    the spans overlap; refused between machines as every verdict is (verdict.refused)."""
    base = results.get(baseline)
    if base is None or capacity.span(base) is None:
        return []
    out = []
    for lb, res in results.items():
        if lb == baseline or capacity.span(res) is None:
            continue
        a, b = engines[lb], engines[baseline]
        if no := refused(a.rec, b.rec, cross_machine):
            out.append(f"Capacity: {no}.")
            continue
        if _terms(a) != _terms(b):
            out.append(f"Capacity: no verdict between {a.title} and {b.title}: their searches had different SLOs, "
                       "SLO percentile, max_concurrency or workload.")
            continue
        order, (lo_a, hi_a), (lo_b, hi_b) = capacity.higher(res, base), capacity.span(res), capacity.span(base)
        spans = f"{a.title} {_span(lo_a, hi_a)}, {b.title} {_span(lo_b, hi_b)} req/s"
        if order == 0:
            out.append(f"Capacity: no verdict between {a.title} and {b.title}: the ranges their capacities lie in overlap "
                       f"({spans}).")
        else:
            more, less = (a, b) if order > 0 else (b, a)
            out.append(f"Capacity: {more.title} holds a higher request rate within the SLOs than {less.title} "
                       f"(the ranges their capacities lie in: {spans}).")
    return out


def _search(sv) -> tuple[scenario.Capacity, Slo, int | None, list[capacity.Probe]] | None:
    """sv: report.Served. Its run's capacity settings, SLOs, max_concurrency and usable probes; None without a
    search or a usable probe."""
    sc = sv.run.scenario
    load = sc.get("load") or {}
    if not load.get("capacity"):
        return None
    cap, slo = record(scenario.Capacity, load["capacity"]), record(Slo, sc.get("slo") or {})
    probes = capacity.probes_of(sv.rec, load.get("max_concurrency"), slo, cap.slo_percentile)
    return (cap, slo, load.get("max_concurrency"), probes) if probes else None


def _terms(sv) -> tuple:
    """What two capacities must share to be compared: the SLOs, their percentile, load.max_concurrency (the cap on
    requests in flight) and the workload (less num_prompts, which only sets a probe's least number of requests)."""
    sc = sv.run.scenario
    load = sc.get("load") or {}
    work = {k: v for k, v in (sc.get("workload") or {}).items() if k != "num_prompts"}
    return (sc.get("slo"), record(scenario.Capacity, load.get("capacity") or {}).slo_percentile,
            load.get("max_concurrency"), sorted(work.items(), key=str))


def _span(lo: float, hi: float) -> str:
    return f"below {hi:.3g}" if lo == 0 else f"at least {lo:.3g}" if math.isinf(hi) else f"[{lo:.3g}, {hi:.3g}]"


def _n(probes: list) -> str:
    return f"{len(probes)} probe{'' if len(probes) == 1 else 's'}"


def _unusable(rec, max_concurrency) -> str:
    """' Probed but left out: <rate> req/s (why); ...' for the probes no figure above uses ('' if none): they
    passed or failed nothing, and the search went on around them (analysis/capacity.py, 'around')."""
    out = [f"{k.request_rate:.4g} req/s ({why})" for k, why in left_out(rec).items()
           if k.request_rate is not None and math.isfinite(k.request_rate) and k.max_concurrency == max_concurrency]
    return f" Probed but left out: {'; '.join(out)}." if out else ""


def capacity_section(doc: Doc, engines: dict, results: tuple[list[str], list[list]] | None = None) -> list[str]:
    """engines: report.Served by label; results: capacity_results(...) when already computed. Returns the
    sentences it wrote; the method goes to the Method section."""
    said, rows = results or capacity_results(engines)
    if said:
        doc.h(2, "Capacity: the highest request rate that meets the SLOs")
        for s in said:
            doc.p(s)
        doc.table(["engine", "rate req/s", "repeats", "worst SLO ratio (mean)", "probe", "per repeat",
                   "kept up? completed / arrived (in flight), per repeat"], rows)
        doc.p("How: Method, capacity (below). 'Kept up?' describes each repeat and is not part of the pass rule: over "
              "the second half of its sending window, the requests completed per request arrived, and the requests "
              "in flight at the half's start and end. An engine that keeps up completes about as many as arrive "
              "and its count stays level; a backlog climbs. Poisson arrivals alone move the count by about "
              "±sqrt(arrivals in the half) (llmcompare/analysis/keepup.py). A probe that passes while its count "
              "climbs passes for its length only.")
        doc.method("Capacity: the highest request rate meeting the SLOs (llmcompare/analysis/capacity.py)",
                   capacity.METHOD)
    return said
