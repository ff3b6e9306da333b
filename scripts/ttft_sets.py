#!/usr/bin/env python3
"""Whether the TTFT split's request sets matter (analysis/agreement.py): vLLM observes a request's queue and prefill
times when it finishes but its TTFT at its first token, so over one comparison window the two histograms count
different requests. From the client's own per-request files, per point: its mean TTFT of the requests whose first
token came inside the engine-counter window, minus that of the requests that finished inside it. A difference far
below the engine's unexplained remainder (TTFT - queue - prefill) rules the sets out as its cause.

  python scripts/ttft_sets.py RUN_DIR     (a Markdown table on stdout; reports/h100-c512-complete used it)
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmcompare.schema import request_lines
from llmcompare.schema.files import load_run


def rows(run_dir: Path) -> list[list]:
    run, out = load_run(run_dir), []
    for e in run.engines.values():
        recs = request_lines.records(run_dir, e.name)
        for p in e.points:
            c = p.engine_counters
            if c is None or not c.window_s or c.engine_mean_queue_ms is None or c.engine_mean_prefill_ms is None:
                continue
            lo, hi = c.window_s
            ok = [r for r in recs.get((p.index, p.repeat, p.attempt), []) if r.success]
            first = [r.ttft_ms for r in ok if lo < r.dispatch_s + r.ttft_ms / 1000 <= hi]
            done = [r.ttft_ms for r in ok if lo < r.dispatch_s + r.e2el_ms / 1000 <= hi]
            if not first or not done:
                continue
            rest = c.engine_mean_ttft_ms - c.engine_mean_queue_ms - c.engine_mean_prefill_ms
            out.append([e.name, p.label, p.repeat + 1, round(rest), round(sum(first) / len(first)),
                        round(sum(done) / len(done)), round(sum(first) / len(first) - sum(done) / len(done))])
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print("| engine | point | repeat | engine's TTFT in neither queue nor prefill ms | client mean TTFT, first token in "
          "window ms | client mean TTFT, finished in window ms | difference ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows(Path(argv[0])):
        print("| " + " | ".join(str(x) for x in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
