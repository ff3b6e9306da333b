"""The report's serve-bench sections: the verdict against the baseline in detail (chart, table, sentences), the
latency verdicts, and every point's figures with their charts. engines: report.build.Served by label."""

from __future__ import annotations

from pathlib import Path

from llmcompare.analysis import traffic, verdict
from llmcompare.report import charts
from llmcompare.report.doc import Doc, fmt
from llmcompare.schema.files import read_jsonl
from llmcompare.schema.run import LoadKey


def _ci(e: verdict.Estimate | None, nd: int = 1) -> str:
    if e is None:
        return "–"
    if e.lo is None:
        return fmt(e.mean, nd)
    return f"{fmt(e.mean, nd)} [{fmt(e.lo, nd)}, {fmt(e.hi, nd)}]"


def load_axis(keys: list[LoadKey]) -> str:
    """The x label of a chart over these load points."""
    closed = {k.concurrency is not None for k in keys}
    return "concurrency" if closed == {True} else "request rate (req/s)" if closed == {False} else \
        "concurrency (or request rate)"


def verdict_section(doc: Doc, out: Path, engines: dict, baseline: str, figures: str = "auto",
                    colours: charts.Colours | None = None, cross_machine: bool = False) -> dict:
    """Per candidate, where it is faster or slower than the baseline, by how much: a panel per workload cell, the
    table, and the same in words."""
    doc.h(2, f"Verdict: output throughput against {engines[baseline].title}")
    base = engines[baseline].rec
    gaps = {lb: verdict.compare(sv.rec, base, figures=figures, cross_machine=cross_machine)
            for lb, sv in engines.items() if lb != baseline}
    for lb, sv in engines.items():
        if lb != baseline and (no := verdict.refused(sv.rec, base, cross_machine)
                               or verdict.machine_left_out(sv.rec, base, cross_machine)):
            doc.p(no[0].upper() + no[1:] + ".")
    all_rows = [(lb, r) for lb, rows in gaps.items() for r in rows]
    if not all_rows:
        for lb in gaps:
            doc.p(verdict.sentence(engines[lb].title, engines[baseline].title, gaps[lb]))
        doc.p(f"No load point has complete, trusted results for {engines[baseline].title} and another engine: no "
              "verdict against it.")
        return {}
    panels: dict[str, dict] = {}
    for lb, r in all_rows:
        if r.key.x is not None:
            panels.setdefault(r.key.workload_label, {}).setdefault(lb, []).append(
                (r.key.x, r.gap.pct, r.gap.lo_pct, r.gap.hi_pct))
    if panels:
        doc.img(charts.engine_panels(out / "gap.png", panels, colours or charts.Colours(engines),
                                     load_axis([r.key for _, r in all_rows]), f"gap vs {baseline} (%)",
                                     f"Output-throughput gap against {baseline} (0: level with it), 95% intervals",
                                     hline0=True),
                f"Output-throughput gap against {baseline}, a panel per workload cell, a colour per engine; bars "
                "are 95% intervals")
    kinds = {(lb, r.key): traffic_of(engines[lb].run, r.key) for lb, r in all_rows}
    tails = tail_latency(engines, baseline, figures, cross_machine)
    waves = any(traffic.synchronized(k) for k in kinds.values())  # fixed-length rows: the wave-phase check's column
    drains = any(r.drain is not None or r.drain_why for _, r in all_rows)  # whole-point rows: the drain check's
    doc.table(["engine", "point", "output tok/s", f"{baseline} output tok/s", "gap % [95% interval]", "verdict",
               "from", "why this figure", "whole-point gap %", "interval", "first half of each point: gap % [95%]",
               *(["steady windows over whole waves (fixed lengths): gap % [95%]"] if waves else []),
               *(["drains left out (whole points): gap % [95%]"] if drains else []),
               "TTFT p99 difference %", "TPOT p99 difference %", "traffic"],
              [[lb, r.key.label, _ci(r.candidate), _ci(r.baseline), r.gap.text(),
                r.gap.word + (" (across machines)" if r.machines else ""), r.candidate.source, r.why,
                r.whole.text() if r.whole else "(the verdict's)", r.candidate.method, _half_cell(r),
                *([_waves_cell(r) if traffic.synchronized(kinds[(lb, r.key)]) else "–"] if waves else []),
                *([_drain_cell(r)] if drains else []),
                *tails.get((lb, r.key), ("–", "–")), kinds[(lb, r.key)]] for lb, r in all_rows])
    length_note(doc, all_rows)
    drain_note(doc, all_rows)
    phase_note(doc, [(lb, r) for lb, r in all_rows if traffic.synchronized(kinds[(lb, r.key)])])
    open_loop_note(doc, all_rows, engines, baseline)
    if waves:
        doc.p("Rows marked synchronized are fixed lengths in a closed loop: the requests move in waves (they start, "
              "prefill, decode and finish together; the per-second chart shows the waves), so their figures depend "
              "on the first wave and on how the point's length cuts the waves. They are not a verdict on realistic "
              "traffic, whose lengths vary or whose requests arrive at a rate (llmcompare/analysis/traffic.py).")
    for lb, rows in gaps.items():
        doc.p(verdict.sentence(engines[lb].title, engines[baseline].title, rows))
    doc.p("How the figures, intervals and words are made: Method, verdicts (below).")
    doc.method("Verdicts: figures, intervals, significance (llmcompare/analysis/verdict.py)", verdict.METHOD)
    return gaps


def _half_cell(r: verdict.Row) -> str:
    if r.half is None:
        return r.half_why or "–"
    return f"{r.half.text()} {r.half.word}" + (": the full-length gap lies outside it" if r.moved_with_length else "")


def _waves_cell(r: verdict.Row) -> str:
    if r.waves is None:
        return r.waves_why or "not checked: the verdict is on whole points"
    return f"{r.waves.text()} {r.waves.word}" + (": the verdict's word differs" if r.moved_with_phase else "")


def _drain_cell(r: verdict.Row) -> str:
    if r.drain is None:
        return r.drain_why or "not checked: the verdict is on steady-state rates"
    return f"{r.drain.text()} {r.drain.word}" + (": the verdict's word differs" if r.rests_on_drain else "")


def _check_note(doc: Doc, rows: list, figure, failed, item, moved: str, held: str) -> None:
    """What one check of verdict.METHOD found over the table's rows: the rows it could check have figure(row) set;
    moved + the failed rows' item(label, row) texts where any failed, else held with {checked} and {rows} filled."""
    checked = [(lb, r) for lb, r in rows if figure(r) is not None]
    if not checked:
        return
    bad = [item(lb, r) for lb, r in checked if failed(r)]
    doc.p(moved.format("; ".join(bad)) if bad else held.format(checked=len(checked), rows=len(rows)))


def drain_note(doc: Doc, rows: list) -> None:
    """What the drain check (verdict.METHOD) found over the whole-point rows."""
    _check_note(doc, rows, lambda r: r.drain, lambda r: r.rests_on_drain,
                lambda lb, r: f"{lb} {r.key.label} ({r.gap.text()} {r.gap.word}; drains left out {r.drain.text()} "
                              f"{r.drain.word})",
                "Drain check: the verdict rests on the points' drains at {}. A drain lasts about as long at any point "
                "length, so a longer point would give another verdict there: these rows are not verdicts that hold.",
                "Drain check: at every whole-point row checked ({checked} of {rows}) the points with their drains left "
                "out give the same verdict; the magnitude differs because a whole point's drain is a share of it that "
                "shrinks as points grow longer (the warm-up stays in: a necessary condition, not a proof).")


def phase_note(doc: Doc, rows: list) -> None:
    """What the wave-phase check (verdict.METHOD) found over the synchronized rows."""
    _check_note(doc, rows, lambda r: r.waves, lambda r: r.moved_with_phase,
                lambda lb, r: f"{lb} {r.key.label} ({r.gap.text()} {r.gap.word}; over whole waves {r.waves.text()} "
                              f"{r.waves.word})",
                "Wave-phase check: the verdict depends on where its steady windows cut the waves at {}. With fixed "
                "lengths the rate rises and falls once a wave; narrowed to the whole waves inside them, the same "
                "windows give another verdict, so these rows are not verdicts that hold: more waves a point are "
                "needed.",
                "Wave-phase check: at every fixed-length row checked ({checked} of {rows}) the same steady windows "
                "narrowed to the whole waves inside them give the same verdict.")


def length_note(doc: Doc, rows: list) -> None:
    """What the length check (verdict.METHOD) found over the table's rows."""
    _check_note(doc, rows, lambda r: r.half, lambda r: r.moved_with_length,
                lambda lb, r: f"{lb} {r.key.label} ({r.gap.text()}; first halves {r.half.text()})",
                "Length check: the verdict moved with the point's length at {}. There the first half of each point "
                "gives an interval that does not hold the full-length gap, so the figure still depends on how long "
                "the point ran: a longer point (load.converge) is needed before it is a verdict.",
                "Length check: at every row checked ({checked} of {rows}) the full-length gap lies inside the "
                "interval of the same rule applied to the first half of each point (the halves share their requests "
                "with the full points: a necessary condition, not a proof).")


def open_loop_note(doc: Doc, rows: list, engines: dict, baseline: str) -> None:
    """For open-loop rows on whole points where both engines returned the same output tokens: the two whole-point
    durations, and why their ratio is the gap (analysis/traffic.durations)."""
    said = []
    for lb, r in rows:
        d = traffic.same_work_durations(engines[lb].rec, engines[baseline].rec, r.key) \
            if r.candidate.source == "whole point" else None
        if d:
            said.append(f"{lb} {r.key.label}: {d[0]:.1f} s against {d[1]:.1f} s")
    if said:
        doc.p("Open-loop rows on whole points: both engines were sent the same requests on one seeded arrival "
              "schedule and returned the same output tokens, so their whole-point throughputs differ only by the "
              "points' durations (first send to last reply; mean over repeats): " + "; ".join(said) + ". The "
              "sending lasted the same for both, so the gap is in how long each took to return the last replies "
              "after the last send. At a rate both engines keep up with, that is a latency difference, not a "
              "difference in what they can serve: the capacity search and the latency verdicts say that "
              "(llmcompare/analysis/traffic.py).")


def tail_latency(engines: dict, baseline: str, figures: str, cross_machine: bool) -> dict:
    """(engine, point) -> the p99 TTFT and p99 TPOT differences against the baseline, each '+34.3% [+21.6,
    +48.4] slower' (verdict.compare on the metric: lower is better), '–' where that metric has no verdict."""
    out: dict = {}
    for lb, sv in engines.items():
        if lb == baseline:
            continue
        per = [{r.key: r for r in verdict.compare(sv.rec, engines[baseline].rec, m, figures, cross_machine)}
               for m in ("p99_ttft_ms", "p99_tpot_ms")]
        for k in set(per[0]) | set(per[1]):
            out[(lb, k)] = tuple(f"{d[k].gap.text()} {d[k].gap.word}" if k in d else "–" for d in per)
    return out


def latency_verdicts(doc: Doc, engines: dict, baseline: str, figures: str = "auto", cross_machine: bool = False) -> None:
    rows = []
    for lb, sv in engines.items():
        if lb == baseline:
            continue
        for metric in ("median_tpot_ms", "median_ttft_ms"):
            for r in verdict.compare(sv.rec, engines[baseline].rec, metric, figures, cross_machine):
                rows.append([lb, r.key.label, metric, _ci(r.candidate, 2), _ci(r.baseline, 2), r.gap.text(),
                             r.gap.word + (" (across machines)" if r.machines else "")])
    if rows:
        doc.h(3, f"Latency against {baseline}")
        doc.table(["engine", "point", "metric", "engine ms", f"{baseline} ms", "difference % [95%]", "verdict"], rows)


def cache_hit(p) -> str | None:
    """The point's prefix-cache hit rate in %, as its engine reported it (engines/prefix_cache.py); None for older files."""
    c = p.prefix_cache
    if c is None:
        return None
    if not c.reported:
        return "not reported"
    return f"{100 * c.hit_rate:.1f}" if c.hit_rate is not None else "no lookups"


def _point_row(lb: str, p) -> list:
    m, st = p.metrics, p.steady
    return [lb, p.label, p.repeat + 1, p.attempt, p.status, m.completed if m else None, m.failed if m else None,
            m.output_throughput if m else None, st.output_throughput if st else None,
            st.halfwidth_tok_s if st else None, steady_note(p),
            m.stat("median_ttft_ms") if m else None, m.stat("p99_ttft_ms") if m else None,
            m.stat("median_tpot_ms") if m else None, m.stat("p99_tpot_ms") if m else None,
            m.stat("median_itl_ms") if m else None, m.stat("p99_itl_ms") if m else None,
            m.mean_tokens_per_chunk if m else None, p.server_metrics.get("mean_num_requests_running"), cache_hit(p),
            *_counters(p), "; ".join(p.trust.reasons) if not p.trust.trusted else ""]


def steady_note(p) -> str | None:
    """The point's steady state in words: the rule, warm-up cut, end, interval against its target, and what
    load.converge decided; or why it has none."""
    st, stop = p.steady, f"; load.converge: {p.converge_stop}{_live(p)}" if p.converge_stop else ""
    if st is None:
        return (p.no_steady or "") + stop or None  # None: an older file says nothing
    if not st.rule:
        return "wave window (files before MSER-5)"
    word = "converged" if st.converged else "not converged"
    flag = ", batch means correlated (widened)" if st.widened else ""
    return (f"{st.rule}: warm-up {st.warmup_s:.0f} s cut, to {st.end_reason} at {st.end_s:.0f} s; {word} "
            f"(±{100 * st.rel_halfwidth:.1f}% vs {100 * st.target_rel_halfwidth:g}%, {st.batches} batches{flag}){stop}")


def _live(p) -> str:
    """When load.converge stopped the sending and what its live check read then (files before session 24: "")."""
    if p.converge_stop_s is None:
        return ""
    hw, series_s = p.converge_live_rel_halfwidth, p.converge_live_series_s
    read = f"±{100 * hw:.1f}%" if hw is not None else "no steady state yet"
    over = f" over the first {series_s:.0f} s" if series_s is not None else ""
    return f" at {p.converge_stop_s:.0f} s (its last live check: {read}{over})"


def _counters(p) -> list:
    """client processes; the engine's own generation tok/s over the compared window and the client's shortfall
    against it, in %; the mean TTFT over that window, the client's / the engine's own (its queue + prefill)
    (analysis/agreement.py); None where not measured (older files, no counters)."""
    c = p.engine_counters
    workers = p.client.get("workers") if p.client else None
    if c is None or not c.reported:
        return [workers, "not reported" if c is not None else None, None, None]
    return [workers, c.engine_generation_tok_s, c.shortfall_pct, _ttft_cell(c)]


def _ttft_cell(c) -> str | None:
    """'client / engine (queued + prefill)' mean TTFT ms over the compared window; None where not measured."""
    if c.engine_mean_ttft_ms is None or c.client_mean_ttft_ms is None:
        return None
    inner = " + ".join(f"{v:,.0f}" for v in (c.engine_mean_queue_ms, c.engine_mean_prefill_ms) if v is not None)
    return f"{c.client_mean_ttft_ms:,.0f} / {c.engine_mean_ttft_ms:,.0f}" + (f" ({inner})" if inner else "")


def serve_details(doc: Doc, out: Path, engines: dict, refs: list[dict], colours: charts.Colours | None = None) -> None:
    doc.h(2, "End to end: serve-bench")
    colours = colours or charts.Colours(engines)
    rows, thr, lat, keys = [], {}, {}, []
    for lb, sv in engines.items():
        for key, pts in sorted(verdict.usable_points(sv.rec).items(), key=lambda kv: verdict.point_order(kv[0])):
            e_thr, e_tpot = verdict.estimate(pts), verdict.estimate(pts, "median_tpot_ms")
            if key.x is not None:
                thr.setdefault(key.workload_label, {}).setdefault(lb, []).append((key.x, e_thr.mean, e_thr.lo, e_thr.hi))
                keys.append(key)
            lat.setdefault(key.workload_label, {}).setdefault(lb, []).append(
                (e_thr.mean, e_tpot.mean if e_tpot else None, None, None))
        rows += [_point_row(lb, p) for p in sv.rec.points]
    published = [{"label": r["label"], "points": r["chart_points"]} for r in refs if r["metric"] == "output_throughput"]
    if thr:
        doc.img(charts.engine_panels(out / "throughput.png", thr, colours, load_axis(keys), "output tokens/s",
                                     "Output throughput, 95% intervals", refs=published),
                "Output throughput against load, a panel per workload cell, a colour per engine"
                + (" (published series in grey, in every panel)" if published else ""))
    if lat:
        doc.img(charts.engine_panels(out / "latency_throughput.png", lat, colours, "output tokens/s",
                                     "median TPOT (ms)", "Latency against throughput (each point: a load point)",
                                     logx=False),
                "Median TPOT against output throughput, a panel per workload cell")
    doc.p("Every point, repeat and attempt (whole-point figures as vLLM bench serve computes them; 'steady' is "
          "the steady-state rate (warm-up cut by MSER-5, drain left out) with its 95% batch-means half-width; ITL "
          "is between chunks carrying tokens, read beside tokens per chunk). Points that are not complete and "
          "trusted are listed but enter no verdict.")
    doc.table(["engine", "point", "repeat", "attempt", "status", "ok", "failed", "output tok/s", "steady tok/s",
               "steady ± tok/s", "steady state",
               "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "ITL p50 ms", "ITL p99 ms",
               "tokens/chunk", "running (engine)", "prefix cache hit %", "client processes", "engine gen tok/s",
               "client shortfall %", "TTFT mean ms: client / engine (queued + prefill)", "why untrusted"], rows)
    gone = [[lb, key.label, why] for lb, sv in engines.items()
            for key, why in sorted(verdict.left_out(sv.rec).items(), key=lambda kv: verdict.point_order(kv[0]))]
    if gone:
        doc.p("Left out of every verdict: load points a repeat of which has a first attempt that is not usable (the "
              "retries of an untrusted attempt are shown above but never counted: Method).")
        doc.table(["engine", "point", "why"], gone)
    series_charts(doc, out, engines, colours)


def traffic_of(run, key) -> str:
    """The traffic label (analysis/traffic.py) of a point of this run, from the scenario it was measured with."""
    return traffic.label(run.scenario.get("workload", {}), run.scenario.get("load", {}).get("burstiness", 1.0), key)


def series_charts(doc: Doc, out: Path, engines: dict, colours: charts.Colours | None = None) -> None:
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
                                 "Output tokens per second through each point (first repeat; steady window shaded)",
                                 colours),
                "Per-second output throughput: warm-up, steady state and drain (with fixed lengths in a closed "
                "loop the waves show as a pattern repeating once per wave)")
