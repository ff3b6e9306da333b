"""What serve-bench prints as it goes and at the end: a line per measured point and the closing table."""

from __future__ import annotations

import sys

from llmcompare.schema.run import PointResult, ServeRun


def say_point(name: str, res: PointResult, repeats: int) -> None:
    label = res.label + (f" #{res.repeat + 1}" if repeats > 1 else "") + (f" (attempt {res.attempt})"
                                                                          if res.attempt > 1 else "")
    m = res.metrics
    for w in res.warnings:
        print(f"warning: {name} {label}: {w}", file=sys.stderr)
    if m is None or m.completed == 0:
        top = max(m.errors, key=m.errors.get) if m and m.errors else "no request finished"
        print(f"{name} {label}: {res.status}: all {m.failed if m else res.num_prompts} requests failed: {top}",
              file=sys.stderr)
        return
    st = f", steady {res.steady.output_throughput:.1f} tok/s" if res.steady else ""
    print(f"{name} {label}: {res.status}: {m.completed} ok, {m.failed} failed, {m.output_throughput:.1f} output tok/s"
          f"{st}, median TTFT {m.stat('median_ttft_ms'):.1f} ms, median TPOT {m.stat('median_tpot_ms'):.2f} ms",
          file=sys.stderr)
    if not res.trust.trusted:
        print(f"UNTRUSTED {name} {label}: " + "; ".join(res.trust.reasons), file=sys.stderr)


def summary(run: ServeRun) -> str:
    """The short table printed last: whole-point and steady-state throughput, latencies, status."""
    repeats = run.scenario.get("load", {}).get("repeats", 1) > 1
    rows = [(name, p, p.label + (f"#{p.repeat + 1}" if repeats else "")) for name, e in run.engines.items()
            for p in e.points]
    w = max([12, *(len(label) + 2 for _, _, label in rows)])  # "c=1 in=128 out=32#3" and the like fit
    n = max([14, *(len(name) + 2 for name, _, _ in rows)])
    head = (f"{'engine':<{n}}{'point':<{w}}{'status':<11}{'ok':>5}{'fail':>5}{'out tok/s':>11}{'steady':>10}"
            f"{'TTFT p50':>10}{'p99':>9}{'TPOT p50':>10}{'p99':>8}{'ITL p99':>9}")
    lines = [head]
    nan = float("nan")
    for name, p, label in rows:
        m = p.metrics
        if m is None:
            lines.append(f"{name:<{n}}{label:<{w}}{p.status:<11}")
            continue
        st = f"{p.steady.output_throughput:>10.1f}" if p.steady else f"{'-':>10}"
        lines.append(f"{name:<{n}}{label:<{w}}{p.status:<11}{m.completed:>5}{m.failed:>5}{m.output_throughput:>11.1f}{st}"
                     f"{m.stat('median_ttft_ms') or nan:>10.1f}{m.stat('p99_ttft_ms') or nan:>9.1f}"
                     f"{m.stat('median_tpot_ms') or nan:>10.2f}{m.stat('p99_tpot_ms') or nan:>8.2f}"
                     f"{m.stat('p99_itl_ms') or nan:>9.2f}")
    return "\n".join(lines) + "\n(latencies in ms; 'steady': output tok/s in the steady-state window; see run.json)"
