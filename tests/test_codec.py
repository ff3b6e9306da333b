"""The records' JSON codec (schema/codec.py: builders made once per type) and the JSON-lines appender
(schema/files.JsonlAppender): the same values as before they were made fast, and the same file rules."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llmcompare.errors import ResultsWriteError
from llmcompare.schema.codec import _plain, record
from llmcompare.schema.files import JsonlAppender, read_jsonl
from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Metrics, ServeRun
from llmcompare.schema.upgrade import upgrade

REPORTS = Path(__file__).resolve().parents[1] / "reports"


@dataclass
class Inner:
    x: float = 0.0
    tags: list[str] = field(default_factory=list)


@dataclass
class Outer:
    n: int
    rates: list[float] = field(default_factory=list)
    maybe: float | None = None
    by_name: dict[str, float] = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    inner: Inner | None = None
    inners: list[Inner] = field(default_factory=list)


def test_record_builds_every_kind_of_field():
    o = record(Outer, {"n": 3, "rates": [1.5, "inf", "-inf", None], "maybe": "inf", "by_name": {"a": "inf", "b": 2.0},
                       "raw": {"k": [1]}, "inner": {"x": "-inf", "tags": ["t"]}, "inners": [{"x": 1.0}, None],
                       "unknown": "a newer file's field"})
    assert o.n == 3
    assert o.rates[:2] == [1.5, math.inf] and o.rates[2] == -math.inf and o.rates[3] is None
    assert o.maybe == math.inf and o.by_name == {"a": math.inf, "b": 2.0} and o.raw == {"k": [1]}
    assert o.inner == Inner(-math.inf, ["t"]) and o.inners == [Inner(1.0), None]
    assert record(Outer, {"n": 1, "maybe": None, "inner": None, "rates": None}) == Outer(1, None, None, inner=None)


def test_plain_writes_infinities_as_strings_and_copies_lists():
    chunks = [1.0, 2.5]
    out = _plain({"c": chunks, "i": [1.0, math.inf], "t": (2, -math.inf), "f": math.inf, "o": Inner(math.inf)})
    assert out == {"c": [1.0, 2.5], "i": [1.0, "inf"], "t": [2, "-inf"], "f": "inf", "o": {"x": "inf", "tags": []}}
    assert out["c"] is not chunks  # a new list, as before the fast path
    assert math.isnan(_plain(math.nan)) and _plain(True) is True and _plain(None) is None


def test_a_request_record_round_trips_through_a_line():
    rec = RequestRecord(7, 16, 3, scheduled_s=0.5, dispatch_s=0.51, ttft_ms=20.0, e2el_ms=31.0,
                        chunk_ms=[20.0, 25.5, 31.0], reads=3, output_tokens=3, status=200, success=True, text="abc")
    back = record(RequestRecord, json.loads(json.dumps(_plain(rec.to_json()))))
    rec.text = ""  # not saved
    assert back == rec


def test_committed_runs_read_the_same_through_the_uncached_codec():
    """Every committed run.json read by the codec equals the same file read by a plain walk of its type hints
    made afresh for every value (the codec before its builders were cached)."""
    import dataclasses
    import types
    import typing

    def slow(t, v):
        origin = typing.get_origin(t)
        if origin in (typing.Union, types.UnionType):
            return None if v is None else slow([a for a in typing.get_args(t) if a is not type(None)][0], v)
        if v is None:
            return None
        if origin is list:
            (item,) = typing.get_args(t) or (typing.Any,)
            return [slow(item, x) for x in v]
        if origin is dict:
            args = typing.get_args(t)
            return {k: slow(args[1], x) for k, x in v.items()} if args else dict(v)
        if dataclasses.is_dataclass(t):
            if t is Metrics:  # its own from_json: the codec for its fields, its stats beside them
                names = {f.name for f in dataclasses.fields(t)} - {"stats"}
                m = slow_fields(t, {k: x for k, x in v.items() if k in names})
                m.stats = {k: float(x) for k, x in v.items() if k not in names and k.endswith("_ms") and x is not None}
                return m
            return slow_fields(t, v)
        return float(v) if t is float and isinstance(v, str) else v

    def slow_fields(t, v):
        hints = typing.get_type_hints(t)
        names = {f.name for f in dataclasses.fields(t) if f.init}
        return t(**{k: slow(hints[k], x) for k, x in v.items() if k in names})

    runs = sorted(p for p in REPORTS.glob("**/run.json") if '"llmcompare.serve-bench/' in p.read_text()[:4000])
    assert len(runs) >= 20
    for p in runs:
        d = json.loads(p.read_text())
        assert ServeRun.from_json(d) == slow_fields(ServeRun, upgrade(d)), p


def test_appender_keeps_each_line_as_it_comes_and_refuses_links(tmp_path):
    path = tmp_path / "e.requests.jsonl"
    log = JsonlAppender(path)
    assert not path.exists()  # opened at the first line
    log.write({"index": 0, "x": math.inf})
    assert read_jsonl(path) == [{"index": 0, "x": "inf"}]  # flushed, before close
    log.write({"index": 1})
    log.close()
    log.close()  # twice is harmless
    assert [r["index"] for r in read_jsonl(path)] == [0, 1]
    link = tmp_path / "l.requests.jsonl"
    os.symlink(tmp_path / "elsewhere", link)
    with pytest.raises(ResultsWriteError, match="symbolic link"):
        JsonlAppender(link).write({"index": 0})
    assert not (tmp_path / "elsewhere").exists()
