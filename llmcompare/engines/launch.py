"""How a server of a registered kind is launched and asked, from its registry entry: the program that runs it
(its environment's python, or a command prefix), its command line, its version, and what its own arguments
already set (tensor-parallel degree, context length, prefix cache). Reads a resolved scenario (expand.py): no
${VAR} is left in the fields it reads."""

from __future__ import annotations

import os

from llmcompare.engines import prefix_cache, turbomind_log
from llmcompare.engines.environments import installed_version, resolve_python
from llmcompare.engines.flags import arg_value, find_flag
from llmcompare.engines.log import LogFacts, gemm_facts
from llmcompare.engines.registry import ENGINES, EngineKind, kind
from llmcompare.errors import ScenarioError
from llmcompare.expand import expand
from llmcompare.schema.scenario import Engine


def engine_python(e: Engine) -> str | None:
    """The python of the engine's environment: its `venv` (made by `llmcompare setup`) or its `python`."""
    if e.venv:
        return resolve_python(e.venv, f"engine {e.name!r}: venv")
    return e.python or None


def command_prefix(e: Engine, k: EngineKind) -> list[str]:
    """What runs the kind's CLI: the engine's command prefix, its python -m the kind's module, or the console
    script from PATH."""
    if e.command:
        return list(e.command)
    if py := engine_python(e):
        return [py, "-m", k.cli_module]
    return [k.console]


def server_command(e: Engine, model: str, port: int, tokenizer: str | None = None) -> list[str]:
    k = kind(e.kind)
    if k.command is None:
        raise ScenarioError(f"engine {e.name!r}: kind {e.kind} is not launched by llmcompare (give base_url)")
    cmd = k.command(e, command_prefix(e, k), model, port, tokenizer)
    cmd += prefix_cache.flags(e.kind, k.prefix_cache_flags, e.prefix_cache)
    for flag, value in k.default_args.items():
        if arg_value(cmd, flag) is None:
            cmd += [flag, value]
    tp = e.tensor_parallel or 1
    if tp > 1 and find_flag(e.args, k.tp_flags) is None:  # given in args, it has the same value (check_tensor_parallel)
        cmd += [k.tp_flags[0], str(tp)]
    return (["nice", "-n", str(e.nice)] if e.nice else []) + cmd


def check_degree(where: str, v: int | None) -> None:
    if v is not None and v < 1:
        raise ScenarioError(f"{where}: must be an integer >= 1 (the GPUs the model is sharded over), got {v}")


def check_tensor_parallel(where: str, e: Engine, scenario_tp: int) -> None:
    """Checks engine `e`'s degree and fills it in (null: the scenario's). Its own args may pass the flag only
    with the same value: the degree also picks kernel-bench's shapes and is recorded, so it has one source."""
    check_degree(f"{where}.tensor_parallel", e.tensor_parallel)
    source = f"{where}.tensor_parallel" if e.tensor_parallel is not None else "the scenario's tensor_parallel"
    e.tensor_parallel = e.tensor_parallel or scenario_tp
    given = find_flag(e.args, ENGINES[e.kind].tp_flags)
    if given and expand(given[1], f"{where}.args") != str(e.tensor_parallel):  # validate reads the text as written
        raise ScenarioError(f"{where}.args: passes {given[0]} {given[1]}, but the engine's tensor-parallel degree is "
                            f"{e.tensor_parallel} ({source}); set tensor_parallel: {given[1]} instead and drop "
                            f"{given[0]} from args (llmcompare passes {ENGINES[e.kind].tp_flags[0]})")


def check_prefix_cache(where: str, e: Engine) -> None:
    if isinstance(e.prefix_cache, bool):  # YAML 1.1: a bare on/off is a boolean
        e.prefix_cache = "on" if e.prefix_cache else "off"
    prefix_cache.check(where, e.kind, ENGINES[e.kind].prefix_cache_flags, e.prefix_cache, e.args)


def arg_max_len(e: Engine) -> tuple[int | None, str | None]:
    """The context length the engine's own arguments set (`--max-model-len 4096` or `--max-model-len=4096`), if
    they do (known before it starts)."""
    flag = kind(e.kind).max_len_flag
    value = arg_value(e.args, flag) if flag else None
    if value is None:
        return None, None
    try:
        return int(value), f"its {flag} argument"
    except ValueError:
        raise ScenarioError(f"engines[{e.name}].args: {flag} needs an integer, got {value!r}") from None


def engine_version(e: Engine, timeout_s: float = 60.0) -> str | None:
    """Asks the engine's own python for its distribution version; None when it cannot be told."""
    k = kind(e.kind)
    if not k.module:
        return None
    if e.python or e.venv:
        py = engine_python(e)
    elif e.command and k.console:
        # a command prefix ending in ".../bin/vllm" has its python beside it
        head = e.command[-1 if len(e.command) == 1 else 0]
        if not head.endswith("/" + k.console):
            return None
        py = head.rsplit("/", 1)[0] + "/python"
    else:
        return None
    return installed_version(py, k.module, timeout_s, env={**os.environ, **e.env})  # e.g. its PYTHONPATH


def read_log_file(kind_name: str, path) -> LogFacts:
    """What a server's log file says, read line by line: TurboMind's `[Gemm]`/`[tune]` lines are counted (a
    TM_GEMM_VERBOSE log can be gigabytes), the other lines go to the kind's read_log."""
    tally, rest = turbomind_log.Tally(), []
    with open(path, errors="replace") as f:
        for line in f:
            if not tally.add(line):
                rest.append(line)
    return gemm_facts(kind(kind_name).read_log("".join(rest)), tally)
