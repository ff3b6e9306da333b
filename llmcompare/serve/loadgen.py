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
import contextlib
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import numpy as np
from tqdm import tqdm

from llmcompare.schema.request import RequestRecord, RequestSpec
from llmcompare.schema.run import LoadKey
from llmcompare.schema.scenario import Cell
from llmcompare.serve import converge
from llmcompare.serve.client import completion_body, stream_completion

STOP_GRACE_S = 2.0  # after a stop, how long requests in flight get to fail and be recorded as cut off
# A request that failed without an HTTP answer (refused, reset, its stream cut short) may be the server dying: a
# SIGKILLed server refuses connections some milliseconds before its exit can be read, and a closed loop can fail
# every request it has left in that time (CI, session 27: a point of 64 recorded as failures, not cut off). Such a
# failure waits up to this long for the death to show before it counts as the engine's.
DEATH_GRACE_S = 1.0


def could_be_death(rec: RequestRecord) -> bool:
    """A failure with no HTTP status other than 200 and no timeout: what a server that died leaves."""
    return not rec.success and rec.status in (None, 200) and not (rec.error or "").startswith("timed out")


@dataclass
class LoadPoint:
    """One entry of the plan: a load key and how many requests it sends (before min_duration_s)."""

    index: int
    key: LoadKey
    num_prompts: int
    num_prompts_why: str = ""


@dataclass
class Request:
    """What the load loop needs to send one point's requests: no scenario objects."""

    url: str  # .../v1/completions
    model: str  # the served model name
    body: dict  # the engine's body template (sampling, ignore_eos, streaming): see serve/client.body_template
    timeout_s: float  # per request


@dataclass
class PointRun:
    records: list[RequestRecord] = field(default_factory=list)  # finished ones, and those cut off
    duration_s: float = 0.0  # from the start to the last request's end (vLLM's duration)
    partial: bool = False  # stopped before every request finished
    abort_reason: str | None = None
    unfinished: int = 0  # requests never sent, or cut off in flight, when it stopped
    loop_lag_ms: list[float] = field(default_factory=list)  # how late 10 ms sleeps of the client's loop woke up
    t0: float = 0.0  # the point's start on the perf_counter clock (CLOCK_MONOTONIC: one clock for every process)
    workers: list[dict] = field(default_factory=list)  # per client worker process: its requests and loop lag
    notes: list[str] = field(default_factory=list)  # what made it partial besides the server (a worker died)
    converge_stop: str | None = None  # load.converge stopped the sending: "converged" | "time up" (serve/converge.py); None: it never did
    # CPU seconds this process spent over the point (time.process_time, all its threads): the in-process client's,
    # or the workers' parent's (each worker's own in `workers`); over duration_s, 1.0 is a whole core kept busy
    cpu_s: float | None = None

    def client_health(self) -> dict:
        """The client's own load: a loop that wakes late delays every timestamp it takes by as much. With worker
        processes, the loop lag of all of them together (each worker's own in `workers`)."""
        health = lag_summary(sorted(self.loop_lag_ms))
        if self.cpu_s is not None and self.duration_s:
            health["cpu_share"] = round(self.cpu_s / self.duration_s, 3)
        return health


def lag_summary(lag: list[float]) -> dict:
    """p50, p99, max (ms) and count of sorted loop-lag samples; {} when there are none."""
    if not lag:
        return {}
    return {"loop_lag_p50_ms": lag[len(lag) // 2], "loop_lag_p99_ms": _p99(lag), "loop_lag_max_ms": lag[-1],
            "loop_lag_samples": len(lag)}


def _p99(sorted_values: list[float]) -> float:
    return float(np.percentile(sorted_values, 99))


FLOOR_WINDOWS = 5  # short windows the idle floor is measured in
FLOOR_WINDOW_S = 0.1
FLOOR_CAP_MS = 2.0  # an idle loop's timers wake within ~1 ms (epoll's granularity): more is the machine, not idle


async def idle_loop_lag(windows: int = FLOOR_WINDOWS, window_s: float = FLOOR_WINDOW_S) -> float:
    """The floor of the loop-lag measurement (ms): with nothing in flight, the p99 lateness of 10 ms sleeps in
    each of `windows` short windows, their median, at most FLOOR_CAP_MS. One stall of the process while it is
    measured (a neighbour's burst, a server starting) moves one window, not the median, and never the cap: a
    poisoned floor cannot pass a point whose loop was late (analysis/trust.py)."""
    per_window = []
    for _ in range(windows):
        lags = []
        end = time.perf_counter() + window_s
        while time.perf_counter() < end:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append((time.perf_counter() - t - 0.01) * 1000.0)
        per_window.append(_p99(sorted(lags)))
    return min(float(np.median(per_window)), FLOOR_CAP_MS)


def plan(concurrency: list[int], request_rate: list[float], max_concurrency: int | None, num_prompts: int,
         prompts_per_concurrency: int, cells: list[tuple[int | None, ...]] | None = None) -> list[LoadPoint]:
    """Every workload cell (a scenario.Cell: input_len, output_len[, prefix_len, num_prefixes]; outer, in the
    order given) at every load point: closed-loop points first, then open-loop ones, in the order given. Indices
    number the whole grid."""
    def n_for(c: int | None) -> tuple[int, str]:
        n = prompts_per_concurrency * c if c else 0
        if n > num_prompts:
            return n, f"prompts_per_concurrency {prompts_per_concurrency} x {c}"
        return num_prompts, "num_prompts"

    grid = [Cell(*x) for x in cells or [Cell(None, None)]]
    keys = [LoadKey(concurrency=c, **x._asdict()) for x in grid for c in concurrency]
    keys += [LoadKey(request_rate=r, max_concurrency=max_concurrency, **x._asdict())
             for x in grid for r in request_rate]
    keys.sort(key=lambda k: grid.index(Cell(*k.cell)))  # stable: cell outer
    return [LoadPoint(i, k, *n_for(k.concurrency or k.max_concurrency)) for i, k in enumerate(keys)]


def prompts_for_duration(point: LoadPoint, min_duration_s: float, warm_e2el_s: float | None, cap: int) -> LoadPoint:
    """A closed-loop point of concurrency c sends about c / E2EL requests a second: enough of them to last
    min_duration_s, E2EL taken from the warm-up at the same concurrency."""
    c = point.key.concurrency
    if not c or not min_duration_s or not warm_e2el_s:
        return point
    n = math.ceil(min_duration_s * c / warm_e2el_s)
    if n <= point.num_prompts:
        return point
    n = min(n, cap)
    why = f"min_duration_s {min_duration_s:g} at warm-up E2EL {warm_e2el_s:.2f} s" + (" (capped)" if n == cap else "")
    return LoadPoint(point.index, point.key, n, why)


def arrivals(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Arrival offsets in seconds from the point's start, the schedule of vLLM `bench serve` (vllm/benchmarks/
    serve.py, get_request, without ramp-up) for the same seed, rate and burstiness: one gap per request, the
    first one included, drawn as numpy's legacy `np.random.seed(seed); np.random.gamma(burstiness,
    1 / (rate * burstiness))` (a private RandomState here: the global one is left alone), summed, then scaled so
    that the last request is due at exactly n / rate (the mean of the n gaps is 1/rate for any burstiness).
    Burstiness 1 is Poisson; burstiness inf (gamma shape -> inf) is the regular schedule (i + 1) / rate;
    rate inf sends everything at 0."""
    if n <= 0:
        return []
    if math.isinf(rate):
        return [0.0] * n
    if math.isinf(burstiness):
        return [(i + 1) / rate for i in range(n)]
    gaps = np.random.RandomState(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    if t[-1] == 0:
        return t.tolist()
    return (t * ((n / rate) / t[-1])).tolist()


def progress(total: int, desc: str | None, conv: converge.Converger | None = None):
    """The point's progress bar of `total` requests (none when desc is None). A converging point (conv) stops on its
    rule or its max_s (its desc says which), not on a request count: its bar shows requests, elapsed time and rate,
    and no fraction or ETA (the requests at hand are only an upper bound: 0/7624 and an ETA of minutes for a 75 s
    point)."""
    return tqdm(total=None if conv else total, desc=desc, unit="req", leave=True, dynamic_ncols=True,
                disable=desc is None)


def session() -> aiohttp.ClientSession:
    """The HTTP session of one client process: no connection limit, no proxy from the environment."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300), trust_env=False)


async def run_point(session: aiohttp.ClientSession, req: Request, key: LoadKey, specs: list[RequestSpec],
                    burstiness: float = 1.0, seed: int = 0,
                    on_record: Callable[[RequestRecord], None] | None = None,
                    abort: Callable[[], str | None] | None = None, desc: str | None = None,
                    on_start: Callable[[RequestRecord], None] | None = None,
                    conv: converge.Converger | None = None) -> PointRun:
    """Sends `specs` under load `key` from this process and returns every finished request; failures are
    recorded, never raised. When `abort` names a reason (the server died), nothing more is sent and requests in
    flight are recorded as cut off. on_start(rec): a request is about to be sent (its record fills in as its
    chunks arrive). conv (load.converge): sending stops once it decides, and those in flight finish.
    serve/workers.py runs the same over several processes."""
    bar, stop, reason, enough = progress(len(specs), desc, conv), asyncio.Event(), [], asyncio.Event()
    decided: list[str] = []

    def check_abort() -> None:
        if abort is not None and not stop.is_set() and (why := abort()):
            reason.append(why)
            stop.set()

    async def after_failure(rec: RequestRecord) -> None:
        """Is the server gone? Asked at once, and for DEATH_GRACE_S when the failure could be its death."""
        check_abort()
        end = time.perf_counter() + (DEATH_GRACE_S if abort is not None and could_be_death(rec) else 0.0)
        while not stop.is_set() and time.perf_counter() < end:
            await asyncio.sleep(0.02)
            check_abort()

    def started(rec: RequestRecord) -> None:
        if conv is not None:
            conv.started(rec.index, rec.scheduled_s)
        if on_start is not None:
            on_start(rec)

    def done(rec: RequestRecord) -> None:
        bar.update(1)
        if conv is not None:
            conv.finished(rec)
        if on_record is not None:
            on_record(rec)

    def stop_sending(decision: str) -> None:
        decided.append(decision)
        enough.set()

    due = None if key.concurrency is not None else arrivals(len(specs), key.request_rate, burstiness, seed)
    c = max(1, min(key.concurrency, len(specs))) if key.concurrency is not None else None
    t0 = time.perf_counter()
    watcher = asyncio.create_task(converge.watch(conv, t0, stop_sending)) if conv is not None else None
    try:
        run = await run_share(session, req, specs, list(range(len(specs))), due, c, key.max_concurrency,
                              t0, stop, started, done, check_abort, enough, after_failure)
    finally:
        bar.close()
        if watcher is not None:
            watcher.cancel()
    run.abort_reason = reason[0] if reason else None
    run.converge_stop = decided[0] if decided else None
    settle(run, len(specs))
    return run


async def run_share(session: aiohttp.ClientSession, req: Request, specs: list[RequestSpec], indices: list[int],
                    due: list[float] | None, concurrency: int | None, cap: int | None, t0: float,
                    stop: asyncio.Event, on_start=None, on_record=None, check_abort=None,
                    enough: asyncio.Event | None = None, after_failure=None) -> PointRun:
    """Sends specs[k] as request indices[k]: closed loop with `concurrency` slots (due None), or each at t0 +
    due[k] with at most `cap` in flight (open loop). Returns when all are done or `stop` is set (those in flight
    then get STOP_GRACE_S to fail, recorded as cut off). Records go to on_record as they finish. `enough` set
    (load.converge): nothing more is sent, and those in flight finish as results. after_failure(rec) (async): asks
    whether the server is gone after a failed request, setting `stop` if so (else check_abort() is asked)."""
    run, cpu0 = PointRun(t0=t0), time.process_time()
    enough = enough or asyncio.Event()

    async def one(k: int, scheduled_s: float) -> None:
        if stop.is_set() or enough.is_set():
            return
        spec = specs[k]
        rec = RequestRecord(indices[k], spec.prompt_len, spec.output_len, scheduled_s=scheduled_s)
        if on_start is not None:
            on_start(rec)
        await stream_completion(session, req.url, completion_body(req.model, spec, req.body), rec, t0, req.timeout_s)
        if not rec.success:  # a failure may be the server dying: then it is not the engine's result
            if after_failure is not None:
                await after_failure(rec)
            elif check_abort is not None:
                check_abort()
            rec.cut_off = stop.is_set()
            if rec.cut_off:
                rec.error = f"cut off: the engine died while this request was in flight ({rec.error})"
        run.records.append(rec)
        if on_record is not None:
            on_record(rec)

    if due is None:
        main = asyncio.create_task(_closed(one, len(specs), concurrency or 1, stop, t0, enough))
    else:
        main = asyncio.create_task(_open(one, due, cap, stop, t0, enough))
    watcher = asyncio.create_task(_watch(run, stop, check_abort or (lambda: None)))
    stopped = asyncio.create_task(stop.wait())
    with _gc_paused():
        try:
            await asyncio.wait({main, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if main.done():
                main.result()
            else:  # stopped: give requests in flight a moment to fail and be recorded as cut off
                await asyncio.wait({main}, timeout=STOP_GRACE_S)
        finally:
            for t in (watcher, stopped, main):
                t.cancel()  # on Ctrl-C: requests still in flight are not recorded (they count as unfinished)
            await asyncio.gather(watcher, stopped, main, return_exceptions=True)
            run.duration_s, run.cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    return run


@contextlib.contextmanager
def _gc_paused():
    """No cyclic-GC pauses inside the measurement: a gen-2 pass over a point's records can stall the loop for
    milliseconds, and every timestamp taken after it carries the stall (collected once the point ends)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            gc.collect()


def settle(run: PointRun, n: int) -> None:
    """Marks the run partial when it was aborted, a client worker died, or it finished fewer than its n requests
    (cut-off ones count as unfinished). Stopped by load.converge, its n is what it sent (the rest were not due)."""
    finished = len(run.records) - sum(r.cut_off for r in run.records)
    if run.converge_stop:
        n = len(run.records)
    if run.abort_reason or run.notes or finished < n:
        run.partial = True
        run.unfinished = n - finished


async def _closed(one, n: int, c: int, stop: asyncio.Event, t0: float, enough: asyncio.Event) -> None:
    """c slots share one iterator: each sends its next request when its last one finished."""
    it = iter(range(n))

    async def slot() -> None:
        for k in it:  # single-threaded: no races on the iterator
            if stop.is_set() or enough.is_set():
                return
            await one(k, time.perf_counter() - t0)

    await asyncio.gather(*(slot() for _ in range(min(c, n))))


async def _open(one, due: list[float], cap: int | None, stop: asyncio.Event, t0: float, enough: asyncio.Event) -> None:
    """Each request is sent at its due time, or when a slot frees if `cap` limits the flight."""
    sem = asyncio.Semaphore(cap) if cap else None
    tasks = []

    async def gated(k: int, at: float) -> None:
        if sem is None:
            return await one(k, at)
        async with sem:
            await one(k, at)

    for k, at in enumerate(due):
        await sleep_until(t0 + at)
        if stop.is_set() or enough.is_set():
            break
        tasks.append(asyncio.create_task(gated(k, at)))
    await asyncio.gather(*tasks)


async def sleep_until(deadline: float) -> None:
    """Returns once perf_counter() >= deadline (seconds, the perf_counter clock), never before. uvloop's timers
    count whole milliseconds from a cached loop time and can fire up to ~1 ms early (measured here: 1.03 ms in
    300 random sleeps; asyncio's own loop never fires early), which would send an open-loop request before its
    due time; what is left after an early wake-up is slept again (uvloop: the next loop turn)."""
    while (left := deadline - time.perf_counter()) > 0:
        await asyncio.sleep(left)


async def _watch(run: PointRun, stop: asyncio.Event, check_abort) -> None:
    """Measures the loop's lateness (10 ms sleeps) and polls for the server's death every 0.2 s."""
    last_check = time.perf_counter()
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        run.loop_lag_ms.append((time.perf_counter() - t - 0.01) * 1000.0)
        if time.perf_counter() - last_check > 0.2:
            last_check = time.perf_counter()
            check_abort()


async def warmup(session: aiohttp.ClientSession, req: Request, key: LoadKey, specs: list[RequestSpec],
                 abort: Callable[[], str | None] | None = None) -> PointRun:
    """Warm-up at the point's concurrency (at most len(specs) in flight), closed loop; nothing is saved."""
    c = key.concurrency or key.max_concurrency or len(specs)
    return await run_point(session, req, LoadKey(concurrency=max(1, min(c, len(specs)))), specs, abort=abort)
