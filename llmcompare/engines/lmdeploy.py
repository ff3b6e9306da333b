"""lmdeploy's api_server (TurboMind backend): its command line, its environment, the kernel it will run, and
what its log says (the silent PyTorch fallback is an error; session_len; TurboMind's GEMM choices through
turbomind_log.py)."""

from __future__ import annotations

import re

from llmcompare.engines import turbomind_log
from llmcompare.engines.flags import arg_value
from llmcompare.engines.log import EngineFallbackError, KernelChoice, LogFacts, gemm_facts
from llmcompare.engines.package import Package
from llmcompare.schema.gpu import Gpu
from llmcompare.schema.scenario import Engine

ENVIRONMENTS = {"lmdeploy": Package("lmdeploy", "0.18.0", "lmdeploy", "lmdeploy", "lmdeploy", True, by_default=True)}


def lmdeploy_command(e: Engine, prefix: list[str], model: str, port: int, tokenizer: str | None) -> list[str]:
    """`prefix` runs lmdeploy's CLI (launch.command_prefix): e.g. [python, -m, lmdeploy]."""
    cmd = prefix + ["serve", "api_server", model, "--server-name", e.host, "--server-port", str(port)]
    if e.served_model_name:
        cmd += ["--model-name", e.served_model_name]
    return cmd + list(e.args)


_LMDEPLOY_FALLBACK = "Fallback to pytorch engine"


_LMDEPLOY_SESSION_LEN = re.compile(r"session_len=(\d+)")


def lmdeploy_log(text: str) -> LogFacts:
    if _LMDEPLOY_FALLBACK in text:
        line = next(ln for ln in text.splitlines() if _LMDEPLOY_FALLBACK in ln)
        raise EngineFallbackError(
            "lmdeploy fell back from TurboMind to its PyTorch engine, so this would not measure TurboMind: "
            f"{line.strip()!r}. Check the model format (--model-format awq) and the TurboMind build."
        )
    facts = LogFacts()
    if "turbomind" in text.lower():
        facts.notes.append("turbomind backend")
    if m := _LMDEPLOY_SESSION_LEN.search(text):  # `turbomind engine config: ... session_len=S ...`
        facts.max_model_len = int(m.group(1))
    return gemm_facts(facts, turbomind_log.summarize(text.splitlines()))


# its processes' titles: one process, its command line (`lmdeploy serve api_server MODEL ...`), which also runs
# TurboMind (profiled passes on the H200 and H100: reports/h100-sglang-c64)
PROCESS_ROLES = (("api_server", "api-server"), (" serve", "api-server"))
LMDEPLOY_PREFIX = {"on": ["--enable-prefix-caching"], "off": []}


def gemm_verbose_env(env: dict[str, str], version: str | None) -> str | None:
    """EngineKind.instrumented: TM_GEMM_VERBOSE set in the server's env makes lmdeploy 0.18 and later print one line
    per GEMM per forward pass (0.17 has no such switch; engines/turbomind_log.py); None when it does not."""
    value = env.get("TM_GEMM_VERBOSE")
    if value in (None, "", "0"):
        return None
    ver = tuple(int(x) for x in re.findall(r"\d+", version or "")[:2])
    if ver and ver < (0, 18):
        return None
    return (f"TM_GEMM_VERBOSE={value} in its env: lmdeploy {version or '(version not known)'} prints one line "
            "per GEMM per forward pass, so its throughput was measured with this logging on (instrumented)")


def predict_kernel(gpu: Gpu | None, config: dict | None, args: list[str], env: dict[str, str],
                   cpu_build: bool) -> KernelChoice:
    """EngineKind.predict_kernel: TurboMind runs its own int4 kernels; another --backend is not TurboMind."""
    backend = arg_value(args, "--backend") or "turbomind"
    if backend == "turbomind":
        return KernelChoice(None, "TurboMind's own int4 GEMM kernels")
    return KernelChoice(None, f"--backend {backend}: lmdeploy's {backend} engine, not TurboMind")
