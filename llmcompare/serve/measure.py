"""One engine's load points on a running server: warm-up, the measured run (saved as it goes), the trust check
and a new attempt while its timestamps cannot be trusted; the profiled passes and the capacity search after the
plan's points. The prompts of every (point, repeat, attempt, warm-up) are the same on every engine."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import aiohttp
import numpy as np

from llmcompare.analysis import agreement, metrics, steady, traffic, trust
from llmcompare.engines import prefix_cache, registry
from llmcompare.engines.server import ServerError
from llmcompare.errors import ScenarioError
from llmcompare.schema.files import JsonlAppender, RunFile, append_jsonl
from llmcompare.schema.request import RequestSpec
from llmcompare.schema.run import LoadKey, PointResult, now
from llmcompare.schema.scenario import EXACT_LENGTHS, Engine, Scenario
from llmcompare.serve import capacity_search, capture, converge, loadgen, same_answer
from llmcompare.serve.client import body_template, completion_body
from llmcompare.serve.context_length import check_lengths, max_model_len
from llmcompare.serve.engine_metrics import MetricsSampler
from llmcompare.serve.loadgen import LoadPoint, Request
from llmcompare.serve.summary import say_point
from llmcompare.serve.telemetry import Telemetry
from llmcompare.serve.workers import WorkerPool, auto_workers
from llmcompare.workload import synthetic
from llmcompare.workload.prompts import Prompts


@dataclass
class Bench:
    """One engine's measurement context: what _measure needs, and nothing of the scenario beyond it."""

    s: Scenario
    rf: RunFile
    engine: str
    req: Request
    prompts: Prompts
    plan: list[LoadPoint]
    blocks: dict[int, tuple[int, int]]  # stream -> (start, size) in a file dataset
    abort: object = None  # () -> reason the server is gone, or None
    idle_lag_ms: float = 0.0
    capture: capture.Capture | None = None  # the hook's side of a launched server (profile.points)
    todo: dict | None = None  # (point index, repeat) -> first attempt number (serve/campaign.py); None: every cell
    progress: object = None  # campaign.Progress
    workers: int = 1  # client processes (load.client_workers resolved); more after an attempt the client could not time
    pool: WorkerPool | None = None  # the worker processes when workers > 1 (serve/workers.py)
    stack: contextlib.ExitStack | None = None  # owns the pool


def stream_id(point: LoadPoint, repeat: int, attempt: int, warm: bool, s: Scenario) -> int:
    """Every (point, repeat, attempt, warm-up) gets its own prompts; the same ones on every engine."""
    a = (attempt - 1) % s.load.max_attempts  # a resumed cell's attempts continue the numbering, with its prompts
    return ((point.index * s.load.repeats + repeat) * s.load.max_attempts + a) * 2 + (0 if warm else 1)


def prompt_blocks(s: Scenario, prompts: Prompts, plan: list[LoadPoint]) -> dict[int, tuple[int, int]]:
    """File datasets: the shuffled file shared out among the run's streams, none twice (unless reuse is allowed).
    Checked before any server starts."""
    if not prompts.from_file:
        return {}
    need = []
    for p in plan:
        for r in range(s.load.repeats):
            for a in range(1, s.load.max_attempts + 1):
                need.append((stream_id(p, r, a, True, s), s.load.warmup_requests))
                need.append((stream_id(p, r, a, False, s), p.num_prompts))
    total, size = sum(n for _, n in need), prompts.file_size()
    if total > size and not s.workload.allow_prompt_reuse:
        raise ScenarioError(
            f"workload.path: {s.workload.path} has {size} usable prompts, and this plan may send {total} "
            f"({len(plan)} points x {s.load.repeats} repeats x up to {s.load.max_attempts} attempts, warm-ups "
            "included) without sending one twice; use a larger file, fewer requests, or set "
            "workload.allow_prompt_reuse: true (prefix caches will then see repeated prompts)")
    out, start = {}, 0
    for sid, n in need:
        out[sid] = (start % size, n)
        start += n
    return out


def profile_stream(point: LoadPoint) -> int:
    """A profiled pass's prompts: negative, so never a point's (stream_id >= 0). It once took repeat = repeats,
    which is the next point's first repeat: a pass re-sent those prompts. On the real vLLM CPU server that stream
    made a pass hit 384 of 768 prompt tokens in the prefix cache, this one 0 (tests/test_profile.py, 2026-12-04);
    replayed through a model of vLLM's cache it reproduces the 22-43% hit rates vLLM logged in the H200 map's
    passes (scripts/prefix_replay.py, docs/profiling.md)."""
    return -(point.index + 1)


def _block(b: Bench, sid: int, n: int) -> tuple[int, int] | None:
    """A file dataset's share for a stream the plan did not reserve (a profiled pass, a capacity probe): the next
    n prompts after every share given so far, the same for every engine of the run (blocks are shared); None
    for generated datasets. A file too small for it, reuse not allowed: a clear error."""
    if not b.prompts.from_file or sid in b.blocks:
        return b.blocks.get(sid)
    size, taken = b.prompts.file_size(), sum(k for _, k in b.blocks.values())
    if taken + n > size and not b.s.workload.allow_prompt_reuse:
        raise ScenarioError(f"workload.path: {b.s.workload.path} has {size} usable prompts; the planned points "
                            f"took {taken} and a profiled pass or capacity probe needs {n} more without sending one "
                            "twice; use a larger file, or set workload.allow_prompt_reuse: true")
    b.blocks[sid] = (taken % size, n)
    return b.blocks[sid]


def _specs(b: Bench, point: LoadPoint, n: int, repeat: int, attempt: int, warm: bool,
           sid: int | None = None) -> list[RequestSpec]:
    sid = stream_id(point, repeat, attempt, warm, b.s) if sid is None else sid
    return b.prompts.sample(n, sid, _block(b, sid, n), point.key.cell)


def _machine_key(b: Bench) -> str:
    """The machine this engine's server runs on now (its latest start; schema/machine.py): "" when not known."""
    m = b.rf.record(b.engine).machine
    return (m.latest_key or m.key) if m else ""


async def measure(session: aiohttp.ClientSession, b: Bench, point: LoadPoint, repeat: int) -> None:
    """One point, one repeat: warm-up, the measured run, and again while its timestamps cannot be trusted."""
    first, t0 = (b.todo or {}).get((point.index, repeat), 1), time.monotonic()
    for attempt in range(first, first + b.s.load.max_attempts):
        warm = []
        if b.s.load.warmup_requests:
            w = await loadgen.warmup(session, b.req, point.key,
                                     _specs(b, point, b.s.load.warmup_requests, repeat, attempt, True), b.abort)
            if w.abort_reason:
                raise ServerError(w.abort_reason)
            warm = [r for r in w.records if r.success and r.output_tokens]
        lp = _planned(b, point, warm)
        res = PointResult.at(point.key, index=point.index, repeat=repeat, attempt=attempt, num_prompts=lp.num_prompts,
                             num_prompts_why=lp.num_prompts_why, started_at=now(), machine_key=_machine_key(b))
        b.rf.point(b.engine, res)
        pr = await _run(session, b, res, _specs(b, point, lp.num_prompts, repeat, attempt, False))
        if pr.abort_reason:
            raise ServerError(pr.abort_reason)
        say_point(b.engine, res, b.s.load.repeats)
        if res.trust.trusted or not trust.worth_retry(res.trust) or attempt == first + b.s.load.max_attempts - 1:
            if b.progress:
                b.progress.cell_done(b.engine, point.index, repeat, time.monotonic() - t0)
            return
        more = _more_workers(b, res)
        print(f"{b.engine} {res.label}: measuring again (attempt {attempt + 1} of {first + b.s.load.max_attempts - 1}"
              f"{f', with {more} client processes' if more else ''}; verdicts use the first attempt: "
              "docs/metrics.md, trust)", file=sys.stderr)


def _planned(b: Bench, point: LoadPoint, warm: list) -> LoadPoint:
    """How many requests the point sends: load.min_duration_s's, or with load.converge enough for its max_s (it
    stops sending earlier when it converges; serve/converge.py). warm: the warm-up's successful records."""
    ld, cv = b.s.load, b.s.load.converge
    if cv is not None and point.key.concurrency is None:  # open loop: rate x max_s requests
        n = min(ld.max_prompts_per_point, max(point.num_prompts, math.ceil(point.key.request_rate * cv.max_s)))
        return LoadPoint(point.index, point.key, n, f"load.converge max_s {cv.max_s:g} at the rate")
    # the warm-up's E2EL stands for the point's only if it ran at the point's concurrency
    same_load = point.key.concurrency is not None and ld.warmup_requests >= point.key.concurrency
    e2el_s = float(np.median([r.e2el_ms for r in warm])) / 1000.0 if warm and same_load else None
    if cv is not None and e2el_s is None and warm and (mean_out := _mean_output_tokens(b, point)):
        s_per_token = sum(r.e2el_ms for r in warm) / 1000.0 / sum(r.output_tokens for r in warm)
        more = converge.closed_loop_requests(point.key.concurrency, cv.max_s, s_per_token, mean_out,
                                             point.num_prompts, ld.max_prompts_per_point)
        return LoadPoint(point.index, point.key, *more) if more else point
    return loadgen.prompts_for_duration(point, max(ld.min_duration_s, cv.max_s if cv else 0.0), e2el_s,
                                        ld.max_prompts_per_point)


def _mean_output_tokens(b: Bench, point: LoadPoint) -> float | None:
    """The workload's mean output length, where it is known without drawing the point's prompts (None for file
    datasets: their prompts are drawn in blocks, serve/measure._block)."""
    wl = b.s.workload
    if wl.dataset in EXACT_LENGTHS:
        return float(point.key.output_len or wl.output_lens[0])
    return _drawn_mean_output(wl)


def _drawn_mean_output(wl) -> float | None:
    """synthetic-sharegpt's mean output length (its clipped lognormal, synthetic.synthetic_stats); None otherwise."""
    if wl.dataset != "synthetic-sharegpt":
        return None
    return synthetic.synthetic_stats(wl.seed, 1024, wl.sigma_input, wl.sigma_output,
                                     wl.max_total_len)["mean_output_tokens"]


async def _run(session: aiohttp.ClientSession, b: Bench, res: PointResult, specs: list[RequestSpec]):
    """The measured run of one point; the result is filled in and saved even when it is interrupted."""
    rf, name = b.rf, b.engine
    tag = {"point": res.index, "repeat": res.repeat, "attempt": res.attempt, "label": res.label}
    saved, log = [], JsonlAppender(rf.path(name, "requests.jsonl"))

    def save(rec) -> None:
        saved.append(rec)
        log.write({**tag, **rec.to_json()})

    url = b.req.url.rsplit("/v1/", 1)[0] + "/metrics"
    floor = await _floor(b, res)
    sampler = MetricsSampler(session, url, b.s.load.metrics_interval_s, time.perf_counter())
    pr, tel = None, Telemetry(b.s.profile.telemetry_interval_ms)
    cv = b.s.load.converge
    desc = f"{name} {res.label}" + (f" #{res.repeat + 1}" if b.s.load.repeats > 1 else "")
    if cv:  # it stops sending at one of these; the bar shows no total (loadgen.progress)
        desc += f" (until ±{100 * cv.rel_halfwidth:g}% or {cv.max_s:g} s)"
    seed = b.s.workload.seed + res.index
    conv = converge.Converger(cv.rel_halfwidth, cv.max_s) if cv else None
    try:
        cache_before = await prefix_cache.read(session, url)  # counters: the point's own hits are the difference
        async with tel, sampler:
            if b.pool is not None:
                pr = await b.pool.run_point(res.key, specs, b.s.load.burstiness, seed, on_record=save, abort=b.abort,
                                            desc=desc, conv=conv)
            else:
                pr = await loadgen.run_point(session, b.req, res.key, specs, b.s.load.burstiness, seed=seed,
                                             on_record=save, abort=b.abort, desc=desc, conv=conv)
        res.prefix_cache = prefix_cache.delta(cache_before, await prefix_cache.read(session, url))
        if conv is not None and conv.decided_s is not None:
            res.converge_stop_s = round(conv.decided_s, 3)
            res.converge_live_rel_halfwidth, res.converge_live_series_s = conv.live_rel_halfwidth, conv.live_series_s
    finally:
        for t, vals in sampler.samples:
            row = {**tag, "t_s": round(t, 4), "unix_s": round(sampler.unix_s(t), 4)}  # unix_s: nvidia-smi's clock
            append_jsonl(rf.path(name, "metrics.jsonl"), {**row, **vals})
        _finish(b, res, pr, saved, sampler, floor)
        res.telemetry = tel.save(rf.path(name, "telemetry.jsonl.gz"), tag, res.metrics)
        rf.point(name, res)
        log.close()  # last: its lines are already flushed, and the point is saved before anything here can fail
    return pr


def _finish(b: Bench, res: PointResult, pr, saved: list, sampler: MetricsSampler, floor: float) -> None:
    res.finished_at = now()
    res.server_metrics = sampler.summary()
    res.server_metrics_error = None if sampler.samples else sampler.error
    res.cut_off = sum(r.cut_off for r in saved)
    if pr is None:  # interrupted (Ctrl-C, SIGTERM): what finished is in requests.jsonl; no figures
        res.status, res.unfinished = "interrupted", res.num_prompts - (len(saved) - res.cut_off)
        return
    res.token_counts = metrics.fill_token_counts(pr.records, b.prompts.count_tokens)
    done = [r for r in pr.records if not r.cut_off]
    res.metrics = metrics.compute(pr.records, pr.duration_s, b.s.percentiles, b.s.slo) if done else None
    cv = b.s.load.converge
    res.steady, why = steady.find(pr.records, res.concurrency, cv.rel_halfwidth if cv else steady.DEFAULT_TARGET)
    res.no_steady = why or None
    res.half_steady_tok_s, res.half_no_steady = steady.first_half(pr.records, res.concurrency)
    res.before_drain_tok_s = steady.before_drain(pr.records, res.concurrency)
    if traffic.fixed_lengths({"dataset": b.s.workload.dataset, "ignore_eos": b.s.workload.ignore_eos}):
        res.waves_steady_tok_s = steady.waves_rate(pr.records, res.concurrency, res.steady)  # requests in waves
    if cv is not None:  # it stopped when converged, or ran out of time (or of its max_s worth of requests)
        res.converge_stop = pr.converge_stop or "requests used up"  # every planned request sent before max_s
    res.client = {**pr.client_health(), "idle_floor_ms": floor, "workers": b.workers}
    res.client_workers = pr.workers
    res.failures_allowed = b.s.load.allow_failures
    samples = [(t + sampler.t0 - pr.t0, v) for t, v in sampler.samples]  # on the point's clock
    res.engine_counters = agreement.compare(samples, pr.records, res.concurrency)
    res.trust = trust.assess(pr.records, res.metrics, res.client, floor, b.s.workload.ignore_eos,
                             agreement.reasons(res.engine_counters))
    for note in (agreement.running_note(res.engine_counters), trust.merged_note(res.trust, pr.records),
                 trust.busy_note(res.client, res.client_workers)):
        if note:
            res.warnings.append(note)
    res.warnings += pr.notes
    res.unfinished = pr.unfinished
    if pr.partial:
        res.status = "partial"
    elif res.trust.failed_requests and not b.s.load.allow_failures:  # never "complete" with failures in it
        res.status = "failed"
    else:
        res.status = "complete" if res.trust.trusted else "untrusted"
    if res.steady is None:
        res.warnings.append(f"no steady state ({why}): its verdicts use the whole point")
    rows = steady.series(pr.records, pr.duration_s, sampler.samples)
    tag = {"point": res.index, "repeat": res.repeat, "attempt": res.attempt, "label": res.label}
    for row in rows:
        append_jsonl(b.rf.path(b.engine, "series.jsonl"), {**tag, **row})


async def _answer(session: aiohttp.ClientSession, b: Bench) -> None:
    """The same-answer probe (serve/same_answer.py), once per engine, before its first load point."""
    c, rec = b.s.checks.same_answer, b.rf.record(b.engine)
    if same_answer.wanted(rec.answer, c):
        sampling = registry.kind(rec.kind).sampling  # greedy, whatever workload.temperature says
        rec.answer = await same_answer.ask(session, b.req.url.rsplit("/v1/", 1)[0], b.req.model, sampling, c)
        b.rf.save()
        same_answer.say(b.engine, rec.answer)


async def _drive(b: Bench, repeats: list[int]) -> None:
    async with loadgen.session() as session:
        await _answer(session, b)
        with contextlib.ExitStack() as b.stack:
            b.idle_lag_ms = await loadgen.idle_loop_lag()
            rec = b.rf.record(b.engine)
            rec.client_idle_loop_lag_p99_ms, rec.client_workers = b.idle_lag_ms, b.workers
            b.rf.save()
            if b.workers > 1:
                _start_pool(b, b.workers)
            for r in repeats:
                for point in b.plan:
                    if b.todo is None or (point.index, r) in b.todo:
                        await measure(session, b, point, r)
            if b.capture and repeats[-1] == b.s.load.repeats - 1:  # extra passes, never among the points' figures
                await capture.profile_points(session, b.capture, b.rf, b.engine, b.req, b.plan, b.s.profile,
                                             b.abort, lambda point, n: _specs(b, point, n, 0, 1, False, profile_stream(point)))
            if b.s.load.capacity and (not repeats or repeats[-1] == b.s.load.repeats - 1):  # after the plan's points: the request-rate search (analysis/capacity.py)
                await capacity_search.search(b, lambda point, r: measure(session, b, point, r))


def _start_pool(b: Bench, n: int) -> None:
    """(Re)starts the client's worker processes, n of them."""
    if b.pool is not None:
        b.pool.__exit__(None, None, None)
    b.pool = WorkerPool(n, b.req).__enter__()
    b.stack.callback(b.pool.__exit__, None, None, None)
    b.workers = n


def _more_workers(b: Bench, res: PointResult) -> int | None:
    """After an attempt the client could not time (its loop lag, or streams in one read): twice the client
    processes for the next, up to the machine's cores; None when that is no more than now."""
    late_reads = res.trust.single_read_requests - res.trust.server_merged_requests  # merged by the server: not late
    timing = late_reads or (res.trust.loop_lag_excess_ms or 0) > 0
    n = min(2 * b.workers, os.cpu_count() or 1)
    if not timing or n <= b.workers:
        return None
    _start_pool(b, n)
    return n


async def _floor(b: Bench, res: PointResult) -> float:
    """The loop-lag floor a point's trust is judged against: the lower of the engine's first floor and one
    measured now, in this process or in every worker (loadgen.idle_loop_lag: windows' median, capped). A stall
    while either was measured cannot raise it past FLOOR_CAP_MS, nor past the other."""
    now_ms = await (b.pool.idle_floors() if b.pool is not None else loadgen.idle_loop_lag())
    now_ms = statistics.median(now_ms) if isinstance(now_ms, list) else now_ms
    return min(now_ms, b.idle_lag_ms)


def run_plan(s: Scenario) -> list[LoadPoint]:
    """Every workload cell at every load point (loadgen.plan), as the scenario asks."""
    return loadgen.plan(s.load.concurrency, s.load.request_rate, s.load.max_concurrency, s.workload.num_prompts,
                        s.workload.prompts_per_concurrency, s.workload.cells())


def worker_count(s: Scenario, plan: list[LoadPoint], cores: int | None = None) -> int:
    """load.client_workers as a number. auto (workers.auto_workers) sizes the pool for the heaviest point the
    engine will be sent: the plan's, and the capacity search's highest probe (load.capacity.max_rate), whose
    points are not in the plan; open-loop events per second at the workload's mean output length where it is
    known without drawing prompts (synthetic-sharegpt), else the longest output_len. (Before this, a capacity
    search had an empty plan and always got 1 process: on an H100, vLLM's probe at 16 req/s was untrusted for the
    client's loop lag with 1 and trusted with 8; reports/h100-capacity.)"""
    if s.load.client_workers != "auto":
        return int(s.load.client_workers)
    keys = [p.key for p in plan]
    if s.load.capacity is not None:
        keys.append(LoadKey(request_rate=s.load.capacity.max_rate, max_concurrency=s.load.max_concurrency))
    return auto_workers(keys, round(_drawn_mean_output(s.workload) or max(s.workload.output_lens)), cores)


def bench(s: Scenario, rf: RunFile, e: Engine, base_url: str, model: str, prompts: Prompts,
           blocks: dict, repeats: list[int], abort=None, log_len: int | None = None, camp=None, cap=None) -> None:
    limit, src = max_model_len(base_url, e, log_len)
    rec = rf.record(e.name)
    rec.max_model_len, rec.max_model_len_source = limit, src
    rf.save()
    check_lengths(e, limit, src, s, prompts)
    sampling = registry.kind(e.kind).sampling if s.workload.temperature == 0 else {"temperature": s.workload.temperature}
    req = Request(f"{base_url}/v1/completions", model, body_template(sampling, s.workload.ignore_eos),
                  s.load.request_timeout_s)
    cell = s.workload.cells()[0]
    p_len = (cell.input_len or 0) + (cell.prefix_len or 0)  # tokens
    example = RequestSpec(f"<prompt of {p_len or 'its'} tokens>", p_len, cell.output_len or s.workload.output_lens[0])
    rec.request_body = completion_body(model, example, req.body)
    rf.save()
    b = Bench(s, rf, e.name, req, prompts, camp.plan if camp else run_plan(s), blocks, abort, capture=cap)
    b.workers = worker_count(s, b.plan)
    if camp:
        b.todo, b.progress = camp.todo[e.name], camp.progress
    asyncio.run(_drive(b, repeats))

