"""GPU telemetry during a load point: `nvidia-smi` sampling SM clock, power and memory of every GPU.

`Telemetry` is a context manager that owns the sampler's process group (start_new_session) and stops it on the
way out; the samples are parsed from its CSV output. Without nvidia-smi on PATH (a CPU machine) it records that
telemetry was unavailable; that is not an error. Energy: each GPU's power integrated over its own sample times
(trapezoids), summed over GPUs; J per output token = that energy / the point's output tokens.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from llmcompare.schema.files import open_for_write
from llmcompare.schema.telemetry import Sample, TelemetrySummary

QUERY = "index,timestamp,clocks.sm,power.draw,memory.used"


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse(text: str) -> list[Sample]:
    """nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits lines; malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            t = dt.datetime.strptime(parts[1], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            gpu = int(parts[0])
        except ValueError:
            continue
        out.append(Sample(gpu, t, _num(parts[2]), _num(parts[3]), _num(parts[4])))
    return out


def summarize(samples: list[Sample], output_tokens: float | None = None) -> TelemetrySummary:
    s = TelemetrySummary(available=True, samples=len(samples), gpus=sorted({x.gpu for x in samples}))
    if not samples:
        s.why_not = "nvidia-smi gave no sample"
        return s
    energy, span = 0.0, 0.0
    for g in s.gpus:
        pts = sorted((x.t_s, x.power_w) for x in samples if x.gpu == g and x.power_w is not None)
        energy += sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:], strict=False))
        if len(pts) > 1:
            span = max(span, pts[-1][0] - pts[0][0])
    clocks = [x.sm_clock_mhz for x in samples if x.sm_clock_mhz is not None]
    mem = [x.memory_used_mib for x in samples if x.memory_used_mib is not None]
    s.duration_s = round(span, 3)
    if span > 0:
        s.energy_j = round(energy, 2)
        s.mean_power_w = round(energy / span, 2)
        if output_tokens:
            s.j_per_output_token = round(energy / output_tokens, 5)
    if clocks:
        s.sm_clock_mhz_mean, s.sm_clock_mhz_min = round(sum(clocks) / len(clocks), 1), min(clocks)
    if mem:
        s.memory_used_mib_max = max(mem)
    return s


class Telemetry:
    """with Telemetry(200) as t: ...; then t.samples, t.summary(tokens). interval_ms 0: off."""

    def __init__(self, interval_ms: int):
        self.interval_ms = interval_ms
        self.exe = shutil.which("nvidia-smi")
        self.proc: subprocess.Popen | None = None
        self.samples: list[Sample] = []
        self.why_not: str | None = None if self.exe else "nvidia-smi not on PATH"
        if interval_ms <= 0:
            self.why_not = "off (profile.telemetry_interval_ms: 0)"

    def __enter__(self) -> Telemetry:
        if self.why_not:
            return self
        self._out = tempfile.TemporaryFile(mode="w+")
        try:
            self.proc = subprocess.Popen([self.exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                          "-lms", str(self.interval_ms)], stdout=self._out,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self.why_not = f"cannot run nvidia-smi: {e}"
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self._out.seek(0)
        self.samples = parse(self._out.read())
        self._out.close()

    async def __aenter__(self) -> Telemetry:
        return self.__enter__()

    async def __aexit__(self, *exc) -> None:
        self.__exit__(*exc)

    def save(self, path: Path, tag: dict, metrics=None) -> TelemetrySummary:
        """Appends the samples (one gzip member per point, tagged) and returns the summary; `metrics`: the
        point's (for J per output token), None when it has no figures."""
        if self.samples:
            with open_for_write(path, "ab") as raw, gzip.open(raw, "at") as f:
                for x in self.samples:
                    f.write(json.dumps({**tag, **dataclasses.asdict(x)}) + "\n")
        return self.summary(metrics.total_output_tokens if metrics else None)

    def summary(self, output_tokens: float | None) -> TelemetrySummary:
        if self.why_not:
            return TelemetrySummary(available=False, why_not=self.why_not)
        return summarize(self.samples, output_tokens)
