"""The client's parsing and recording path (serve/client.py) against malformed and unbounded streams: every
request ends recorded (a success, or a failure with its reason), nothing is raised, and what it keeps is bounded.
Also both /metrics readers against a page that is not UTF-8. The same faults through `serve-bench`: test_faults."""

import asyncio
import json
import re
from types import SimpleNamespace

import aiohttp
import fakeserver  # tests/fakeserver.py
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from llmcompare.engines import prefix_cache
from llmcompare.engines.server import free_port
from llmcompare.schema.request import RequestRecord
from llmcompare.serve import client
from llmcompare.serve.engine_metrics import MetricsSampler


class _Response:
    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        async def gen():
            for c in chunks:
                yield c
        self.content = SimpleNamespace(iter_any=gen)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class _Session:
    """What stream_completion uses of an aiohttp session, answering with the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def post(self, url, json, timeout):
        return _Response(self.chunks)


def record(chunks: list[bytes], max_tokens: int = 6) -> RequestRecord:
    rec = RequestRecord(0, 8, max_tokens)
    asyncio.run(client.stream_completion(_Session(chunks), "http://x/v1/completions", {}, rec, 0.0, 5.0))
    return rec


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


OK = [event({"choices": [{"index": 0, "text": " a", "finish_reason": None}]}) for _ in range(5)] + [
    event({"choices": [{"index": 0, "text": " a", "finish_reason": "length"}]}),
    event({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 6, "total_tokens": 14}}),
    b"data: [DONE]\n\n"]


def test_a_good_stream_is_recorded_as_before():
    rec = record(OK)
    assert rec.success and rec.error is None and len(rec.chunk_ms) == 6 and rec.text == " a" * 6
    assert (rec.prompt_tokens, rec.output_tokens, rec.output_tokens_source) == (8, 6, "usage")


def test_a_stream_past_max_tokens_is_cut_off_and_keeps_no_more_timestamps():
    rec = record(OK[:1] * 1000 + OK[-2:])
    assert not rec.success and rec.error.startswith("stream cut off: more than 76 events for max_tokens 6")
    assert len(rec.chunk_ms) == 76


def test_text_past_its_bound_is_cut_off():
    rec = record([event({"choices": [{"text": "x" * (client.text_limit(1) + 1)}]})], max_tokens=1)
    assert rec.error.startswith("stream cut off: more than 66560 characters of text for max_tokens 1")
    assert rec.text == ""


def test_a_huge_line_is_a_failure_and_its_bytes_are_let_go():
    rec = record([b"data: " + b"[" * (64 << 10)] * 20)
    assert rec.error.startswith("an SSE line longer than 1 MiB")


@pytest.mark.parametrize("data,error", [
    ('{"choices": {"0": {"text": "x"}}}', "choices is an object, not a list"),
    ('{"choices": [null]}', "choices[0] is null, not an object"),
    ('{"choices": [{"text": "a"}, 3]}', "choices[1] is a number, not an object"),
    ('{"choices": [{"text": ["a"]}]}', "choices[0].text is a list, not a string"),
    ('{"choices": [{"text": "a", "finish_reason": {}}]}', "choices[0].finish_reason is an object, not a string"),
    ('{"usage": [1]}', "usage is a list, not an object"),
    ('{"usage": {"completion_tokens": 6.0}}', "usage.completion_tokens is a number (6.0), not a non-negative"),
    ('{"usage": {"completion_tokens": true}}', "usage.completion_tokens is a boolean (True), not a non-negative"),
    ('{"usage": {"total_tokens": 9007199254740992}}', "usage.total_tokens is a number"),
    ('{"usage": {"prompt_tokens": NaN}}', "usage.prompt_tokens is a number (nan)"),
    ('[' * 33 + ']' * 33, "JSON nested deeper than 32 levels"),
    ('{"a": "' + '[' * 40 + '"' + ', "choices": [{"text": "["}]}', None),  # brackets in strings do not nest
])
def test_each_field_of_an_event_is_checked(data, error):
    if error is None:
        assert client.parse_event(data).text == "["
        return
    with pytest.raises(client.StreamFailure, match="^" + re.escape("malformed stream event: " + error)):
        client.parse_event(data)


def test_an_error_event_gives_the_servers_message():
    with pytest.raises(client.StreamFailure, match="^error event: out of memory$"):
        client.parse_event('{"error": {"message": "out of memory", "code": 500}}')
    with pytest.raises(client.StreamFailure, match=r"^error event: \{\"object\": \"error\""):
        client.parse_event('{"object": "error", "msg": 1}')


def test_an_error_response_that_is_not_utf8_or_is_huge_is_recorded():
    async def main() -> RequestRecord:
        async def fail(request):
            return web.Response(status=500, body=b"\xff\xfe" * (1 << 20), content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_post("/v1/completions", fail)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        rec = RequestRecord(0, 8, 6)
        try:
            async with aiohttp.ClientSession() as s:
                await client.stream_completion(s, f"http://127.0.0.1:{port}/v1/completions", {}, rec, 0.0, 10.0)
        finally:
            await runner.cleanup()
        return rec

    rec = asyncio.run(main())
    assert rec.status == 500 and rec.error.startswith("HTTP 500: \ufffd") and len(rec.error) <= 310


# ---- /metrics that is not UTF-8: both readers ------------------------------------------------------------------
@pytest.fixture
def metrics_url():
    port = free_port()
    proc = fakeserver.launch(port, "--mode", "metrics-bad-utf8")
    yield f"http://127.0.0.1:{port}/metrics"
    proc.terminate()
    proc.wait()


def test_both_metrics_readers_skip_the_lines_that_are_not_utf8(metrics_url):
    async def main():
        async with aiohttp.ClientSession() as s:
            before = await prefix_cache.read(s, metrics_url)
            async with MetricsSampler(s, metrics_url, 0.01, 0.0) as sampler:
                await asyncio.sleep(0.2)
            return before, await prefix_cache.read(s, metrics_url), sampler

    before, after, sampler = asyncio.run(main())
    assert sampler.samples and sampler.error is None
    assert all(v == {"num_requests_running": 2.0, "num_requests_waiting": 1.0} for _, v in sampler.samples)
    assert before == {"queries": 100.0, "hits": 25.0}  # hits{x="\xff"} 1000 is left out
    assert prefix_cache.delta(before, after).hit_rate == pytest.approx(0.25)


def test_a_counter_value_that_is_not_a_number_is_skipped():
    assert prefix_cache.parse("vllm:prefix_cache_hits_total 1e\nvllm:prefix_cache_queries_total 4\n") == {
        "queries": 4.0}


# ---- property tests: whatever the server sends -------------------------------------------------------------------
KEYS = ["choices", "usage", "error", "object", "text", "finish_reason", "index", "prompt_tokens",
        "completion_tokens", "total_tokens", "message"]
scalars = st.none() | st.booleans() | st.integers(-3, 2**60) | st.floats() | st.text(max_size=8)
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                           | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), c, max_size=4),
                           max_leaves=24)
good = st.builds(lambda t, f: event({"choices": [{"index": 0, "text": t, "finish_reason": f}]}),
                 st.text(max_size=6), st.none() | st.just("length"))
usage = st.builds(lambda p, c: event({"choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c}}),
                  st.integers(0, 99) | json_values, st.integers(0, 99) | json_values)
pieces = st.one_of(
    good, good, usage,
    st.builds(event, json_values),  # random JSON of random shapes
    st.binary(max_size=40),  # random bytes
    st.sampled_from([b"data: [DONE]\n\n", b": keep-alive\n", b"\r", b"\n", b"data:", b"event: x\r\n"]),
    st.builds(lambda e, k: e[:k], good, st.integers(0, 30)),  # a cut line
    st.builds(lambda n, eol: b"data: " + b"x" * n + eol,  # huge lines, about the limit
              st.sampled_from([(1 << 20) - 7, (1 << 20) - 6, 1 << 20, (1 << 20) + 1, 3 << 20]),
              st.sampled_from([b"", b"\n", b"\n\n"])),
    st.builds(lambda d: b"data: " + b"[" * d + b"]" * d + b"\n\n", st.integers(30, 3000)),  # deep JSON
)


def chunked(data, raw: bytes) -> list[bytes]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


def stream_of(data, noise: list[bytes], n_good: int, done: bool) -> bytes:
    """n_good good events (then usage and [DONE] if done), with the noise put in at random places."""
    body = [OK[0]] * n_good + (OK[-2:] if done else [])
    for piece in noise:
        body.insert(data.draw(st.integers(0, len(body))), piece)
    return b"".join(body)


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=12), st.integers(0, 120), st.booleans(), st.integers(1, 40), st.data())
def test_any_stream_ends_recorded_bounded_and_countable(noise, n_good, done, max_tokens, data):
    from llmcompare.analysis.metrics import compute

    rec = record(chunked(data, stream_of(data, noise, n_good, done)), max_tokens)  # nothing may escape
    assert rec.success == (rec.error is None) and isinstance(rec.error, (str, type(None)))
    if rec.success:
        assert rec.chunk_ms and rec.ttft_ms == rec.chunk_ms[0] and rec.e2el_ms == rec.chunk_ms[-1]
    assert len(rec.chunk_ms) <= client.events_limit(max_tokens) and len(rec.text) <= client.text_limit(max_tokens)
    for n in (rec.prompt_tokens, rec.output_tokens):
        assert n is None or (type(n) is int and n >= 0)
    compute([rec], 1.0, [50, 99])  # the point's figures can be made of whatever was recorded
    json.dumps(rec.to_json())


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces | st.builds(lambda n: b"y" * n, st.integers(0, 9000)), max_size=25), st.data())
def test_the_parser_never_holds_more_than_its_bound(stream, data):
    p = client.SSEParser(max_line=4096)
    for chunk in chunked(data, b"".join(stream)):
        try:
            events = p.feed(chunk)
        except client.SSEError:
            assert p.buffered == 0  # let go at once
            return
        assert p.buffered <= 2 * 4096 and all(len(e) <= 4096 for e in events)
    p.close()
    assert p.buffered == 0


def depth(v) -> int:
    if isinstance(v, list):
        return 1 + max(map(depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(depth, v.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(json_values | st.lists(json_values) | st.text(alphabet='[]{}"\\', max_size=20).map(lambda t: [t]))
def test_the_depth_check_counts_the_nesting_json_has(v):
    text = json.dumps(v)
    assert client.json_depth_over(text, 3) == (depth(v) > 3)
