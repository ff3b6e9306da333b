"""`serve-bench`: for each engine of the scenario, launch (or reach) its server, warm it, run every load point
`load.repeats` times, and keep run.json, the per-request lines and the per-second series on disk as it goes.
A point whose timestamps cannot be trusted (analysis/trust.py) is measured again, up to `load.max_attempts` times, and
kept as `untrusted` if it stays so. A dead server, a failed start, Ctrl-C or a write error ends the run with a
clear error; completed points stay on disk, and no engine process is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np

from llmcompare.analysis import metrics, steady, trust
from llmcompare.engines import launch, log, prefix_cache, registry
from llmcompare.engines.launch import arg_max_len
from llmcompare.engines.server import ServerError, ServerProcess, free_port, served_models
from llmcompare.errors import ScenarioError
from llmcompare.expand import resolve
from llmcompare.models import checkpoint
from llmcompare.schema.files import RunFile, append_jsonl, load_run, new_run_dir
from llmcompare.schema.request import RequestSpec
from llmcompare.schema.run import PointResult, ServeRun, now
from llmcompare.schema.scenario import Engine, Scenario
from llmcompare.serve import campaign, capacity_search, capture, loadgen
from llmcompare.serve.campaign import Campaign
from llmcompare.serve.client import body_template, completion_body
from llmcompare.serve.context_length import check_lengths, max_model_len
from llmcompare.serve.engine_metrics import MetricsSampler
from llmcompare.serve.loadgen import LoadPoint, Request
from llmcompare.serve.telemetry import Telemetry
from llmcompare.setup import hub
from llmcompare.setup.host import host_info
from llmcompare.workload.prompts import Prompts, load_tokenizer


class RunFailed(RuntimeError):
    def __init__(self, message: str, run_dir: Path):
        super().__init__(message)
        self.run_dir = run_dir


def prepare_model(s: Scenario) -> str:

    hub.resolve_tokenizer(s.model)  # a hub id becomes its local directory
    path = s.model.path
    if Path(path).exists():
        return path
    if hub.is_hub_id(path) or (s.model.make is None and not path.startswith(("/", "~", "."))):
        return hub.resolve(path, "model.path")  # the engines get the local snapshot (model.make: local paths only)
    if s.model.make is None:
        raise ScenarioError(f"model.path: {path} does not exist (and model.make is not set to build it)")
    mk = s.model.make
    print(f"model {path} is missing: making it (preset {mk.preset}, quant {mk.quant}, {mk.dtype}, seed {mk.seed})",
          file=sys.stderr)
    checkpoint.make_model(path, mk.preset, mk.quant, mk.dtype, mk.seed)
    return path


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


def _specs(b: Bench, point: LoadPoint, n: int, repeat: int, attempt: int, warm: bool) -> list[RequestSpec]:
    sid = stream_id(point, repeat, attempt, warm, b.s)
    return b.prompts.sample(n, sid, b.blocks.get(sid), point.key.cell)


async def _measure(session: aiohttp.ClientSession, b: Bench, point: LoadPoint, repeat: int) -> None:
    """One point, one repeat: warm-up, the measured run, and again while its timestamps cannot be trusted."""
    first, t0 = (b.todo or {}).get((point.index, repeat), 1), time.monotonic()
    for attempt in range(first, first + b.s.load.max_attempts):
        warm_e2el_s = None
        if b.s.load.warmup_requests:
            w = await loadgen.warmup(session, b.req, point.key,
                                     _specs(b, point, b.s.load.warmup_requests, repeat, attempt, True), b.abort)
            if w.abort_reason:
                raise ServerError(w.abort_reason)
            e2el = [r.e2el_ms for r in w.records if r.success]
            # the warm-up's E2EL stands for the point's only if it ran at the point's concurrency
            same_load = point.key.concurrency is not None and b.s.load.warmup_requests >= point.key.concurrency
            warm_e2el_s = float(np.median(e2el)) / 1000.0 if e2el and same_load else None
        lp = loadgen.prompts_for_duration(point, b.s.load.min_duration_s, warm_e2el_s, b.s.load.max_prompts_per_point)
        k = point.key
        res = PointResult(index=point.index, repeat=repeat, attempt=attempt, concurrency=k.concurrency,
                          request_rate=k.request_rate, max_concurrency=k.max_concurrency, input_len=k.input_len,
                          output_len=k.output_len, prefix_len=k.prefix_len, num_prefixes=k.num_prefixes,
                          num_prompts=lp.num_prompts, num_prompts_why=lp.num_prompts_why, started_at=now())
        b.rf.point(b.engine, res)
        pr = await _run(session, b, res, _specs(b, point, lp.num_prompts, repeat, attempt, False))
        if pr.abort_reason:
            raise ServerError(pr.abort_reason)
        _say(b.engine, res, b.s.load.repeats)
        if res.trust.trusted or not trust.worth_retry(res.trust) or attempt == first + b.s.load.max_attempts - 1:
            if b.progress:
                b.progress.cell_done(b.engine, point.index, repeat, time.monotonic() - t0)
            return
        print(f"{b.engine} {res.label}: measuring again (attempt {attempt + 1} of {first + b.s.load.max_attempts - 1})",
              file=sys.stderr)


async def _run(session: aiohttp.ClientSession, b: Bench, res: PointResult, specs: list[RequestSpec]):
    """The measured run of one point; the result is filled in and saved even when it is interrupted."""
    rf, name = b.rf, b.engine
    tag = {"point": res.index, "repeat": res.repeat, "attempt": res.attempt, "label": res.label}
    saved = []

    def save(rec) -> None:
        saved.append(rec)
        append_jsonl(rf.path(name, "requests.jsonl"), {**tag, **rec.to_json()})

    url = b.req.url.rsplit("/v1/", 1)[0] + "/metrics"
    sampler = MetricsSampler(session, url, b.s.load.metrics_interval_s, time.perf_counter())
    pr, tel = None, Telemetry(b.s.profile.telemetry_interval_ms)
    try:
        cache_before = await prefix_cache.read(session, url)  # counters: the point's own hits are the difference
        async with tel, sampler:
            pr = await loadgen.run_point(session, b.req, res.key, specs, b.s.load.burstiness,
                                         seed=b.s.workload.seed + res.index, on_record=save, abort=b.abort,
                                         desc=f"{name} {res.label}" + (f" #{res.repeat + 1}" if b.s.load.repeats > 1 else ""))
        res.prefix_cache = prefix_cache.delta(cache_before, await prefix_cache.read(session, url))
    finally:
        for t, vals in sampler.samples:
            append_jsonl(rf.path(name, "metrics.jsonl"), {**tag, "t_s": round(t, 4), **vals})
        _finish(b, res, pr, saved, sampler)
        res.telemetry = tel.save(rf.path(name, "telemetry.jsonl.gz"), tag, res.metrics)
        rf.point(name, res)
    return pr


def _finish(b: Bench, res: PointResult, pr, saved: list, sampler: MetricsSampler) -> None:
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
    res.steady = steady.steady(pr.records, res.concurrency)
    res.client = pr.client_health()
    res.trust = trust.assess(pr.records, res.metrics, res.client, b.idle_lag_ms, b.s.workload.ignore_eos)
    res.unfinished = pr.unfinished
    if pr.partial:
        res.status = "partial"
    else:
        res.status = "complete" if res.trust.trusted else "untrusted"
    if res.steady is None and res.concurrency:
        res.warnings.append(f"no steady-state window: {res.num_prompts} requests at concurrency {res.concurrency} "
                            f"are fewer than three waves (set workload.prompts_per_concurrency to 3 or more)")
    rows = steady.series(pr.records, pr.duration_s, sampler.samples)
    tag = {"point": res.index, "repeat": res.repeat, "attempt": res.attempt, "label": res.label}
    for row in rows:
        append_jsonl(b.rf.path(b.engine, "series.jsonl"), {**tag, **row})


def _say(name: str, res: PointResult, repeats: int) -> None:
    label = res.label + (f" #{res.repeat + 1}" if repeats > 1 else "") + (f" (attempt {res.attempt})"
                                                                          if res.attempt > 1 else "")
    m = res.metrics
    for w in res.warnings:
        print(f"warning: {name} {label}: {w}", file=sys.stderr)
    if m is None or m.completed == 0:
        top = max(m.errors, key=m.errors.get) if m and m.errors else "no request finished"
        print(f"{name} {label}: {res.status}: all {m.failed if m else res.num_prompts} requests failed: {top}",
              file=sys.stderr)
        return
    st = f", steady {res.steady.output_throughput:.1f} tok/s" if res.steady else ""
    print(f"{name} {label}: {res.status}: {m.completed} ok, {m.failed} failed, {m.output_throughput:.1f} output tok/s"
          f"{st}, median TTFT {m.stat('median_ttft_ms'):.1f} ms, median TPOT {m.stat('median_tpot_ms'):.2f} ms",
          file=sys.stderr)
    if not res.trust.trusted:
        print(f"UNTRUSTED {name} {label}: " + "; ".join(res.trust.reasons), file=sys.stderr)


async def _drive(b: Bench, repeats: list[int]) -> None:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        b.idle_lag_ms = await loadgen.idle_loop_lag()
        b.rf.engine(b.engine, client_idle_loop_lag_p99_ms=b.idle_lag_ms)
        for r in repeats:
            for point in b.plan:
                if b.todo is None or (point.index, r) in b.todo:
                    await _measure(session, b, point, r)
        if b.capture and repeats[-1] == b.s.load.repeats - 1:  # extra passes, never among the points' figures
            await capture.profile_points(session, b.capture, b.rf, b.engine, b.req, b.plan, b.s.profile, b.abort,
                                         lambda point, n: _specs(b, point, n, b.s.load.repeats, 1, False))
        if b.s.load.capacity:  # after the plan's points: the request-rate search (analysis/capacity.py)
            await capacity_search.search(b, lambda point, r: _measure(session, b, point, r))


def run_plan(s: Scenario) -> list[LoadPoint]:
    """Every workload cell at every load point (loadgen.plan), as the scenario asks."""
    return loadgen.plan(s.load.concurrency, s.load.request_rate, s.load.max_concurrency, s.workload.num_prompts,
                        s.workload.prompts_per_concurrency, s.workload.cells())


def _bench(s: Scenario, rf: RunFile, e: Engine, base_url: str, model: str, prompts: Prompts,
           blocks: dict, repeats: list[int], abort=None, log_len: int | None = None, camp=None, cap=None) -> None:
    limit, src = max_model_len(base_url, e, log_len)
    rf.engine(e.name, max_model_len=limit, max_model_len_source=src)
    check_lengths(e, limit, src, s, prompts)
    sampling = registry.kind(e.kind).sampling if s.workload.temperature == 0 else {"temperature": s.workload.temperature}
    req = Request(f"{base_url}/v1/completions", model, body_template(sampling, s.workload.ignore_eos),
                  s.load.request_timeout_s)
    cell = s.workload.cells()[0]
    p_len = (cell.input_len or 0) + (cell.prefix_len or 0)  # tokens
    example = RequestSpec(f"<prompt of {p_len or 'its'} tokens>", p_len, cell.output_len or s.workload.output_lens[0])
    rf.engine(e.name, request_body=completion_body(model, example, req.body))
    b = Bench(s, rf, e.name, req, prompts, camp.plan if camp else run_plan(s), blocks, abort, capture=cap)
    if camp:
        b.todo, b.progress = camp.todo[e.name], camp.progress
    asyncio.run(_drive(b, repeats))


@contextlib.contextmanager
def launched(s: Scenario, rf: RunFile, e: Engine, model_path: str):
    """One life of a launched server: start it, record its command line and what its log says, yield
    (server, served model name, log facts); stop it (and read the log again) on the way out."""
    tok = s.model.tokenizer or None
    port = e.port or free_port(e.host)
    cmd = launch.server_command(e, model_path, port, tok)
    log_path = rf.path(e.name, "server.log")
    rec = rf.engine(e.name, kind=e.kind, command=cmd, env=e.env, log=log_path.name, base_url=f"http://{e.host}:{port}",
                    tensor_parallel=e.tensor_parallel)
    if rec.version is None:
        rf.engine(e.name, version=launch.engine_version(e))
    print(f"{e.name}: starting {' '.join(cmd)}", file=sys.stderr)
    k, env = registry.kind(e.kind), dict(e.env)
    env |= capture.hook_env(bool(s.profile.points), rf.dir / f".{e.name}.capture", env)
    with ServerProcess(e.name, cmd, log_path, e.host, port, env=env, startup_timeout_s=e.startup_timeout_s) as srv:
        facts = k.read_log(log_path.read_text(errors="replace"))  # raises on a fallback
        name = e.served_model_name or srv.model_ids[0]
        rec = rf.engine(e.name, status="running", pid=srv.proc.pid, ready_s=srv.ready_s, starts=rec.starts + 1,
                        served_model=name, kernels=facts.kernels, log_notes=facts.notes)
        if facts.version and not rec.version:
            rf.engine(e.name, version=facts.version)
        print(f"{e.name}: ready in {srv.ready_s:.0f} s; kernels: {facts.kernels or 'not reported'}", file=sys.stderr)
        yield srv, name, facts
        srv.check()
        # kernels chosen lazily (first batch of a size) appear after start-up: read the log again
        facts = launch.read_log_file(e.kind, log_path)  # line by line: a TM_GEMM_VERBOSE log is huge
        rf.engine(e.name, kernels=facts.kernels, log_notes=facts.notes, gemm_choices=facts.gemm_choices)


def _serve(s: Scenario, rf: RunFile, e: Engine, model_path: str, prompts: Prompts, camp: Campaign,
           repeats: list[int]) -> None:
    """One life of a launched server, running the repeats given."""
    with launched(s, rf, e, model_path) as (srv, name, facts):
        cap = capture.Capture(rf.dir / f".{e.name}.capture", srv.proc.pid) if s.profile.points else None
        _bench(s, rf, e, srv.base_url, name, prompts, camp.blocks, repeats, abort=srv.death,
               log_len=facts.max_model_len, camp=camp, cap=cap)


def _bench_engine(s: Scenario, rf: RunFile, e: Engine, model_path: str, prompts: Prompts, camp: Campaign) -> None:
    repeats = camp.repeats(e.name)  # those with a cell to do
    if not repeats and not s.load.capacity:
        print(f"{e.name}: every cell is done already", file=sys.stderr)
        rf.engine(e.name, status="complete")
        return
    if registry.kind(e.kind).command is None:  # an already-running server
        base_url = e.base_url.rstrip("/")
        ids = served_models(base_url)
        if not ids:
            raise ServerError(f"{e.name}: no OpenAI-compatible server answers {base_url}/v1/models")
        name = e.served_model_name or ids[0]
        rf.engine(e.name, kind=e.kind, base_url=base_url, served_model=name, status="running",
                  tensor_parallel=e.tensor_parallel)  # as the scenario says: nothing is passed to it
        _bench(s, rf, e, base_url, name, prompts, camp.blocks, repeats, camp=camp)
    elif s.load.restart_between_repeats:
        for r in repeats:
            _serve(s, rf, e, model_path, prompts, camp, [r])
    else:
        _serve(s, rf, e, model_path, prompts, camp, repeats)
    rf.engine(e.name, status="complete")


def outcome(run_dir: Path) -> tuple[int, int]:
    """(failed requests, untrusted points) of a finished run: what the exit code reports."""

    run = load_run(run_dir)
    pts = [p for e in run.engines.values() for p in e.points]
    return sum(p.metrics.failed for p in pts if p.metrics), sum(p.status == "untrusted" for p in pts)


def serve_bench(s: Scenario, argv: list[str], engine_names: list[str] | None = None, resume: str | None = None,
                redo: str | None = None) -> Path:
    """resume: a run directory to continue (serve/campaign.py); redo: campaign.REDO, finished cells to measure again.
    `s` as loaded: it is resolved here (expand.py) and run.json records it as written."""
    s = resolve(s, engine_names)
    chosen = [s.engine(n) for n in engine_names] if engine_names else s.engines
    saved = campaign.saved_run(resume, s) if resume else None
    model_path = prepare_model(s)
    prompts = Prompts(s.workload, load_tokenizer(s.model.tokenizer or model_path))
    plan = campaign.stable_plan(run_plan(s), saved)
    camp = Campaign(plan, campaign.cells_to_do(s, plan, [e.name for e in chosen], saved, redo),
                    prompt_blocks(s, prompts, sorted(plan, key=lambda p: p.index)))
    for e in chosen:  # before any server starts: what the engines' own arguments tell
        check_lengths(e, *arg_max_len(e), s, prompts)
    cfg = Path(model_path) / "config.json"
    host = host_info(max(e.tensor_parallel or 1 for e in chosen))
    if saved:
        rf = campaign.reopen(saved, argv, camp.todo, host, s.to_dict())
    else:
        rf = RunFile(new_run_dir(s.output_dir, s.name), ServeRun(
            created_at=now(), argv=argv, host=host, scenario=s.to_dict(),
            model_config=json.loads(cfg.read_text()) if cfg.exists() else None))
    run = rf.run
    print(f"run directory: {rf.dir}", file=sys.stderr)
    camp.progress, line = campaign.estimate(s, camp, saved)
    print(line, file=sys.stderr)
    try:
        for e in chosen:
            try:
                _bench_engine(s, rf, e, model_path, prompts, camp)
            except BaseException as ex:
                status = "interrupted" if isinstance(ex, KeyboardInterrupt) else "failed"
                rf.engine(e.name, status=status, error=str(ex) or type(ex).__name__)
                raise
    except KeyboardInterrupt:
        rf.finish("interrupted", "interrupted (SIGINT/SIGTERM); completed points are kept")
        raise
    except (ServerError, log.EngineFallbackError, ScenarioError, OSError, RuntimeError) as ex:
        rf.finish("failed", str(ex))
        raise RunFailed(str(ex), rf.dir) from None
    rf.finish("complete")
    print(summary(run), file=sys.stderr)
    return rf.dir


def summary(run: ServeRun) -> str:
    """The short table printed last: whole-point and steady-state throughput, latencies, status."""
    head = (f"{'engine':<14}{'point':<12}{'status':<11}{'ok':>5}{'fail':>5}{'out tok/s':>11}{'steady':>10}"
            f"{'TTFT p50':>10}{'p99':>9}{'TPOT p50':>10}{'p99':>8}{'ITL p99':>9}")
    lines = [head]
    for name, e in run.engines.items():
        for p in e.points:
            m = p.metrics
            if m is None:
                lines.append(f"{name:<14}{p.label:<12}{p.status:<11}")
                continue
            st = f"{p.steady.output_throughput:>10.1f}" if p.steady else f"{'-':>10}"
            nan = float("nan")
            label = p.label + (f"#{p.repeat + 1}" if run.scenario.get("load", {}).get("repeats", 1) > 1 else "")
            lines.append(f"{name:<14}{label:<12}{p.status:<11}{m.completed:>5}{m.failed:>5}{m.output_throughput:>11.1f}{st}"
                         f"{m.stat('median_ttft_ms') or nan:>10.1f}{m.stat('p99_ttft_ms') or nan:>9.1f}"
                         f"{m.stat('median_tpot_ms') or nan:>10.2f}{m.stat('p99_tpot_ms') or nan:>8.2f}"
                         f"{m.stat('p99_itl_ms') or nan:>9.2f}")
    return "\n".join(lines) + "\n(latencies in ms; 'steady': output tok/s in the steady-state window; see run.json)"
