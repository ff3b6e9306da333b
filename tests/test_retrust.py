"""scripts/retrust.py re-judges a saved point under the single-read rule of analysis/trust.py: a stream the server
sent as one event no longer makes it untrusted; several events read at once still do; other reasons are kept."""

import importlib.util
import json
from pathlib import Path

from llmcompare.schema.files import RunFile, load_run
from llmcompare.schema.run import EngineRecord, PointResult, ServeRun, Trust

ROOT = Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("retrust", ROOT / "scripts/retrust.py")
retrust = importlib.util.module_from_spec(spec)
spec.loader.exec_module(retrust)
OLD = ("1 of 2 streams arrived in a single read (TTFT = E2EL): the client or the server was starved of CPU, so "
       "their timestamps hold no timing")


def line(index: int, chunk_ms: list[float], reads: int) -> str:
    return json.dumps({"point": 0, "repeat": 0, "attempt": 1, "index": index, "prompt_len": 8, "output_len": 8,
                       "dispatch_s": 0.1 * index, "chunk_ms": chunk_ms, "ttft_ms": chunk_ms[0],
                       "e2el_ms": chunk_ms[-1], "reads": reads, "output_tokens": 8, "success": True}) + "\n"


def saved(tmp_path: Path, events_of_the_single_read: int, other_reasons: list[str]) -> Path:
    t = Trust(trusted=False, reasons=[OLD, *other_reasons], single_read_requests=1)
    e = EngineRecord(name="e", points=[PointResult(index=0, concurrency=2, status="untrusted", trust=t)])
    d = tmp_path / "run"
    d.mkdir()
    RunFile(d, ServeRun(created_at="2026-12-04T00:00:00+00:00", engines={"e": e}))
    (d / "e.requests.jsonl").write_text(line(0, [10.0 * (k + 1) for k in range(8)], 8)
                                        + line(1, [500.0] * events_of_the_single_read, 1))
    return d


def test_a_stream_sent_as_one_event_no_longer_leaves_the_point_untrusted(tmp_path):
    d = saved(tmp_path, 1, [])
    retrust.retrust(d, dry_run=False)
    p = load_run(d).engines["e"].points[0]
    assert p.status == "complete" and p.trust.trusted and p.trust.reasons == []
    assert (p.trust.single_read_requests, p.trust.server_merged_requests) == (1, 1)
    assert any("re-judged" in w for w in p.warnings) and any("one event" in w for w in p.warnings)
    before = (d / "run.json").read_text()
    retrust.retrust(d, dry_run=False)  # once is enough: a second pass changes nothing
    assert (d / "run.json").read_text() == before


def test_events_read_late_and_other_reasons_keep_it_untrusted(tmp_path):
    d = saved(tmp_path, 8, [])
    retrust.retrust(d, dry_run=False)
    assert load_run(d).engines["e"].points[0].status == "untrusted"  # the rule is unchanged for these: no rewrite
    lag = "the client's event loop woke up 7.0 ms late"
    (tmp_path / "b").mkdir()
    d2 = saved(tmp_path / "b", 1, [lag])
    retrust.retrust(d2, dry_run=False)
    p = load_run(d2).engines["e"].points[0]
    assert p.status == "untrusted" and p.trust.reasons == [lag] and p.trust.server_merged_requests == 1
