"""`serve-bench`: for each engine of the scenario, launch (or reach) its server, warm it, run every load point,
and keep run.json and the per-request lines on disk as it goes. A dead server, a failed start, Ctrl-C or a
write error ends the run with a clear error; completed points stay on disk, and no engine process is left.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import aiohttp

from . import checkpoint, engines, loadgen, metrics
from .monitor import MetricsSampler
from .results import ServeRun, append_jsonl, new_run_dir, now
from .scenario import Engine, Scenario, ScenarioError, expand
from .server import ServerError, ServerProcess, free_port, served_models
from .workload import Prompts, load_tokenizer

CLIENT_LAG_WARN_MS = 1.0  # p99 event-loop lag beyond the idle floor above which a point is flagged


class RunFailed(RuntimeError):
    def __init__(self, message: str, run_dir: Path):
        super().__init__(message)
        self.run_dir = run_dir


def prepare_model(s: Scenario) -> str:
    path = expand(s.model.path)
    if Path(path).exists():
        return path
    if s.model.make is None:
        if path.startswith(("/", "~", ".")):
            raise ScenarioError(f"model.path: {path} does not exist (and model.make is not set to build it)")
        return path  # a hub id: the engines resolve it from their local cache
    mk = s.model.make
    print(f"model {path} is missing: making it (preset {mk.preset}, quant {mk.quant}, {mk.dtype}, seed {mk.seed})",
          file=sys.stderr)
    checkpoint.make_model(path, mk.preset, mk.quant, mk.dtype, mk.seed)
    return path


async def _drive(s: Scenario, run: ServeRun, ename: str, base_url: str, model_name: str, prompts: Prompts,
                 abort) -> None:
    url = f"{base_url}/v1/completions"
    req_path, met_path = run.path(ename, "requests.jsonl"), run.path(ename, "metrics.jsonl")
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        idle_lag_ms = await loadgen.idle_loop_lag()
        run.engine(ename, client_idle_loop_lag_p99_ms=idle_lag_ms)
        for idx, point in enumerate(loadgen.plan(s.load, s.workload)):
            specs = prompts.sample(point.num_prompts, stream=2 * idx + 1)
            if s.load.warmup_requests:
                wspecs = prompts.sample(s.load.warmup_requests, stream=2 * idx)
                w = await loadgen.warmup(session, url, model_name, point, wspecs, s.workload, s.load, abort)
                if w.abort_reason:
                    raise ServerError(w.abort_reason)
            entry = {"label": point.label, "concurrency": point.concurrency,
                     "request_rate": None if point.request_rate is None else
                     ("inf" if math.isinf(point.request_rate) else point.request_rate),
                     "max_concurrency": point.max_concurrency, "num_prompts": point.num_prompts,
                     "status": "running", "started_at": now()}
            run.point(ename, entry)

            def save(rec, label=point.label):
                append_jsonl(req_path, {"point": label, **rec.to_json()})

            sampler = MetricsSampler(session, f"{base_url}/metrics", s.load.metrics_interval_s, time.perf_counter())
            pr = None
            try:
                async with sampler:
                    pr = await loadgen.run_point(session, url, model_name, point, specs, s.workload, s.load,
                                                 seed=s.workload.seed + idx, on_record=save, abort=abort,
                                                 desc=f"{ename} {point.label}")
            finally:
                for t, vals in sampler.samples:
                    append_jsonl(met_path, {"point": point.label, "t_s": round(t, 4), **vals})
                records = pr.records if pr else []
                entry["server_metrics"] = sampler.summary()
                entry["server_metrics_error"] = None if sampler.samples else sampler.error
                entry["token_counts"] = metrics.fill_token_counts(records, prompts.count_tokens)
                entry["metrics"] = metrics.compute(records, pr.duration_s if pr else 0.0, s.percentiles, s.slo)
                entry["finished_at"] = now()
                entry["client"] = pr.client_health() if pr else {}
                lag = entry["client"].get("loop_lag_p99_ms")
                if lag is not None and lag > idle_lag_ms + CLIENT_LAG_WARN_MS:
                    entry.setdefault("warnings", []).append(
                        f"the client's event loop woke up {lag:.1f} ms late (p99; {idle_lag_ms:.1f} ms when idle): "
                        "the load generator is busy, and its timestamps may carry up to the difference in delay")
                if pr is None or pr.partial:
                    entry["status"] = "partial"
                    entry["unfinished"] = pr.unfinished if pr else point.num_prompts
                else:
                    entry["status"] = "complete"
                run.point(ename, entry)
            if pr.abort_reason:
                raise ServerError(pr.abort_reason)
            m = entry["metrics"]
            for w in entry.get("warnings", []):
                print(f"warning: {ename} {point.label}: {w}", file=sys.stderr)
            print(f"{ename} {point.label}: {m['completed']} ok, {m['failed']} failed, "
                  f"{m['output_throughput']:.1f} output tok/s, median TTFT {m['median_ttft_ms']:.1f} ms, "
                  f"median TPOT {m['median_tpot_ms']:.2f} ms", file=sys.stderr)


def _bench_engine(s: Scenario, run: ServeRun, e: Engine, model_path: str, prompts: Prompts) -> None:
    tok = expand(s.model.tokenizer) if s.model.tokenizer else None
    if e.kind == "openai":
        base_url = e.base_url.rstrip("/")
        ids = served_models(base_url)
        if not ids:
            raise ServerError(f"{e.name}: no OpenAI-compatible server answers {base_url}/v1/models")
        name = e.served_model_name or ids[0]
        run.engine(e.name, kind=e.kind, base_url=base_url, command=None, version=None, served_model=name,
                   status="running")
        asyncio.run(_drive(s, run, e.name, base_url, name, prompts, abort=None))
        run.engine(e.name, status="complete")
        return
    port = e.port or free_port(e.host)
    cmd = engines.server_command(e, model_path, port, tok)
    log_path = run.path(e.name, "server.log")
    run.engine(e.name, kind=e.kind, command=cmd, env=e.env, version=engines.engine_version(e),
               log=log_path.name, base_url=f"http://{e.host}:{port}")
    print(f"{e.name}: starting {' '.join(cmd)}", file=sys.stderr)
    with ServerProcess(e.name, cmd, log_path, e.host, port, env={k: expand(v) for k, v in e.env.items()},
                       startup_timeout_s=e.startup_timeout_s) as srv:
        facts = engines.kind(e.kind).read_log(log_path.read_text(errors="replace"))  # raises on a fallback
        name = e.served_model_name or srv.model_ids[0]
        info = run.engine(e.name, status="running", pid=srv.proc.pid, ready_s=srv.ready_s, served_model=name,
                          kernels=facts.kernels, log_notes=facts.notes)
        if facts.version and not info.get("version"):
            run.engine(e.name, version=facts.version)
        print(f"{e.name}: ready in {srv.ready_s:.0f} s; kernels: {facts.kernels or 'not reported'}", file=sys.stderr)
        asyncio.run(_drive(s, run, e.name, srv.base_url, name, prompts, abort=srv.death))
        srv.check()
        # kernels chosen lazily (first batch of a size) appear after start-up: read the log again
        facts = engines.kind(e.kind).read_log(log_path.read_text(errors="replace"))
        run.engine(e.name, status="complete", kernels=facts.kernels)


def failed_requests(run_dir: Path) -> int:
    run = json.loads((Path(run_dir) / "run.json").read_text())
    return sum((p.get("metrics") or {}).get("failed", 0) for e in run["engines"].values() for p in e["points"])


def serve_bench(s: Scenario, argv: list[str], engine_names: list[str] | None = None) -> Path:
    chosen = [s.engine(n) for n in engine_names] if engine_names else s.engines
    model_path = prepare_model(s)
    tokenizer = load_tokenizer(s.model.tokenizer or model_path)
    prompts = Prompts(s.workload, tokenizer)
    run = ServeRun(new_run_dir(s.output_dir, s.name), s.to_dict(), argv)
    cfg = Path(model_path) / "config.json"
    run.data["model_config"] = json.loads(cfg.read_text()) if cfg.exists() else None
    print(f"run directory: {run.dir}", file=sys.stderr)
    try:
        for e in chosen:
            try:
                _bench_engine(s, run, e, model_path, prompts)
            except BaseException as ex:
                status = "interrupted" if isinstance(ex, KeyboardInterrupt) else "failed"
                run.engine(e.name, status=status, error=str(ex) or type(ex).__name__)
                raise
    except KeyboardInterrupt:
        run.finish("interrupted", "interrupted (SIGINT/SIGTERM); completed points are kept")
        raise
    except (ServerError, engines.EngineFallbackError, OSError, RuntimeError) as ex:
        run.finish("failed", str(ex))
        raise RunFailed(str(ex), run.dir) from None
    run.finish("complete")
    print(summary(run.data), file=sys.stderr)
    return run.dir


def summary(data: dict) -> str:
    """The short table printed last (p99 columns read nan when 99 is not among the scenario's percentiles)."""
    nan = float("nan")
    head = f"{'engine':<14}{'point':<10}{'ok':>5}{'fail':>5}{'req/s':>8}{'out tok/s':>11}{'TTFT p50':>10}{'p99':>9}" \
           f"{'TPOT p50':>10}{'p99':>8}{'ITL p99':>9}"
    lines = [head]
    for name, e in data["engines"].items():
        for p in e["points"]:
            m = p.get("metrics") or {}
            if not m:
                continue
            lines.append(f"{name:<14}{p['label']:<10}{m['completed']:>5}{m['failed']:>5}{m['request_throughput']:>8.2f}"
                         f"{m['output_throughput']:>11.1f}{m['median_ttft_ms']:>10.1f}{m.get('p99_ttft_ms', nan):>9.1f}"
                         f"{m['median_tpot_ms']:>10.2f}{m.get('p99_tpot_ms', nan):>8.2f}"
                         f"{m.get('p99_itl_ms', nan):>9.2f}")
    return "\n".join(lines) + "\n(latencies in ms; see run.json for every percentile)"
