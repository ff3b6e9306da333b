"""The SLO capacity search on a running server: probes open-loop request rates as analysis/capacity.py's
next_rate says, measures each like any load point (saved as it goes), and resumes from the probes on file."""

from __future__ import annotations

import math
import sys

from llmcompare.analysis.capacity import Result, assess, next_rate, probes_of, slo_text
from llmcompare.schema.run import LoadKey
from llmcompare.serve.loadgen import LoadPoint

# ---- the search, on a running server ------------------------------------------------------------------------
FINISHED = ("complete", "untrusted", "failed")


async def search(b, measure) -> Result:
    """b: measure.Bench; measure(point, repeat): measure.measure on the open session. Probes already on file (a
    resumed run) are not measured again."""

    s, cap, rec = b.s, b.s.load.capacity, b.rf.run.engines[b.engine]
    q, cell = cap.slo_percentile, s.workload.cells()[0]
    print(f"{b.engine}: capacity search at {slo_text(s.slo, q)}: from {cap.min_rate:g} req/s, x2 up to "
          f"{cap.max_rate:g}, then bisection to {cap.tolerance:.0%}; at most {cap.max_probes} probes of "
          f"{s.load.repeats} repeat(s)", file=sys.stderr)
    tried: set[float] = set()
    while (rate := next_rate(cap, usable := probes_of(rec, s.load.max_concurrency, s.slo, q),
                             frozenset(tried - {p.rate for p in usable}))) is not None:
        if rate in tried:  # a guard against looping: next_rate excludes every rate tried and not usable
            break
        tried.add(rate)
        key = LoadKey(request_rate=rate, max_concurrency=s.load.max_concurrency, **cell._asdict())
        on_file = {p.key: p.index for e in b.rf.run.engines.values() for p in e.points}
        index = on_file.get(key, max([*on_file.values(), *(p.index for p in b.plan)], default=-1) + 1)
        n = min(max(s.workload.num_prompts, math.ceil(rate * s.load.min_duration_s)), s.load.max_prompts_per_point)
        point = LoadPoint(index, key, n, "capacity probe")
        for r in range(s.load.repeats):
            last = rec.point(index, r)
            if last is None or last.status not in FINISHED:
                if b.todo is not None:  # a cut probe (resume): new attempts numbered after those on file
                    b.todo[(index, r)] = last.attempt + 1 if last else 1
                await measure(point, r)
        (probe,) = [p for p in probes_of(rec, s.load.max_concurrency, s.slo, q) if p.rate == rate] or [None]
        verdict = "no usable repeat: the search goes on around it" if probe is None else \
            ("passes" if probe.passed else "fails") + f" (worst SLO ratio {probe.mean:.2f})"
        print(f"{b.engine}: capacity probe {rate:g} req/s {verdict}", file=sys.stderr)
    res = assess(probes_of(rec, s.load.max_concurrency, s.slo, q), cap.tolerance)
    print(f"{b.engine}: at {slo_text(s.slo, q)} it holds {res.text()}", file=sys.stderr)
    return res
