"""kernel-bench's result records (schema KERNEL_SCHEMA): one KernelPoint per backend, shape and M; with tensor
parallelism, one AllReducePoint per M."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from llmcompare.schema.codec import _plain, record

KERNEL_SCHEMA = "llmcompare.kernel-bench/2"
LM_HEAD = "lm_head"  # KernelPoint.shape of vocab x hidden (models/shapes.lm_head): fp16 in every engine


@dataclass
class KernelPoint:
    backend: str = ""
    shape: str = ""
    n: int = 0
    k: int = 0
    m: int | None = None  # None: the backend failed before any M (e.g. weight preparation)
    status: str = ""  # ok | wrong | error
    error: str | None = None
    rel_err: float | None = None
    copies: int | None = None
    eager_us: float | None = None
    eager_us_p20: float | None = None
    eager_us_p80: float | None = None
    graph_ok: bool | None = None
    graph_error: str | None = None
    graph_us: float | None = None
    graph_us_p20: float | None = None
    graph_us_p80: float | None = None
    kernels: list[dict] = field(default_factory=list)  # torch.profiler: name, launches_per_call, us_per_call
    kernels_error: str | None = None
    tm_gemm: list[dict] = field(default_factory=list)  # TurboMind's own report of the kernel it chose (engines/turbomind_log.py)
    tm_api: str | None = None  # which TurboMind Python API ran it (0.17's or 0.18's)
    tm_gemm_candidates: int | None = None  # kernels TurboMind's tuner measured for this M
    trace: str | None = None  # the worker's traceback when status is error
    # derived against the run's ceilings (kernels/bench.derive)
    tflops: float | None = None
    pct_peak: float | None = None
    gbps: float | None = None
    pct_copy_bw: float | None = None
    floor_us: float | None = None
    pct_roofline: float | None = None
    speedup_vs_cublas: float | None = None
    gemm_kernel_us: float | None = None
    other_kernels_us: float | None = None
    kernel_names: str | None = None

    @property
    def time_us(self) -> float | None:
        return self.graph_us or self.eager_us


@dataclass
class AllReducePoint:
    """One all-reduce timed by kernels/in_engine/collectives.py: M x hidden elements summed over world_size GPUs, what a
    tensor-parallel decoder layer runs twice (after o and after down)."""

    world_size: int = 0
    m: int = 0  # tokens
    hidden_size: int = 0
    dtype: str = "float16"
    bytes: int = 0  # m * hidden_size * element size: the tensor each GPU contributes
    backend: str = "nccl"  # torch.distributed's
    status: str = ""  # ok | error
    error: str | None = None
    iters: int = 0  # back-to-back calls per sample
    us: float | None = None  # median per call over the samples, each sample the slowest rank's (a layer waits)
    us_p20: float | None = None
    us_p80: float | None = None
    algbw_gbps: float | None = None  # bytes / us
    busbw_gbps: float | None = None  # algbw * 2 (n - 1) / n, nccl-tests' bus bandwidth: comparable to a link's


@dataclass
class KernelRun:
    schema: str = KERNEL_SCHEMA
    status: str = "running"
    created_at: str = ""
    finished_at: str | None = None
    argv: list[str] = field(default_factory=list)
    host: dict = field(default_factory=dict)
    scenario: dict = field(default_factory=dict)  # every field (/1 kept its name only, in scenario_name)
    scenario_name: str = ""
    model: str = ""
    layers: int = 0
    group_size: int = 128
    rtol: float = 0.0
    m: list[int] = field(default_factory=list)
    shapes: list[dict] = field(default_factory=list)  # name, n, k, per_layer
    backends: dict[str, dict] = field(default_factory=dict)  # name -> python, status, reason, description
    workers: list[dict] = field(default_factory=list)  # python, backends, env, gpu, ceilings, log
    points: list[KernelPoint] = field(default_factory=list)
    tensor_parallel: int = 1  # shapes are one GPU's share at this degree (models/shapes.py)
    collectives: list[AllReducePoint] = field(default_factory=list)  # tensor_parallel > 1: the all-reduce per M
    collectives_worker: dict = field(default_factory=dict)  # python, status, reason, env, log
    dir: str = ""

    def to_json(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "dir"}

    @classmethod
    def from_json(cls, d: dict) -> KernelRun:
        if d.get("schema") == "llmcompare.kernel-bench/1":
            d = dict(d, scenario_name=d.get("scenario") or "", scenario={})
        return record(cls, d)
