"""The win map in the report: per pair of engines, the output-throughput gap over the grid (rows: workload cells,
columns: load) with its 95% interval and significance word in every cell (analysis/verdict.py), the crossover lines
where the winner changes, and per workload cell each engine's Pareto front of per-user speed against total
throughput. Reads saved results only.

Crossover: two adjacent cells (next load in a row, or next workload cell in a column, among the cells both
engines have) where the gap is significant in both and of opposite sign: one engine wins one cell, the other the
next. A sign change of the point estimates where either side is not significant is reported as "not
significant", never as a crossover.
Pareto front (as vLLM `bench sweep plot_pareto`): per engine and workload cell, the load points no other point
of the same engine beats in both total output tok/s and per-user output tok/s (1000 / mean TPOT ms), each the
mean over its complete, trusted repeats (whole-point figures).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from llmcompare.analysis import verdict
from llmcompare.report import map_charts
from llmcompare.report.charts import Colours
from llmcompare.report.doc import Doc
from llmcompare.schema.run import EngineRecord

UNNAMED = "(dataset)"  # the row of a workload without lengths of its own when its dataset is not known


@dataclass
class WinMap:
    """One pair's gaps laid out as a grid: cells[(r, c)] is the verdict row at workload r and load c."""

    first: str
    second: str
    # workload labels ("in=1024 out=256"; shared-prefix: "in=256 out=128 prefix=1024x4", a row per prefix_len x
    # num_prefixes, so cells that differ only in the prefix never share one; "" for a file dataset)
    rows: list[str]
    cols: list[str]  # load labels ("c=16", "rate=4")
    cells: dict[tuple[int, int], verdict.Row]


@dataclass
class Crossover:
    cell: tuple[int, int]
    next_cell: tuple[int, int]
    before: verdict.Row
    after: verdict.Row



def win_map(first: str, second: str, rows: list[verdict.Row]) -> WinMap:
    keys = sorted((r.key for r in rows), key=verdict.point_order)
    wls = sorted({k.workload_label: k.workload for k in keys}.items(), key=lambda kv: kv[1])
    loads = sorted({k.load_label: (k.x is None, k.concurrency is None, k.x or 0) for k in keys}.items(),
                   key=lambda kv: kv[1])
    r_of, c_of = {w: i for i, (w, _) in enumerate(wls)}, {c: i for i, (c, _) in enumerate(loads)}
    cells = {(r_of[x.key.workload_label], c_of[x.key.load_label]): x for x in rows}
    return WinMap(first, second, [w for w, _ in wls], [c for c, _ in loads], cells)


def _signed(row: verdict.Row) -> int:
    """+1: the first engine significantly ahead, -1: behind, 0: not significant (or no interval)."""
    return {"faster": 1, "slower": -1}.get(row.gap.word, 0)


def _neighbours(wm: WinMap):
    """Adjacent pairs of present cells: along each row (load), then along each column (workload)."""
    for r in range(len(wm.rows)):
        cs = [c for c in range(len(wm.cols)) if (r, c) in wm.cells]
        yield from (((r, a), (r, b)) for a, b in zip(cs, cs[1:], strict=False))
    for c in range(len(wm.cols)):
        rs = [r for r in range(len(wm.rows)) if (r, c) in wm.cells]
        yield from (((a, c), (b, c)) for a, b in zip(rs, rs[1:], strict=False))


def crossovers(wm: WinMap) -> tuple[list[Crossover], list[Crossover]]:
    """(significant crossovers, sign changes of the estimates that are not significant on both sides)."""
    sig, loose = [], []
    for a, b in _neighbours(wm):
        ra, rb = wm.cells[a], wm.cells[b]
        if _signed(ra) * _signed(rb) == -1:
            sig.append(Crossover(a, b, ra, rb))
        elif (ra.gap.pct > 0) != (rb.gap.pct > 0):
            loose.append(Crossover(a, b, ra, rb))
    return sig, loose


def _where(x: Crossover) -> str:
    k1, k2 = x.before.key, x.after.key
    if k1.workload_label == k2.workload_label:
        return f"between {k1.load_label} and {k2.load_label}" + (f" at {k1.workload_label}" if k1.workload_label else "")
    return f"between {k1.workload_label} and {k2.workload_label} at {k1.load_label}"


def not_holding(x: Crossover) -> list[str]:
    """The sides of a crossover whose verdict does not hold yet (the length, wave-phase or drain check: verdict.METHOD)."""
    return [f"{r.key.label} ({r.failed_check})" for r in (x.before, x.after) if r.failed_check]


def crossover_sentence(wm: WinMap, sig: list[Crossover], loose: list[Crossover]) -> str:
    a, b = wm.first, wm.second
    if sig:
        parts = [f"{_where(x)} ({a} {x.before.gap.word} {x.before.gap.text()} -> {x.after.gap.word} "
                 f"{x.after.gap.text()}" + (f"; not yet a verdict that holds at {', '.join(no)}" if (no := not_holding(x))
                                           else "") + ")" for x in sig]
        out = f"{a} against {b}: the winner changes " + "; ".join(parts) + "."
    else:
        words = {r.gap.word for r in wm.cells.values() if _signed(r)}
        lead = (f"{a} is {words.pop()} than {b} wherever the difference is significant"
                if len(words) == 1 else "no significant difference anywhere")
        out = f"{a} against {b}: no crossover (the winner never changes significantly between adjacent cells; {lead})."
    if loose:
        out += " Not significant: the estimates change sign " + "; ".join(_where(x) for x in loose) + "."
    return out


def _cell_text(row: verdict.Row) -> str:
    g = row.gap
    interval = f"\n[{g.lo_pct:+.1f}, {g.hi_pct:+.1f}]" if g.lo_pct is not None else "\n(no interval)"
    word = {"faster": "faster", "slower": "slower", "no significant difference": "n.s."}.get(g.word, g.word)
    return f"{g.pct:+.1f}%{interval}\n{word}"


def heatmap_file(out: Path, wm: WinMap, sig: list[Crossover], colours: Colours | None = None,
                 unnamed: str = UNNAMED) -> str:
    pct = [[wm.cells[(r, c)].gap.pct if (r, c) in wm.cells else None for c in range(len(wm.cols))]
           for r in range(len(wm.rows))]
    text = [[_cell_text(wm.cells[(r, c)]) if (r, c) in wm.cells else "" for c in range(len(wm.cols))]
            for r in range(len(wm.rows))]
    significant = [[(r, c) in wm.cells and _signed(wm.cells[(r, c)]) != 0 for c in range(len(wm.cols))]
                   for r in range(len(wm.rows))]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"map_{wm.first}_vs_{wm.second}") + ".png"
    return map_charts.heatmap(out / name, [r or unnamed for r in wm.rows], wm.cols, pct, text,
                              [(*x.cell, *x.next_cell) for x in sig],
                              f"{wm.first} against {wm.second}: output throughput gap % [95% interval]; "
                              "black lines: the winner changes", significant, (wm.first, wm.second), colours)


def pareto_points(rec: EngineRecord) -> dict[str, list[tuple[float, float, str]]]:
    """workload label -> [(total output tok/s, per-user output tok/s, load label)] of one engine."""
    out: dict[str, list] = {}
    for key, pts in verdict.usable_points(rec).items():
        thr = [p.metrics.output_throughput for p in pts]
        tpot = [t for p in pts if (t := p.metrics.stat("mean_tpot_ms"))]
        if thr and tpot:
            out.setdefault(key.workload_label, []).append(
                (statistics.fmean(thr), 1000.0 / statistics.fmean(tpot), key.load_label))
    return out


def pareto_front(pts: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The points no other beats in both coordinates (higher is better in both), by throughput."""
    front, best_y = [], float("-inf")
    for p in sorted(pts, key=lambda p: (-p[0], -p[1])):
        if p[1] > best_y:
            front.append(p)
            best_y = p[1]
    return sorted(front)


def map_section(doc: Doc, out: Path, recs: dict[str, EngineRecord], figures: str = "auto",
                colours: Colours | None = None, cross_machine: bool = False, unnamed: str = UNNAMED) -> list[str]:
    """Every pair's heatmap and crossover statement, then the Pareto fronts; returns the crossover sentences.
    `unnamed`: the row name of a workload without lengths of its own (a dataset's: its name, e.g. synthetic-sharegpt)."""
    doc.h(2, "Win map: where each engine is faster, and where the winner changes")
    names, said, colours = list(recs), [], colours or Colours(recs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if no := verdict.refused(recs[a], recs[b], cross_machine):
                doc.p(no[0].upper() + no[1:] + ".")
                continue
            rows = verdict.compare(recs[a], recs[b], figures=figures, cross_machine=cross_machine)
            if part := verdict.machine_left_out(recs[a], recs[b], cross_machine):
                doc.p(part[0].upper() + part[1:] + ".")
            if not rows:
                continue
            wm = win_map(a, b, rows)
            sig, loose = crossovers(wm)
            said.append(crossover_sentence(wm, sig, loose) + (f" Across machines: {rows[0].machines}." if rows[0].machines else ""))
            doc.p(said[-1])
            doc.img(heatmap_file(out, wm, sig, colours, unnamed), f"{a} against {b}: output-throughput gap over the grid (rows: "
                    "workload, columns: load), 95% interval and verdict in each cell; thick lines: crossovers")
    pareto_section(doc, out, recs, colours, unnamed)
    return said


def pareto_section(doc: Doc, out: Path, recs: dict[str, EngineRecord], colours: Colours | None = None,
                   unnamed: str = UNNAMED) -> None:
    panels: dict[str, dict] = {}
    for name, rec in recs.items():
        for wl, pts in pareto_points(rec).items():
            panels.setdefault(wl, {})[name] = pts
    if not panels:
        return
    fronts = {wl: {n: pareto_front(p) for n, p in per.items()} for wl, per in panels.items()}
    doc.img(map_charts.pareto(out / "pareto.png", panels, fronts, "Pareto fronts: per-user speed against total "
                              "output throughput (each point: a load point, mean over its repeats)", colours),
            "Per engine and workload cell, the Pareto front of per-user output tok/s (1000 / mean TPOT) against "
            "total output tok/s")
    doc.table(["workload", "engine", "Pareto front (load: total tok/s, per-user tok/s)"],
              [[wl or unnamed, n, "; ".join(f"{lb}: {x:,.0f}, {y:,.1f}" for x, y, lb in f)]
               for wl, per in fronts.items() for n, f in per.items()])
