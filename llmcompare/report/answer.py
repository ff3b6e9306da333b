"""The report's opening: a few plain sentences, each generated from the verdict rows (analysis/verdict.py): which
engine is fastest where and by how much, each candidate against the baseline, where the winner changes, and how
sure the figures are. Nothing here is written by hand; the details follow in the report."""

from __future__ import annotations

from collections import Counter

from llmcompare.analysis import traffic, verdict
from llmcompare.report import win_map
from llmcompare.schema.run import LoadKey


def listed(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _order(labels_of: list[LoadKey], attr: str) -> list[str]:
    return list(dict.fromkeys(getattr(k, attr) for k in sorted(labels_of, key=verdict.point_order)))


def _grouped(keys: set[LoadKey], universe: list[LoadKey], outer: str, inner: str, every: str) -> str:
    """Cells grouped by `outer` (load or workload label), outer values with the same inner set merged."""
    by: dict[str, set[str]] = {}
    for k in sorted(keys, key=verdict.point_order):
        by.setdefault(getattr(k, outer), set()).add(getattr(k, inner))
    groups: dict[frozenset, list[str]] = {}
    for o in _order(universe, outer):
        if o in by:
            groups.setdefault(frozenset(by[o]), []).append(o)
    inner_order = _order(universe, inner)
    parts = []
    for inners, outers in groups.items():
        present = {getattr(k, inner) for k in universe if getattr(k, outer) in outers}
        tail = every if inners == present and len(present) > 1 else listed([i for i in inner_order if i in inners])
        parts.append(f"{listed(outers)} at {tail}")
    return "; ".join(parts)


def where(keys: set[LoadKey], universe: list[LoadKey]) -> str:
    """A short name for a set of cells of the grid `universe`: 'c=1 at every workload', 'c=64 and c=256 at
    in=1024 out=64', 'in=512 out=256 at every load' (whichever is shorter), or with one workload cell its loads."""
    if len(wls := {k.workload_label for k in universe}) <= 1:
        loads = _order(list(keys), "load_label")
        out = "every load" if len(loads) == len(universe) > 1 else listed(loads)
        return f"{out} at {wls.pop()}" if wls and next(iter(wls)) else out
    a = _grouped(keys, universe, "load_label", "workload_label", "every workload")
    b = _grouped(keys, universe, "workload_label", "load_label", "every load")
    return min(a, b, key=len)


def cells(n: int) -> str:
    return f"{n} cell" + "s" * (n != 1)


def span(pcts: list[float]) -> str:
    """'-14.1% to -45.5%' (smallest to largest difference; '-38.4% to +12.5%' across 0), or one value."""
    lo, hi = (min(pcts, key=abs), max(pcts, key=abs)) if min(pcts) * max(pcts) > 0 else (min(pcts), max(pcts))
    return f"{lo:+.1f}%" if lo == hi else f"{lo:+.1f}% to {hi:+.1f}%"


def pair_sentence(cand: str, base: str, rows: list[verdict.Row]) -> str:
    """'A against B (output throughput, 12 cells): slower at 8 by -14.1% to -46.1% (where); faster at none; ...'."""
    universe = [r.key for r in rows]
    by = {w: [r for r in rows if r.gap.word == w] for w in ("faster", "slower", "no significant difference",
                                                           "no interval")}
    parts = []
    for w in sorted(("faster", "slower"), key=lambda w: -len(by[w])):
        rs = by[w]
        if rs:
            parts.append(f"{w} at {len(rs)} by {span([r.gap.pct for r in rs])} ({where({r.key for r in rs}, universe)})")
        elif by["faster"] or by["slower"]:
            parts.append(f"{w} at none")
    if rs := by["no significant difference"]:
        parts.append(f"no significant difference at {len(rs)} ({span([r.gap.pct for r in rs])}: "
                     f"{where({r.key for r in rs}, universe)})")
    if rs := by["no interval"]:
        parts.append(f"no interval at {len(rs)}, under two usable values on a side ({span([r.gap.pct for r in rs])}: "
                     f"{where({r.key for r in rs}, universe)})")
    return f"{cand} against {base} (output throughput, {cells(len(rows))}): " + "; ".join(parts) + "."


def leader_sentence(titles: dict[str, str], recs: dict, figures: str, cross_machine: bool = False) -> str | None:
    """With three or more engines: per cell the engine significantly faster than every other there, and by how
    much it leads the next one; the cells where none is."""
    if len(recs) < 3:
        return None
    rows = {(a, b): {r.key: r for r in verdict.compare(recs[a], recs[b], figures=figures, cross_machine=cross_machine)}
            for a in recs for b in recs if a != b}
    keys = sorted({k for per in rows.values() for k in per}, key=verdict.point_order)
    if not keys:  # no cell with trusted results for two engines: the pair sentences say why
        return None
    lead: dict[str, list[tuple[LoadKey, float]]] = {}
    none, partial = set(), set()
    for k in keys:
        if any(k not in per for per in rows.values()):
            partial.add(k)  # an engine without a usable figure there: nobody is the fastest of all
            continue
        for a in recs:
            gaps = [per[k].gap for (x, _), per in rows.items() if x == a]
            if all(g.word == "faster" for g in gaps):
                lead.setdefault(a, []).append((k, min(g.pct for g in gaps)))
                break
        else:
            none.add(k)
    parts = [f"{titles[a]} at {len(v)}, by {span([p for _, p in v])} over the next ({where({k for k, _ in v}, keys)})"
             for a, v in sorted(lead.items(), key=lambda kv: -len(kv[1]))]
    if none:
        parts.append(f"no engine significantly ahead of all the others at {len(none)} ({where(none, keys)})")
    if partial:
        parts.append(f"not every engine has a usable figure at {len(partial)} ({where(partial, keys)}): no "
                     "fastest of all there")
    return f"Fastest of the {len(recs)} engines at each of {len(keys)} cells (output throughput): " + \
        "; ".join(parts) + "."


def crossover_sentence(recs: dict, figures: str, cross_machine: bool = False) -> str | None:
    said, never = [], []
    names = list(recs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rows = verdict.compare(recs[a], recs[b], figures=figures, cross_machine=cross_machine)
            if len(rows) > 1:  # a winner can change only between two cells
                sig = win_map.crossovers(win_map.win_map(a, b, rows))[0]
                n, weak = len(sig), sum(bool(win_map.not_holding(x)) for x in sig)
                (said if n else never).append(f"{a} against {b}" + (f" at {n} place{'s' * (n > 1)}" if n else "")
                                              + (f" ({weak} of them on a verdict that does not hold yet)" if weak
                                                 else ""))
    if not said and not never:
        return None
    out = ("The winner changes between adjacent cells (significant on both sides: the black lines of the win map) "
           "for " + "; ".join(said) if said else "The winner never changes significantly between adjacent cells")
    return out + (f"; never for {'; '.join(never)}." if said and never else ".")


def _rests_on(method: str, n: int) -> str:
    if method.startswith("across "):
        return f"{n} on {method.split(' ', 1)[1]} each"
    if method.startswith("within one run"):
        return f"{n} on parts of one run's steady window (run-to-run variance not included)"
    return f"{n} on one value (no interval)"


def left_out(engines: dict) -> list[str]:
    """Per engine, its load points left out of every verdict (a repeat whose counted attempt is not usable:
    verdict.left_out), of those measured."""
    out = []
    for lb, sv in engines.items():
        gone = verdict.left_out(sv.rec)
        if gone:
            measured = {p.key for p in sv.rec.points}
            out.append(f"{lb} {len(gone)} of {len(measured)}")
    return out


def sureness_sentence(rows: list[verdict.Row], engines: dict) -> str:
    """How sure: what each figure rests on, and how many measured runs were left out."""
    est = [e for r in rows for e in (r.candidate, r.baseline)]
    sources = Counter({"whole point": "whole points", "steady-state window": "steady-state windows",
                       "steady-state rate (MSER-5)": "steady-state rates (MSER-5)"}.get(e.source, e.source)
                      for e in est)
    rests = [_rests_on(m, n) for m, n in Counter(e.method for e in est).most_common()]
    rests[0] = rests[0].replace(" on ", " rest on ", 1)
    rest = left_out(engines)
    return ("How sure: figures are means with 95% intervals, gaps have 95% intervals (Method, below), and a cell is "
            "called faster or slower only where the gap's interval excludes 0. Of the "
            f"{len(est)} figures compared ({', '.join(f'{n} {s}' for s, n in sources.most_common())}), {', '.join(rests)}. "
            "Load points left out whole (a repeat's first attempt untrusted, partial, with failed requests or without "
            "its request lines on file; no "
            "verdict rests on the repeats that passed): " + ("; ".join(rest) if rest else "none") + ".")


def _apart(rows: list[verdict.Row]) -> str:
    """Said after a pair's sentence compared across machines (report --cross-machine)."""
    return f" Compared across machines, as asked: {rows[0].machines}." if rows and rows[0].machines else ""


def traffic_sentence(run, rows) -> str | None:
    """Which of the verdicts' points were synchronized traffic (analysis/traffic.py), when any was."""
    wl, burst = run.scenario.get("workload", {}), run.scenario.get("load", {}).get("burstiness", 1.0)
    sync = sorted({r.key.label for r in rows if traffic.synchronized(traffic.label(wl, burst, r.key))})
    if not sync:
        return None
    which = "Every verdict above is" if len(sync) == len({r.key.label for r in rows}) else \
        f"The verdicts at {', '.join(sync)} are"
    return (f"{which} of synchronized traffic (fixed lengths in a closed loop: the requests move in waves), not of "
            "realistic traffic with varying lengths or arrivals at a rate.")


def checks_sentence(pairs: list) -> str | None:
    """pairs: (engine label, verdict.Row). The rows whose verdict moved with the point's length (the length check),
    with where its steady windows cut the waves (the wave-phase check, which only fixed-length points carry a
    figure for), or rests on the whole points' drains (the drain check: verdict.METHOD), when any did: those words
    above are not yet verdicts that hold."""
    length = [f"{lb} {r.key.label}" for lb, r in pairs if r.moved_with_length]
    phase = [f"{lb} {r.key.label}" for lb, r in pairs if r.moved_with_phase]
    drain = [f"{lb} {r.key.label}" for lb, r in pairs if r.rests_on_drain]
    parts = ([f"at {listed(length)} it moved with the point's length (length check)"] if length else []) + \
        ([f"at {listed(phase)} it depends on where the steady windows cut the waves (wave-phase check)"] if phase
         else []) + \
        ([f"at {listed(drain)} it rests on the whole points' drains (drain check)"] if drain else [])
    return ("Not yet verdicts that hold: " + "; ".join(parts) + " (Verdict, below).") if parts else None


def open_loop_sentence(pairs: list, recs: dict, baseline: str) -> str | None:
    """pairs: (engine label, verdict.Row) against the baseline. The open-loop points judged on whole points where
    both engines did the same work (analysis/traffic.same_work_durations), when any was: there the throughput gap
    is the ratio of the points' durations."""
    ol = sorted({r.key.label for lb, r in pairs if r.candidate.source == "whole point"
                 and traffic.same_work_durations(recs[lb], recs[baseline], r.key)})
    if not ol:
        return None
    return (f"At the open-loop points ({', '.join(ol)}) both engines were sent the same requests at the same times "
            "and returned the same tokens: a whole-point throughput gap there is how much sooner one finished the "
            "last replies after the last send, not what it can serve (Verdict, below); what each can serve is its "
            "capacity.")


def answer_section(doc, engines: dict, baseline: str, figures: str, capacity_said: list[str],
                   first: list[str] = (), cross_machine: bool = False) -> None:
    """engines: report.Served by label. The answer first, then links to every section. `first`: sentences said
    before the verdicts (an engine whose answer is not the baseline's: report/same_answer.py)."""
    doc.h(2, "The answer: who is faster, where, by how much")
    recs = {lb: sv.rec for lb, sv in engines.items()}
    titles = {lb: sv.title for lb, sv in engines.items()}
    said, rows, pairs = list(first), [], []
    if lead := leader_sentence(titles, recs, figures, cross_machine):
        said.append(lead)
    for lb in engines:
        if lb == baseline:
            continue
        if no := verdict.refused(recs[lb], recs[baseline], cross_machine):
            said.append(no[0].upper() + no[1:] + ".")
        elif rs := verdict.compare(recs[lb], recs[baseline], figures=figures, cross_machine=cross_machine):
            said.append(pair_sentence(titles[lb], titles[baseline], rs) + _apart(rs))
            if part := verdict.machine_left_out(recs[lb], recs[baseline], cross_machine):
                said.append(part[0].upper() + part[1:] + ".")
            rows += rs
            pairs += [(lb, r) for r in rs]
    if not rows:
        others = [f"{a} and {b}" for i, a in enumerate(recs) for b in list(recs)[i + 1:] if baseline not in (a, b)
                  and verdict.compare(recs[a], recs[b], figures=figures, cross_machine=cross_machine)]
        said.append(f"No load point has complete, trusted results for {engines[baseline].title} and another engine: "
                    "no verdict against it" + (f" (compared in the win map: {', '.join(others)})." if others else "."))
    elif x := crossover_sentence(recs, figures, cross_machine):
        said.append(x)
    said += capacity_said
    if rows:
        said.append(sureness_sentence(rows, engines))
        if t := traffic_sentence(engines[baseline].run, rows):
            said.append(t)
        if t := checks_sentence(pairs):
            said.append(t)
        if t := open_loop_sentence(pairs, recs, baseline):
            said.append(t)
    doc.answer(said)
    doc.toc()
