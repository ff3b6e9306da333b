"""One streamed /v1/completions request, timed chunk by chunk.

Failures (HTTP status, an error event, malformed SSE or JSON, an event of the wrong shape, a stream past its
bounds, a stream cut short, a timeout) are recorded in the RequestRecord, never raised: the load loop must go on
and account for them. Every field of every event is checked in one place (`parse_event`); the bounds are:

  one SSE line, or one event's data     MAX_LINE_BYTES (1 MiB; serve/sse.py)
  JSON nesting of one event             MAX_DEPTH levels (32)
  events of one request                 EVENTS_PER_TOKEN x max_tokens + EVENTS_SLACK (2 x n + 64)
  generated text of one request         CHARS_PER_TOKEN x max_tokens + TEXT_SLACK characters (1024 x n + 64 Ki)
  an error response's body              ERROR_BODY_BYTES read (1200), 300 characters kept
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import NamedTuple

import aiohttp
import numpy as np

from llmcompare.schema.request import RequestRecord, RequestSpec
from llmcompare.serve.sse import SSEError, SSEParser

MAX_DEPTH = 32  # a completion event nests 4 levels (event, choices, choice, logprobs); an error object a few more
EVENTS_PER_TOKEN, EVENTS_SLACK = 2, 64  # an engine sends at most one choice per token, plus role/end/usage/[DONE]
CHARS_PER_TOKEN, TEXT_SLACK = 1024, 64 * 1024  # Qwen2.5's longest token decodes to 128 characters
ERROR_BODY_BYTES = 1200
MAX_COUNT = 2**53  # token counts above this are not exact in every JSON reader

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)', re.DOTALL)  # an unclosed string runs to the end


class StreamFailure(ValueError):
    """Why a request failed, as recorded in its RequestRecord.error."""


class Event(NamedTuple):
    """One event's fields, checked: what the record takes from it."""

    done: bool = False  # [DONE]
    choice: bool = False  # it carried a choice
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


_DONE = Event(done=True)


def _excerpt(data: str) -> str:
    return repr(data[:120]) + ("..." if len(data) > 120 else "")


def _type(x) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(x), "a number")


def json_depth_over(data: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests deeper than `limit` (or leaves more than `limit` brackets open): linear, and
    a count of brackets first, so an ordinary event costs two str.count calls."""
    if data.count("[") + data.count("{") <= limit:
        return False
    a = np.frombuffer(_STRING.sub("", data).encode(), dtype=np.uint8)  # brackets inside strings do not nest
    steps = ((a == 0x5B) | (a == 0x7B)).astype(np.int32) - ((a == 0x5D) | (a == 0x7D))
    return bool(len(a)) and int(np.cumsum(steps).max()) > limit


def _count(usage: dict, key: str) -> int | None:
    v = usage.get(key)
    if v is not None and (type(v) is not int or not 0 <= v < MAX_COUNT):
        raise StreamFailure(f"malformed stream event: usage.{key} is {_type(v)} ({v!r:.40}), not a non-negative "
                            "integer")
    return v


def _choice(choices) -> tuple[str, str | None]:
    """The first choice's (text, finish_reason); every choice must be an object with a string text (or none)."""
    if type(choices) is not list:
        raise StreamFailure(f"malformed stream event: choices is {_type(choices)}, not a list")
    for i, c in enumerate(choices):
        if type(c) is not dict:
            raise StreamFailure(f"malformed stream event: choices[{i}] is {_type(c)}, not an object")
        if (t := c.get("text")) is not None and type(t) is not str:
            raise StreamFailure(f"malformed stream event: choices[{i}].text is {_type(t)}, not a string")
        if (f := c.get("finish_reason")) is not None and type(f) is not str:
            raise StreamFailure(f"malformed stream event: choices[{i}].finish_reason is {_type(f)}, not a string or "
                                "null")
    return (choices[0].get("text") or "", choices[0].get("finish_reason")) if choices else ("", None)


def _error_message(msg: dict) -> str:
    err = msg.get("error", msg)
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"][:300]
    return json.dumps(err)[:300]  # depth-limited above: dumps cannot recurse too far


def parse_event(data: str) -> Event:
    """The one check of a stream event's shape; raises StreamFailure naming what is wrong (or the server's error).
    choices: absent, null or a list of objects; text: a string or null; finish_reason: a string or null; usage:
    absent, null or an object whose prompt_tokens/completion_tokens/total_tokens are null or non-negative
    integers. Other fields are not read."""
    if data[:1] != "{" and data.strip() == "[DONE]":
        return _DONE
    if data.count("[") + data.count("{") > MAX_DEPTH and json_depth_over(data):  # counts: the cheap test first
        raise StreamFailure(f"malformed stream event: JSON nested deeper than {MAX_DEPTH} levels: {_excerpt(data)}")
    try:
        msg = json.loads(data)
    except (ValueError, RecursionError):
        raise StreamFailure(f"malformed JSON in stream: {_excerpt(data)}") from None
    if not isinstance(msg, dict):
        raise StreamFailure(f"unexpected stream event: {_type(msg)}, not an object: {_excerpt(data)}")
    choices = msg.get("choices")
    if (msg.get("error") is not None or msg.get("object") == "error") and not choices:
        raise StreamFailure(f"error event: {_error_message(msg)}")
    text, finish = _choice(choices) if choices is not None else ("", None)
    usage = msg.get("usage")
    if usage is None:
        return Event(False, bool(choices), text, finish)
    if type(usage) is not dict:
        raise StreamFailure(f"malformed stream event: usage is {_type(usage)}, not an object")
    _count(usage, "total_tokens")
    return Event(False, bool(choices), text, finish, _count(usage, "prompt_tokens"),
                 _count(usage, "completion_tokens"))


def events_limit(max_tokens: int) -> int:
    return EVENTS_PER_TOKEN * max(0, max_tokens) + EVENTS_SLACK


def text_limit(max_tokens: int) -> int:
    return CHARS_PER_TOKEN * max(0, max_tokens) + TEXT_SLACK


class StreamRecorder:
    """Folds a response's bytes into `rec` as they arrive, within the bounds above. feed() never raises: it
    returns True once the record is final (a failure recorded in rec.error, or the end of the stream)."""

    def __init__(self, rec: RequestRecord, max_tokens: int, parser: SSEParser | None = None) -> None:
        self.rec, self.parser = rec, parser or SSEParser()
        self.max_events, self.max_text = events_limit(max_tokens), text_limit(max_tokens)
        self.max_tokens, self.events, self.done = max_tokens, 0, False

    def feed(self, chunk: bytes | None, at_ms: float) -> bool:
        """One read (None: the stream ended), at_ms after dispatch."""
        try:
            had_choice = False
            for data in self.parser.feed(chunk) if chunk is not None else self.parser.close():
                had_choice |= self._take(parse_event(data), at_ms)
            self.rec.reads += had_choice
        except (SSEError, StreamFailure) as e:
            self.rec.error = str(e)
            self.parser.close()  # its buffer is let go at once
            return True
        if chunk is None:
            self._finish()
            return True
        return False

    def _take(self, ev: Event, at_ms: float) -> bool:
        rec = self.rec
        self.events += 1
        if self.events > self.max_events:
            raise StreamFailure(f"stream cut off: more than {self.max_events} events for max_tokens "
                                f"{self.max_tokens} (the limit is {EVENTS_PER_TOKEN} x max_tokens + {EVENTS_SLACK})")
        self.done |= ev.done
        if ev.choice:
            if len(rec.text) + len(ev.text) > self.max_text:
                raise StreamFailure(f"stream cut off: more than {self.max_text} characters of text for max_tokens "
                                    f"{self.max_tokens} (the limit is {CHARS_PER_TOKEN} x max_tokens + {TEXT_SLACK})")
            rec.chunk_ms.append(at_ms)
            rec.text += ev.text
            rec.empty_last_chunk = not ev.text and ev.finish_reason is not None
        if ev.prompt_tokens is not None:
            rec.prompt_tokens = ev.prompt_tokens
        if ev.completion_tokens is not None:
            rec.output_tokens, rec.output_tokens_source = ev.completion_tokens, "usage"
        return ev.choice

    def _finish(self) -> None:
        rec = self.rec
        if not self.done:
            rec.error = "stream closed before [DONE]"
        elif not rec.chunk_ms:
            rec.error = "no tokens in stream"
        else:
            rec.ttft_ms, rec.e2el_ms, rec.success = rec.chunk_ms[0], rec.chunk_ms[-1], True


def completion_body(model: str, spec: RequestSpec, template: dict) -> dict:
    """One request: the engine's body template (sampling, ignore_eos, streaming) with this prompt and length."""
    return {"model": model, "prompt": spec.prompt, "max_tokens": spec.output_len, **template}


def body_template(sampling: dict, ignore_eos: bool) -> dict:
    return {**sampling, "ignore_eos": ignore_eos, "stream": True, "stream_options": {"include_usage": True}}


async def _body_head(resp: aiohttp.ClientResponse) -> str:
    """The start of an error response's body, whatever its encoding or length."""
    head = b""
    while len(head) < ERROR_BODY_BYTES and (part := await resp.content.read(ERROR_BODY_BYTES - len(head))):
        head += part
    return head.decode("utf-8", errors="replace")[:300]


async def stream_completion(session: aiohttp.ClientSession, url: str, body: dict, rec: RequestRecord,
                            t0: float, timeout_s: float) -> RequestRecord:
    """Sends one request and fills `rec`; t0 is the point's start on the perf_counter clock."""
    start = time.perf_counter()
    rec.dispatch_s = start - t0
    rec.queue_ms = (rec.dispatch_s - rec.scheduled_s) * 1000.0
    recorder = StreamRecorder(rec, rec.output_len)
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            rec.status = resp.status
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {await _body_head(resp)}"
                return rec
            chunks = resp.content.iter_any()
            while True:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    chunk = None
                if recorder.feed(chunk, (time.perf_counter() - start) * 1000.0):
                    return rec  # leaving the block closes a connection whose stream is not over
    except asyncio.TimeoutError:
        rec.error = f"timed out after {timeout_s:.0f} s"
    except aiohttp.ClientError as e:
        rec.error = f"{type(e).__name__}: {e}"
    return rec
