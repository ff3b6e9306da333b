#!/usr/bin/env python3
"""Where a profiled window's idle time sits: per step (the steps and heavy-step rule of llmcompare/profile/timeline.py),
the GPU's idle ms (the step minus the union of its kernels), split into light and heavy steps (int4 GEMM above
HEAVY_INT4 x the median step's). Tells spread-out host waiting (every step a little) from bursts (a few steps a lot);
reports/h100-profile-sharegpt-c64/README.md used it.

  python scripts/step_idle.py TRACE.json.gz [TRACE...]
"""

from __future__ import annotations

import argparse
import statistics
from typing import NamedTuple

from llmcompare.profile import timeline as tl


class Step(NamedTuple):
    ms: float  # anchor to anchor
    idle_ms: float  # the step minus the union of its kernels
    int4_ms: float  # its int4 GEMMs' summed duration


def steps(path: str) -> list[Step]:
    evs, _ = tl.events(tl.read_trace(path))
    names = tl.lm_head_names(evs)
    marks = set(names) if names else {tl.anchor_name(evs)}
    starts = [e.start_us for e in evs if e.name in marks]
    out, i = [], 0
    for a, b in zip(starts, starts[1:], strict=False):
        while i < len(evs) and evs[i].start_us < a:
            i += 1
        spans, int4, j = [], 0.0, i
        while j < len(evs) and evs[j].start_us < b:
            e = evs[j]
            spans.append((e.start_us, min(e.start_us + e.dur_us, b)))
            int4 += e.dur_us if e.cls == "int4_gemm" else 0.0
            j += 1
        out.append(Step((b - a) / 1000.0, (b - a - tl._union_us(spans)) / 1000.0, int4 / 1000.0))
    return out


def summary(st: list[Step]) -> dict:
    """Light and heavy steps' counts and idle figures (ms), and each group's idle as a share of all steps' time."""
    med = statistics.median(s.int4_ms for s in st)
    heavy = [s for s in st if s.int4_ms > tl.HEAVY_INT4 * med]
    light = [s for s in st if s.int4_ms <= tl.HEAVY_INT4 * med]
    total = sum(s.ms for s in st)
    idle = sorted(s.idle_ms for s in light)
    return {"steps": len(st), "light": len(light), "heavy": len(heavy),
            "light_idle_median_ms": statistics.median(idle), "light_idle_p90_ms": idle[int(0.9 * (len(idle) - 1))],
            "light_idle_max_ms": idle[-1], "light_idle_over_1ms": sum(x > 1.0 for x in idle),
            "light_idle_share": sum(idle) / total,
            "heavy_idle_mean_ms": statistics.fmean(s.idle_ms for s in heavy) if heavy else None,
            "heavy_idle_share": sum(s.idle_ms for s in heavy) / total}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    for path in ap.parse_args(argv).traces:
        st = steps(path)
        if len(st) < 2:
            print(f"{path}: fewer than two steps")
            continue
        s = summary(st)
        print(f"{path}: {s['steps']} steps, {s['light']} light, {s['heavy']} heavy")
        print(f"  light steps' idle ms: median {s['light_idle_median_ms']:.3f}, p90 {s['light_idle_p90_ms']:.3f}, "
              f"max {s['light_idle_max_ms']:.3f}; over 1 ms: {s['light_idle_over_1ms']}; "
              f"{100 * s['light_idle_share']:.1f}% of the steps' time")
        if s["heavy"]:
            print(f"  heavy steps' idle ms: mean {s['heavy_idle_mean_ms']:.3f}; "
                  f"{100 * s['heavy_idle_share']:.1f}% of the steps' time")


if __name__ == "__main__":
    main()
