"""The load generator: one aiohttp session, one load point at a time, an explicit concurrency model.

  closed loop, concurrency c:  c workers, each sends its next request as soon as its last one finished.
  open loop, request rate r:   arrivals on a seeded schedule (gamma intervals with shape `burstiness` and
                               mean 1/r; burstiness 1 is Poisson; r = inf sends all at t=0), each request
                               sent at its arrival, or when a slot frees if max_concurrency caps the flight.
queue_ms records how long a request waited in the client past its due time (slots, or a loop running late).
Warm-up requests run before the clock starts and are not recorded. Each finished request is handed to
`on_record` at once (saved as the run goes); failures are recorded, never raised.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from tqdm import tqdm

from .client import RequestRecord, completion_body, stream_completion
from .scenario import Load, Workload
from .workload import RequestSpec


@dataclass
class LoadPoint:
    label: str  # "c=8" or "rate=4" (or "rate=inf")
    concurrency: int | None = None
    request_rate: float | None = None
    max_concurrency: int | None = None
    num_prompts: int = 0


@dataclass
class PointRun:
    records: list[RequestRecord] = field(default_factory=list)
    duration_s: float = 0.0
    partial: bool = False  # stopped before every request finished
    abort_reason: str | None = None
    unfinished: int = 0  # requests sent or due but not finished when it stopped
    loop_lag_ms: list[float] = field(default_factory=list)  # how late 10 ms sleeps of the client's loop woke up

    def client_health(self) -> dict:
        """The client's own load: a loop that wakes late delays every timestamp it takes by as much."""
        lag = sorted(self.loop_lag_ms)
        if not lag:
            return {}
        return {"loop_lag_p50_ms": lag[len(lag) // 2], "loop_lag_p99_ms": _p99(lag), "loop_lag_max_ms": lag[-1],
                "loop_lag_samples": len(lag)}


def _p99(sorted_values: list[float]) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * 0.99))]


async def idle_loop_lag(seconds: float = 0.5) -> float:
    """p99 lateness (ms) of 10 ms sleeps with nothing in flight: the floor of the loop-lag measurement (epoll
    waits in whole milliseconds, so a timer can wake up to ~1 ms late on an idle loop)."""
    lags = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append((time.perf_counter() - t - 0.01) * 1000.0)
    return _p99(sorted(lags))


def plan(load: Load, workload: Workload) -> list[LoadPoint]:
    def n_for(c: int | None) -> int:
        n = workload.num_prompts
        if c and workload.prompts_per_concurrency:
            n = max(n, workload.prompts_per_concurrency * c)
        return n

    pts = [LoadPoint(f"c={c}", concurrency=c, num_prompts=n_for(c)) for c in load.concurrency]
    for r in load.request_rate:
        label = "rate=inf" if math.isinf(r) else f"rate={r:g}"
        pts.append(LoadPoint(label, request_rate=r, max_concurrency=load.max_concurrency,
                             num_prompts=n_for(load.max_concurrency)))
    return pts


def arrivals(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Arrival offsets in seconds: cumulative gamma(shape=burstiness, scale=1/(rate*burstiness)) gaps,
    which have mean 1/rate for any burstiness (vLLM bench serve's model). The first request goes at 0."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return out


async def run_point(session: aiohttp.ClientSession, url: str, model: str, point: LoadPoint,
                    specs: list[RequestSpec], workload: Workload, load: Load, seed: int,
                    on_record: Callable[[RequestRecord], None] | None = None,
                    abort: Callable[[], str | None] | None = None, desc: str | None = None) -> PointRun:
    run = PointRun()
    n = len(specs)
    bar = tqdm(total=n, desc=desc, unit="req", leave=True, dynamic_ncols=True, disable=desc is None)
    stop = asyncio.Event()  # set when the server is gone: send nothing more, keep what finished

    def check_abort() -> None:
        if abort is not None and not stop.is_set() and (reason := abort()):
            run.abort_reason = reason
            stop.set()

    async def one(i: int, spec: RequestSpec, scheduled_s: float, t0: float) -> None:
        if stop.is_set():
            return
        rec = RequestRecord(i, spec.prompt_len, spec.output_len, scheduled_s=scheduled_s)
        body = completion_body(model, spec, workload.ignore_eos, workload.temperature)
        await stream_completion(session, url, body, rec, t0, load.request_timeout_s)
        if not rec.success:
            check_abort()  # a failure may be the server dying: such requests are not the engine's results
            if stop.is_set():
                return
        run.records.append(rec)
        bar.update(1)
        if on_record is not None:
            on_record(rec)

    async def closed(c: int, t0: float) -> None:
        it = iter(enumerate(specs))

        async def worker() -> None:
            for i, spec in it:  # one iterator shared by all workers (single-threaded: no races)
                if stop.is_set():
                    return
                await one(i, spec, time.perf_counter() - t0, t0)

        await asyncio.gather(*(worker() for _ in range(min(c, n))))

    async def open_(rate: float, cap: int | None, t0: float) -> None:
        sem = asyncio.Semaphore(cap) if cap else None
        tasks = []

        async def gated(i: int, spec: RequestSpec, at: float) -> None:
            if sem is None:
                return await one(i, spec, at, t0)
            async with sem:
                await one(i, spec, at, t0)

        for i, (spec, at) in enumerate(zip(specs, arrivals(n, rate, load.burstiness, seed), strict=True)):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if stop.is_set():
                break
            tasks.append(asyncio.create_task(gated(i, spec, at)))
        await asyncio.gather(*tasks)

    async def watch() -> None:
        last_check = time.perf_counter()
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            run.loop_lag_ms.append((time.perf_counter() - t - 0.01) * 1000.0)
            if time.perf_counter() - last_check > 0.2:
                last_check = time.perf_counter()
                check_abort()

    # no cyclic-GC pauses inside the measurement: a gen-2 pass over a point's records can stall the loop for
    # milliseconds, and every timestamp taken after it carries the stall (collected once the point ends)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    t0 = time.perf_counter()
    if point.concurrency is not None:
        main = asyncio.create_task(closed(point.concurrency, t0))
    else:
        main = asyncio.create_task(open_(point.request_rate, point.max_concurrency, t0))
    watcher = asyncio.create_task(watch())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({main, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if main.done():
            main.result()
    finally:
        for t in (watcher, stopped, main):
            t.cancel()  # on abort or Ctrl-C: requests still in flight are not recorded
        await asyncio.gather(watcher, stopped, main, return_exceptions=True)
        run.duration_s = time.perf_counter() - t0  # vLLM: from the start to the last request's end
        if gc_was_enabled:
            gc.enable()
            gc.collect()
        if run.abort_reason or len(run.records) < n:
            run.partial = True
            run.unfinished = n - len(run.records)
        bar.close()
    return run


async def warmup(session: aiohttp.ClientSession, url: str, model: str, point: LoadPoint,
                 specs: list[RequestSpec], workload: Workload, load: Load,
                 abort: Callable[[], str | None] | None = None) -> PointRun:
    """Warm-up at the point's concurrency (at most len(specs) in flight); nothing is recorded."""
    c = point.concurrency or point.max_concurrency or len(specs)
    wp = LoadPoint("warmup", concurrency=max(1, min(c, len(specs))), num_prompts=len(specs))
    return await run_point(session, url, model, wp, specs, workload, load, seed=0, abort=abort)
