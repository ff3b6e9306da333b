"""Result records and files: typed, versioned, self-describing, written as the run goes.

A serve-bench run directory holds
  run.json                    ServeRun (schema SERVE_SCHEMA): scenario, host, and per engine an EngineRecord with
                              its command line, version, what its log says it chose, the request body it was
                              sent, its answer to the same-answer probe (schema/answer.py), and one PointResult
                              per load point, repeat and attempt; rewritten atomically
                              after every state change, so it is always readable
  <engine>.requests.jsonl     one line per finished request (appended as each finishes)
  <engine>.series.jsonl       per point, one line per second: output tokens, requests in flight, engine gauges
  <engine>.metrics.jsonl      the engine's Prometheus samples, one line per sample (t_s; unix_s from session 20)
  <engine>.server.log         the server's stdout and stderr
A kernel-bench run directory holds run.json (KernelRun, schema KERNEL_SCHEMA), kernels.csv and worker logs.

One writer and one reader per schema: `to_json` / `from_json` here. The reader still accepts the /1 schemas
(files committed under reports/ before points had repeats, steady-state windows and trust checks) and /2;
schema/upgrade.py fills in what older files did not carry.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass, field

from llmcompare.schema.answer import AnswerProbe
from llmcompare.schema.codec import _plain, record
from llmcompare.schema.machine import Machine
from llmcompare.schema.prefix_cache import PrefixCache
from llmcompare.schema.profile import ProfileRecord
from llmcompare.schema.telemetry import TelemetrySummary
from llmcompare.schema.upgrade import upgrade

SERVE_SCHEMA = "llmcompare.serve-bench/3"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# ---- serve-bench -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadKey:
    """What identifies a load point across engines and runs: the load, and the workload cell it sends (random
    prompts of exactly input_len tokens, exactly output_len out; None for file datasets, whose lengths vary;
    shared-prefix: num_prefixes prefixes of prefix_len tokens before the input_len, None for other datasets)."""

    concurrency: int | None = None  # closed loop
    request_rate: float | None = None  # open loop, req/s (inf: all at once)
    max_concurrency: int | None = None  # open loop's cap on requests in flight
    input_len: int | None = None  # tokens per prompt (shared-prefix: after the prefix)
    output_len: int | None = None  # tokens per reply
    prefix_len: int | None = None  # shared-prefix: tokens of each shared prefix
    num_prefixes: int | None = None  # shared-prefix: distinct prefixes

    @property
    def load_label(self) -> str:
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        r = self.request_rate
        cap = f",max={self.max_concurrency}" if self.max_concurrency else ""
        return ("rate=inf" if r is not None and math.isinf(r) else f"rate={r:g}") + cap

    @property
    def workload_label(self) -> str:
        """'in=1024 out=256', 'in=256 out=128 prefix=1024x4' (shared-prefix: prefix_len x num_prefixes), or ''
        for a file dataset."""
        if self.input_len is None and self.output_len is None:
            return ""
        prefix = f" prefix={self.prefix_len}x{self.num_prefixes}" if self.prefix_len is not None else ""
        return f"in={self.input_len} out={self.output_len}{prefix}"

    @property
    def workload(self) -> tuple[int, int, int, int]:
        """Sort key of the workload cell (file datasets first; the prefix axes inner)."""
        return (self.input_len or 0, self.output_len or 0, self.prefix_len or 0, self.num_prefixes or 0)

    @property
    def cell(self) -> tuple[int | None, int | None, int | None, int | None]:
        """The workload cell as scenario.Workload.cells() gives it: (input, output, prefix_len, num_prefixes)."""
        return (self.input_len, self.output_len, self.prefix_len, self.num_prefixes)

    @property
    def label(self) -> str:
        return f"{self.load_label} {self.workload_label}".strip()

    @property
    def x(self) -> float | None:
        """Where the point goes on a chart's load axis."""
        if self.concurrency is not None:
            return float(self.concurrency)
        return None if self.request_rate is None or math.isinf(self.request_rate) else self.request_rate


# vLLM bench serve's per-point figures, under its names (units: ms, s, req/s, tok/s as named in docs/metrics.md)
_COUNTS = ("completed", "failed", "total_input_tokens", "total_output_tokens", "input_tokens_from_usage",
           "output_tokens_from_usage", "output_tokens_retokenized")


@dataclass
class Metrics:
    completed: int = 0
    failed: int = 0
    duration_s: float = 0.0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    request_throughput: float = 0.0  # req/s
    output_throughput: float = 0.0  # tok/s
    total_token_throughput: float = 0.0  # tok/s
    input_tokens_from_usage: int = 0
    output_tokens_from_usage: int = 0
    output_tokens_retokenized: int = 0
    good_requests: int | None = None
    request_goodput: float | None = None  # req/s
    mean_tokens_per_chunk: float | None = None  # output tokens / chunks carrying a token
    errors: dict[str, int] = field(default_factory=dict)
    # mean_/median_/std_/p<q>_ of ttft, tpot, itl, itl_chunks, e2el, queue, in ms (vLLM's flat key names)
    stats: dict[str, float] = field(default_factory=dict)

    def stat(self, key: str) -> float | None:
        return self.stats.get(key)

    def to_json(self) -> dict:
        d = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "stats"}
        return d | self.stats

    @classmethod
    def from_json(cls, d: dict) -> Metrics:
        names = {f.name for f in dataclasses.fields(cls)} - {"stats"}
        m = record(cls, {k: v for k, v in d.items() if k in names})
        m.stats = {k: float(v) for k, v in d.items() if k not in names and k.endswith("_ms") and v is not None}
        return m


@dataclass
class Steady:
    """A point's steady-state window and the figures inside it only.

    rule "mser-5" (analysis/steady.py, analysis/mser.py): the warm-up is truncated by MSER-5 on the per-second
    output rate, the window ends before the drain (the last send, or earlier when the requests in flight fall
    below the closed loop's target), and the rate's 95% interval is by batch means of the window.
    rule "" (files written before the rule): a closed-loop window from the 2c-th send over whole waves of c
    completions, or (open loop) from one median E2EL after the first send to the last send; no interval fields."""

    start_s: float = 0.0  # seconds from the point's start: the first second of the batch means
    end_s: float = 0.0
    output_tokens: float = 0.0  # tokens whose chunks arrived inside the window
    output_throughput: float = 0.0  # tok/s over the window: the steady-state rate (= mean of the batch means)
    request_throughput: float = 0.0  # requests finished inside the window / its length
    requests_inside: int = 0  # sent and finished inside the window: the latency statistics below
    stats: dict[str, float] = field(default_factory=dict)  # median_/p99_ of ttft, tpot, itl, e2el (ms)
    # rule mser-5: the batch means of the window, tok/s each; rule "": the window cut in 5 equal parts
    sub_output_throughput: list[float] = field(default_factory=list)
    rule: str = ""  # "mser-5"; "" in files written before the rule (the window described above)
    warmup_s: float | None = None  # MSER-5's truncation, s from the point's start (start_s is at or after it)
    end_reason: str = ""  # "last send" | "in flight below target" (closed loop: fewer than c requests in flight)
    halfwidth_tok_s: float | None = None  # 95% half-width of output_throughput by batch means (widened if lag-1 high)
    rel_halfwidth: float | None = None  # halfwidth_tok_s / output_throughput
    batches: int = 0  # batch means the interval rests on (10 to 30)
    batch_s: float | None = None  # seconds per batch
    lag1_autocorr: float | None = None  # lag-1 autocorrelation of the batch means
    widened: bool = False  # lag1_autocorr above 2 / sqrt(batches): the half-width was widened, and is flagged
    target_rel_halfwidth: float | None = None  # what converged is judged against (load.converge, else the default)
    converged: bool | None = None  # rel_halfwidth <= target_rel_halfwidth; None: files written before the rule

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class EngineCounters:
    """The engine's own token counters over a window of the point (its Prometheus /metrics, sampled every
    load.metrics_interval_s), beside what the client received over the same window (analysis/agreement.py)."""

    reported: bool = False  # False: the engine exports no token counters (lmdeploy without --enable-metrics)
    window_s: list[float] = field(default_factory=list)  # [start, end], seconds from the point's start
    engine_generation_tok_s: float | None = None  # generation_tokens_total's increase / window
    engine_prompt_tok_s: float | None = None  # prompt_tokens_total's increase / window
    client_tok_s: float | None = None  # output tokens whose chunks reached the client inside the window / window
    shortfall_pct: float | None = None  # 100 * (1 - client / engine): tokens made but not (yet) received
    mean_running: float | None = None  # the engine's num_requests_running, averaged over the point's samples
    mean_waiting: float | None = None  # its num_requests_waiting (queued in its scheduler), averaged the same way
    target_in_flight: int | None = None  # the client's concurrency (closed loop), or None
    # Where a request's time to first token goes, over the same window (None: the engine exports no such histogram,
    # or a file written before 2026-12-05): the engine's own time_to_first_token histogram (vLLM: from its API
    # server's arrival stamp to its processing of the first token), its queue (waiting in the scheduler) and prefill
    # (scheduled to first token) histograms (vLLM observes those two when a request finishes), each as the window's
    # increase of _sum / increase of _count, in ms; the client's mean TTFT of the requests whose first token reached
    # it inside the window
    engine_mean_ttft_ms: float | None = None
    engine_mean_queue_ms: float | None = None
    engine_mean_prefill_ms: float | None = None
    client_mean_ttft_ms: float | None = None


@dataclass
class Trust:
    """Whether a point's timestamps and work can be believed; an untrusted point is never averaged in."""

    assessed: bool = True  # False for files written before these checks existed (schema /1)
    trusted: bool = True
    reasons: list[str] = field(default_factory=list)
    single_read_requests: int = 0  # whole stream arrived in one read of the socket (files without the next field: all untrusted)
    server_merged_requests: int = 0  # of those, the ones sent as one event: merged by the server, timed correctly
    wrong_length_requests: int = 0  # produced another number of tokens than asked (ignore_eos)
    loop_lag_excess_ms: float | None = None  # client loop lag p99 above its idle floor
    failed_requests: int = 0  # failed, not cut off (a point with any is untrusted unless load.allow_failures)
    counter_disagreement: bool = False  # the client received fewer tokens than the engine's counters say it made


@dataclass
class PointResult:
    index: int = 0  # position of its load key in the plan
    repeat: int = 0  # 0 .. load.repeats - 1
    attempt: int = 1  # 1 + times it was measured again because the timestamps could not be trusted
    concurrency: int | None = None
    request_rate: float | None = None
    max_concurrency: int | None = None
    input_len: int | None = None  # the workload cell (random prompts); None for file datasets
    output_len: int | None = None
    prefix_len: int | None = None  # shared-prefix's cell (LoadKey); None for other datasets
    num_prefixes: int | None = None
    num_prompts: int = 0
    num_prompts_why: str = ""
    status: str = "running"  # running | complete | untrusted | partial | interrupted
    started_at: str | None = None
    finished_at: str | None = None
    metrics: Metrics | None = None  # whole point, as vLLM bench serve reports it
    steady: Steady | None = None
    no_steady: str | None = None  # why the point has no steady state (rule mser-5); None: it has one, or older files
    # the length check (analysis/verdict.py): the steady-state rate (tok/s) of the point's first half, the requests
    # a point half as long would have sent, by the same rule; None with half_no_steady saying why (both None: files
    # before session 20; scripts/resteady.py --half adds them)
    half_steady_tok_s: float | None = None
    half_no_steady: str | None = None
    # the wave-phase check (analysis/verdict.py): the steady window narrowed to the whole waves inside it, output
    # tok/s (analysis/steady.whole_waves; fixed lengths in a closed loop, whose requests move in waves; None: other
    # traffic, no steady window, less than one whole wave, or files before session 25: resteady.py --waves adds it)
    waves_steady_tok_s: float | None = None
    # the drain check (analysis/verdict.py): output tok/s from the point's start to its drain's start (the whole
    # point with its drain left out, warm-up kept; analysis/steady.before_drain; None: files before session 31,
    # scripts/resteady.py --drain adds it)
    before_drain_tok_s: float | None = None
    converge_stop: str | None = None  # load.converge: "converged" | "time up" | "requests used up"; None: not asked (or older files)
    # load.converge's live rule when it stopped the sending (serve/converge.py; None: it never did, or files before
    # session 24): s from the point's start, and its last check's batch-means relative half-width (a fraction; None:
    # no steady state yet) over the first live_series_s s of the series (up to the oldest request then in flight).
    # `steady` is computed again over the whole window afterwards and is the point's figure: the two can differ.
    converge_stop_s: float | None = None
    converge_live_rel_halfwidth: float | None = None
    converge_live_series_s: float | None = None
    trust: Trust = field(default_factory=Trust)
    server_metrics: dict[str, float] = field(default_factory=dict)  # time-averaged engine gauges
    server_metrics_error: str | None = None
    prefix_cache: PrefixCache | None = None  # hit rate over the point, as the engine reports it (None: older files)
    token_counts: dict[str, int] = field(default_factory=dict)
    client: dict[str, float] = field(default_factory=dict)  # the client's event-loop lag, ms
    warnings: list[str] = field(default_factory=list)
    unfinished: int = 0  # requests not finished when it stopped (never sent, or cut off)
    cut_off: int = 0  # requests in flight when the engine died: not the engine's failures, not its results
    telemetry: TelemetrySummary | None = None  # GPU power, clocks, memory over the measured run (serve/telemetry.py)
    client_workers: list[dict] = field(default_factory=list)  # per client process: requests sent, loop lag (ms)
    engine_counters: EngineCounters | None = None  # the engine's own token rates beside the client's
    failures_allowed: bool = False  # load.allow_failures when it was measured (older files: not allowed)
    # the machine this attempt was measured on (schema/machine.py's key; "": not known to be one, e.g. a server at
    # another address); None: files before session 33, whose engine record's machine stands for it
    machine_key: str | None = None
    # request lines of this attempt in <engine>.requests.jsonl(.xz), counted when the run is read for a report
    # (schema/request_lines.attach); None: not counted (never saved in run.json)
    requests_on_file: int | None = None

    @classmethod
    def at(cls, key: LoadKey, **fields) -> PointResult:
        """A result of the load point `key`: the file keeps the key's fields flat, beside the others."""
        return cls(**dataclasses.asdict(key), **fields)

    @property
    def key(self) -> LoadKey:
        return LoadKey(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LoadKey)})

    @property
    def label(self) -> str:
        return self.key.label

    @property
    def usable(self) -> bool:
        """Complete and trusted, with no failed request unless the scenario allowed them, and its request lines
        on file (unless not checked): the only points a verdict uses."""
        return (self.status == "complete" and self.metrics is not None and self.metrics.completed > 0
                and (self.metrics.failed == 0 or self.failures_allowed) and self.requests_on_file != 0)

    def to_json(self) -> dict:
        d = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "requests_on_file"}
        return {"label": self.label, **d}


@dataclass
class EngineRecord:
    name: str = ""
    kind: str = ""
    status: str = "starting"  # starting | running | complete | failed | interrupted
    error: str | None = None
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    base_url: str | None = None
    log: str | None = None
    pid: int | None = None
    ready_s: float | None = None  # seconds from launch until /v1/models answered (last start)
    starts: int = 0
    served_model: str | None = None
    max_model_len: int | None = None  # prompt + output tokens the server accepts
    max_model_len_source: str | None = None
    request_body: dict = field(default_factory=dict)  # sent with every request (prompt, max_tokens per request)
    kernels: dict[str, str] = field(default_factory=dict)  # linear method -> kernel its log names
    log_notes: list[str] = field(default_factory=list)
    gemm_choices: list[dict] = field(default_factory=list)  # TurboMind: per GEMM problem, its kernel (turbomind_log.Tally)
    tensor_parallel: int | None = None  # GPUs it shards the model over (a launched server's flag is in command)
    client_idle_loop_lag_p99_ms: float | None = None  # the client's idle loop-lag floor (loadgen.idle_floor)
    client_workers: int | None = None  # processes the client ran its points in (load.client_workers)
    machine: Machine | None = None  # where it was measured (schema/machine.py); older files: the run's host
    points: list[PointResult] = field(default_factory=list)
    profiles: list[ProfileRecord] = field(default_factory=list)  # profiled passes (serve/capture.py), never in points
    # the fixed greedy request's answer, sent once before its first load point (checks.same_answer; None: not sent,
    # or a file written before the check)
    answer: AnswerProbe | None = None

    def point(self, index: int, repeat: int) -> PointResult | None:
        """The last attempt of (index, repeat)."""
        return next((p for p in reversed(self.points) if (p.index, p.repeat) == (index, repeat)), None)


@dataclass
class ServeRun:
    schema: str = SERVE_SCHEMA
    status: str = "running"  # running | complete | failed | interrupted
    error: str | None = None
    created_at: str = ""
    finished_at: str | None = None
    argv: list[str] = field(default_factory=list)
    host: dict = field(default_factory=dict)
    scenario: dict = field(default_factory=dict)  # the scenario as run, every field
    model_config: dict | None = None
    engines: dict[str, EngineRecord] = field(default_factory=dict)
    resumed: list[dict] = field(default_factory=list)  # per `serve-bench --resume`: when, argv, cells to do
    dir: str = ""  # where it was read from or is written (not saved)

    def to_json(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "dir"}

    @classmethod
    def from_json(cls, d: dict) -> ServeRun:
        return record(cls, upgrade(d))
