"""The open loop's arrival schedule: its statistics, the same schedule as vLLM `bench serve` (its own function,
run in the vLLM venv), burstiness inf, and the schedule as the load loop sends it (through the CLI, against
tests/fakeserver.py)."""

import json
import math
import subprocess
import textwrap

import fakeserver  # tests/fakeserver.py
import numpy as np
import pytest
import yaml

from llmcompare.engines.server import free_port
from llmcompare.serve.loadgen import arrivals


def gaps(ts: list[float]) -> np.ndarray:
    return np.diff([0.0, *ts])


@pytest.mark.parametrize("burstiness", [0.1, 0.5, 1.0, 2.0, 10.0, 1000.0])
@pytest.mark.parametrize("rate", [0.5, 8.0, 300.0])
def test_mean_gap_is_one_over_rate_for_any_burstiness(rate, burstiness):
    n = 4000
    ts = arrivals(n, rate, burstiness, seed=7)
    g = gaps(ts)
    assert len(ts) == n and (g >= 0).all() and ts == sorted(ts)
    # the n gaps (the first from the start) are scaled to sum to n / rate, as vLLM does: exactly 1/rate on average
    assert ts[-1] == pytest.approx(n / rate, rel=1e-12)
    assert g.mean() == pytest.approx(1 / rate, rel=1e-12)
    # and the scaling only corrects sampling noise: any half of the schedule already has mean ~1/rate (the mean
    # of 2000 gamma gaps has relative std 1 / sqrt(2000 * burstiness) <= 7%; 5 sigma)
    tol = 5 / math.sqrt(2000 * burstiness)
    assert g[:2000].mean() == pytest.approx(1 / rate, rel=tol)
    assert g[2000:].mean() == pytest.approx(1 / rate, rel=tol)
    # burstiness is the gamma shape: coefficient of variation 1 / sqrt(shape) (1 for Poisson)
    assert g.std() / g.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.15)


def test_schedule_is_seeded_and_leaves_numpy_global_state_alone():
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = arrivals(50, 4.0, 1.0, seed=1)
    assert (np.random.get_state()[1] == before).all()
    assert a == arrivals(50, 4.0, 1.0, seed=1)
    assert a != arrivals(50, 4.0, 1.0, seed=2)


def test_burstiness_inf_is_the_regular_schedule_and_the_limit_of_large_shapes():
    assert arrivals(5, 2.0, math.inf, seed=0) == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert arrivals(3, 2.0, math.inf, seed=0) == arrivals(3, 2.0, math.inf, seed=99)  # nothing random left
    # gamma with a huge shape has almost no spread: the schedule tends to the regular one
    assert arrivals(200, 10.0, 1e8, seed=3) == pytest.approx(arrivals(200, 10.0, math.inf, seed=3), abs=1e-3)


def test_rate_inf_sends_everything_at_once_and_empty_is_empty():
    assert arrivals(4, math.inf, 1.0, seed=0) == [0.0] * 4
    assert arrivals(4, math.inf, math.inf, seed=0) == [0.0] * 4
    assert arrivals(0, 3.0, 1.0, seed=0) == []
    assert arrivals(1, 3.0, 0.5, seed=0) == [pytest.approx(1 / 3)]


# vLLM's own get_request, run as `vllm bench serve` runs it (main_async seeds python's and numpy's global RNGs
# with --seed, then iterates get_request), on a fake clock: time.time stands still at 0 and asyncio.sleep
# records what it was asked to wait, which is then exactly each request's offset from the start.
VLLM_SCHEDULE = textwrap.dedent("""
    import asyncio, json, random, sys
    import numpy as np
    import vllm.benchmarks.serve as serve

    slept = []
    async def fake_sleep(s):
        slept.append(s)
    serve.asyncio.sleep = fake_sleep
    serve.time.time = lambda: 0.0

    async def schedule(n, rate, burstiness, seed):
        random.seed(seed)
        np.random.seed(seed)
        out, seen = [], len(slept)
        async for _ in serve.get_request(list(range(n)), rate, burstiness):
            out.append(slept[-1] if len(slept) > seen else 0.0)  # a request due at 0 is not slept for
            seen = len(slept)
        return out

    cases = json.loads(sys.argv[1])
    res = [asyncio.run(schedule(n, float(r), float(b), s)) for n, r, b, s in cases]
    print("SCHEDULES " + json.dumps(res))
""")

CASES = [(40, 4.0, 1.0, 0), (40, 4.0, 1.0, 1), (100, 0.7, 0.3, 42), (64, 250.0, 5.0, 3), (10, 1.0, "inf", 0),
         (7, "inf", 1.0, 0), (1, 2.0, 1.0, 0), (2000, 30.0, 0.05, 11)]


def test_same_schedule_as_vllm_bench_serve(vllm_py):
    p = subprocess.run([vllm_py, "-c", VLLM_SCHEDULE, json.dumps(CASES)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("SCHEDULES ")]
    theirs = json.loads(line.split(" ", 1)[1])
    for (n, rate, burst, seed), want in zip(CASES, theirs, strict=True):
        got = arrivals(n, float(rate), float(burst), seed)
        assert len(want) == n
        # same numpy draws, same sum, same scaling: equal to the last bit, or within rounding of it
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (n, rate, burst, seed)


# ---- the schedule as the load loop sends it, through the CLI ---------------------------------------------------
@pytest.fixture
def fake():
    port = free_port()
    # tokens 20 ms apart: a client loop a few ms late on a busy 2-core machine is well inside the timing it checks
    proc = fakeserver.launch(port, "--ttft-ms", "5", "--itl-ms", "20")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait()


def run_rate_point(tmp_path, tiny_model, cli, url, **load) -> list[dict]:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({
        "name": "rate", "model": {"path": tiny_model}, "engines": [{"name": "fake", "kind": "openai", "base_url": url}],
        "workload": {"input_len": 8, "output_len": 4, "num_prompts": 20},
        "load": {"concurrency": [], "warmup_requests": 0, "metrics_interval_s": 0, **load},
        "output_dir": str(tmp_path / "runs")}))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 4), p.stderr[-2000:]  # 4: a point untrusted (a loaded machine); not the subject
    (d,) = (tmp_path / "runs").iterdir()
    recs = [json.loads(ln) for ln in (d / "fake.requests.jsonl").read_text().splitlines()]
    last = max(r.get("attempt", 1) for r in recs)  # a point measured again keeps only its last attempt here
    return [r for r in recs if r.get("attempt", 1) == last]


def test_open_loop_sends_the_regular_schedule_of_burstiness_inf(tmp_path, tiny_model, cli, fake):
    recs = sorted(run_rate_point(tmp_path, tiny_model, cli, fake, request_rate=[40.0], burstiness=math.inf),
                  key=lambda r: r["index"])
    assert len(recs) == 20 and all(r["success"] for r in recs)
    assert [r["scheduled_s"] for r in recs] == pytest.approx([(i + 1) / 40 for i in range(20)], abs=1e-9)
    # each request leaves at its due time (a loop that runs late shows as queue time, here a few ms at most)
    assert max(r["queue_ms"] for r in recs) < 20, [r["queue_ms"] for r in recs]


def test_open_loop_poisson_schedule_ends_at_n_over_rate(tmp_path, tiny_model, cli, fake):
    recs = run_rate_point(tmp_path, tiny_model, cli, fake, request_rate=[50.0], burstiness=1.0)
    due = sorted(r["scheduled_s"] for r in recs)
    assert len(due) == 20 and due[-1] == pytest.approx(20 / 50, rel=1e-9)
    assert len(set(np.round(np.diff(due), 9))) > 10  # not regular


def test_one_stall_while_the_idle_floor_is_measured_does_not_poison_it():
    """Issue 27 item 1: a 1.5 s stop of the client in the floor's measurement gave a floor of 1,229.6 ms, which
    then excused every later point's lag. One stall moves one of the windows, not their median, and never the cap."""
    import asyncio
    import time

    from llmcompare.serve import loadgen

    async def stalled() -> float:
        asyncio.get_running_loop().call_later(0.03, time.sleep, 1.5)  # blocks the loop inside the first window
        return await loadgen.idle_loop_lag()

    t = time.perf_counter()
    floor = asyncio.run(stalled())
    assert time.perf_counter() - t >= 1.5  # the stall happened while the floor was measured
    assert 0.0 <= floor <= loadgen.FLOOR_CAP_MS
