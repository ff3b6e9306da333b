"""A bounded, linear-time server-sent-events parser (WHATWG rules, the subset OpenAI streams use).

Bounded: a line (or one event's data, over its `data:` lines) longer than `max_line` bytes raises SSEError at
once, so the buffer never holds more than `max_line` bytes of one line plus one chunk. Linear: every byte is
searched for a line end once (the search goes on from where the last one stopped; consumed bytes are dropped in
one slice per chunk), so a stream without line ends costs as much as its length, not its length squared.
"""

from __future__ import annotations

import re

MAX_LINE_BYTES = 1 << 20  # 1 MiB: a real stream event is a few hundred bytes; see docs/faults.md

_EOL = re.compile(rb"\r\n|\r|\n")


class SSEError(ValueError):
    """The stream broke a bound (the client records the message as the request's failure)."""


class SSEParser:
    """Feed it bytes as they arrive, at any boundaries, and get back the completed events' data strings."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf before this hold no line end: the next search starts here
        self._data: list[str] = []
        self._data_len = 0  # bytes of the event being read (its data lines so far)

    @property
    def buffered(self) -> int:
        """Bytes held: the unfinished line and the unfinished event's data."""
        return len(self._buf) + self._data_len

    def feed(self, chunk: bytes) -> list[str]:
        if b"\r" in chunk or self._buf.endswith(b"\r"):
            return self._feed_any(chunk)
        *lines, rest = chunk.split(b"\n")  # the usual case: \n line ends only, each searched for once
        events: list[str] = []
        if lines:
            if self._buf:
                lines[0] = self._buf + lines[0]
                self._buf = bytearray()
            for line in lines:
                self._take_line(line, events)
        self._buf += rest
        if len(self._buf) > self.max_line:
            self._fail(f"an SSE line longer than {_mib(self.max_line)} (no line end yet)")
        self._scan = len(self._buf)
        return events

    def _take_line(self, line: bytes, events: list[str]) -> None:
        if line:
            self._line(line)
        elif self._data:
            events.append("\n".join(self._data))
            self._data, self._data_len = [], 0

    def _feed_any(self, chunk: bytes) -> list[str]:
        """Any line ends (CR LF, CR, LF), with a final CR held back until the next byte shows what it is."""
        if self._buf:
            self._buf += chunk
            buf = self._buf
        else:
            buf = chunk  # nothing held: no copy into the buffer
        events: list[str] = []
        start = 0  # where the current line begins in buf
        for m in _EOL.finditer(buf, self._scan):
            a, b = start, m.start()
            start = m.end()
            if start == len(buf) and start - b == 1 and buf[b] == 0x0D:
                start = a
                break  # a lone \r at the end may be the first half of \r\n: wait for more bytes
            self._take_line(buf[a:b], events)
        if buf is self._buf:
            del self._buf[:start]
        elif start < len(buf):
            self._buf = bytearray(buf[start:])
        if len(self._buf) > self.max_line:
            self._fail(f"an SSE line longer than {_mib(self.max_line)} (no line end yet)")
        # a held-back final \r is searched again with the bytes that follow it
        self._scan = len(self._buf) - 1 if self._buf.endswith(b"\r") else len(self._buf)
        return events

    def _line(self, line: bytes) -> None:
        """A line that is not blank."""
        if len(line) > self.max_line:
            self._fail(f"an SSE line longer than {_mib(self.max_line)}")
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        name, _, value = line.partition(b":")
        if name != b"data":
            return
        if value.startswith(b" "):
            value = value[1:]
        self._data_len += len(value) + 1
        if self._data_len > self.max_line:
            self._fail(f"an SSE event whose data lines hold more than {_mib(self.max_line)}")
        self._data.append(value.decode("utf-8", errors="replace"))

    def _fail(self, message: str) -> None:
        self._buf, self._data, self._data_len, self._scan = bytearray(), [], 0, 0
        raise SSEError(message)

    def close(self) -> list[str]:
        """End of stream: a held-back final CR ends its line; an event not closed by a blank line is dropped,
        as the spec says."""
        events: list[str] = []
        if self._buf.endswith(b"\r"):
            self._take_line(self._buf[:-1], events)
        self._buf, self._data, self._data_len, self._scan = bytearray(), [], 0, 0
        return events


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"
