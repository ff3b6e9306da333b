import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmcompare.serve.sse import MAX_LINE_BYTES, SSEError, SSEParser


def feed_all(chunks):
    p = SSEParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    return out + p.close()


def test_events_and_done():
    raw = b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n'
    assert feed_all([raw]) == ['{"a": 1}', '{"b": 2}', "[DONE]"]


def test_crlf_and_cr_line_endings_comments_and_multiline_data():
    raw = b": keep-alive\r\ndata: x\r\ndata: y\r\n\r\nevent: e\rdata:z\r\r"
    assert feed_all([raw]) == ["x\ny", "z"]


def test_split_crlf_across_chunks_is_one_line_end():
    # "\r" then "\n" in the next chunk must not count as two line ends (that would end the event early)
    assert feed_all([b"data: a\r", b"\ndata: b\r\n\r\n"]) == ["a\nb"]


def test_unterminated_event_is_dropped_at_close():
    p = SSEParser()
    assert p.feed(b"data: half") == []
    assert p.close() == []


def test_utf8_split_inside_a_character():
    s = 'data: {"t": "毕老师"}\n\n'.encode()
    cut = s.index("老".encode()) + 1
    assert feed_all([s[:cut], s[cut:]]) == ['{"t": "毕老师"}']


payloads = st.lists(st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=20), max_size=3),
                    min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(payloads, st.data(), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_chunk_boundaries_give_the_same_events(events, data, eol):
    raw = b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + eol + eol for e in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert [json.loads(x) for x in feed_all(chunks)] == events


def test_a_stream_without_line_ends_is_cut_at_the_limit_and_let_go():
    # issue 27: such a stream took the client to 826 MB; now the parser holds at most MAX_LINE_BYTES of it
    p, chunk = SSEParser(), b"a" * (64 << 10)
    p.feed(b"data: ")
    fed = 0
    with pytest.raises(SSEError, match=r"^an SSE line longer than 1 MiB \(no line end yet\)$"):
        while fed < 1000:
            p.feed(chunk)
            fed += 1
            assert p.buffered <= MAX_LINE_BYTES
    assert 6 + fed * len(chunk) <= MAX_LINE_BYTES < 6 + (fed + 1) * len(chunk)
    assert p.buffered == 0


def test_a_line_or_an_event_past_the_limit_is_an_error():
    p = SSEParser(max_line=100)
    assert p.feed(b"data: " + b"x" * 93 + b"\n\n") == ["x" * 93]
    with pytest.raises(SSEError, match="^an SSE line longer than 100 bytes$"):
        p.feed(b"data: " + b"x" * 95 + b"\n")
    with pytest.raises(SSEError, match="^an SSE event whose data lines hold more than 100 bytes$"):
        SSEParser(max_line=100).feed(b"data: " + b"x" * 60 + b"\ndata: " + b"x" * 60 + b"\n")


def _best_of_3(f) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def test_parsing_is_linear_many_lines_in_one_chunk_cost_no_more_than_in_many():
    # issue 27: the parser re-scanned (and copied) its whole buffer for every line: quadratic in a chunk's lines
    ev, n = b'data: {"choices":[{"text":" a"}]}\n\n', 20_000

    def one_chunk():
        assert len(SSEParser().feed(ev * n)) == n

    def many_chunks():
        p = SSEParser()
        for _ in range(n):
            p.feed(ev)

    assert _best_of_3(one_chunk) < 3 * _best_of_3(many_chunks)
