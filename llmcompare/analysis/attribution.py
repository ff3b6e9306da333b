"""How much of an end-to-end gap the int4 GEMM kernels explain. Reads saved results only.

The model is MODEL below (the report states it in its Method section).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

from llmcompare.engines import gemm_backends, registry
from llmcompare.engines.gemm_backends import base_name
from llmcompare.models.shapes import from_config
from llmcompare.schema.kernel_run import LM_HEAD, KernelRun
from llmcompare.schema.run import EngineRecord, PointResult

MODEL = """  batch      requests in their decode phase on average, by Little's law from the client's own measurements:
             request_throughput * mean(E2EL - TTFT). (Engines' own /metrics gauges are shown beside it but not
             used: lmdeploy 0.18's num_requests_running stayed at 4.0 through the concurrency-64 point on the H200,
             where the client measured ~48 requests decoding.)
  decode     each step runs every layer's GEMMs at M = batch: step_us(M) = layers * sum_shapes t(shape, M)
             + lm_head(M); steps = output tokens / batch; decode_gemm_s = steps * step_us(batch).
  prefill    each request's prompt runs once at M = its input length, and lm_head on its last token only:
             prefill_gemm_s = requests * (layers * sum_shapes t(shape, input_len) + lm_head(1)).
  lm_head    vocab x hidden, fp16 in every engine, so cuBLAS fp16's time for every engine; included only when
             the kernel run measured it (kernel_bench.lm_head), else 0. The same time for both engines of a pair:
             it raises the GEMM shares, not the predicted gap.
  t(shape,M) the kernel-bench graph-replayed time of the engine's GEMM backend, log-log interpolated in M
             (linear in M past the largest measured M). A point whose batch or mean prompt length lies below the
             smallest measured M is not modelled (its row says so): the table holds nothing there.
  comm       with tensor parallelism (a kernel run at degree t > 1, whose shapes are one GPU's share and which
             timed the all-reduce): each layer also runs 2 all-reduces of M x hidden (after o and after down),
             comm_us(M) = layers * 2 * t_allreduce(M), interpolated like t(shape,M); step time = GEMM + comm. Both
             engines get the one measured table (NCCL through torch.distributed, eager), so comm adds to both sides
             of a comparison at the same batch and is shown as its own share of each engine's time; vLLM's custom
             all-reduce and TurboMind's own may be faster than NCCL at decode sizes.
  gap        for engines A (candidate) and B (baseline) at the same load point, the measured gap is
             output_throughput_A / output_throughput_B - 1. The GEMM-only prediction keeps everything of B but
             its GEMMs: duration_B - gemm_B + gemm_A', where gemm_A' is A's kernels at B's batch sizes; predicted
             gap = duration_B / (duration_B - gemm_B + gemm_A') - 1. The rest of the measured gap is "not explained
             by GEMM" (attention, scheduling, sampling, HTTP, ...).
Ignored: chunked prefill mixing prefill and decode tokens in one batch, padding to CUDA-graph sizes, lm_head when
it was not measured, and overlap between GPU work and the host.
"""

ALLREDUCES_PER_LAYER = 2  # a tensor-parallel layer sums o's and down's partial outputs over the GPUs


def interpolate(pts: list[tuple[int, float]], m: float) -> float:
    """Time at M from sorted [(M, µs)]: log-log between measured M, flat below the first, linear in M past the last."""
    ms = [p[0] for p in pts]
    if m <= ms[0]:
        return pts[0][1]
    if m >= ms[-1]:
        return pts[-1][1] * m / ms[-1]
    i = bisect.bisect_left(ms, m)
    (m0, t0), (m1, t1) = pts[i - 1], pts[i]
    f = (math.log(m) - math.log(m0)) / (math.log(m1) - math.log(m0))
    return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))


@dataclass
class KernelTable:
    backend_us: dict[str, dict[str, list[tuple[int, float]]]]  # backend -> shape -> sorted [(M, graph µs)]
    shapes: list[dict]  # the model's shapes (per_layer > 0), one GPU's share at tensor_parallel
    layers: int
    lm_head: list[tuple[int, float]] = field(default_factory=list)  # cuBLAS fp16 [(M, graph µs)]; [] not measured
    tensor_parallel: int = 1
    allreduce_us: list[tuple[int, float]] = field(default_factory=list)  # sorted [(M, µs)]; empty: no comm term
    # backend -> the package versions its worker's environment reported ({"lmdeploy": "0.17.0", ...}); {}: unknown
    versions: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_run(cls, run: KernelRun) -> KernelTable:
        shapes = [s for s in run.shapes if s.get("per_layer", 1) > 0]
        names = {s["name"] for s in shapes}
        t: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for p in run.points:
            if p.status == "ok" and p.shape in names and p.time_us:
                t.setdefault(p.backend, {}).setdefault(p.shape, []).append((p.m, p.time_us))
        for b in t.values():
            for s in b:
                b[s].sort()
        head = sorted((p.m, p.time_us) for p in run.points if p.status == "ok" and p.shape == LM_HEAD
                      and base_name(p.backend) == "cublas" and p.time_us)
        comm = sorted((c.m, c.us) for c in run.collectives if c.status == "ok" and c.us)
        versions = {b: dict(((w.get("env") or {}).get("versions")) or {}) for w in run.workers
                    for b in w.get("backends") or []}
        return cls(t, shapes, int(run.layers or 0), head, int(run.tensor_parallel or 1), comm, versions)

    def gemm_us(self, backend: str, shape: str, m: float) -> float:
        return interpolate(self.backend_us[backend][shape], m)

    def lm_head_us(self, m: float) -> float:
        """lm_head over m rows (cuBLAS fp16, any engine), µs; 0 when the kernel run did not measure it."""
        return interpolate(self.lm_head, m) if self.lm_head else 0.0

    def step_us(self, backend: str, m: float, head_m: float | None = None) -> float:
        """One forward pass over m tokens on one GPU, µs: every layer's quantized GEMMs, and lm_head over head_m
        rows (the sampled ones: all m in decode, one per request in prefill) when measured."""
        return (self.layers * sum(self.gemm_us(backend, s["name"], m) for s in self.shapes)
                + self.lm_head_us(m if head_m is None else head_m))

    def comm_step_us(self, m: float) -> float:
        """The all-reduces of one forward pass over m tokens, µs (0 without a measured all-reduce)."""
        return self.layers * ALLREDUCES_PER_LAYER * interpolate(self.allreduce_us, m) if self.allreduce_us else 0.0

    def other_version(self, backend: str, engine: EngineRecord) -> str | None:
        """Why this table's `backend` does not stand for what `engine` served, or None: the kernel run timed it in
        an environment with another version of the engine's own package (`--python turbomind=<an lmdeploy 0.17
        env>` without the `@0.17.0` label, set beside a served lmdeploy 0.18). A version unknown on either side,
        or a backend of another engine kind (cuBLAS): not checked. Local build tags (`+cu130`) are ignored."""
        b, kind = gemm_backends.BACKENDS.get(base_name(backend)), registry.ENGINES.get(engine.kind or "")
        if not b or not kind or not kind.module or b.engine != engine.kind:
            return None
        timed = self.versions.get(backend, {}).get(kind.module)
        if timed and engine.version and timed.split("+")[0] != engine.version.split("+")[0]:
            return (f"the kernel run timed {backend} with {kind.module} {timed}, and {engine.name} served "
                    f"{kind.module} {engine.version}: time each version under its own name, e.g. kernel-bench "
                    f"--backends {base_name(backend)}@{timed} --python {base_name(backend)}@{timed}=PYTHON")
        return None

    def has(self, backend: str) -> bool:
        return backend in self.backend_us and all(s["name"] in self.backend_us[backend] for s in self.shapes)

    def lowest_m(self, backend: str) -> int:
        """The smallest M measured for every shape of `backend`. Below it interpolate() could only repeat that
        M's time, which overstates a smaller M's (a 57-row decode step is not a 512-row GEMM)."""
        return max(self.backend_us[backend][s["name"]][0][0] for s in self.shapes)


def below_table(table: KernelTable, backends: list[str], ms: dict[str, float]) -> str | None:
    """Why a point cannot be modelled with this table, or None: an M it needs ({what: M}) lies below the smallest
    M the table measured for one of `backends`."""
    low = max(table.lowest_m(b) for b in backends)
    short = [f"{what} {m:.0f}" for what, m in ms.items() if m < low]
    return f"the kernel table starts at M = {low}, below it not measured: {', '.join(short)}" if short else None


def engine_backend(engine: EngineRecord, scenario_engine: dict | None = None) -> tuple[str | None, str]:
    """(backend, how we know): from the server log, else the scenario's gemm_backend, else the engine kind's."""
    for kernel in engine.kernels.values():
        if b := gemm_backends.from_log_name(kernel):
            return b, f"server log: {kernel}"
    if scenario_engine and scenario_engine.get("gemm_backend"):
        return scenario_engine["gemm_backend"], "scenario gemm_backend"
    kind = registry.ENGINES.get(engine.kind)
    if kind and kind.gemm_backend:
        return kind.gemm_backend, f"engine kind {engine.kind} (its log names no kernel; a fallback would have failed the run)"
    return None, "unknown: the log names no kernel and the scenario sets no gemm_backend"


@dataclass
class PointGemm:
    label: str
    batch: float
    batch_source: str
    requests: float
    output_tokens: float
    input_len: float
    duration_s: float
    output_throughput: float
    decode_gemm_s: float = 0.0
    prefill_gemm_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    decode_comm_s: float = 0.0  # the all-reduces (tensor parallelism; 0 without a measured table)
    prefill_comm_s: float = 0.0

    @property
    def gemm_s(self) -> float:
        return self.decode_gemm_s + self.prefill_gemm_s

    @property
    def comm_s(self) -> float:
        return self.decode_comm_s + self.prefill_comm_s

    @property
    def rest_s(self) -> float:
        """What the model leaves to everything else: attention, sampling, scheduling, the host, ..."""
        return self.duration_s - self.gemm_s - self.comm_s


def point_profile(points: list[PointResult], running: list[float] | None = None) -> PointGemm:
    """The mean over a point's usable repeats (whole-point figures: the model covers prefill and decode)."""
    ms = [p.metrics for p in points]
    mean = lambda f: statistics.fmean(f(m) for m in ms)  # noqa: E731
    batch = mean(lambda m: m.request_throughput * (m.stat("mean_e2el_ms") - m.stat("mean_ttft_ms")) / 1000.0)
    src = "Little's law (client)"
    if running:
        src += f"; engine /metrics said {sum(running) / len(running):.1f}"
    n = mean(lambda m: m.completed)
    return PointGemm(points[0].label, max(1.0, batch), src, n, mean(lambda m: m.total_output_tokens),
                     mean(lambda m: m.total_input_tokens / m.completed if m.completed else 0.0),
                     mean(lambda m: m.duration_s), mean(lambda m: m.output_throughput))


_MODELLED = ("decode_gemm_s", "prefill_gemm_s", "notes", "decode_comm_s", "prefill_comm_s")


def gemm_time(pg: PointGemm, table: KernelTable, backend: str) -> PointGemm:
    """The point's GEMM and communication time with `backend`'s kernels (decode steps at M = batch, each prompt
    once at M = its length)."""
    out = PointGemm(**{k: v for k, v in pg.__dict__.items() if k not in _MODELLED})
    steps = pg.output_tokens / pg.batch if pg.batch else 0.0
    prompt_m = max(1.0, pg.input_len)
    out.decode_gemm_s = steps * table.step_us(backend, pg.batch) * 1e-6
    out.prefill_gemm_s = pg.requests * table.step_us(backend, prompt_m, head_m=1) * 1e-6
    out.decode_comm_s = steps * table.comm_step_us(pg.batch) * 1e-6
    out.prefill_comm_s = pg.requests * table.comm_step_us(prompt_m) * 1e-6
    return out


@dataclass
class Attribution:
    """The measured gap of a candidate over a baseline at one load point, and what the GEMMs alone predict."""

    point: str
    batch_candidate: float
    batch_baseline: float
    batch_source: str
    measured_gap_pct: float
    gemm_predicted_gap_pct: float
    not_explained_pct: float
    gemm_s_candidate: float
    gemm_s_baseline: float
    gemm_share_candidate: float
    gemm_share_baseline: float
    decode_gemm_s_baseline: float
    prefill_gemm_s_baseline: float
    comm_s_candidate: float = 0.0  # the all-reduces at each engine's own batch (tensor parallelism)
    comm_s_baseline: float = 0.0


def compare(label: str, cand: PointGemm, base: PointGemm, table: KernelTable, cand_backend: str,
            base_backend: str) -> Attribution:
    g_base = gemm_time(base, table, base_backend)
    g_cand_at_base = gemm_time(base, table, cand_backend)  # cand's kernels, base's batch profile
    g_cand = gemm_time(cand, table, cand_backend)
    measured = cand.output_throughput / base.output_throughput - 1 if base.output_throughput else math.nan
    d = base.duration_s
    # step time = GEMM + comm; comm is one table at the same batch on both sides, so only the GEMMs move
    denom = d - (g_base.gemm_s + g_base.comm_s) + (g_cand_at_base.gemm_s + g_cand_at_base.comm_s)
    predicted = d / denom - 1 if denom > 0 else math.nan
    return Attribution(
        label, cand.batch, base.batch, cand.batch_source, 100 * measured, 100 * predicted,
        100 * (measured - predicted), g_cand.gemm_s, g_base.gemm_s,
        g_cand.gemm_s / cand.duration_s if cand.duration_s else math.nan,
        g_base.gemm_s / base.duration_s if base.duration_s else math.nan,
        g_base.decode_gemm_s, g_base.prefill_gemm_s, g_cand.comm_s, g_base.comm_s)


def shapes_match(table: KernelTable, model_config: dict | None) -> bool | None:
    if not model_config:
        return None

    try:
        want = {(g.n, g.k) for g in from_config(model_config, table.tensor_parallel)}
    except Exception:
        return None
    return want == {(s["n"], s["k"]) for s in table.shapes} and table.layers == model_config.get("num_hidden_layers")
