"""The context length a server accepts, and the check that every request of the scenario fits in it (before a
server starts, from the engine's own arguments, and again from what the started server says)."""

from __future__ import annotations

import json

from llmcompare.engines.launch import arg_max_len
from llmcompare.engines.registry import kind
from llmcompare.engines.server import http_get
from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Engine, Scenario
from llmcompare.workload.prompts import Prompts


def max_model_len(base_url: str, e: Engine, log_len: int | None = None) -> tuple[int | None, str | None]:
    """The context length the server accepts: from /v1/models (vLLM's max_model_len), its log (lmdeploy's
    session_len) or the engine's flag."""
    status, body = http_get(f"{base_url}/v1/models")
    try:
        for m in json.loads(body)["data"] if status == 200 else []:
            if m.get("max_model_len"):
                return int(m["max_model_len"]), "the server's /v1/models"
    except (ValueError, KeyError, TypeError):
        pass
    if log_len:
        return log_len, "its log"
    return arg_max_len(e)


def check_lengths(e: Engine, limit: int | None, source: str | None, s: Scenario, prompts: Prompts) -> None:
    """Prompt + output must fit the engine's context, or it would shorten answers or refuse them."""
    if limit is None:
        return
    longest = prompts.longest()  # per dataset kind (workload.Prompts)
    reserve = kind(e.kind).context_reserve  # registry: tokens of the context no request can use
    usable = limit - reserve
    if longest > usable:
        accepts = (f"{usable} ({source} says {limit}, and {e.kind} keeps {reserve} of them: engines/{e.kind}.py)"
                   if reserve else f"{limit} ({source})")
        raise ScenarioError(
            f"engines[{e.name}]: a request needs {longest} tokens (prompt + output) and the engine accepts {accepts}; "
            f"raise its context length (to {longest + reserve}) or shorten workload.input_len/output_len"
            + ("/prefix_len" if s.workload.dataset == "shared-prefix" else "")
            + ("/max_total_len" if s.workload.dataset == "synthetic-sharegpt" else ""))
