#!/usr/bin/env python3
"""Is a client/engine token shortfall a constant delivery delay? For every measured run of a saved serve-bench
run (one engine), the engine's own generation_tokens_total (its /metrics samples) against the tokens the client
had received by the same moments (analysis/steady.tokens_between), both counted from the run's first sample:
D(t) = engine - client, in tokens, at the first sample after 4 s, halfway, and at the last send; and the one
delay tau (0-3 s, 0.05 s steps) for which the engine's increase from that first sample after 4 s, shifted by tau
(engine(t - tau)), best matches the client's increase (client(t)), with its mean absolute error.
A constant delay would show as D(t) ~ tau x the rate at t with a small error at that tau; D changing sign, or
the best tau at 0 with a large error, is not one. D at the point's last sample (after the drain) tells a counter
that counts tokens earlier than the client gets them (D back near 0) from one that counts tokens the client never
gets, or misses some (D stays away from 0). Writes a Markdown table.

  python scripts/counter_drift.py RUN_DIR ENGINE
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from llmcompare.analysis.steady import tokens_between
from llmcompare.schema import request_lines
from llmcompare.schema.files import read_jsonl


def samples(run_dir: Path, engine: str) -> dict[tuple, list[tuple[float, float]]]:
    """(point, repeat, attempt) -> [(t_s, generation_tokens_total)] from <engine>.metrics.jsonl."""
    out: dict[tuple, list[tuple[float, float]]] = {}
    for d in read_jsonl(run_dir / f"{engine}.metrics.jsonl"):
        if "point" in d and "generation_tokens_total" in d:
            out.setdefault((d["point"], d["repeat"], d["attempt"]), []).append((d["t_s"], d["generation_tokens_total"]))
    return out


def drift(recs, samp: list[tuple[float, float]]) -> dict[str, float] | None:
    ok = [r for r in recs if r.success]
    if len(samp) < 10 or not ok:
        return None
    t = np.array([s[0] for s in samp])
    g = np.array([s[1] for s in samp]) - samp[0][1]
    c = np.array([tokens_between(ok, t[0], x) for x in t])
    inside = np.where((t > 4.0) & (t <= max(r.dispatch_s for r in recs)))[0]
    if len(inside) < 3:
        return None
    d = g - c
    a, i = inside[0], inside

    def err(tau: float) -> float:  # increments from the first sample after 4 s: no baseline to agree on
        e = np.interp(t - tau, t, g)
        return float(np.abs((e[i] - e[a]) - (c[i] - c[a])).mean())

    fits = [(tau, err(tau)) for tau in np.arange(0.0, 3.001, 0.05)]
    tau, err = min(fits, key=lambda f: f[1])
    return {"first": d[inside[0]], "mid": d[inside[len(inside) // 2]], "last": d[inside[-1]], "end": d[-1], "tau": tau,
            "err": err}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("engine")
    a = ap.parse_args(argv)
    cells, samp = request_lines.records(a.run, a.engine), samples(a.run, a.engine)
    print("| point | repeat | attempt | D after 4 s | D halfway | D at the last send | D after the drain | best delay s | "
          "its mean abs error (tokens) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, recs in sorted(cells.items()):
        if (r := drift(recs, samp.get(k, []))) is not None:
            print(f"| {k[0]} | {k[1] + 1} | {k[2]} | {r['first']:,.0f} | {r['mid']:,.0f} | {r['last']:,.0f} | {r['end']:,.0f} | "
                  f"{r['tau']:.2f} | {r['err']:,.0f} |")


if __name__ == "__main__":
    main()
