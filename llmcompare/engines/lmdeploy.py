from __future__ import annotations

import re

from llmcompare.engines import turbomind_log
from llmcompare.engines.log import EngineFallbackError, LogFacts, _gemm_facts
from llmcompare.engines.program import _prefix
from llmcompare.expand import expand
from llmcompare.schema.scenario import Engine


def lmdeploy_command(e: Engine, model: str, port: int, tokenizer: str | None) -> list[str]:
    cmd = _prefix(e, "lmdeploy", "lmdeploy")
    cmd += ["serve", "api_server", model, "--server-name", e.host, "--server-port", str(port)]
    if e.served_model_name:
        cmd += ["--model-name", e.served_model_name]
    return cmd + [expand(a) for a in e.args]


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
    return _gemm_facts(facts, turbomind_log.summarize(text.splitlines()))


LMDEPLOY_PREFIX = {"on": ["--enable-prefix-caching"], "off": []}
