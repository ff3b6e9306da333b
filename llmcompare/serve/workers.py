"""Client worker processes: one load point's requests spread over N processes, each with its own event loop and
HTTP session, so the client is not the first thing to give way at an engine's event rate (vLLM streams one token
per chunk: ~10-20k events/s at concurrency 256 on an H200).

  closed loop, concurrency c:  worker w owns slots s with s % N == w (c // N or c // N + 1 of them) and the
                               requests i with (i % c) % N == w; each slot sends its worker's next request as
                               soon as its last one finished (at most c in flight in all).
  open loop, request rate r:   one global seeded schedule (loadgen.arrivals, vLLM bench serve's), request i sent
                               by worker i % N at its due time: the schedule does not depend on N.
                               max_concurrency m: worker w may have m // N (+1 for w < m % N) in flight.

Every timestamp is taken on the host's monotonic clock (perf_counter is CLOCK_MONOTONIC on Linux, one clock for
all processes), relative to a start t0 the parent sets a moment ahead; records stream to the parent as each
request finishes (and a 'start' line as each is sent), and the parent saves them as the one-process client
does. Stopping: the parent sends 'stop' (the server died, Ctrl-C, SIGTERM) and the workers cut off what is in
flight; a worker whose pipe to the parent closes exits (the parent was killed); a worker that dies mid-point
has its started requests saved as cut off by the parent, the rest never sent, and the point is partial.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from llmcompare.schema.codec import record
from llmcompare.schema.request import RequestRecord, RequestSpec
from llmcompare.schema.run import LoadKey
from llmcompare.serve import converge, loadgen
from llmcompare.serve.pipe import Duplex, recv

# Events (streamed chunks) per second one worker sustains with a p99 added ITL error below 1 ms: measured by
# scripts/client_capacity.py (reports/client-capacity.json, docs/client-capacity.md).
EVENTS_PER_WORKER = 8000.0
FASTEST_ITL_S = 0.005  # the shortest decode step a served request streams at (H200, 7B AWQ, c <= 64: 6-7 ms)
START_AHEAD_S = 0.3  # t0 this far ahead of the job's dispatch: every worker has it before it starts
STOP_GRACE_S = 2.0  # after 'stop', how long in-flight requests get to fail and be recorded as cut off
JOIN_S = 5.0  # a worker that does not exit this long after 'quit' is killed
LOOPS = ("auto", "uvloop", "asyncio")  # a worker's event loop: auto = uvloop where installed


def expected_events_per_s(key: LoadKey, output_len: int) -> float:
    """An upper bound of the point's streamed events per second: each of c requests in flight streams at most one
    chunk per FASTEST_ITL_S (closed loop); r requests/s of output_len tokens each (open loop)."""
    if key.concurrency is not None:
        return key.concurrency / FASTEST_ITL_S
    rate = key.request_rate if key.request_rate is not None and math.isfinite(key.request_rate) else None
    if rate is None:
        return (key.max_concurrency or 1) / FASTEST_ITL_S
    by_rate = rate * output_len
    return min(by_rate, key.max_concurrency / FASTEST_ITL_S) if key.max_concurrency else by_rate


def auto_workers(keys: list[LoadKey], output_len: int, cores: int | None = None) -> int:
    """`load.client_workers: auto`: enough workers that none is asked for more than half its measured capacity
    at the plan's heaviest point, at most half the cores (the other half for the engine's own processes: its API
    server and engine core each keep a core busy at high load), at least 1."""
    cores = cores or os.cpu_count() or 1
    need = max((expected_events_per_s(k, output_len) for k in keys), default=0.0)
    return max(1, min(math.ceil(need / (0.5 * EVENTS_PER_WORKER)), cores // 2))


def shares(total: int, n: int) -> list[int]:
    """total split over n as evenly as possible, the larger shares first."""
    return [total // n + (1 if w < total % n else 0) for w in range(n)]


def assign(key: LoadKey, n_specs: int, n: int, arrivals: list[float] | None) -> list[list[tuple[int, float | None]]]:
    """Per worker, the (request index, due time or None) it sends, in order (see the module's docstring)."""
    out: list[list[tuple[int, float | None]]] = [[] for _ in range(n)]
    if key.concurrency is not None:
        c = max(1, min(key.concurrency, n_specs))
        for i in range(n_specs):
            out[(i % c) % n].append((i, None))
    else:
        for i in range(n_specs):
            out[i % n].append((i, arrivals[i] if arrivals else 0.0))
    return out


@dataclass
class _Worker:
    index: int
    proc: mp.Process
    conn: Connection
    started: dict[int, float] = field(default_factory=dict)  # index -> scheduled_s of requests sent, not finished
    done: dict | None = None  # its 'done' message: loop lag samples, idle floor
    dead: str | None = None


class WorkerPool:
    """N client processes for one engine's points (started once, reused point after point; a context manager)."""

    def __init__(self, n: int, req: loadgen.Request, loop: str = "auto"):
        if loop not in LOOPS:
            raise ValueError(f"loop: {loop!r} is not valid; valid: {', '.join(LOOPS)}")
        self.n, self.req, self.loop = n, req, loop
        self.ctx = mp.get_context("spawn")  # no fork of a process holding an event loop and sockets
        self.workers: list[_Worker] = []

    def __enter__(self) -> WorkerPool:
        for w in range(self.n):
            self.workers.append(self._spawn(w))
        return self

    def _spawn(self, w: int) -> _Worker:
        # one pipe each way: an event loop that watches a pipe's fd (uvloop) makes it non-blocking, and a send on
        # it would then fail when the pipe is full (BlockingIOError, seen on the H200 at 40k events/s); each side
        # watches only the end it reads and writes on the other, blocking, end
        down_r, down_w = self.ctx.Pipe(duplex=False)  # parent -> worker
        up_r, up_w = self.ctx.Pipe(duplex=False)  # worker -> parent
        p = self.ctx.Process(target=worker_main, args=(Duplex(down_r, up_w), self.req, w, self.loop),
                             name=f"llmcompare-client-{w}", daemon=True)
        p.start()
        down_r.close()
        up_w.close()
        return _Worker(w, p, Duplex(up_r, down_w))

    def __exit__(self, *exc) -> None:
        for wk in self.workers:
            try:
                wk.conn.send(("quit",))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + JOIN_S
        for wk in self.workers:
            wk.proc.join(max(0.0, deadline - time.monotonic()))
            if wk.proc.is_alive():
                wk.proc.kill()
                wk.proc.join(1.0)
            wk.conn.close()

    def replace_dead(self) -> None:
        """A worker that died is replaced before the next point."""
        for i, wk in enumerate(self.workers):
            if not wk.proc.is_alive() or wk.dead:
                wk.conn.close()
                self.workers[i] = self._spawn(wk.index)

    async def idle_floors(self) -> list[float]:
        """Each worker's idle loop-lag floor (loadgen.idle_loop_lag, measured in that worker with nothing in
        flight), in ms."""
        self.replace_dead()
        for wk in self.workers:
            wk.conn.send(("floor",))
        return [float((await recv(wk.conn))[1]) for wk in self.workers]

    async def run_point(self, key: LoadKey, specs: list[RequestSpec], burstiness: float = 1.0, seed: int = 0,
                        on_record: Callable[[RequestRecord], None] | None = None,
                        abort: Callable[[], str | None] | None = None, desc: str | None = None,
                        conv: converge.Converger | None = None) -> loadgen.PointRun:
        """loadgen.run_point's contract, over the pool's processes."""
        self.replace_dead()
        return await _Point(self, key, specs, burstiness, seed, on_record, abort, desc, conv).run()


def _cut_off(rec: RequestRecord) -> None:
    rec.cut_off = True
    rec.error = f"cut off: the engine died while this request was in flight ({rec.error})"


class _Point:
    """One point's run over the pool: dispatch, the records as they come, stop, death of a worker."""

    def __init__(self, pool: WorkerPool, key, specs, burstiness, seed, on_record, abort, desc, conv=None):
        self.pool, self.key, self.specs, self.on_record, self.abort = pool, key, specs, on_record, abort
        self.conv = conv  # load.converge: when it decides, every worker is told 'enough' (stop sending)
        self.run_ = loadgen.PointRun()
        self.bar = loadgen.progress(len(specs), desc, conv)
        n = pool.n
        due = None if key.concurrency is not None else loadgen.arrivals(len(specs), key.request_rate, burstiness, seed)
        self.plan = assign(key, len(specs), n, due)
        slots = shares(max(1, min(key.concurrency, len(specs))), n) if key.concurrency is not None else None
        caps = shares(key.max_concurrency, n) if key.max_concurrency else [None] * n
        self.jobs = [{"concurrency": slots[w] if slots else None, "cap": caps[w], "items": self.plan[w]}
                     for w in range(n)]
        self.stopped = False
        # failures that could be the server dying (loadgen.could_be_death), held back from the records for up to
        # loadgen.DEATH_GRACE_S while its death may still show: (when it was received, the record)
        self.held: list[tuple[float, RequestRecord]] = []

    async def run(self) -> loadgen.PointRun:
        run, t0, cpu0 = self.run_, time.perf_counter() + START_AHEAD_S, time.process_time()
        run.t0 = t0
        for wk, job in zip(self.pool.workers, self.jobs, strict=True):
            wk.started, wk.done, wk.dead = {}, None, None
            wk.conn.send(("point", job, [self.specs[i] for i, _ in job["items"]], t0))
        watcher = asyncio.create_task(converge.watch(self.conv, t0, self._enough)) if self.conv else None
        try:
            await asyncio.gather(*(self._follow(wk) for wk in self.pool.workers))
            while self.held:  # the last failures' grace
                await asyncio.sleep(0.02)
                self._check_abort()
                self._settle_held()
        finally:
            self._settle_held(force=True)
            if watcher is not None:
                watcher.cancel()
            if not all(wk.done for wk in self.pool.workers):  # Ctrl-C or an error here: stop them all
                self._stop_all()
            run.duration_s, run.cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
            self._collect_health()
            loadgen.settle(run, len(self.specs))
            self.bar.close()
        return run

    async def _follow(self, wk: _Worker) -> None:
        """Reads one worker's lines until its 'done' (or its death)."""
        last_check = time.perf_counter()
        while wk.done is None:
            try:
                msg = await recv(wk.conn, timeout_s=0.2)
            except (EOFError, OSError):
                msg = ("died",)
            if msg is None:  # no line in 0.2 s: is the server or the worker gone?
                if not wk.proc.is_alive():
                    msg = ("died",)
            if time.perf_counter() - last_check > 0.2 or self.held:
                last_check = time.perf_counter()
                self._check_abort()
                self._settle_held()
            if msg is not None:
                self._take(wk, msg)

    def _take(self, wk: _Worker, msg: tuple) -> None:
        kind = msg[0]
        if kind == "start":
            wk.started[msg[1]] = msg[2]
            if self.conv is not None:
                self.conv.started(msg[1], msg[2])
        elif kind == "rec":
            rec = record(RequestRecord, msg[1])
            wk.started.pop(rec.index, None)
            if self.conv is not None:
                self.conv.finished(rec)
            if not rec.success:
                self._check_abort()  # a failure may be the server dying: then it is not the engine's result
                if self.run_.abort_reason is None and self.abort is not None and loadgen.could_be_death(rec):
                    self.held.append((time.perf_counter(), rec))  # its death may not show yet
                    return
                if self.run_.abort_reason and not rec.cut_off:
                    _cut_off(rec)
            self._done(rec)
        elif kind == "done":
            wk.done = msg[1]
        elif kind in ("died", "failed"):
            why = msg[1] if kind == "failed" else f"exit code {wk.proc.exitcode}"
            wk.dead = f"client worker {wk.index} died ({why})"
            wk.done = {"loop_lag_ms": []}
            self.run_.notes.append(wk.dead + f"; its {len(wk.started)} requests in flight are cut off")
            for i, scheduled in sorted(wk.started.items()):
                s = self.specs[i]
                self._done(RequestRecord(i, s.prompt_len, s.output_len, scheduled_s=scheduled, cut_off=True,
                                         error=f"cut off: {wk.dead} while this request was in flight"))
            wk.started.clear()
            self._stop_all()

    def _settle_held(self, force: bool = False) -> None:
        """Held failures: cut off once the server is known dead; the engine's failures after their grace (or at
        once with force: the point is over)."""
        now, keep = time.perf_counter(), []
        for t, rec in self.held:
            if self.run_.abort_reason:
                _cut_off(rec)
            elif not force and now - t < loadgen.DEATH_GRACE_S:
                keep.append((t, rec))
                continue
            self._done(rec)
        self.held = keep

    def _done(self, rec: RequestRecord) -> None:
        self.run_.records.append(rec)
        self.bar.update(1)
        if self.on_record is not None:
            self.on_record(rec)

    def _check_abort(self) -> None:
        if self.abort is not None and not self.run_.abort_reason and (reason := self.abort()):
            self.run_.abort_reason = reason
            self._stop_all()

    def _enough(self, decision: str) -> None:
        """load.converge decided: every worker stops sending; what is in flight finishes as results."""
        self.run_.converge_stop = decision
        self._tell_all("enough")

    def _stop_all(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self._tell_all("stop")

    def _tell_all(self, message: str) -> None:
        """Sends (message,) to every worker still running; one whose pipe is gone is noticed by its exit."""
        for wk in self.pool.workers:
            if wk.done is None:
                try:
                    wk.conn.send((message,))
                except (OSError, ValueError):
                    pass

    def _collect_health(self) -> None:
        """Per worker: its loop-lag summary (PointRun.workers); the point's loop lag is every worker's samples."""
        for wk in self.pool.workers:
            lags = sorted((wk.done or {}).get("loop_lag_ms", []))
            self.run_.loop_lag_ms += lags
            h = loadgen.lag_summary(lags)
            cpu = (wk.done or {}).get("cpu_s")
            if cpu is not None and self.run_.duration_s:  # 1.0: the worker kept a whole core busy
                h |= {"cpu_s": round(cpu, 3), "cpu_share": round(cpu / self.run_.duration_s, 3)}
            self.run_.workers.append({"worker": wk.index, "requests": len(self.plan[wk.index]), **h,
                                      **({"loop": wk.done["loop"]} if wk.done and "loop" in wk.done else {}),
                                      **({"died": wk.dead} if wk.dead else {})})


# ---- in the worker process ----------------------------------------------------------------------------------------
def worker_main(conn: Connection, req: loadgen.Request, index: int, loop: str = "auto") -> None:
    """A worker's life: jobs from the parent, one at a time, until 'quit' or the parent's end (its pipe closes).
    Ctrl-C is the parent's to handle (SIGINT ignored here); SIGTERM ends it. `loop` (LOOPS): auto runs uvloop
    where it is installed (a dependency on Linux and macOS), else asyncio's own loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise
        else:
            return uvloop.run(_serve_jobs(conn, req, f"uvloop {uvloop.__version__}"))
    asyncio.run(_serve_jobs(conn, req, "asyncio"))


async def _serve_jobs(conn: Connection, req: loadgen.Request, loop_name: str) -> None:
    async with loadgen.session() as session:
        while True:
            try:
                msg = await recv(conn)
            except (EOFError, BrokenPipeError, ConnectionResetError):
                return  # the parent is gone
            except OSError as e:  # not the parent's end: it hears why (its note on the point) where it still can
                with contextlib.suppress(OSError, ValueError):
                    conn.send(("failed", f"reading from the parent: {type(e).__name__}: {e}"))
                return
            if msg[0] == "quit":
                return
            if msg[0] == "floor":
                conn.send(("floor", await loadgen.idle_loop_lag()))
            elif msg[0] == "point":
                try:
                    await _job(conn, session, req, *msg[1:], loop_name=loop_name)
                except Exception as e:  # the parent records it as this worker's death (the point is partial)
                    conn.send(("failed", f"{type(e).__name__}: {e}"))
                    return


async def _job(conn: Connection, session, req: loadgen.Request, job: dict, specs: list[RequestSpec],
               t0: float, loop_name: str) -> None:
    """One point's share: the worker's requests under its slots (closed) or at their due times (open)."""
    stop, enough = asyncio.Event(), asyncio.Event()
    listener = asyncio.create_task(_listen(conn, stop, enough))
    indices = [i for i, _ in job["items"]]
    due = None if job["concurrency"] is not None else [at for _, at in job["items"]]

    def started(rec: RequestRecord) -> None:
        conn.send(("start", rec.index, rec.scheduled_s))

    def finished(rec: RequestRecord) -> None:
        conn.send(("rec", rec.to_json()))

    await loadgen.sleep_until(t0)
    run = await loadgen.run_share(session, req, specs, indices, due, job["concurrency"], job["cap"], t0, stop,
                                  started, finished, enough=enough)
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)
    conn.send(("done", {"loop_lag_ms": run.loop_lag_ms, "loop": loop_name, "cpu_s": run.cpu_s}))


async def _listen(conn: Connection, stop: asyncio.Event, enough: asyncio.Event) -> None:
    """During a job: 'stop' (or the parent's end) stops sending and cuts off what is in flight; 'enough'
    (load.converge) stops sending and lets what is in flight finish."""
    while not stop.is_set():
        try:
            msg = await recv(conn)
        except (EOFError, OSError):
            msg = ("stop",)
        if msg and msg[0] == "enough":
            enough.set()
        if msg and msg[0] in ("stop", "quit"):
            stop.set()
            if msg[0] == "quit":
                os._exit(0)
