"""Where a served engine's GPU time goes per decode step, read from a captured Chrome trace (torch.profiler's).

Input: a trace JSON (gzipped or not) written by the capture hook (profile/in_engine/sitecustomize.py). Events used:
  GPU   complete events (ph "X") of category "kernel", "gpu_memcpy" or "gpu_memset" (CUPTI's records, CUDA-graph
        nodes included), of one device (the lowest id seen: with tensor parallelism each GPU runs the same step)
  CPU   when the trace has no kernel (a CPU build), the outermost "cpu_op" events of each thread of the process
Steps: an anchor kernel that runs once per forward pass marks them; a step runs from one anchor's start to the next
one's (the last, unclosed part is dropped). The anchor is, unless given (profile.anchor: a substring of the
kernel's name), the lm_head: the only fp16 GEMM of an AWQ model, every `gemm`-class kernel name (not int4) when
int4 GEMMs run between every two of them (lm_head_names: cuBLAS picks another kernel as the batch moves, so with
variable lengths one name alone merges steps); else the `gemm`-class name seen most often (ties: most time);
without such a kernel, the name whose count is the most common count among names seen more than once (kernels
that run once per step).
Per step: busy time by class (profile/kernel_class.py; kernels are put in the step where they start), busy = the union of
kernel intervals (overlapping streams count once), idle = step - busy (the GPU waiting for the host). Per window:
step count, median and mean step, and per class the mean per step (means add up: sum of classes - overlap + idle =
mean step). Heavy steps: those whose int4 GEMM time is above HEAVY_INT4 x the median step's (their GEMMs ran at a
larger M: prefill tokens in the step); their count, mean step and share of the steps' time beside the others' mean.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from llmcompare.profile.kernel_class import ORDER, classify
from llmcompare.schema.profile import StepSummary

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # torch.profiler's categories of device-side work
# a step is heavy above this x the median step's int4 GEMM time: at decode batch sizes an int4 GEMM's time hardly
# moves with M (on the committed decode-only windows of 20+ steps, every step's int4 GEMM time was 0.97-1.15x its
# window's median; steps carrying prefill in other windows took 3-27x), so above 1.25x its M was larger
HEAVY_INT4 = 1.25


@dataclass
class Event:
    name: str
    start_us: float
    dur_us: float
    cls: str


def read_trace(path: str | Path) -> dict:
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt") as f:
        return json.load(f)


def events(trace: dict) -> tuple[list[Event], str]:
    """The kernels of the first GPU, or (no kernel at all) the outermost CPU ops; sorted by start."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e and "ts" in e]
    kern = [e for e in evs if e.get("cat") in GPU_CATS]
    if kern:
        dev = min(str(e.get("pid")) for e in kern)
        chosen, source = [e for e in kern if str(e.get("pid")) == dev], "gpu"
    else:
        chosen, source = _outermost([e for e in evs if e.get("cat") == "cpu_op"]), "cpu"
    out = [Event(str(e.get("name", "")), float(e["ts"]), float(e["dur"]), classify(str(e.get("name", ""))))
           for e in chosen]
    out.sort(key=lambda e: e.start_us)
    return out, source


def _outermost(ops: list[dict]) -> list[dict]:
    """CPU ops nest (aten::linear holds aten::addmm): keep each thread's top-level ones."""
    out = []
    by_thread: dict[tuple, list[dict]] = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        end = float("-inf")
        for e in evs:
            if float(e["ts"]) >= end:
                out.append(e)
                end = float(e["ts"]) + float(e["dur"])
    return out


def anchor_name(evs: list[Event]) -> str | None:
    """The name of the kernel that runs once per step (see the module docstring)."""
    counts = Counter(e.name for e in evs)
    time_us: Counter = Counter()
    for e in evs:
        time_us[e.name] += e.dur_us
    gemms = [n for n, c in counts.items() if c >= 2 and classify(n) == "gemm"]
    if gemms:
        return max(gemms, key=lambda n: (counts[n], time_us[n]))
    repeated = [c for c in counts.values() if c >= 2]
    if not repeated:
        return None
    per_step = Counter(repeated).most_common(1)[0][0]
    return min((n for n, c in counts.items() if c == per_step),
               key=lambda n: next(e.start_us for e in evs if e.name == n))


def lm_head_names(evs: list[Event]) -> list[str] | None:
    """Every `gemm`-class kernel name, most frequent first, when int4 GEMMs run between every two of their launches:
    then each is the lm_head of one forward pass (an AWQ model's only fp16 GEMM), whichever kernel cuBLAS picked for
    the step's batch (reports/h100-c512: TurboMind's window held two, 35 and 14 steps). None without int4 GEMMs or
    gemm kernels, or when two gemm launches meet with no int4 GEMM between them (a split-K pair, or another fp16
    GEMM in the model): then one name marks steps, as before."""
    if not any(e.cls == "int4_gemm" for e in evs):
        return None
    counts: Counter = Counter()
    between = None  # int4 launches since the last gemm-class one; None before the first
    for e in evs:
        if e.cls == "int4_gemm" and between is not None:
            between += 1
        elif e.cls == "gemm":
            if between == 0:
                return None
            counts[e.name] += 1
            between = 0
    return [n for n, _ in counts.most_common()] if sum(counts.values()) >= 2 else None


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarize(evs: list[Event], source: str = "gpu", anchor: str | None = None) -> StepSummary:
    s = StepSummary(source=source, events=len(evs))
    if not evs:
        s.note = "no kernel or op in the trace"
        return s
    t0, t1 = evs[0].start_us, max(e.start_us + e.dur_us for e in evs)
    s.window_ms = (t1 - t0) / 1000.0
    s.busy_ms_total = _union_us([(e.start_us, e.start_us + e.dur_us) for e in evs]) / 1000.0
    tot: dict[str, float] = {}
    per_name: dict[str, list[float]] = {}
    for e in evs:
        tot[e.cls] = tot.get(e.cls, 0.0) + e.dur_us / 1000.0
        per_name.setdefault(e.name, []).append(e.dur_us)
    s.class_ms_total = {c: round(tot[c], 4) for c in ORDER if c in tot}
    top = sorted(per_name.items(), key=lambda kv: -sum(kv[1]))[:15]
    s.top_kernels = [{"name": n[:200], "class": classify(n), "count": len(d), "ms": round(sum(d) / 1000.0, 4)}
                     for n, d in top]
    s.anchor, names = step_anchor(evs, anchor)
    s.anchor_names = names if len(names) > 1 else []
    starts = step_starts(evs, anchor, names)
    if len(starts) < 2:
        s.note = "fewer than two step anchors: no per-step figures"
        return s
    _steps(s, per_step(evs, starts))
    return s


def step_anchor(evs: list[Event], anchor: str | None = None) -> tuple[str | None, list[str]]:
    """The anchor (the module docstring's rule) and, where every lm_head kernel name marks steps, those names."""
    names = None if anchor else lm_head_names(evs)
    return anchor or (names[0] if names else anchor_name(evs)), names or []


def step_starts(evs: list[Event], anchor: str | None, names: list[str]) -> list[float]:
    """The steps' start times (us): the given anchor substring's kernels, else the names' (step_anchor), else the
    chosen anchor's."""
    if anchor:
        return [e.start_us for e in evs if anchor in e.name]
    marks = set(names) if names else {anchor_name(evs)}
    return [e.start_us for e in evs if e.name in marks]


@dataclass
class Step:
    ms: float  # anchor to anchor
    busy_ms: float  # the union of the step's kernel intervals (cut at its end)
    class_ms: dict[str, float]  # per kernel class (ORDER), the summed durations of the kernels starting in it

    @property
    def idle_ms(self) -> float:  # the GPU waiting for the host
        return self.ms - self.busy_ms


def per_step(evs: list[Event], starts: list[float]) -> list[Step]:
    """Each step between two consecutive starts (evs sorted by start; a kernel belongs to the step it starts in)."""
    out, i = [], 0
    for a, b in zip(starts, starts[1:], strict=False):
        while i < len(evs) and evs[i].start_us < a:
            i += 1
        spans, cls_us = [], dict.fromkeys(ORDER, 0.0)
        j = i
        while j < len(evs) and evs[j].start_us < b:
            e = evs[j]
            spans.append((e.start_us, min(e.start_us + e.dur_us, b)))
            cls_us[e.cls] += e.dur_us
            j += 1
        out.append(Step((b - a) / 1000.0, _union_us(spans) / 1000.0, {c: cls_us[c] / 1000.0 for c in ORDER}))
    return out


def _steps(s: StepSummary, st: list[Step]) -> None:
    steps_ms, busy_ms = [x.ms for x in st], [x.busy_ms for x in st]
    by_cls = {c: [x.class_ms[c] for x in st] for c in ORDER}
    s.steps = len(steps_ms)
    s.step_ms_median = round(statistics.median(steps_ms), 5)
    s.step_ms_mean = round(statistics.fmean(steps_ms), 5)
    s.busy_ms_mean = round(statistics.fmean(busy_ms), 5)
    s.idle_ms_mean = round(s.step_ms_mean - s.busy_ms_mean, 5)
    s.class_ms_mean = {c: round(statistics.fmean(v), 5) for c, v in by_cls.items() if any(v)}
    s.class_ms_median = {c: round(statistics.median(v), 5) for c, v in by_cls.items() if any(v)}
    _heavy(s, st)


def heavy_split(st: list[Step]) -> tuple[list[Step], list[Step]] | None:
    """(heavy, light) steps by the module docstring's rule; None when the median step ran no int4 GEMM."""
    med = statistics.median(x.class_ms["int4_gemm"] for x in st) if st else 0.0
    if med <= 0:
        return None
    return ([x for x in st if x.class_ms["int4_gemm"] > HEAVY_INT4 * med],
            [x for x in st if x.class_ms["int4_gemm"] <= HEAVY_INT4 * med])


def _heavy(s: StepSummary, st: list[Step]) -> None:
    """The heavy steps (module docstring) against the others."""
    split = heavy_split(st)
    if split is None:
        return
    heavy, light = split
    s.heavy_factor, s.heavy_steps = HEAVY_INT4, len(heavy)
    s.light_step_ms_mean = round(statistics.fmean(x.ms for x in light), 5)
    if heavy:
        s.heavy_step_ms_mean = round(statistics.fmean(x.ms for x in heavy), 5)
    s.heavy_time_share = round(sum(x.ms for x in heavy) / sum(x.ms for x in st), 4)


def analyze(path: str | Path, anchor: str | None = None) -> StepSummary:
    """A trace file's per-step summary."""
    evs, source = events(read_trace(path))
    return summarize(evs, source, anchor)


def main(argv: list[str] | None = None) -> None:
    """python -m llmcompare.profile.timeline TRACE [--anchor SUBSTRING]: a trace's per-step summary as JSON (e.g. to try
    another anchor on a kept trace)."""
    import argparse
    import dataclasses

    ap = argparse.ArgumentParser(prog="python -m llmcompare.profile.timeline")
    ap.add_argument("trace")
    ap.add_argument("--anchor", default=None, help="a substring of the kernel name that marks steps")
    a = ap.parse_args(argv)
    print(json.dumps(dataclasses.asdict(analyze(a.trace, a.anchor)), indent=1))


if __name__ == "__main__":
    main()
