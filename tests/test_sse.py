import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmcompare.serve.client import SSEParser


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
