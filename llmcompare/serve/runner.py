"""`serve-bench`: for each engine of the scenario, launch (or reach) its server, warm it, run every load point
`load.repeats` times, and keep run.json, the per-request lines and the per-second series on disk as it goes.
A point whose timestamps cannot be trusted (analysis/trust.py) is measured again, up to `load.max_attempts` times, and
kept as `untrusted` if it stays so. A dead server, a failed start, Ctrl-C or a write error ends the run with a
clear error; completed points stay on disk, and no engine process is left."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from llmcompare.engines import launch, log, registry
from llmcompare.engines.launch import arg_max_len
from llmcompare.engines.server import ServerError, ServerProcess, free_port, served_models
from llmcompare.errors import ScenarioError
from llmcompare.expand import resolve
from llmcompare.schema.files import RunFile, RunLock, load_run, new_run_dir
from llmcompare.schema.machine import Machine
from llmcompare.schema.run import ServeRun, now
from llmcompare.schema.scenario import Engine, Scenario
from llmcompare.serve import campaign, capture
from llmcompare.serve.campaign import Campaign
from llmcompare.serve.context_length import check_lengths
from llmcompare.serve.measure import bench, prompt_blocks, run_plan
from llmcompare.serve.summary import summary
from llmcompare.setup.host import host_info, machine
from llmcompare.setup.model import prepare_model
from llmcompare.workload.prompts import Prompts, load_tokenizer


class RunFailed(RuntimeError):
    def __init__(self, message: str, run_dir: Path):
        super().__init__(message)
        self.run_dir = run_dir


@contextlib.contextmanager
def launched(s: Scenario, rf: RunFile, e: Engine, model_path: str):
    """One life of a launched server: start it, record its command line and what its log says, yield
    (server, served model name, log facts); stop it (and read the log again) on the way out."""
    tok = s.model.tokenizer or None
    highest = registry.kind(e.kind).max_port
    port = e.port or free_port(e.host, highest)
    if port > highest:
        raise ScenarioError(f"engines[{e.name}].port: {port} is over {highest}, the highest a {e.kind} server takes")
    cmd = launch.server_command(e, model_path, port, tok)
    log_path = rf.path(e.name, "server.log")
    rec = rf.record(e.name)
    rec.kind, rec.command, rec.env, rec.log = e.kind, cmd, e.env, log_path.name
    rec.base_url, rec.tensor_parallel = f"http://{e.host}:{port}", e.tensor_parallel
    rec.version = rec.version or launch.engine_version(e)
    rec.machine = same_machine(rec.machine, machine(e.env))
    rf.save()
    print(f"{e.name}: starting {' '.join(cmd)}", file=sys.stderr)
    k, env = registry.kind(e.kind), dict(e.env)
    env |= capture.hook_env(bool(s.profile.points), rf.dir / f".{e.name}.capture", env)
    with ServerProcess(e.name, cmd, log_path, e.host, port, env=env, startup_timeout_s=e.startup_timeout_s) as srv:
        facts = k.read_log(log_path.read_text(errors="replace"))  # raises on a fallback
        name = e.served_model_name or srv.model_ids[0]
        rec.status, rec.pid, rec.ready_s, rec.starts, rec.served_model = "running", srv.proc.pid, srv.ready_s, \
            rec.starts + 1, name
        rec.kernels, rec.log_notes, rec.version = facts.kernels, facts.notes, rec.version or facts.version
        rf.save()
        print(f"{e.name}: ready in {srv.ready_s:.0f} s; kernels: {facts.kernels or 'not reported'}", file=sys.stderr)
        yield srv, name, facts
        srv.check()
        # kernels chosen lazily (first batch of a size) appear after start-up: read the log again
        facts = launch.read_log_file(e.kind, log_path)  # line by line: a TM_GEMM_VERBOSE log is huge
        rec.kernels, rec.log_notes, rec.gemm_choices = facts.kernels, facts.notes, facts.gemm_choices
        rf.save()


def same_machine(was: Machine | None, now_: Machine) -> Machine:
    """The engine record's machine after a (re)start: `now_`, or, when an earlier start of it (a resume) was on
    another machine, one whose key is "" (not one machine) naming both. `latest_key` keeps this start's machine."""
    now_.latest_key = now_.key
    if was is None or was.key == now_.key:
        return now_
    now_.key, now_.source = "", f"measured on more than one machine: {was.describe()}; then this one"
    return now_


def _server_host(base_url: str) -> str:
    host = base_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return "local" if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0") else host


def _serve(s: Scenario, rf: RunFile, e: Engine, model_path: str, prompts: Prompts, camp: Campaign,
           repeats: list[int]) -> None:
    """One life of a launched server, running the repeats given."""
    with launched(s, rf, e, model_path) as (srv, name, facts):
        cap = capture.Capture(rf.dir / f".{e.name}.capture", srv.proc.pid,
                              registry.kind(e.kind).process_roles) if s.profile.points else None
        bench(s, rf, e, srv.base_url, name, prompts, camp.blocks, repeats, abort=srv.death,
               log_len=facts.max_model_len, camp=camp, cap=cap)


def _bench_engine(s: Scenario, rf: RunFile, e: Engine, model_path: str, prompts: Prompts, camp: Campaign,
                  only: int | None = None) -> None:
    """Every repeat of engine e with a cell to do (only: that repeat alone, its turn in an interleaved run)."""
    repeats = [r for r in camp.repeats(e.name) if only is None or r == only]  # those with a cell to do
    last_turn = only is None or only == s.load.repeats - 1
    if not repeats and not (s.load.capacity and last_turn):
        if not camp.repeats(e.name):
            print(f"{e.name}: every cell is done already", file=sys.stderr)
            rf.record(e.name).status = "complete"
            rf.save()
        return
    if registry.kind(e.kind).command is None:  # an already-running server
        base_url = e.base_url.rstrip("/")
        ids = served_models(base_url)
        if not ids:
            raise ServerError(f"{e.name}: no OpenAI-compatible server answers {base_url}/v1/models")
        name = e.served_model_name or ids[0]
        rec = rf.record(e.name)
        rec.kind, rec.base_url, rec.served_model, rec.status = e.kind, base_url, name, "running"
        rec.tensor_parallel = e.tensor_parallel  # as the scenario says: nothing is passed to it
        rec.machine = same_machine(rec.machine, machine(e.env, _server_host(base_url)))
        rf.save()
        bench(s, rf, e, base_url, name, prompts, camp.blocks, repeats, camp=camp)
    elif s.load.restart_between_repeats:
        for r in repeats:
            _serve(s, rf, e, model_path, prompts, camp, [r])
    else:
        _serve(s, rf, e, model_path, prompts, camp, repeats)
    if last_turn:
        rf.record(e.name).status = "complete"
        rf.save()


def outcome(run_dir: Path) -> tuple[int, int]:
    """(failed requests, untrusted cells) of a finished run: what the exit code reports. Only the last attempt of
    each (engine, point, repeat) counts: an attempt measured again (the runner's retry, or `--resume --redo`) is
    superseded by the later one."""

    run = load_run(run_dir)
    last = [e.point(i, r) for e in run.engines.values() for i, r in dict.fromkeys((p.index, p.repeat) for p in e.points)]
    return sum(p.metrics.failed for p in last if p.metrics), sum(p.status == "untrusted" for p in last)


def serve_bench(s: Scenario, argv: list[str], engine_names: list[str] | None = None, resume: str | None = None,
                redo: str | None = None) -> Path:
    """resume: a run directory to continue (serve/campaign.py); redo: campaign.REDO, finished cells to measure again.
    `s` as loaded: it is resolved here (expand.py) and run.json records it as written. The run directory is
    locked (files.RunLock) for the run's life: a resume before its files are read, a new one once it is made."""
    s = resolve(s, engine_names)
    with contextlib.ExitStack() as held:
        if resume and Path(resume).exists():  # one that is not there: saved_run says so
            held.enter_context(RunLock(Path(resume) if Path(resume).is_dir() else Path(resume).parent))
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
            d = new_run_dir(s.output_dir, s.name)
            held.enter_context(RunLock(d))
            rf = RunFile(d, ServeRun(created_at=now(), argv=argv, host=host, scenario=s.to_dict(),
                                     model_config=json.loads(cfg.read_text()) if cfg.exists() else None))
        print(f"run directory: {rf.dir}", file=sys.stderr)
        camp.progress, line = campaign.estimate(s, camp, saved)
        print(line, file=sys.stderr)
        _run_engines(s, rf, chosen, model_path, prompts, camp)
        print(summary(rf.run), file=sys.stderr)
        return rf.dir


def _run_engines(s: Scenario, rf: RunFile, chosen: list[Engine], model_path: str, prompts: Prompts,
                 camp: Campaign) -> None:
    """Every chosen engine in turn; run.json says how the run ended (complete, interrupted, failed)."""
    turns = [(e, None) for e in chosen]
    if s.load.interleave:  # repeat 0 of every engine, then repeat 1 ...: drift on the machine hits all alike
        turns = [(e, r) for r in range(s.load.repeats) for e in chosen]
    try:
        for e, only in turns:
            try:
                _bench_engine(s, rf, e, model_path, prompts, camp, only)
            except BaseException as ex:
                status = "interrupted" if isinstance(ex, KeyboardInterrupt) else "failed"
                rec = rf.record(e.name)
                rec.status, rec.error = status, str(ex) or type(ex).__name__
                rf.save()
                raise
    except KeyboardInterrupt:
        rf.finish("interrupted", "interrupted (SIGINT/SIGTERM); completed points are kept")
        raise
    except (ServerError, log.EngineFallbackError, ScenarioError, OSError, RuntimeError) as ex:
        rf.finish("failed", str(ex))
        raise RunFailed(str(ex), rf.dir) from None
    except Exception as ex:  # a bug: run.json says so, not `running`; the traceback is kept for the report of it
        rf.finish("failed", f"internal error: {type(ex).__name__}: {ex}")
        raise
    rf.finish("complete")
