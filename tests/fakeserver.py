"""A fake OpenAI-compatible streaming server, for the tests and for scripts/client_capacity.py: it answers on a
known schedule, or misbehaves on purpose (faults a real engine cannot be made to send).

  python tests/fakeserver.py PORT [--mode ok|slow|500|cut|badjson|garbage|bad-shapes|no-newline|endless|
                                          metrics-bad-utf8] [--ttft-ms 2] [--itl-ms 2]
                                  [--tokens-per-chunk 1] [--empty-final-chunk] [--cpu CORE]
                                  [--answer none|fixed|shifted] [--prompt-tokens 16]

A bare HTTP/1.1 server on asyncio (keep-alive, chunked transfer, server-sent events), far cheaper per chunk than
a web framework, so that under a load test the client, not the server, is what runs out first.

Schedule (mode ok): for a request asking for n tokens (`max_tokens`), chunk j (0-based) is due at
t0 + ttft_ms + j * itl_ms, t0 being when the request was read in full, on absolute deadlines (a late send does
not push the next one back). Each chunk carries `tokens_per_chunk` tokens (the last one what is left), so there
are ceil(n / tokens_per_chunk) chunks; `--empty-final-chunk` adds one more chunk on the same clock that carries
a choice with no text and the finish reason, as lmdeploy's server sends under load. Usage (prompt_tokens 16,
completion_tokens n) follows when the request asked for it (stream_options.include_usage), then [DONE].
/v1/completions and /v1/chat/completions both stream (text or delta.content).

GET /stats gives how late the server's own sends were against their deadlines ({"sends", "p50_late_ms",
"p99_late_ms", "max_late_ms"}): the floor of the timing error any client can see. /stats?reset=1 also clears
them. GET /health and /v1/models answer as vLLM's do.

Faults: `slow` is ok with 50 ms TTFT and ITL unless given; `500` answers HTTP 500 with an error body; `cut`
closes the connection half-way through the stream; `badjson` sends malformed JSON as the second chunk; `garbage`
sends lines that are not server-sent events in place of every chunk, then [DONE]. `bad-shapes`: the k-th
request (counted from the server's start) ends with BAD_EVENTS[k % len(BAD_EVENTS)] in place of its usage event
(well-formed JSON of the wrong shape, or JSON nested too deep), then [DONE]. `no-newline`: `data: ` and then
NO_NEWLINE_BYTES of "a" in 64 KiB chunks, 1 ms apart, without a line end, then the response ends. `endless`: choice
chunks on the ok schedule past max_tokens, for as long as the client reads. `metrics-bad-utf8`: streams as ok, and
GET /metrics answers METRICS_PAGE, whose lines hold bytes that are not UTF-8 (its prefix-cache counters grow by
100 queries and 25 hits a read).

Answers with logprobs (the same-answer probe: a request that is not streamed and asks for `logprobs: k`):
`--answer none` (default) answers without logprobs, as a server that ignores the field; `fixed` answers
" a" x max_tokens with FAKE_TOP (its first k entries) as every position's top_logprobs; `shifted` the same
tokens, but with SHIFTED_TOP at the first position (the same top-1, another distribution: KL well above the
check's tolerance); `broken` logprobs of the wrong shape (top_logprobs a string). `--prompt-tokens N` is the usage.prompt_tokens of every answer (default 16).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from array import array

# (what is wrong, the event's data): each a class of malformed event the client must record, not raise
BAD_EVENTS = [
    ("choices is an object", b'{"choices": {"0": {"index": 0, "text": "x"}}}'),
    ("choices holds a non-object", b'{"choices": ["x"]}'),
    ("text is a number", b'{"choices": [{"index": 0, "text": 7, "finish_reason": null}]}'),
    ("finish_reason is a number", b'{"choices": [{"index": 0, "text": " a", "finish_reason": 1}]}'),
    ("usage is a string", b'{"choices": [], "usage": "16 tokens"}'),
    ("token counts are strings", b'{"choices": [], "usage": {"prompt_tokens": "16", "completion_tokens": "6"}}'),
    ("a token count is negative", b'{"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": -6}}'),
    ("an error event", b'{"error": {"message": "injected error event", "type": "fault", "code": 500}}'),
    ("the event is a list", b"[1, 2]"),
    ("JSON nested 100000 deep", b"[" * 100_000 + b"]" * 100_000),
]
NO_NEWLINE_BYTES = 8 << 20
METRICS_PAGE = (b"# HELP vllm:num_requests_running Number of requests running.\n"
                b'vllm:num_requests_running{model_name="fake\xff\xfe"} 5\n'  # not UTF-8: the line is skipped
                b'vllm:num_requests_running{model_name="fake-model"} 2\n'
                b"vllm:num_requests_waiting 1\n"
                b"\xc3\x28 vllm:num_requests_waiting 9\n"
                b"vllm:prefix_cache_queries_total %d\n"
                b"vllm:prefix_cache_hits_total %d\n"
                b"vllm:prefix_cache_hits_total{x=\"\xff\"} 1000\n")
MODES = ("ok", "slow", "500", "cut", "badjson", "garbage", "bad-shapes", "no-newline", "endless", "metrics-bad-utf8")
PROMPT_TOKENS = 16
MODEL = "fake-model"
ANSWERS = ("none", "fixed", "shifted", "broken")
FAKE_TOP = [(" a", -0.2), (" b", -2.1), (" c", -2.9), (" d", -3.4), (" e", -3.9), (" f", -4.3), (" g", -4.8)]
SHIFTED_TOP = [(" a", -1.0), (" b", -1.1), (" c", -1.3), (" d", -2.5), (" e", -2.8), (" f", -4.3), (" g", -4.8)]


class Config:
    def __init__(self, mode: str = "ok", ttft_ms: float | None = None, itl_ms: float | None = None,
                 tokens_per_chunk: int = 1, empty_final_chunk: bool = False, answer: str = "none",
                 prompt_tokens: int = PROMPT_TOKENS) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if answer not in ANSWERS:
            raise ValueError(f"answer must be one of {ANSWERS}, not {answer!r}")
        self.answer, self.prompt_tokens = answer, prompt_tokens
        default = 50.0 if mode == "slow" else 2.0
        self.mode = mode
        self.ttft_s = (default if ttft_ms is None else ttft_ms) / 1000.0
        self.itl_s = (default if itl_ms is None else itl_ms) / 1000.0
        self.tokens_per_chunk = max(1, tokens_per_chunk)
        self.empty_final_chunk = empty_final_chunk


def _frame(data: bytes) -> bytes:
    """One HTTP chunk (chunked transfer encoding)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Stream:
    """One streamed response's bytes, made once per request (the sends are then only writes)."""

    def __init__(self, cfg: Config, chat: bool, n: int, usage: bool) -> None:
        k = cfg.tokens_per_chunk
        sizes = [min(k, n - i) for i in range(0, n, k)] or [0]

        def choice(text: str, finish: str | None) -> dict:
            if chat:
                return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            return {"index": 0, "text": text, "finish_reason": finish}

        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": "cmpl-fake", "object": obj, "created": int(time.time()), "model": MODEL}
        last_finish = None if cfg.empty_final_chunk else "length"
        self.chunks = [_event({**head, "choices": [choice(" a" * s, last_finish if j == len(sizes) - 1 else None)]})
                       for j, s in enumerate(sizes)]
        if cfg.empty_final_chunk:
            self.chunks.append(_event({**head, "choices": [choice("", "length")]}))
        tail = b""
        if usage:
            p = cfg.prompt_tokens
            tail += _event({**head, "choices": [], "usage": {"prompt_tokens": p, "completion_tokens": n,
                                                             "total_tokens": p + n}})
        self.tail = tail + b"data: [DONE]\n\n"


_STREAMS: dict[tuple, _Stream] = {}  # the bytes of a response depend only on these: made once, sent many times


class FakeServer(asyncio.Protocol):
    cfg = Config()
    # per send: how late it went out (ms) and when it was due (s, the loop's clock: time.monotonic, the host's
    # CLOCK_MONOTONIC, which the client's perf_counter also reads); arrays: millions of sends at high load
    late_ms, due_s = array("d"), array("d")
    streams_started = 0  # requests streamed (bad-shapes picks its event by this)
    metrics_reads = 0

    def connection_made(self, transport) -> None:
        self.t = transport
        self.buf = b""
        self.loop = asyncio.get_running_loop()
        self.close_after = False

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (i := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:i].decode("latin-1")
            lines = head.split("\r\n")
            hdr = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            rest = self.buf[i + 4:]
            if hdr.get("transfer-encoding", "").lower() == "chunked":
                body, used = _dechunk(rest)
                if body is None:
                    return
            else:
                n = int(hdr.get("content-length", 0))
                if len(rest) < n:
                    return
                body, used = rest[:n], n
            self.buf = rest[used:]
            method, path = lines[0].split(" ", 2)[:2]
            self.close_after = hdr.get("connection", "").lower() == "close"
            self.handle(method, path, body)

    # ---- responses ----
    def reply(self, obj: dict, status: str = "200 OK") -> None:
        b = json.dumps(obj).encode()
        self.t.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (status.encode(), len(b), b))
        if self.close_after:
            self.t.close()

    def handle(self, method: str, path: str, body: bytes) -> None:
        cfg = FakeServer.cfg
        if path.startswith("/stats"):
            self.reply(_lateness(path))
            if "reset" in path:
                FakeServer.late_ms, FakeServer.due_s = array("d"), array("d")
                _LATENESS.clear()
        elif path.startswith("/metrics") and cfg.mode == "metrics-bad-utf8":
            FakeServer.metrics_reads += 1
            page = METRICS_PAGE % (100 * FakeServer.metrics_reads, 25 * FakeServer.metrics_reads)
            self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(page), page))
        elif path.startswith("/v1/models"):
            self.reply({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake",
                                                    "max_model_len": 32768}]})
        elif method == "POST" and path.split("?")[0] in ("/v1/completions", "/v1/chat/completions"):
            t0 = self.loop.time()
            try:
                req = json.loads(body)
            except ValueError:
                return self.reply({"error": {"message": "body is not JSON"}}, "400 Bad Request")
            if cfg.mode == "500":
                return self.reply({"error": {"message": "injected failure"}}, "500 Internal Server Error")
            n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
            usage = bool((req.get("stream_options") or {}).get("include_usage"))
            chat = "chat" in path
            if not req.get("stream"):
                text = " a" * n
                choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
                if not chat and req.get("logprobs") and cfg.answer != "none":
                    choice["logprobs"] = _logprobs(cfg.answer, n, int(req["logprobs"]))
                p = cfg.prompt_tokens
                return self.reply({"id": "cmpl-fake", "model": MODEL, "choices": [{**choice, "finish_reason": "length"}],
                                   "usage": {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}})
            key = (chat, n, usage)
            stream = _STREAMS.get(key) or _STREAMS.setdefault(key, _Stream(cfg, chat, n, usage))
            self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            FakeServer.streams_started += 1
            if cfg.mode == "no-newline":
                return self.drip(b"data: ", b"a" * (64 << 10), NO_NEWLINE_BYTES >> 16, 0.001)
            if cfg.mode == "endless":
                return self.loop.call_at(t0 + cfg.ttft_s, self.drip, b"", stream.chunks[0], None, cfg.itl_s)
            if cfg.mode == "bad-shapes":
                bad = BAD_EVENTS[(FakeServer.streams_started - 1) % len(BAD_EVENTS)][1]
                stream = _Stream(cfg, chat, n, usage)
                stream.tail = b"data: " + bad + b"\n\ndata: [DONE]\n\n"
            m = len(stream.chunks)
            for j in range(m):
                due = t0 + cfg.ttft_s + j * cfg.itl_s
                self.loop.call_at(due, self.send, due, stream, j, m)
        else:
            self.reply({"status": "ok"} if path.startswith("/health") else {"error": {"message": "not found"}},
                       "200 OK" if path.startswith("/health") else "404 Not Found")

    def drip(self, first: bytes, data: bytes, left: int | None, every_s: float) -> None:
        """Sends `first`, then `data` every `every_s`: `left` times (then ends the response), or while the client
        reads (None)."""
        if self.t.is_closing():
            return
        if left == 0:
            self.t.write(b"0\r\n\r\n")
            return
        self.t.write(_frame(first + data))
        self.loop.call_later(every_s, self.drip, b"", data, None if left is None else left - 1, every_s)

    def send(self, due: float, stream: _Stream, j: int, m: int) -> None:
        FakeServer.late_ms.append((self.loop.time() - due) * 1000.0)
        FakeServer.due_s.append(due)
        if self.t.is_closing():
            return
        mode = FakeServer.cfg.mode
        if mode == "cut" and j == m // 2:
            self.t.close()  # the connection drops half-way through the stream
            return
        if mode == "badjson" and j == 1:
            data = b'data: {"choices": [{"text": "x"\n\n'
        elif mode == "garbage":
            data = b"this is not server-sent events\n\n"
        else:
            data = stream.chunks[j]
        if j == m - 1:
            self.t.write(_frame(data + stream.tail) + b"0\r\n\r\n")
            if self.close_after:
                self.t.close()
        else:
            self.t.write(_frame(data))


def _lateness(path: str) -> dict:
    """/stats[?since=T&until=U]: this process's send lateness (ms) over the sends due in [T, U] (monotonic
    seconds; default: all since the last reset)."""
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    lo, hi = float(q.get("since", ["-inf"])[0]), float(q.get("until", ["inf"])[0])
    key = (lo, hi, len(FakeServer.late_ms))  # the same question asked again (a client reaching every process
    if key not in _LATENESS:                 # asks each many times): answered from memory, not re-sorted
        s = sorted(late for late, due in zip(FakeServer.late_ms, FakeServer.due_s, strict=True) if lo <= due <= hi)
        _LATENESS.clear()
        _LATENESS[key] = {"sends": len(s), "p50_late_ms": s[len(s) // 2] if s else 0.0,
                          "p99_late_ms": s[min(len(s) - 1, int(len(s) * 0.99))] if s else 0.0,
                          "max_late_ms": s[-1] if s else 0.0}
    return _LATENESS[key]


_LATENESS: dict[tuple, dict] = {}


def _logprobs(answer: str, n: int, k: int) -> dict:
    """choices[0].logprobs of a completion of n tokens " a", k alternatives per position (OpenAI's shape)."""
    tops = [dict((SHIFTED_TOP if answer == "shifted" and i == 0 else FAKE_TOP)[:k]) for i in range(n)]
    if answer == "broken":
        return {"tokens": [" a"] * n, "top_logprobs": "not a list"}
    return {"tokens": [" a"] * n, "token_logprobs": [t[" a"] for t in tops], "top_logprobs": tops,
            "text_offset": [2 * i for i in range(n)]}


def _dechunk(b: bytes) -> tuple[bytes | None, int]:
    """A chunked request body: (body, bytes used) once complete, (None, 0) while more is needed."""
    out, pos = b"", 0
    while True:
        i = b.find(b"\r\n", pos)
        if i < 0:
            return None, 0
        size = int(b[pos:i].split(b";")[0], 16)
        if size == 0:
            end = b.find(b"\r\n\r\n", i)
            return (out, end + 4) if end >= 0 else (None, 0)
        if len(b) < i + 2 + size + 2:
            return None, 0
        out += b[i + 2:i + 2 + size]
        pos = i + 2 + size + 2


def serve(port: int, cfg: Config, host: str = "127.0.0.1", reuse_port: bool = False) -> None:
    FakeServer.cfg = cfg

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(FakeServer, host, port, backlog=4096,
                                                                 reuse_port=reuse_port or None)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- for tests and scripts: start one in a subprocess ------------------------------------------------------------
def launch(port: int, *args: str, python: str = sys.executable, timeout_s: float = 10.0) -> subprocess.Popen:
    """Starts `python tests/fakeserver.py PORT *args` and waits until it answers /health; the caller stops it
    (terminate, wait)."""
    proc = subprocess.Popen([python, os.path.abspath(__file__), str(port), *args])
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"fake server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"fake server on port {port} did not answer within {timeout_s:.0f} s")


def stats(base_url: str, reset: bool = False, since: float | None = None, until: float | None = None) -> dict:
    """One server process's send lateness (/stats); since/until: only the sends due in that window (monotonic s)."""
    q = {k: v for k, v in (("reset", 1 if reset else None), ("since", since), ("until", until)) if v is not None}
    with urllib.request.urlopen(f"{base_url}/stats" + (f"?{urllib.parse.urlencode(q)}" if q else ""), timeout=10) as r:
        return json.loads(r.read())


def _fork_servers(n: int) -> list[int] | None:
    """n more server processes on the same port; in the parent their pids (stopped with it, SIGTERM included),
    in a child None (it dies with the parent: PR_SET_PDEATHSIG)."""
    children = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            import ctypes

            ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
            return None
        children.append(pid)
    if children:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    return children


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("--mode", choices=MODES, default="ok")
    ap.add_argument("--ttft-ms", type=float, default=None, help="default 2 (50 for --mode slow)")
    ap.add_argument("--itl-ms", type=float, default=None, help="default 2 (50 for --mode slow)")
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--empty-final-chunk", action="store_true")
    ap.add_argument("--cpu", type=int, default=None, help="pin the server to this core")
    ap.add_argument("--answer", choices=ANSWERS, default="none",
                    help="a non-streamed request asking for logprobs: none (answer without), fixed, shifted, broken")
    ap.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="usage.prompt_tokens of every answer")
    ap.add_argument("--processes", type=int, default=1,
                    help="serve from this many processes on one port (SO_REUSEPORT), so that the server scales past "
                         "one core and a client benchmark measures the client; /stats then speaks for one of them")
    a = ap.parse_args(argv)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    cfg = Config(a.mode, a.ttft_ms, a.itl_ms, a.tokens_per_chunk, a.empty_final_chunk, a.answer, a.prompt_tokens)
    children = _fork_servers(a.processes - 1)
    try:
        serve(a.port, cfg, reuse_port=a.processes > 1)
    except KeyboardInterrupt:
        pass
    finally:
        for pid in children or []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 15)


if __name__ == "__main__":
    main()
