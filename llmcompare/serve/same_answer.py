"""Same work, same answer: the one fixed greedy request each engine is sent after its server is ready and before its
first load point (checks.same_answer), and its answer as a schema.answer.AnswerProbe on the engine's record.

The request is standard OpenAI /v1/completions, not streamed: the scenario's fixed prompt (text), max_tokens, the
engine kind's greedy sampling fields (registry.ENGINES[kind].sampling), ignore_eos, and `logprobs: top_k` (vLLM and
lmdeploy's api_server both answer it with choices[0].logprobs: tokens, token_logprobs, top_logprobs). It is bounded:
checks.same_answer.timeout_s for the whole request, MAX_BYTES of answer, JSON nested at most client.MAX_DEPTH deep.
Whatever goes wrong (a timeout, an HTTP error, an answer of the wrong shape) is recorded in the probe's `error` and
said as a warning; the run goes on. A server that returns no logprobs is recorded so (logprobs_returned false):
the report then compares the texts. analysis/same_answer.py compares the answers.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time

import aiohttp

from llmcompare.schema.answer import AnswerProbe
from llmcompare.schema.run import now
from llmcompare.schema.scenario import SameAnswerCheck
from llmcompare.serve.client import MAX_DEPTH, json_depth_over

MAX_BYTES = 1 << 20  # an answer of a few tokens with their top-k is a few KiB


class AnswerError(ValueError):
    """Why the answer cannot be used, as recorded in AnswerProbe.error."""


def probe_body(model: str, sampling: dict, c: SameAnswerCheck) -> dict:
    return {"model": model, "prompt": c.prompt, "max_tokens": c.max_tokens, **sampling, "ignore_eos": True,
            "stream": False, "logprobs": c.top_k}


def wanted(have: AnswerProbe | None, c: SameAnswerCheck) -> bool:
    """Is the probe to be sent (again)? Not when the engine's record holds an answer to the same request already
    (a resumed run, or a server started again for another repeat); a failed one is tried again."""
    return c.enabled and (have is None or have.error is not None
                          or (have.prompt, have.max_tokens, have.top_k) != (c.prompt, c.max_tokens, c.top_k))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(usage: dict, key: str) -> int | None:
    v = usage.get(key)
    return v if type(v) is int and v >= 0 else None


def _alternatives(i: int, d, a: AnswerProbe) -> dict[str, float]:
    """One position's {token: logprob}, most probable first; NaN dropped (and noted)."""
    if d is None:
        return {}
    if type(d) is not dict:
        raise AnswerError(f"logprobs.top_logprobs[{i}] is not an object")
    if not all(_number(v) for v in d.values()):
        raise AnswerError(f"logprobs.top_logprobs[{i}] holds a value that is not a number")
    nan = [k for k, v in d.items() if math.isnan(v)]
    if nan:
        a.notes.append(f"output token {i + 1}: {len(nan)} NaN logprob(s) left out")
    return dict(sorted(((str(k), float(v)) for k, v in d.items() if not math.isnan(v)), key=lambda kv: -kv[1]))


def _logprobs(lp, a: AnswerProbe) -> None:
    if lp is None:
        a.notes.append("the server returned no logprobs (the texts are compared instead)")
        return
    if type(lp) is not dict:
        raise AnswerError("choices[0].logprobs is not an object")
    tops, tokens, values = lp.get("top_logprobs"), lp.get("tokens"), lp.get("token_logprobs")
    if tops is not None and type(tops) is not list:
        raise AnswerError("logprobs.top_logprobs is not a list")
    if tokens is not None and (type(tokens) is not list or not all(type(t) is str for t in tokens)):
        raise AnswerError("logprobs.tokens is not a list of strings")
    if values is not None and (type(values) is not list or not all(v is None or _number(v) for v in values)):
        raise AnswerError("logprobs.token_logprobs is not a list of numbers")
    a.top_logprobs = [_alternatives(i, d, a) for i, d in enumerate(tops or [])]
    a.tokens = list(tokens or [])
    a.token_logprobs = [None if v is None or math.isnan(v) else float(v) for v in values or []]
    a.logprobs_returned = bool(a.top_logprobs)
    if not a.logprobs_returned:
        a.notes.append("the server returned no top_logprobs (the texts are compared instead)")
    short = [i + 1 for i, d in enumerate(a.top_logprobs) if len(d) < a.top_k]
    if short:
        a.notes.append(f"fewer than {a.top_k} alternatives at output token(s) {short}")


def parse_answer(text: str, a: AnswerProbe) -> None:
    """Fills `a` from a /v1/completions answer's body; raises AnswerError naming what is wrong."""
    if json_depth_over(text, MAX_DEPTH):
        raise AnswerError(f"the answer's JSON nests deeper than {MAX_DEPTH} levels")
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):
        raise AnswerError(f"the answer is not JSON: {text[:120]!r}") from None
    if type(msg) is not dict:
        raise AnswerError("the answer is not a JSON object")
    choices = msg.get("choices")
    if not choices and msg.get("error") is not None:
        raise AnswerError(f"error answer: {json.dumps(msg['error'])[:300]}")
    if type(choices) is not list or not choices or type(choices[0]) is not dict:
        raise AnswerError("the answer has no choices[0] object")
    c = choices[0]
    if type(c.get("text")) is not str:
        raise AnswerError("choices[0].text is not a string")
    a.text = c["text"]
    a.finish_reason = c.get("finish_reason") if type(c.get("finish_reason")) is str else None
    if type(usage := msg.get("usage")) is dict:
        a.prompt_tokens, a.completion_tokens = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    _logprobs(c.get("logprobs"), a)


async def _read(resp: aiohttp.ClientResponse) -> str:
    body = b""
    while part := await resp.content.read(65536):
        body += part
        if len(body) > MAX_BYTES:
            raise AnswerError(f"the answer is longer than {MAX_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


async def _ask(session: aiohttp.ClientSession, url: str, a: AnswerProbe, timeout_s: float) -> None:
    async with session.post(url, json=a.request_body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        text = await _read(resp)
        if resp.status != 200:
            raise AnswerError(f"HTTP {resp.status}: {text[:300]}")
        parse_answer(text, a)


async def ask(session: aiohttp.ClientSession, base_url: str, model: str, sampling: dict,
              c: SameAnswerCheck) -> AnswerProbe:
    """The probe, sent and read within c.timeout_s; never raises for the server's sake (the error is recorded)."""
    a = AnswerProbe(prompt=c.prompt, max_tokens=c.max_tokens, top_k=c.top_k, max_kl=c.max_kl, tie_margin=c.tie_margin,
                    request_body=probe_body(model, sampling, c), sent_at=now())
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(_ask(session, f"{base_url}/v1/completions", a, c.timeout_s), c.timeout_s)
    except asyncio.TimeoutError:
        a.error = f"no answer within checks.same_answer.timeout_s ({c.timeout_s:g} s)"
    except aiohttp.ClientError as e:
        a.error = f"{type(e).__name__}: {e}"
    except AnswerError as e:
        a.error = str(e)
    a.elapsed_s = round(time.perf_counter() - t0, 4)
    return a


def say(engine: str, a: AnswerProbe) -> None:
    if a.error:
        print(f"{engine}: warning: the same-answer probe failed: {a.error}; recorded in run.json, the run goes on",
              file=sys.stderr)
        return
    what = f"{len(a.top_logprobs)} tokens with their top-{a.top_k} logprobs" if a.logprobs_returned else \
        "no logprobs (the report compares the texts)"
    print(f"{engine}: same-answer probe: {what}: {a.text[:60]!r}", file=sys.stderr)
