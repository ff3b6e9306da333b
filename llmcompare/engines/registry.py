"""Engine kinds: how to launch each server, how to ask its version, and what its log says it chose.

A registry is a plain dict (ENGINES); nothing here imports an engine: versions are asked of the engine's own
python in a subprocess, and choices are read from the server's log.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from llmcompare.engines import prefix_cache, turbomind_log
from llmcompare.engines.lmdeploy import LMDEPLOY_PREFIX, lmdeploy_command, lmdeploy_log
from llmcompare.engines.log import LogFacts, _gemm_facts
from llmcompare.engines.program import engine_python
from llmcompare.engines.vllm import VLLM_PREFIX, vllm_command, vllm_log
from llmcompare.errors import ScenarioError
from llmcompare.expand import expand
from llmcompare.schema.scenario import Engine


def read_log_file(kind_name: str, path) -> LogFacts:
    """What a server's log file says, read line by line: TurboMind's `[Gemm]`/`[tune]` lines are counted (a
    TM_GEMM_VERBOSE log can be gigabytes), the other lines go to the kind's read_log."""
    tally, rest = turbomind_log.Tally(), []
    with open(path, errors="replace") as f:
        for line in f:
            if not tally.add(line):
                rest.append(line)
    return _gemm_facts(kind(kind_name).read_log("".join(rest)), tally)


# One greedy body for every engine (read from vLLM 0.26/0.32's and lmdeploy's OpenAI protocol code, 2026-12-02):
# vLLM decodes greedily at temperature < 1e-5 (and then ignores top_k); lmdeploy's server never selects greedy
# itself (it forces do_sample) and fills unset fields from the checkpoint's generation_config.json and then its
# own defaults (temperature 0.8, top_k 50), so top_k 1 is what makes it take the argmax. Penalties are sent
# as their neutral values so that neither server applies a checkpoint's.
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 1, "min_p": 0.0, "repetition_penalty": 1.0,
          "presence_penalty": 0.0, "frequency_penalty": 0.0}


@dataclass
class EngineKind:
    """Everything llmcompare knows about one family of servers. Adding an engine kind is one entry here plus
    its command and log functions."""

    module: str  # the distribution whose version is reported ("" when none is asked)
    command: Callable[[Engine, str, int, str | None], list[str]] | None  # None: not launched by llmcompare
    read_log: Callable[[str], LogFacts]
    default_args: dict[str, str] = field(default_factory=dict)  # flag -> value, added when the args lack the flag
    gemm_backend: str | None = None  # the int4 backend it runs when its log does not say (backends.BACKENDS)
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


ENGINES: dict[str, EngineKind] = {
    "vllm": EngineKind("vllm", vllm_command, vllm_log, {}, sampling=GREEDY, max_len_flag="--max-model-len",
                       tp_flags=("--tensor-parallel-size", "-tp"), prefix_cache_flags=VLLM_PREFIX,
                       rough_startup_s=120.0),
    "lmdeploy": EngineKind("lmdeploy", lmdeploy_command, lmdeploy_log, {"--backend": "turbomind"},
                           gemm_backend="turbomind",
                           sampling=GREEDY,
                           max_len_flag="--session-len",
                           tp_flags=("--tp",), prefix_cache_flags=LMDEPLOY_PREFIX, rough_startup_s=30.0),
    "openai": EngineKind("", None, lambda text: LogFacts(), sampling=GREEDY),
}


def kind(name: str) -> EngineKind:
    try:
        return ENGINES[name]
    except KeyError:
        raise ScenarioError(f"unknown engine kind {name!r}; valid: {', '.join(ENGINES)}") from None


def server_command(e: Engine, model: str, port: int, tokenizer: str | None = None) -> list[str]:
    k = kind(e.kind)
    if k.command is None:
        raise ScenarioError(f"engine {e.name!r}: kind {e.kind} is not launched by llmcompare (give base_url)")
    cmd = k.command(e, model, port, tokenizer) + prefix_cache.flags(e.kind, k.prefix_cache_flags, e.prefix_cache)
    for flag, value in k.default_args.items():
        if flag not in cmd:
            cmd += [flag, value]
    tp = e.tensor_parallel or 1
    if tp > 1 and tp_in_args(k, e.args) is None:  # given in args, it has the same value (check_tensor_parallel)
        cmd += [k.tp_flags[0], str(tp)]
    return (["nice", "-n", str(e.nice)] if e.nice else []) + cmd


def tp_in_args(k: EngineKind, args: list[str]) -> tuple[str, str] | None:
    """(flag, value) where an engine's own args pass its tensor-parallel flag (`--tp 2` or `--tp=2`), else None."""
    for i, a in enumerate(args):
        for flag in k.tp_flags:
            if a == flag and i + 1 < len(args):
                return flag, args[i + 1]
            if a.startswith(flag + "="):
                return flag, a.split("=", 1)[1]
    return None


def check_tensor_parallel(where: str, e: Engine, scenario_tp: int) -> None:
    """Checks engine `e`'s degree and fills it in (null: the scenario's). Its own args may pass the flag only
    with the same value: the degree also picks kernel-bench's shapes and is recorded, so it has one source."""
    check_degree(f"{where}.tensor_parallel", e.tensor_parallel)
    source = f"{where}.tensor_parallel" if e.tensor_parallel is not None else "the scenario's tensor_parallel"
    e.tensor_parallel = e.tensor_parallel or scenario_tp
    given = tp_in_args(ENGINES[e.kind], e.args)
    if given and expand(given[1], f"{where}.args") != str(e.tensor_parallel):
        raise ScenarioError(f"{where}.args: passes {given[0]} {given[1]}, but the engine's tensor-parallel degree is "
                            f"{e.tensor_parallel} ({source}); set tensor_parallel: {given[1]} instead and drop "
                            f"{given[0]} from args (llmcompare passes {ENGINES[e.kind].tp_flags[0]})")


def check_prefix_cache(where: str, e: Engine) -> None:
    if isinstance(e.prefix_cache, bool):  # YAML 1.1: a bare on/off is a boolean
        e.prefix_cache = "on" if e.prefix_cache else "off"
    prefix_cache.check(where, e.kind, ENGINES[e.kind].prefix_cache_flags, e.prefix_cache, e.args)


def arg_max_len(e: Engine) -> tuple[int | None, str | None]:
    """The context length the engine's own arguments set, if they do (known before it starts)."""
    flag = kind(e.kind).max_len_flag
    args = [expand(a) for a in e.args]
    if flag and flag in args[:-1]:
        try:
            return int(args[args.index(flag) + 1]), f"its {flag} argument"
        except ValueError:
            raise ScenarioError(f"engines[{e.name}].args: {flag} needs an integer, got "
                                f"{args[args.index(flag) + 1]!r}") from None
    return None, None


def check_degree(where: str, v: int | None) -> None:
    if v is not None and v < 1:
        raise ScenarioError(f"{where}: must be an integer >= 1 (the GPUs the model is sharded over), got {v}")


def engine_version(e: Engine, timeout_s: float = 60.0) -> str | None:
    """Asks the engine's own python for its distribution version; None when it cannot be told."""
    k = kind(e.kind)
    if not k.module:
        return None
    if e.python or e.venv:
        py = engine_python(e)
    elif e.command:
        py = None
        # a command prefix ending in ".../bin/vllm" has its python beside it
        head = expand(e.command[-1 if len(e.command) == 1 else 0])
        if head.endswith(("/vllm", "/lmdeploy")):
            py = head.rsplit("/", 1)[0] + "/python"
        if py is None:
            return None
    else:
        return None
    code = f"import importlib.metadata as m; print(m.version({k.module!r}))"
    env = {**os.environ, **{key: expand(v) for key, v in e.env.items()}}  # e.g. its PYTHONPATH
    try:
        out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None
