"""One streamed /v1/completions request, timed chunk by chunk (the SSE parser it reads with: serve/sse.py).

Failures (HTTP status, an error event, malformed SSE or JSON, a stream cut short, a timeout) are recorded
in the RequestRecord, never raised: the load loop must go on and account for them.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from llmcompare.schema.request import RequestRecord, RequestSpec
from llmcompare.serve.sse import SSEError, SSEParser


def completion_body(model: str, spec: RequestSpec, template: dict) -> dict:
    """One request: the engine's body template (sampling, ignore_eos, streaming) with this prompt and length."""
    return {"model": model, "prompt": spec.prompt, "max_tokens": spec.output_len, **template}


def body_template(sampling: dict, ignore_eos: bool) -> dict:
    return {**sampling, "ignore_eos": ignore_eos, "stream": True, "stream_options": {"include_usage": True}}


def _take_event(data: str, rec: RequestRecord, at_ms: float) -> str:
    """Folds one SSE event into rec (at_ms: its arrival, ms from dispatch): "done" for [DONE], "choice" when it
    carried a choice, "error" (rec.error set) for a malformed or error event, "" otherwise (a usage-only event)."""
    if data.strip() == "[DONE]":
        return "done"
    try:
        msg = json.loads(data)
    except ValueError:
        rec.error = f"malformed JSON in stream: {data[:200]!r}"
        return "error"
    if not isinstance(msg, dict):
        rec.error = f"unexpected stream event: {data[:200]!r}"
        return "error"
    if "error" in msg and not msg.get("choices"):
        rec.error = f"error event: {json.dumps(msg['error'])[:300]}"
        return "error"
    kind = ""
    if choices := msg.get("choices"):
        rec.chunk_ms.append(at_ms)
        text = choices[0].get("text") or ""
        rec.text += text
        rec.empty_last_chunk = not text and choices[0].get("finish_reason") is not None
        kind = "choice"
    if usage := msg.get("usage"):
        rec.prompt_tokens = usage.get("prompt_tokens")
        if usage.get("completion_tokens") is not None:
            rec.output_tokens = usage["completion_tokens"]
            rec.output_tokens_source = "usage"
    return kind


async def stream_completion(session: aiohttp.ClientSession, url: str, body: dict, rec: RequestRecord,
                            t0: float, timeout_s: float) -> RequestRecord:
    """Sends one request and fills `rec`; t0 is the point's start on the perf_counter clock."""
    start = time.perf_counter()
    rec.dispatch_s = start - t0
    rec.queue_ms = (rec.dispatch_s - rec.scheduled_s) * 1000.0
    parser = SSEParser()
    done = False
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            rec.status = resp.status
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return rec
            chunks = resp.content.iter_any()
            while True:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    chunk = None
                at_ms = (time.perf_counter() - start) * 1000.0
                had_choice = False
                for data in parser.feed(chunk) if chunk is not None else parser.close():
                    kind = _take_event(data, rec, at_ms)
                    if kind == "error":
                        return rec
                    done |= kind == "done"
                    had_choice |= kind == "choice"
                rec.reads += had_choice
                if chunk is None:
                    break
    except asyncio.TimeoutError:
        rec.error = f"timed out after {timeout_s:.0f} s"
        return rec
    except aiohttp.ClientError as e:
        rec.error = f"{type(e).__name__}: {e}"
        return rec
    except SSEError as e:  # a line past the parser's bound
        rec.error = str(e)
        return rec
    if not done:
        rec.error = "stream closed before [DONE]"
    elif not rec.chunk_ms:
        rec.error = "no tokens in stream"
    else:
        rec.ttft_ms, rec.e2el_ms, rec.success = rec.chunk_ms[0], rec.chunk_ms[-1], True
    return rec
