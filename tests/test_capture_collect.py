"""Capture.collect waits for the engine's traces without blocking the event loop: other tasks (the server's death
watch, the metrics sampler, Ctrl-C) keep running while a trace is awaited, gzipped and analysed."""

import asyncio
import gzip
import json

from llmcompare.schema.files import RunFile
from llmcompare.schema.run import ServeRun
from llmcompare.serve import capture


def test_collect_waits_without_blocking_the_event_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "WRITE_WAIT_S", 5.0)
    hook = tmp_path / ".e.capture"
    hook.mkdir()
    rf = RunFile(tmp_path, ServeRun())
    cap = capture.Capture(hook, pgid=0)
    ticks = []

    async def ticker():
        while True:
            ticks.append(asyncio.get_running_loop().time())
            await asyncio.sleep(0.01)

    async def engine_writes_its_trace_late():
        await asyncio.sleep(0.5)
        (hook / "trace-123.json").write_text(json.dumps({"traceEvents": []}))
        (hook / "trace-123.meta.json").write_text(json.dumps({"title": "VLLM::EngineCore", "trace": "trace-123.json"}))

    async def main():
        t = asyncio.create_task(ticker())
        w = asyncio.create_task(engine_writes_its_trace_late())
        out = await cap.collect(rf, "e", 0, [123])
        t.cancel()
        await w
        return out

    (tf,) = asyncio.run(main())
    assert len(ticks) > 20, "the event loop was blocked while the trace was awaited"
    assert tf.file == "e.profile-p0.pid123.trace.json.gz" and (tmp_path / tf.file).exists()
    assert json.loads(gzip.open(tmp_path / tf.file).read()) == {"traceEvents": []}
    assert not (hook / "trace-123.json").exists()


def test_a_trace_that_never_comes_is_an_error_after_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "WRITE_WAIT_S", 0.3)
    hook = tmp_path / ".e.capture"
    hook.mkdir()
    (tf,) = asyncio.run(capture.Capture(hook, pgid=0).collect(RunFile(tmp_path, ServeRun()), "e", 0, [7]))
    assert tf.error == "no trace within 0.3 s of the stop" and tf.file == ""


def test_every_process_title_recorded_on_a_gpu_gets_its_kinds_role():
    # the titles of every profiled process in the committed GPU runs (H200 and H100), classified again by each
    # engine kind's process_roles (registry.py): none is "other" (session 27's SGLang pass recorded all three of
    # its processes as "other", before SGLang's titles were in its registry entry), and the known ones get theirs
    import glob
    from pathlib import Path

    from llmcompare.engines import registry

    known = {("lmdeploy", "python3 -m lmdeploy serve api_server"): "api-server",
             ("vllm", "python3 -m vllm.entrypoints.cli.main serve"): "api-server",
             ("vllm", "VLLM::EngineCore"): "engine-core",
             ("sglang", "python3 -m sglang.launch_server --model-path"): "api-server",
             ("sglang", "sglang::scheduler"): "scheduler", ("sglang", "sglang::detokenizer"): "detokenizer"}
    root = Path(__file__).resolve().parent.parent / "reports"
    got = {}
    for f in glob.glob(str(root / "*" / "*" / "run.json")):
        engines = json.loads(Path(f).read_text()).get("engines")
        for e in engines.values() if isinstance(engines, dict) else ():
            for p in e.get("profiles") or []:
                for t in p.get("traces", []):
                    r = capture.role(t["title"], registry.kind(e["kind"]).process_roles)
                    got[(e["kind"], t["title"].split(" /")[0])] = r
    assert known.keys() <= got.keys()  # every kind's processes are on file
    assert {k: r for k, r in got.items() if r == "other" or k in known} == known
