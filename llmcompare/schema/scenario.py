"""Scenario files: the interface of llmcompare, as typed records. A YAML file (a named one in llmcompare/scenarios/
or any path) is read into these dataclasses by scenario/loader.py and checked by scenario/rules.py; an unknown
key, a wrong type or a bad value is an error naming the field and what is valid. Precedence: command line (--set
and the named flags) > file > the defaults written below."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from llmcompare.errors import ScenarioError


@dataclass
class Profile:
    """The scenario's `profile` section: which load points get a captured pass, and GPU telemetry.

    profile:
      points: [64]             # concurrencies (of load.concurrency) to capture; [] (default): none
      seconds: 2.0             # capture window, started once the pass's first 2c requests have finished, at the
                               # first moment every request in flight is past its first token (capture.all_decoding:
                               # decode steps only; at most the point's median E2EL later)
      input_len: null          # with a grid: capture only the cell of this input length (null: every cell)
      output_len: null         # likewise for the output length
      anchor: null             # kernel name marking steps (profile/timeline.py); null: found from the timeline
      waves: null              # the pass's length in waves (c requests each; at least window_wave + 2: the
                               # captured window's wave and one to spare); null: as many requests as the point's
                               # longest measured repeat sent (capture.pass_requests)
      window_wave: 2           # the captured window opens once this many waves (x c requests) have finished, the
                               # uncaptured baseline one wave earlier; with variable lengths, later = in the steady
                               # state (a ShareGPT-like closed loop starts synchronized)
      telemetry_interval_ms: 200   # nvidia-smi sampling during every point; 0: off
    """

    points: list[int] = field(default_factory=list)
    seconds: float = 2.0
    anchor: str | None = None
    telemetry_interval_ms: int = 200
    input_len: int | None = None
    output_len: int | None = None
    waves: int | None = None  # None: the point's own length; else waves x c requests (rules: >= window_wave + 2)
    window_wave: int = 2  # waves finished before the captured window (rules: 2..100)

    def wants(self, key) -> bool:
        """Is this load point (a LoadKey) one to capture?"""
        return (key.concurrency in self.points and self.input_len in (None, key.input_len)
                and self.output_len in (None, key.output_len))


@dataclass
class MakeModel:
    """How to build the model with `llmcompare make-model` when model.path does not exist yet."""

    preset: str = "tiny"  # a name in checkpoint.PRESETS
    quant: Literal["none", "awq"] = "none"
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    seed: int = 0


@dataclass
class Model:
    path: str = ""  # a local checkpoint directory, or a hub id (only if it is already in the local cache)
    tokenizer: str | None = None  # defaults to path
    make: MakeModel | None = None


@dataclass
class Engine:
    name: str = ""
    kind: str = "vllm"  # a name in engines/registry.ENGINES: vllm, lmdeploy, openai
    python: str | None = None  # the engine environment's python; `python -m <engine cli>` is run
    command: list[str] | None = None  # or a command prefix, e.g. ["vllm"] or ["conda", "run", "-n", "x", "vllm"]
    venv: str | None = None  # or an environment made by `llmcompare setup`: vllm, vllm==0.26.0, lmdeploy; or a path
    args: list[str] = field(default_factory=list)  # extra server arguments, appended last
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None  # None: a free port
    host: str = "127.0.0.1"
    base_url: str | None = None  # kind openai: an already-running server, e.g. http://127.0.0.1:8000
    startup_timeout_s: float = 900.0
    served_model_name: str | None = None  # default: read from /v1/models
    gemm_backend: str | None = None  # kernel-bench backend its int4 linears run, when its log does not say
    # CPU priority of the server (nice, 0-19): where the server shares cores with the client (a CPU-only machine),
    # a server at a lower priority cannot starve the client's clock; 0 (as launched) on a GPU host
    nice: int = 0
    # GPUs it shards the model over (registry.ENGINES[kind].tp_flags); null: the scenario's (validate fills it in)
    tensor_parallel: int | None = None
    # as-shipped | on | off: the engine's prefix cache (engines/prefix_cache.py); YAML reads bare on/off as true/false
    prefix_cache: str | bool = "as-shipped"


@dataclass
class Workload:
    # random | sharegpt (path) | jsonl (path) | hf (path: a Hugging Face dataset; workload/hf.py) | synthetic-sharegpt
    # (ShareGPT-like lengths; workload/synthetic.py) | shared-prefix (prefix_len + input_len tokens; workload/synthetic.py)
    dataset: Literal["random", "sharegpt", "jsonl", "hf", "synthetic-sharegpt", "shared-prefix"] = "random"
    path: str | None = None  # sharegpt: a ShareGPT JSON file; jsonl: one {"prompt", "output_len"?} per line
    prompt_column: str | None = None  # hf: the prompt's column (default: the first of prompt, instruction, ...)
    output_column: str | None = None  # hf: the reply's column; its token count is the output length (as sharegpt)
    split: str = "train"  # hf: the split read
    # shared-prefix: tokens of each shared prefix, before input_len tokens of unique suffix; a list: an axis
    prefix_len: int | list[int] = 0
    # shared-prefix: distinct prefixes; request i of a stream takes prefix i % num_prefixes; a list: an axis
    num_prefixes: int | list[int] = 1
    sigma_input: float = 1.0  # synthetic-sharegpt: lognormal sigma of prompt lengths (our choice; workload/synthetic.py)
    sigma_output: float = 0.8  # synthetic-sharegpt: of output lengths
    max_total_len: int = 2048  # synthetic-sharegpt: prompt + output at most (clip to a smaller context)
    # random: exact prompt length in tokens; a list is a grid axis (every length at every load point, one
    # server start: input_len x output_len x load points)
    input_len: int | list[int] = 1024
    output_len: int | list[int] = 256  # random and jsonl default: exact output length in tokens (ignore_eos); a list: an axis
    num_prompts: int = 100  # requests per load point
    # if > 0, a point of concurrency c sends max(num_prompts, this * c): its number of waves (its steady state is
    # found from the data, analysis/steady.py: it needs 20 s or more of series)
    prompts_per_concurrency: int = 0
    seed: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0  # 0: greedy, with each engine's fields for it (registry.ENGINES[kind].sampling)
    allow_prompt_reuse: bool = False  # file datasets: may a run send a prompt twice (prefix caches will hit)

    @property
    def input_lens(self) -> list[int]:
        return _axis(self.input_len)

    @property
    def output_lens(self) -> list[int]:
        return _axis(self.output_len)

    @property
    def prefix_lens(self) -> list[int]:
        return _axis(self.prefix_len)

    @property
    def prefix_counts(self) -> list[int]:
        """The num_prefixes axis."""
        return _axis(self.num_prefixes)

    def cells(self) -> list[Cell]:
        """The workload grid, input length outer, then output length, prefix length, number of prefixes (the
        last two for shared-prefix only, None otherwise); Cell(None, None) for a file dataset or
        synthetic-sharegpt (lengths come from the data)."""
        if self.dataset not in EXACT_LENGTHS:
            return [Cell(None, None)]
        prefixes = ([(p, n) for p in self.prefix_lens for n in self.prefix_counts]
                    if self.dataset == "shared-prefix" else [(None, None)])
        return [Cell(i, o, p, n) for i in self.input_lens for o in self.output_lens for p, n in prefixes]


class Cell(NamedTuple):
    """One cell of the workload grid, in tokens; None where the dataset has no such length."""

    input_len: int | None  # tokens per prompt (shared-prefix: after the prefix)
    output_len: int | None  # tokens per reply
    prefix_len: int | None = None  # shared-prefix: tokens of each shared prefix
    num_prefixes: int | None = None  # shared-prefix: distinct prefixes


EXACT_LENGTHS = ("random", "shared-prefix")  # exact input_len/output_len: grid axes


GENERATED = EXACT_LENGTHS + ("synthetic-sharegpt",)  # no file: prompts made per stream, none sent twice


def _axis(v: int | list[int]) -> list[int]:
    return list(v) if isinstance(v, list) else [v]


@dataclass
class Load:
    concurrency: list[int] = field(default_factory=list)  # closed loop: c requests always in flight
    request_rate: list[float] = field(default_factory=list)  # open loop: requests/s (.inf: all at once)
    burstiness: float = 1.0  # gamma shape of the gaps; 1.0 is Poisson; < 1 burstier, > 1 more uniform; .inf regular
    max_concurrency: int | None = None  # cap on requests in flight in rate mode
    warmup_requests: int = 2  # per load point, at the point's concurrency, outside the clock
    request_timeout_s: float = 600.0
    metrics_interval_s: float = 0.5  # Prometheus /metrics sampling period; 0 disables
    repeats: int = 1  # each load point is run this many times (a verdict needs >= 3)
    restart_between_repeats: bool = False  # a fresh server for every repeat (start-up-to-start-up variance)
    # engines take turns, repeat by repeat: repeat 0 of every engine, then repeat 1 of every engine, ... (each a
    # fresh server; an already-running one is used as it is), so a machine's drift hits every engine alike
    interleave: bool = False
    min_duration_s: float = 0.0  # a closed-loop point sends enough requests to last about this long (from warm-up)
    max_prompts_per_point: int = 20000  # cap on what min_duration_s may ask for
    max_attempts: int = 2  # a point whose timestamps cannot be trusted is measured again, up to this many times
    # processes the load is spread over (serve/workers.py): an integer >= 1, or auto (workers.auto_workers: from the
    # plan's heaviest event rate and the cores); profiled passes and warm-ups run in the parent
    client_workers: int | str = "auto"
    allow_failures: bool = False  # may a complete, trusted point hold failed requests (then counted in the verdicts)
    capacity: Capacity | None = None  # a request-rate search for the highest rate meeting the SLOs (analysis/capacity.py)
    # a point sends until its steady-state rate's relative half-width is at most the target, or its time is up
    # (serve/converge.py); None: the point sends its planned requests
    converge: Converge | None = None


@dataclass
class Converge:
    rel_halfwidth: float = 0.02  # target: 95% half-width of the steady-state output rate / the rate
    max_s: float = 600.0  # s from the point's start: it stops sending here whatever the interval ("time up")


@dataclass
class Slo:
    """Goodput: a request is good when it meets every SLO that is set (vLLM `bench serve --goodput`)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


@dataclass
class ReferencePoint:
    x: float | None = None  # None: the source gives no x (e.g. "25% faster"): drawn across the whole sweep
    y: float = 0.0


@dataclass
class Reference:
    """A published series to overlay on a measured chart (see report)."""

    label: str = ""
    engine: str = ""  # the measured engine it corresponds to (for gap_pct: the faster one's name)
    baseline: str = ""  # for gap_pct: the engine the gap is measured against
    metric: Literal["output_throughput", "request_throughput", "gap_pct", "gemm_s"] = "gap_pct"
    x: str = "concurrency"
    source: str = ""  # URL or citation
    gpu: str = ""
    model: str = ""
    versions: str = ""
    date: str = ""
    note: str = ""
    points: list[ReferencePoint] = field(default_factory=list)


@dataclass
class KernelBench:
    m: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384])
    backends: list[str] = field(default_factory=lambda: ["cublas", "marlin", "machete", "turbomind"])
    python: dict[str, str] = field(default_factory=dict)  # backend -> python of the environment that has it
    extra_shapes: list[list[int]] = field(default_factory=list)  # [N, K] pairs beyond the model's
    lm_head: bool = False  # also time lm_head (vocab x hidden, fp16 in every engine: unquantized backends only)
    group_size: int = 128
    rep_ms: float = 100.0  # timing budget per point and method (eager, graph)
    profile: bool = True
    timeout_s: float = 3600.0  # a worker (one environment's backends) that runs longer is stopped
    # > 1: time one GPU's share of each GEMM at this degree, and the layers' all-reduce (kernels/in_engine/collectives.py);
    # null: the scenario's tensor_parallel (validate fills it in)
    tensor_parallel: int | None = None


PROBE_PROMPT = "Question: What is the capital of France?\nAnswer:"  # the default fixed prompt of checks.same_answer


@dataclass
class SameAnswerCheck:
    """`checks.same_answer`: before its first load point each engine answers one fixed greedy request (the kind's
    greedy sampling fields, ignore_eos, not streamed) with the top-k logprobs of its first output tokens; the report
    marks an engine whose answer disagrees with the reference engine's (analysis/same_answer.py states how)."""

    enabled: bool = True
    prompt: str = PROBE_PROMPT  # the same text to every engine
    max_tokens: int = 8  # output tokens compared (top-1 token agreement over all of them)
    top_k: int = 5  # `logprobs`: alternatives per position (vLLM's default --max-logprobs is 20)
    max_kl: float = 0.05  # nats: KL(reference || engine) of the first output token's top-k above this disagrees
    tie_margin: float = 0.1  # nats: a top-1 flip where the reference's two tokens are closer than this is a near tie
    timeout_s: float = 120.0  # the whole request (sent, answered, read), then it is recorded as failed


@dataclass
class Checks:
    """`checks`: what is checked of each engine beside its speed."""

    same_answer: SameAnswerCheck = field(default_factory=SameAnswerCheck)


@dataclass
class Scenario:
    name: str = ""
    description: str = ""
    model: Model = field(default_factory=Model)
    engines: list[Engine] = field(default_factory=list)
    workload: Workload = field(default_factory=Workload)
    load: Load = field(default_factory=Load)
    slo: Slo = field(default_factory=Slo)
    percentiles: list[float] = field(default_factory=lambda: [50.0, 90.0, 99.0])
    kernel_bench: KernelBench = field(default_factory=KernelBench)
    profile: Profile = field(default_factory=Profile)  # captured passes and telemetry (schema/scenario.py)
    references: list[Reference] = field(default_factory=list)
    checks: Checks = field(default_factory=Checks)  # beside the speed: the same answer (SameAnswerCheck)
    output_dir: str = "runs"
    tensor_parallel: int = 1  # GPUs each engine shards the model over; engines[i].tensor_parallel overrides it
    source: str = ""  # the file it was read from (set by load(), not by the file)
    # the text as written of every field expand.resolve expanded: path in to_dict() -> text (set by load())
    written: dict = field(default_factory=dict, repr=False)

    def engine(self, name: str) -> Engine:
        for e in self.engines:
            if e.name == name:
                return e
        raise ScenarioError(f"engines: no engine named {name!r}; valid: {[e.name for e in self.engines]}")

    def to_dict(self) -> dict[str, Any]:
        """Every field, as written: ${VAR} and ~ as in the file (what run.json records), not as expanded."""
        d = dataclasses.asdict(self)
        for path, text in d.pop("written").items():
            at = d
            for part in path[:-1]:
                at = at[part]
            at[path[-1]] = text
        return d


SLO_METRICS = ("ttft_ms", "tpot_ms", "e2el_ms")


@dataclass
class Capacity:
    slo_percentile: float = 99.0  # must be one of the scenario's percentiles
    min_rate: float = 0.5  # req/s: the first probe
    max_rate: float = 64.0  # req/s: the search stops doubling here
    tolerance: float = 0.1  # stop bisecting when hi / lo - 1 is at most this
    max_probes: int = 12  # probes per engine at most (each is load.repeats measured runs)
