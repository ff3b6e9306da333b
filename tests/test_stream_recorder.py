"""What the client records from a stream's bytes tells a late reader from a server that merged the tokens: several
events read at once keep one arrival each (same time), one event carrying every token is one arrival
(analysis/trust.py: only the first makes a point untrusted)."""

import json

from llmcompare.analysis import trust
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Metrics
from llmcompare.serve.client import StreamRecorder


def event(text: str, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"text": text, "finish_reason": finish}]}).encode() + b"\n\n"


END = (b"data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": 8,
                                                      "total_tokens": 24}}).encode() + b"\n\ndata: [DONE]\n\n")


def record(reads: list[tuple[bytes, float]]) -> RequestRecord:
    rec = RequestRecord(0, 16, 8)
    rs = StreamRecorder(rec, 8)
    for chunk, at_ms in reads:
        assert not rs.feed(chunk, at_ms)
    assert rs.feed(None, reads[-1][1]) and rec.success, rec.error
    return rec


def test_events_read_at_once_keep_an_arrival_each_and_make_the_point_untrusted():
    rec = record([(b"".join(event("ab") for _ in range(7)) + event("ab", "length") + END, 250.0)])
    assert rec.reads == 1 and rec.chunk_ms == [250.0] * 8 and rec.ttft_ms == rec.e2el_ms == 250.0
    t = trust.assess([rec], Metrics(completed=1), {}, 0.2, True)
    assert not t.trusted and t.server_merged_requests == 0


def test_one_event_with_every_token_is_one_arrival_and_stays_trusted():
    rec = record([(event("abababababababab", "length") + END, 250.0)])
    assert rec.reads == 1 and rec.chunk_ms == [250.0] and rec.output_tokens == 8
    t = trust.assess([rec], Metrics(completed=1), {}, 0.2, True)
    assert t.trusted and t.server_merged_requests == 1


def test_a_stream_read_in_pieces_is_neither():
    rec = record([(event("ab"), 20.0)] + [(event("ab"), 20.0 + 10 * k) for k in range(1, 7)]
                 + [(event("ab", "length") + END, 90.0)])
    assert rec.reads == 8 and len(rec.chunk_ms) == 8
    t = trust.assess([rec], Metrics(completed=1), {}, 0.2, True)
    assert t.trusted and (t.single_read_requests, t.server_merged_requests) == (0, 0)


def test_the_h200_stream_vllm_sent_whole_is_told_from_its_neighbour():
    """Two real vLLM 0.26 records of one point on the H200 (reports/h200-converge, c=256, repeat 2): request 1282
    came as one event with its 256 tokens 1.5 s after its send; request 1278 token by token."""
    import json
    from pathlib import Path

    from llmcompare.schema.codec import record

    path = Path(__file__).parent / "data/h200-converge-vllm/two-streams.requests.jsonl"
    recs = {r.index: r for r in (record(RequestRecord, json.loads(line)) for line in path.read_text().splitlines())}
    assert recs[1282].reads == 1 and len(recs[1282].chunk_ms) == 1 and recs[1282].output_tokens == 256
    assert recs[1278].reads > 1
    t = trust.assess(list(recs.values()), Metrics(completed=2), {}, 0.2, True)
    assert t.trusted and (t.single_read_requests, t.server_merged_requests) == (1, 1)
