"""Scenario files: the interface of llmcompare. A YAML file in scenarios/ (or any path) is read into typed
dataclasses and validated; an unknown key, a wrong type or a bad value is an error naming the field and what
is valid. Precedence: command line (--set and the named flags) > file > the defaults written below.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml

from .capacity import Capacity
from .overrides import merge as _merge
from .overrides import parse_set  # noqa: F401  (scenario.parse_set is the API)
from .profilespec import Profile
from .typed import ScenarioError, build

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


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
    kind: str = "vllm"  # a name in engines.ENGINES: vllm, lmdeploy, openai
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
    # GPUs it shards the model over (engines.ENGINES[kind].tp_flags); null: the scenario's (validate fills it in)
    tensor_parallel: int | None = None
    # as-shipped | on | off: the engine's prefix cache (prefixcache.py); YAML reads bare on/off as true/false
    prefix_cache: str | bool = "as-shipped"


@dataclass
class Workload:
    # random | sharegpt (path) | jsonl (path) | hf (path: a Hugging Face dataset; hfdata.py) | synthetic-sharegpt
    # (ShareGPT-like lengths; synthetic.py) | shared-prefix (prefix_len + input_len tokens; synthetic.py)
    dataset: Literal["random", "sharegpt", "jsonl", "hf", "synthetic-sharegpt", "shared-prefix"] = "random"
    path: str | None = None  # sharegpt: a ShareGPT JSON file; jsonl: one {"prompt", "output_len"?} per line
    prompt_column: str | None = None  # hf: the prompt's column (default: the first of prompt, instruction, ...)
    output_column: str | None = None  # hf: the reply's column; its token count is the output length (as sharegpt)
    split: str = "train"  # hf: the split read
    # shared-prefix: tokens of each shared prefix, before input_len tokens of unique suffix; a list: an axis
    prefix_len: int | list[int] = 0
    # shared-prefix: distinct prefixes; request i of a stream takes prefix i % num_prefixes; a list: an axis
    num_prefixes: int | list[int] = 1
    sigma_input: float = 1.0  # synthetic-sharegpt: lognormal sigma of prompt lengths (our choice; synthetic.py)
    sigma_output: float = 0.8  # synthetic-sharegpt: of output lengths
    max_total_len: int = 2048  # synthetic-sharegpt: prompt + output at most (clip to a smaller context)
    # random: exact prompt length in tokens; a list is a grid axis (every length at every load point, one
    # server start: input_len x output_len x load points)
    input_len: int | list[int] = 1024
    output_len: int | list[int] = 256  # random and jsonl default: exact output length in tokens (ignore_eos); a list: an axis
    num_prompts: int = 100  # requests per load point
    # if > 0, a point of concurrency c sends max(num_prompts, this * c): its number of waves; from 3 on the
    # point has a steady-state window of this - 2 whole waves (steady.py)
    prompts_per_concurrency: int = 0
    seed: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0  # 0: greedy, with each engine's fields for it (engines.ENGINES[kind].sampling)
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
    min_duration_s: float = 0.0  # a closed-loop point sends enough requests to last about this long (from warm-up)
    max_prompts_per_point: int = 20000  # cap on what min_duration_s may ask for
    max_attempts: int = 2  # a point whose timestamps cannot be trusted is measured again, up to this many times
    capacity: Capacity | None = None  # a request-rate search for the highest rate meeting the SLOs (capacity.py)


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
    # > 1: time one GPU's share of each GEMM at this degree, and the layers' all-reduce (kernels/collectives.py);
    # null: the scenario's tensor_parallel (validate fills it in)
    tensor_parallel: int | None = None


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
    profile: Profile = field(default_factory=Profile)  # captured passes and telemetry (profilespec.py)
    references: list[Reference] = field(default_factory=list)
    output_dir: str = "runs"
    tensor_parallel: int = 1  # GPUs each engine shards the model over; engines[i].tensor_parallel overrides it
    source: str = ""  # the file it was read from (set by load(), not by the file)

    def engine(self, name: str) -> Engine:
        for e in self.engines:
            if e.name == name:
                return e
        raise ScenarioError(f"engines: no engine named {name!r}; valid: {[e.name for e in self.engines]}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- environment expansion: ${VAR}, ${VAR:-default}, ~ --------------------------------------------------
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def expand(s: str, where: str | None = None) -> str:
    """${VAR}, ${VAR:-default} (used when VAR is unset or empty) and ~. An unset or empty VAR without a default
    is an error naming it and `where` (the field); ${VAR:-} gives an empty default."""
    def sub(m: re.Match) -> str:
        if value := os.environ.get(m.group(1)):
            return value
        if m.group(2) is None:
            raise ScenarioError(f"{where + ': ' if where else ''}{m.group(0)} in {s!r} is not set (or is empty) and "
                                f"has no default; set {m.group(1)}, or write ${{{m.group(1)}:-DEFAULT}}")
        return m.group(2)

    return os.path.expanduser(_VAR.sub(sub, s))


# names become file and directory names (<engine>.server.log, <scenario>-<time>/): nothing that leaves the directory
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
NAME_RULE = "letters, digits, '.', '_' and '-', not starting with '.', at most 100 characters"


def check_name(where: str, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ScenarioError(f"{where}: {name!r} is not a valid name (it names the run's files); "
                            f"allowed: {NAME_RULE}")


def _positive(where: str, v: float, allow_zero: bool = False) -> None:
    if v < 0 or (v == 0 and not allow_zero):
        raise ScenarioError(f"{where}: must be {'>= 0' if allow_zero else '> 0'}, got {v}")


def check_degree(where: str, v: int | None) -> None:
    if v is not None and v < 1:
        raise ScenarioError(f"{where}: must be an integer >= 1 (the GPUs the model is sharded over), got {v}")


def validate(s: Scenario) -> Scenario:
    """Checks across fields and of values (scenario_rules.py); types were checked by build()."""
    from .scenario_rules import validate as check  # it imports this module

    return check(s)


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError(f"scenario file {p} does not exist")
        return p
    for suffix in (".yaml", ".yml"):
        q = SCENARIO_DIR / f"{name_or_path}{suffix}"
        if q.exists():
            return q
    names = sorted(x.stem for x in SCENARIO_DIR.glob("*.y*ml"))
    raise ScenarioError(f"unknown scenario {name_or_path!r}: not a file; scenarios in {SCENARIO_DIR}: {', '.join(names)}")


def load(name_or_path: str, overrides: dict[str, Any] | None = None) -> Scenario:
    path = resolve_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    _merge(data, overrides or {})
    try:
        s = build(Scenario, data, exclude=("source",))
        s.name = s.name or path.stem
        s.source = str(path)
        return validate(s)
    except ScenarioError as e:
        raise ScenarioError(f"{path.name}: {e}") from None
