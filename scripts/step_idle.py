#!/usr/bin/env python3
"""Where a profiled window's idle time sits: per step (profile/timeline.py's steps and heavy-step rule), the GPU's
idle ms (the step minus the union of its kernels), split into light and heavy steps. Tells spread-out host waiting
(every step a little) from bursts (a few steps a lot); reports/h100-profile-sharegpt-c64/README.md used it.

  python scripts/step_idle.py TRACE.json.gz [TRACE...]
"""

from __future__ import annotations

import argparse
import statistics

from llmcompare.profile import timeline as tl


def steps(path: str) -> list[tl.Step]:
    """The trace's steps, anchored as the profiled pass's analysis anchors them (no profile.anchor)."""
    evs, _ = tl.events(tl.read_trace(path))
    _, names = tl.step_anchor(evs)
    return tl.per_step(evs, tl.step_starts(evs, None, names))


def summary(st: list[tl.Step]) -> dict:
    """Light and heavy steps' counts and idle figures (ms), and each group's idle as a share of all steps' time."""
    heavy, light = tl.heavy_split(st) or ([], list(st))
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
