#!/usr/bin/env python3
"""Where a closed loop's requests spend their lives, from the client's own records: per point (repeat, attempt),
over the successful requests sent between --from and --to seconds into it (the plateau), the mean time to the
first token, the mean time after it (E2EL - TTFT), the mean E2EL, and c x mean output tokens / mean E2EL, the rate
a closed loop of c keeps while every slot is busy (Little's law: no warm-up, no drain).
reports/h100-sglang-fixed-c64/README.md used it (SGLang's long TTFT against TurboMind's long inter-token time).

  python scripts/request_life.py RUN_DIR ENGINE [--from 10] [--to 50]
"""

from __future__ import annotations

import argparse
import statistics

from llmcompare.schema.files import load_run
from llmcompare.schema.request_lines import records


def lives(run_dir: str, engine: str, start_s: float, end_s: float) -> list[dict]:
    """One row per (point, repeat, attempt) with requests in the span: n, ttft_s, after_first_s, e2el_s, and
    loop_tok_s (None for an open loop: no concurrency)."""
    conc = {(p.index, p.repeat, p.attempt): p.concurrency for p in load_run(run_dir).engines[engine].points}
    rows = []
    for key, recs in sorted(records(run_dir, engine).items()):
        ok = [r for r in recs if r.success and start_s <= r.dispatch_s <= end_s and r.e2el_ms and r.ttft_ms]
        if not ok:
            continue
        ttft, e2el = statistics.fmean(r.ttft_ms for r in ok) / 1e3, statistics.fmean(r.e2el_ms for r in ok) / 1e3
        c = conc.get(key)
        out = statistics.fmean(r.output_tokens for r in ok)
        rows.append({"key": key, "n": len(ok), "ttft_s": ttft, "after_first_s": e2el - ttft, "e2el_s": e2el,
                     "loop_tok_s": c * out / e2el if c else None})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("engine")
    ap.add_argument("--from", dest="start", type=float, default=10.0, help="s into the point")
    ap.add_argument("--to", dest="end", type=float, default=50.0, help="s into the point")
    a = ap.parse_args(argv)
    rows = lives(a.run_dir, a.engine, a.start, a.end)
    if not rows:
        raise SystemExit(f"no successful {a.engine} request sent between {a.start:g} and {a.end:g} s")
    for r in rows:
        point, repeat, attempt = r["key"]
        loop = f", c x out / E2EL {r['loop_tok_s']:.0f} tok/s" if r["loop_tok_s"] else ""
        print(f"{a.engine} point {point} repeat {repeat + 1} attempt {attempt}: {r['n']} requests; TTFT "
              f"{r['ttft_s']:.3f} s + after it {r['after_first_s']:.3f} s = E2EL {r['e2el_s']:.3f} s{loop}")


if __name__ == "__main__":
    main()
