#!/usr/bin/env python3
"""The steady-state rule (MSER-5 warm-up truncation, end before the drain, batch-means interval:
llmcompare/analysis/steady.py and mser.py) applied to committed serve-bench runs' per-request files, beside each
point's whole-point rate (run.json) and its per-wave rates. Writes a Markdown table; every figure in it is computed
here from <engine>.requests.jsonl(.xz).

  python scripts/steady_rule.py OUT.md RUN_DIR [RUN_DIR...]

Per-wave rate (closed loop, concurrency c): wave j runs from the (j-1)c-th completion to the jc-th (wave 1 from
the point's start); its rate is the output tokens whose chunks arrived in it / its length. Whole waves only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmcompare.analysis import steady
from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run
from llmcompare.schema.request import RequestRecord

TARGET = steady.DEFAULT_TARGET


def requests(run_dir: Path, engine: str) -> dict[tuple[int, int, int], list[RequestRecord]]:
    """The engine's request records per (point, repeat, attempt), from requests.jsonl or its .xz."""
    return request_lines.records(run_dir, engine)


def waves(recs: list[RequestRecord], c: int | None) -> list[float]:
    """Per wave (analysis/steady.wave_edges), its output tok/s; its tokens are those whose chunks arrived in it."""
    edges = steady.wave_edges(recs, c)
    return [steady.tokens_between(recs, a, b) / (b - a) if b > a else float("nan")
            for a, b in zip(edges, edges[1:], strict=False)]


def row(engine: str, p, recs: list[RequestRecord]) -> list[str]:
    st, why = steady.find(recs, p.concurrency, TARGET)
    whole = p.metrics.output_throughput if p.metrics else None
    wv = ", ".join(f"{w:.0f}" for w in waves(recs, p.concurrency)) or "–"
    span = max((r.dispatch_s + (r.e2el_ms or 0) / 1000 for r in recs), default=0.0)
    base = [engine, p.label, str(p.repeat + 1), str(p.attempt), p.status, f"{span:.0f}",
            f"{whole:.0f}" if whole else "–", wv]
    if st is None:
        return [*base, "–", "–", "–", "–", "–", why]
    gap = f"{100 * (st.output_throughput / whole - 1):+.1f}%" if whole else "–"
    flag = ", lag-1 high (widened)" if st.widened else ""
    return [*base, f"{st.warmup_s:.0f} s; to {st.end_s:.0f} s ({st.end_reason})",
            f"{st.output_throughput:.0f} ± {st.halfwidth_tok_s:.0f} (±{100 * st.rel_halfwidth:.1f}%)", gap,
            waves_cell(p, recs, st), "yes" if st.converged else "no",
            f"{st.batches} batches of {st.batch_s:.0f} s, lag-1 "
            f"{st.lag1_autocorr if st.lag1_autocorr is not None else float('nan'):+.2f}{flag}"]


def waves_cell(p, recs: list[RequestRecord], st) -> str:
    """whole_waves() of a fixed-length closed-loop point (its requests move in waves), '–' for any other."""
    if not (p.concurrency and p.input_len and p.output_len):
        return "–"
    got = steady.whole_waves(recs, p.concurrency, st.start_s, st.end_s)
    if got is None:
        return "no whole wave in the window"
    a, b, rate = got
    return f"{rate:.0f} ({a:.1f}-{b:.1f} s; steady {100 * (st.output_throughput / rate - 1):+.1f}%)"


HEAD = ["engine", "point", "repeat", "attempt", "status", "s", "whole-point tok/s", "per-wave tok/s",
        "MSER-5 warm-up cut; window end", "steady tok/s ± 95%", "steady vs whole",
        "the window's whole waves: tok/s (fixed lengths)", f"converged (±{100 * TARGET:g}%)",
        "interval / why no steady state"]


def table(run_dir: Path, tally: dict[str, int]) -> list[str]:
    run = load_run(run_dir)
    lines = [f"### {run_dir.parent.name}/{run_dir.name}", "", "| " + " | ".join(HEAD) + " |",
             "|" + " --- |" * len(HEAD)]
    for name, e in run.engines.items():
        recs = requests(run_dir, name)
        for p in e.points:
            if (got := recs.get((p.index, p.repeat, p.attempt))):
                cells = row(name, p, got)
                tally[outcome(cells)] = tally.get(outcome(cells), 0) + 1
                lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def outcome(cells: list[str]) -> str:
    why = cells[-1]
    if cells[-2] == "–":
        return "too short for MSER-5" if why.startswith("too short") else why.split(":")[0]
    return "steady state, converged" if cells[-2] == "yes" else "steady state, not converged"


def main(out: str, dirs: list[str]) -> None:
    lines = ["# The steady-state rule on committed GPU runs", "",
             "Written by `scripts/steady_rule.py` from each run's per-request files (nothing here is typed by hand). "
             "Rule (llmcompare/analysis/steady.py, mser.py; docs/report.md, 'The steady state'): MSER-5 warm-up truncation on the "
             "per-second output rate (White 1997), the window ended before the drain (the last send, or earlier "
             "when the requests in flight stay below min(c - 0.5, 0.95c)), and a 95% interval by 10-30 batch means of the window "
             f"(Schmeiser 1982), converged at a relative half-width of at most {100 * TARGET:g}%. Per-wave rate: wave "
             "j runs from the (j-1)c-th completion to the jc-th (wave 1 from the point's start), its output tokens "
             "(where their chunks arrived) / its length. 'The window's whole waves': the steady window narrowed to the "
             "whole waves inside it (first wave boundary at or after its start to the last at or before its end), "
             "for fixed lengths in a closed loop only, beside how far the steady figure lies from it: a window that "
             "cuts a wave weighs that wave's phase (the report's wave-phase check; not the rule). 's': the point's length, first send "
             "to last finish.", ""]
    body: list[str] = []
    tally: dict[str, int] = {}
    for d in dirs:
        body += table(Path(d), tally)
        print(f"done {d}", file=sys.stderr)
    lines += [f"Of {sum(tally.values())} measured points (every repeat and attempt): "
              + "; ".join(f"{n} {what}" for what, n in sorted(tally.items(), key=lambda kv: -kv[1])) + ".", ""]
    Path(out).write_text("\n".join(lines + body))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
