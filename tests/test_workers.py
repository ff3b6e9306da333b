"""Client worker processes (serve/workers.py): the split of a point over N processes, against the fake server (a
client-side test: it measures the client, not an engine), and through `llmcompare serve-bench` for what a user
sees: Ctrl-C, SIGTERM and a worker that dies leave no process behind and lose no finished request."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import fakeserver
import pytest
import yaml
from test_point import (
    StopAfter,  # load.converge decided after N requests (the stopping is tested, not the rule)
)

from llmcompare.engines.server import free_port
from llmcompare.schema.request import RequestSpec
from llmcompare.schema.run import LoadKey
from llmcompare.serve import loadgen, pipe, workers


def test_closed_loop_split_keeps_c_in_flight_over_all_workers():
    plan = workers.assign(LoadKey(concurrency=5), 23, 2, None)
    assert sorted(i for w in plan for i, _ in w) == list(range(23))
    assert workers.shares(5, 2) == [3, 2] and workers.shares(4, 8) == [1, 1, 1, 1, 0, 0, 0, 0]
    # worker w owns the requests whose slot (i % c) it owns: slots 0, 2, 4 -> worker 0; 1, 3 -> worker 1
    assert [i for i, _ in plan[1]] == [i for i in range(23) if (i % 5) % 2 == 1]


def test_open_loop_schedule_does_not_depend_on_the_worker_count():
    key = LoadKey(request_rate=20.0)
    due = loadgen.arrivals(40, 20.0, 1.0, seed=3)
    for n in (1, 2, 3, 7):
        got = sorted((i, at) for w in workers.assign(key, 40, n, due) for i, at in w)
        assert got == list(enumerate(due))


def test_auto_picks_workers_from_the_event_rate_and_half_the_cores():
    keys = [LoadKey(concurrency=c) for c in (1, 64, 256, 512)]
    # 512 in flight at one chunk per 5 ms: 102,400 events/s, at half of EVENTS_PER_WORKER each
    want = -(-102400 // (0.5 * workers.EVENTS_PER_WORKER))
    assert workers.auto_workers(keys, 256, cores=64) == want
    assert workers.auto_workers(keys, 256, cores=16) == 8  # half the cores: the engine's processes need the rest
    assert workers.auto_workers(keys, 256, cores=2) == 1
    assert workers.auto_workers([LoadKey(concurrency=1)], 256, cores=16) == 1
    assert workers.auto_workers([LoadKey(request_rate=10.0)], 64, cores=16) == 1  # 640 events/s


def test_auto_sizes_a_capacity_search_by_its_highest_probe():
    """A capacity search's probes are not in the plan (load.concurrency=[]): auto must size the pool for
    max_rate at the workload's mean output length, not fall back to 1 process (as it did on the H100 run)."""
    from llmcompare.scenario.loader import load
    from llmcompare.scenario.overrides import parse_set
    from llmcompare.serve.measure import run_plan, worker_count
    from llmcompare.workload import synthetic

    s = load("qwen-highload-h200", parse_set(["load.concurrency=[]", "load.interleave=false",
                                              "load.capacity={min_rate: 16, max_rate: 64}", "slo={ttft_ms: 2000}"]))
    assert run_plan(s) == []
    mean_out = synthetic.synthetic_stats(0, 1024, s.workload.sigma_input, s.workload.sigma_output,
                                         s.workload.max_total_len)["mean_output_tokens"]
    want = -(-64 * round(mean_out) // (0.5 * workers.EVENTS_PER_WORKER))  # ~21,600 events/s at 64 req/s
    assert want >= 5
    assert worker_count(s, run_plan(s), cores=16) == want
    assert worker_count(s, run_plan(s), cores=2) == 1
    s.load.client_workers = 3
    assert worker_count(s, run_plan(s), cores=16) == 3


@pytest.fixture
def fake(tmp_path):
    port = free_port("127.0.0.1")
    p = fakeserver.launch(port, "--ttft-ms", "5", "--itl-ms", "5")
    yield f"http://127.0.0.1:{port}"
    p.terminate()
    p.wait()


def _req(base: str) -> loadgen.Request:
    return loadgen.Request(f"{base}/v1/completions", fakeserver.MODEL, {"stream": True, "ignore_eos": True}, 30.0)


def _specs(n: int, out: int = 16) -> list[RequestSpec]:
    return [RequestSpec(f"p{i}", 16, out) for i in range(n)]


def test_a_closed_loop_point_over_two_workers_records_every_request(fake):
    async def main():
        saved = []
        with workers.WorkerPool(2, _req(fake)) as pool:
            floors = await pool.idle_floors()
            run = await pool.run_point(LoadKey(concurrency=4), _specs(20), on_record=saved.append)
            return run, saved, floors, [w.proc for w in pool.workers]

    run, saved, floors, procs = asyncio.run(main())
    assert len(floors) == 2 and all(0 <= f <= loadgen.FLOOR_CAP_MS for f in floors)
    assert not run.partial and len(run.records) == 20 == len(saved)
    assert sorted(r.index for r in run.records) == list(range(20)) and all(r.success for r in run.records)
    assert [w["requests"] for w in run.workers] == [10, 10] and run.client_health()["loop_lag_samples"] > 0
    # the CPU each process spent over the point, as a share of one core (the parent's, then each worker's)
    assert 0 < run.client_health()["cpu_share"] < 2.5 and run.cpu_s > 0
    assert all(0 < w["cpu_share"] < 2.5 and w["cpu_s"] > 0 for w in run.workers)
    # never more than 4 in flight, over both processes (one clock: CLOCK_MONOTONIC)
    events = sorted([(r.dispatch_s, 1) for r in run.records] + [(r.dispatch_s + r.e2el_ms / 1000, -1)
                                                                 for r in run.records])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 4
    assert not any(p.is_alive() for p in procs)


def test_load_converge_stops_every_worker_sending_and_lets_the_requests_in_flight_finish(fake):
    async def main():
        with workers.WorkerPool(2, _req(fake)) as pool:
            return await pool.run_point(LoadKey(concurrency=4), _specs(4000), conv=StopAfter(8))

    run = asyncio.run(main())
    assert run.converge_stop == "converged" and 8 <= len(run.records) < 4000
    assert not run.partial and all(r.success and not r.cut_off for r in run.records)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_an_open_loop_point_sends_at_the_global_schedule_never_early(fake, loop):
    key, specs = LoadKey(request_rate=40.0), _specs(16, 4)

    async def main():
        with workers.WorkerPool(3, _req(fake), loop=loop) as pool:
            return await pool.run_point(key, specs, burstiness=1.0, seed=5)

    run = asyncio.run(main())
    due = loadgen.arrivals(16, 40.0, 1.0, 5)
    assert sorted((r.index, r.scheduled_s) for r in run.records) == list(enumerate(due))
    # never before its due time (uvloop's timers fire up to ~1 ms early: loadgen.sleep_until sleeps again)
    assert all(r.dispatch_s >= r.scheduled_s and r.queue_ms >= 0 for r in run.records)
    assert {w["loop"].split()[0] for w in run.workers} == {loop}


def test_sleep_until_never_returns_early_on_uvloop():
    import uvloop

    async def main():
        early = []
        for k in range(60):
            at = time.perf_counter() + 0.0005 + (k % 7) * 0.0013
            await loadgen.sleep_until(at)
            early.append(at - time.perf_counter())
        return early

    assert max(uvloop.run(main())) <= 0


def test_an_unknown_event_loop_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="valid: auto, uvloop, asyncio"):
        workers.WorkerPool(2, _req("http://127.0.0.1:1"), loop="trio")


def test_a_worker_that_dies_mid_point_cuts_off_its_requests_and_the_point_is_partial(tmp_path):
    port = free_port("127.0.0.1")
    p = fakeserver.launch(port, "--ttft-ms", "20", "--itl-ms", "50")  # 64 tokens: 3.2 s a request
    try:
        async def main():
            with workers.WorkerPool(2, _req(f"http://127.0.0.1:{port}")) as pool:
                victim = pool.workers[1].proc
                await pool.idle_floors()  # both workers up (a loaded machine spawns slowly)
                asyncio.get_running_loop().call_later(1.5, os.kill, victim.pid, signal.SIGKILL)
                run = await pool.run_point(LoadKey(concurrency=4), _specs(8, 64))
                again = await pool.run_point(LoadKey(concurrency=2), _specs(2, 2))  # the pool replaced it
                return run, again, [w.proc for w in pool.workers] + [victim]

        run, again, procs = asyncio.run(main())
    finally:
        p.terminate()
        p.wait()
    assert run.partial and run.notes and run.notes[0].startswith("client worker 1 died")
    cut = [r for r in run.records if r.cut_off]
    assert len(cut) >= 2 and all("client worker 1 died" in r.error or "died" in r.error for r in cut)
    assert run.unfinished == 8 - sum(1 for r in run.records if not r.cut_off)
    assert not again.partial and len(again.records) == 2
    assert not any(pr.is_alive() for pr in procs)


def _tagged(tag: str) -> list[int]:
    """Pids of live processes whose environment carries the test's tag (the CLI and everything it started)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_mid_point_keeps_what_finished_and_leaves_no_worker(tmp_path, tiny_model, sig):
    port = free_port("127.0.0.1")
    server = fakeserver.launch(port, "--ttft-ms", "10", "--itl-ms", "30")
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({
        "name": "w", "model": {"path": tiny_model},
        "engines": [{"name": "fake", "kind": "openai", "base_url": f"http://127.0.0.1:{port}"}],
        "workload": {"input_len": 8, "output_len": 32, "num_prompts": 400},
        "load": {"concurrency": [8], "warmup_requests": 0, "metrics_interval_s": 0, "client_workers": 2},
        "output_dir": str(tmp_path / "runs")}))
    tag = f"LLMC_TEST_{uuid.uuid4().hex}"
    env = {**os.environ, "LLMC_TEST_TAG": tag}
    try:
        p = subprocess.Popen([sys.executable, "-m", "llmcompare.cli", "serve-bench", str(f)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        req = None
        end = time.monotonic() + 120
        while time.monotonic() < end and req is None:
            files = list((tmp_path / "runs").glob("*/fake.requests.jsonl"))
            if files and len(files[0].read_text().splitlines()) >= 10:
                req = files[0]
            time.sleep(0.2)
        assert req is not None, "no request finished"
        assert len(_tagged(tag)) >= 3  # the CLI and its two workers
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        server.terminate()
        server.wait()
    assert p.returncode == 130, err[-2000:]
    run = json.loads((req.parent / "run.json").read_text())
    (pt,) = run["engines"]["fake"]["points"]
    lines = req.read_text().splitlines()
    assert pt["status"] == "interrupted" and len(lines) >= 10 and run["status"] == "interrupted"
    assert all(json.loads(ln)["success"] for ln in lines)
    time.sleep(0.5)
    assert _tagged(tag) == []


def test_the_run_records_the_clients_http_library_and_event_loop():
    from importlib import metadata

    from llmcompare.setup import host

    stack = host.host_info()["client"]
    assert stack == {"aiohttp": metadata.version("aiohttp"), "uvloop": metadata.version("uvloop")}


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_message_that_arrives_in_two_pieces_is_read_whole(loop):
    # multiprocessing sends a message over 16 KiB as two writes (its length, then the bytes: a 'point' message of
    # 256 prompts is ~23 KB); uvloop's add_reader leaves the pipe non-blocking, and a recv between the two writes
    # failed (BlockingIOError: the worker took it for its parent's end and exited, and the point was lost)
    import multiprocessing as mp
    import pickle
    import struct
    import threading

    import uvloop

    reader, writer = mp.Pipe(duplex=False)
    obj = ("point", "x" * 30000)
    buf = pickle.dumps(obj)

    def send():
        time.sleep(0.2)
        writer.send(("floor",))  # waited for on the loop (add_reader): under uvloop the pipe is non-blocking now
        time.sleep(0.2)
        os.write(writer.fileno(), struct.pack("!i", len(buf)))
        time.sleep(0.2)
        os.write(writer.fileno(), buf)

    async def main():
        return [await pipe.recv(reader, timeout_s=5), await pipe.recv(reader, timeout_s=5)]

    threading.Thread(target=send, daemon=True).start()
    assert (uvloop.run if loop == "uvloop" else asyncio.run)(main()) == [("floor",), obj]


def test_a_worker_that_cannot_read_its_parent_says_why_before_it_exits(monkeypatch):
    sent = []

    class Conn:  # a pipe whose read fails with an error that is not the parent's end
        def send(self, msg):
            sent.append(msg)

    async def broken(conn, timeout_s=None):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(workers, "recv", broken)
    asyncio.run(workers._serve_jobs(Conn(), _req("http://127.0.0.1:1"), "asyncio"))
    assert sent == [("failed", "reading from the parent: OSError: [Errno 5] Input/output error")]


def _late_death(after_s: float):
    """abort() for a server whose connections are refused at once but whose death shows only after_s later (a
    SIGKILLed server refuses connections before its exit can be read)."""
    t0 = time.monotonic()
    return lambda: "server gone" if time.monotonic() - t0 > after_s else None


def test_requests_refused_before_the_servers_death_shows_are_cut_off_not_failures():
    port = free_port("127.0.0.1")  # nothing listens: every request is refused at once, with no HTTP status

    async def main():
        with workers.WorkerPool(2, _req(f"http://127.0.0.1:{port}")) as pool:
            await pool.idle_floors()
            # the point starts START_AHEAD_S after the call; its 40 refusals take a few ms, its death shows later
            return await pool.run_point(LoadKey(concurrency=4), _specs(40, 8),
                                        abort=_late_death(workers.START_AHEAD_S + 0.1))

    run = asyncio.run(main())
    assert run.partial and run.abort_reason == "server gone"
    assert run.records and all(r.cut_off and r.error.startswith("cut off: the engine died") for r in run.records)


def test_in_process_requests_refused_before_the_servers_death_shows_are_cut_off():
    port = free_port("127.0.0.1")

    async def main():
        async with aiohttp.ClientSession() as s:
            return await loadgen.run_point(s, _req(f"http://127.0.0.1:{port}"), LoadKey(concurrency=4),
                                           _specs(40, 8), abort=_late_death(0.3))

    run = asyncio.run(main())
    assert run.partial and run.abort_reason == "server gone"
    assert run.records and all(r.cut_off for r in run.records) and len(run.records) <= 4  # then nothing more is sent


def test_refused_requests_of_a_server_that_stays_up_are_its_failures_after_the_grace():
    port = free_port("127.0.0.1")

    async def main():
        async with aiohttp.ClientSession() as s:
            return await loadgen.run_point(s, _req(f"http://127.0.0.1:{port}"), LoadKey(concurrency=2),
                                           _specs(4, 8), abort=lambda: None)

    t = time.monotonic()
    run = asyncio.run(main())
    assert not run.partial and len(run.records) == 4
    assert all(not r.success and not r.cut_off and r.status is None for r in run.records)
    assert time.monotonic() - t >= 2 * loadgen.DEATH_GRACE_S  # two waves of 2, each waiting its grace
