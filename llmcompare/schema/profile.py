"""Records of a profiled pass (run.json, EngineRecord.profiles): the capture window, its traces, their per-step
analysis, and the throughput with and without capture. Written by serve/capture.py, read by report/timeline.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmcompare.schema.prefix_cache import PrefixCache


@dataclass
class TraceFile:
    file: str  # in the run directory, gzipped Chrome trace
    pid: int
    role: str  # api-server | engine-core | worker | other (from the process title)
    title: str = ""  # the process's command line / title (vLLM's children: "VLLM::EngineCore")
    start_unix_s: float | None = None  # the capture window in this process
    end_unix_s: float | None = None
    json_bytes: int = 0  # before compression
    cuda: bool | None = None  # whether CUDA kernels were asked for (the process used CUDA; see the hook)
    steps: StepSummary | None = None  # profile/timeline.py's analysis
    error: str | None = None


@dataclass
class ProfileRecord:
    """One extra pass of a load point, run after its measured repeats, during which the capture ran; its figures
    are never among the point's."""

    index: int = 0  # the load point's index in the plan
    label: str = ""
    concurrency: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    prefix_len: int | None = None  # shared-prefix's cell (run.LoadKey); None for other datasets
    num_prefixes: int | None = None
    started_at: str | None = None
    status: str = "running"  # running | complete | failed
    error: str | None = None
    window_s: list[float] = field(default_factory=list)  # [start, end], seconds from the pass's start
    window_output_tok_s: float | None = None  # output tokens whose chunks arrived inside the capture window / its length
    pass_output_tok_s: float | None = None  # the whole pass
    point_output_tok_s: float | None = None  # the point's measured repeats: median steady (else whole-point) tok/s
    baseline_window_s: list[float] = field(default_factory=list)  # the uncaptured window, one wave earlier
    baseline_output_tok_s: float | None = None  # output tok/s in it
    overhead_pct: float | None = None  # 100 * (1 - window / baseline), else 100 * (1 - window / point)
    requests: int = 0
    # waves (x c requests) finished before the captured window (profile.window_wave; files before 2026-12-06
    # session 28 have none: 2)
    window_wave: int | None = None
    # s from the wave's end (window_wave x c requests finished) to the captured window's start: the wait for every request in
    # flight to be past its first token (capture.all_decoding); runs before 2026-12-03 (session 6) waited a fixed
    # delay instead (half the median E2EL, then p99 TTFT + a quarter of the rest of it)
    delay_s: float = 0.0
    window_in_flight: int | None = None  # requests in flight at the window's middle (client's view)
    window_prefill_share: float | None = None  # of the requests in flight mid-window, the share before its 1st token
    traces: list[TraceFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # the engine's prefix-cache counters over the pass: random prompts of its own stream should hit nothing
    prefix_cache: PrefixCache | None = None


@dataclass
class StepSummary:
    """One captured window of one process, summarised per step (ms)."""

    source: str = "gpu"  # gpu: CUDA kernels; cpu: outermost CPU ops (a CPU build)
    events: int = 0  # events analysed
    anchor: str | None = None  # the name that marks steps (the most frequent one where several do)
    # every kernel name that marked steps, where more than one did: the lm_head's cuBLAS kernel changes with the
    # batch size, so a window whose batch moves holds several (profile/timeline.py lm_head_names)
    anchor_names: list[str] = field(default_factory=list)
    steps: int = 0
    step_ms_median: float | None = None
    step_ms_mean: float | None = None
    busy_ms_mean: float | None = None  # union of kernel intervals, per step
    idle_ms_mean: float | None = None  # step - busy
    class_ms_mean: dict[str, float] = field(default_factory=dict)  # class -> busy ms per step (mean)
    # class -> median over steps: the typical decode step (steps carrying a prefill chunk run GEMMs at larger M)
    class_ms_median: dict[str, float] = field(default_factory=dict)
    # heavy steps: int4 GEMM time above HEAVY_INT4 x the median step's (its GEMMs ran at a larger M: prefill
    # tokens in the step, or a larger batch); none in a decode phase at a steady batch
    heavy_factor: float | None = None  # the HEAVY_INT4 the analysis used
    heavy_steps: int = 0
    heavy_step_ms_mean: float | None = None  # mean step of the heavy ones, ms
    light_step_ms_mean: float | None = None  # mean step of the others, ms
    heavy_time_share: float | None = None  # the heavy steps' share of the steps' time, 0..1
    window_ms: float = 0.0  # first event's start to last event's end
    busy_ms_total: float = 0.0  # over the whole window, by the union of intervals
    class_ms_total: dict[str, float] = field(default_factory=dict)
    top_kernels: list[dict] = field(default_factory=list)  # [{name, class, count, ms}] by total time, top 15
    note: str = ""
