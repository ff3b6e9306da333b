"""Why a GEMM kernel takes the time it does, at decode sizes: its CTA tile against the GPU's SMs, its split-K, and
the bytes it must move against the copy bandwidth measured in the same run. Reads saved results only.

The facts are defined in FACTS below (the report states them in its Method section).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from llmcompare.engines import turbomind_log
from llmcompare.engines.gemm_backends import base_name, point_bytes
from llmcompare.engines.registry import ENGINES
from llmcompare.schema.kernel_run import KernelPoint, KernelRun
from llmcompare.schema.run import EngineRecord

FACTS = """  kernel       TurboMind: the kernel a served engine's log names for that problem (EngineRecord.gemm_choices) when
               there is one, else the one kernel-bench's point recorded from TurboMind's own report (tm_gemm);
               other backends: the longest kernel torch.profiler saw in one call (profiled M only)
  tile         the CTA tile m x n x k in a TurboMind kernel's name (a kernel whose A operand is the weight runs the
               transposed problem: its first number spans N); Marlin, Machete and cuBLAS: not reported
  tiles        ceil(M / tile_m) * ceil(N / tile_n) output tiles; CTAs = tiles * split-K
  per SM       CTAs / SMs (the SM count the kernel run recorded, else an assumed H200's 132): below 1, that share
               of the SMs has work; above 1, a last partial wave leaves SMs idle
  bytes        the fewest one call must move: the weight in the backend's format (int4 + fp16 scales + int4 zeros,
               backends.int4_awq_bytes; fp16 for cuBLAS), x [M, K] and y [M, N] in fp16 once (backends.point_bytes)
  % copy bw    bytes / graph-replayed time, against the copy bandwidth measured by the same worker
  slow         more than 1.25 (SLOW) times the fastest backend of the run at the same shape and M; its "why" is computed
               from the facts above, never written by hand
"""

SLOW = 1.25  # x the fastest backend at the same shape and M


ASSUMED_SMS = 132  # an H200 (and H100 SXM), when the run recorded no GPU


DECODE_M = 64  # the largest M of a decode step the table shows (the served batches add theirs)


@dataclass
class KernelFact:
    """One backend, shape and M of a kernel run: the kernel, its time, and the facts that explain it."""

    backend: str
    shape: str
    n: int
    k: int
    m: int
    graph_us: float | None
    kernel: str  # shortened; "" when not known at this M
    kernel_from: str  # served log | kernel-bench tm_gemm | profiler | not profiled at this M
    tile: list[int] | None = None  # CTA [m, n, k] as the kernel computes it
    transposed: bool = False
    splits: int | None = None  # split-K count; None: not reported
    split_note: str = ""  # e.g. cuBLAS's "splitK" in its kernel name, without a count
    sms: int = ASSUMED_SMS
    sms_from: str = ""
    bytes: int = 0
    copy_gbps: float | None = None
    fastest_us: float | None = None
    fastest_backend: str = ""
    flat_us: tuple[float, float] | None = None  # (min, max) µs of this backend and shape over M <= DECODE_M
    engines: list[str] = field(default_factory=list)  # the served engines whose GEMMs this backend runs

    @property
    def tiles(self) -> int | None:
        if not self.tile:
            return None
        tm, tn = (self.tile[1], self.tile[0]) if self.transposed else (self.tile[0], self.tile[1])
        return math.ceil(self.m / tm) * math.ceil(self.n / tn)

    @property
    def ctas(self) -> int | None:
        return self.tiles * (self.splits or 1) if self.tiles else None

    @property
    def per_sm(self) -> float | None:
        return self.ctas / self.sms if self.ctas else None

    @property
    def pct_copy_bw(self) -> float | None:
        if not self.graph_us or not self.copy_gbps:
            return None
        return 100 * self.bytes / (self.graph_us * 1e-6) / 1e9 / self.copy_gbps

    @property
    def slow(self) -> bool:
        return bool(self.graph_us and self.fastest_us and self.graph_us > SLOW * self.fastest_us)

    def why(self) -> str:
        """One computed line for a slow entry ("" otherwise)."""
        if not self.slow:
            return ""
        parts = [f"{self.graph_us / self.fastest_us:.1f}x {self.fastest_backend}'s {self.fastest_us:.1f} µs"]
        split = f"split-K {self.splits}" if self.splits else (self.split_note or "split-K not reported")
        if self.ctas is None:
            parts.append(f"tile not reported, {split}")
        elif self.ctas < self.sms:
            parts.append(f"{self.tiles} tiles{'' if (self.splits or 1) == 1 else f' x {self.splits} splits'} on "
                         f"{self.sms} SMs: {100 * self.ctas / self.sms:.0f}% of SMs busy, {split}")
        else:
            last = self.ctas % self.sms
            waves = f"the last wave fills {100 * last / self.sms:.0f}% of them" if last else "full waves"
            parts.append(f"{self.ctas} CTAs on {self.sms} SMs ({self.per_sm:.2f} per SM): {waves}, {split}")
        if self.pct_copy_bw is not None:
            parts.append(f"{self.pct_copy_bw:.0f}% of copy bandwidth ({self.bytes / 1e6:.1f} MB)")
        if self.flat_us and self.flat_us[1] < 1.1 * self.flat_us[0] and (self.pct_copy_bw or 100) < 50:
            parts.append(f"{self.flat_us[0]:.1f}-{self.flat_us[1]:.1f} µs at every M <= {DECODE_M}, far below the "
                         "copy bandwidth: a fixed cost per call")
        return "; ".join(parts)


def short_name(name: str) -> str:
    """A profiler kernel name without `void `, its argument list and long template arguments."""
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(.*$", "", name)
    return name if len(name) <= 90 else name[:89] + "…"


def worker_of(run: KernelRun, backend: str) -> dict:
    return next((w for w in run.workers if backend in w.get("backends", [])), {})


def gpu_sms(run: KernelRun, backend: str) -> tuple[int, str]:
    sms = (worker_of(run, backend).get("gpu") or {}).get("sm_count")
    if sms:
        return int(sms), f"{(worker_of(run, backend).get('gpu') or {}).get('name')} (kernel run)"
    return ASSUMED_SMS, f"assumed {ASSUMED_SMS} (an H200): the kernel run recorded no GPU"


def _turbomind(p: KernelPoint, served: list[dict]) -> tuple[dict | None, str]:
    if served and (r := turbomind_log.served_kernel(served, p.m, p.n, p.k)):
        return r, "served log"
    kept = [c for c in turbomind_log.selected(p.tm_gemm).values() if (c.get("m"), c.get("n"), c.get("k")) == (p.m, p.n, p.k)]
    c = kept[0] if kept else turbomind_log.kernel_for(p.tm_gemm, p.m, p.n, p.k)
    return c, "kernel-bench tm_gemm"


def fact(run: KernelRun, p: KernelPoint, served: list[dict] | None = None) -> KernelFact:
    """The facts of one ok point; `served`: the gemm_choices of a served engine that runs this backend."""
    sms, sms_from = gpu_sms(run, p.backend)
    f = KernelFact(p.backend, p.shape, p.n, p.k, p.m, p.graph_us or p.eager_us, "", "not profiled at this M",
                   sms=sms, sms_from=sms_from, bytes=point_bytes(p.backend, p.n, p.k, p.m, run.group_size),
                   copy_gbps=(worker_of(run, p.backend).get("ceilings") or {}).get("copy_gbps"))
    if base_name(p.backend) == "turbomind":
        c, src = _turbomind(p, served or [])
        if c:
            f.kernel, f.kernel_from, f.tile, f.splits = c["kernel"], src, c.get("tile"), c.get("splits")
            f.transposed = bool(c.get("transposed"))
    elif p.kernels:
        f.kernel, f.kernel_from = short_name(p.kernels[0]["name"]), "profiler"
        if any("splitK" in k["name"] for k in p.kernels):
            f.split_note = "split-K (its name says splitK; count not reported)"
    return f


def facts(run: KernelRun, served: dict[str, list[dict]] | None = None, engines: dict[str, list[str]] | None = None,
          extra_ms: set[int] = frozenset()) -> list[KernelFact]:
    """Every backend, model shape and decode M (M <= DECODE_M, and extra_ms: the measured Ms that cover the served
    batches) of a kernel run. served: backend -> a served engine's gemm_choices; engines: backend -> engine labels."""
    shapes = {s["name"] for s in run.shapes if s.get("per_layer", 1) > 0}
    pts = [p for p in run.points if p.status == "ok" and p.m is not None and p.shape in shapes
           and (p.m <= DECODE_M or p.m in extra_ms)]
    best: dict[tuple[str, int], KernelPoint] = {}
    for p in pts:
        key = (p.shape, p.m)
        if p.time_us and (key not in best or p.time_us < best[key].time_us):
            best[key] = p
    out = []
    for p in pts:
        f = fact(run, p, (served or {}).get(p.backend))
        b = best[(p.shape, p.m)]
        f.fastest_us, f.fastest_backend = b.time_us, b.backend
        small = [q.time_us for q in pts if (q.backend, q.shape) == (p.backend, p.shape) and q.m <= DECODE_M]
        f.flat_us = (min(small), max(small)) if len(small) > 1 else None
        f.engines = (engines or {}).get(p.backend, [])
        out.append(f)
    return out


def covering_m(run: KernelRun, batch: float) -> int | None:
    """The smallest measured M at or above a served batch size."""
    return next((m for m in sorted(run.m) if m >= batch), None)


def run_backend(run: KernelRun, backend: str, rec: EngineRecord) -> str | None:
    """The kernel run's name for an engine's backend: of `turbomind` and `turbomind@0.17.0`, the one whose worker
    ran the engine's own version (its env's versions), else the unversioned one."""
    names = [b for b in run.backends if base_name(b) == backend]
    kind = ENGINES.get(rec.kind)
    module = kind.module if kind else ""
    same = [b for b in names if module and rec.version
            and ((worker_of(run, b).get("env") or {}).get("versions") or {}).get(module) == rec.version]
    return (same or [b for b in names if b == backend] or names or [None])[0]
