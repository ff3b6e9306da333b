"""A serve-bench campaign: which cells (engine x load point x repeat) a run still has to measure, how long that
should take, and how far it has got. `serve-bench SCENARIO --resume RUN_DIR` continues a run that stopped
(Ctrl-C, SIGTERM, a crash, a device time limit) in its own directory:

  done      a cell whose last attempt is `complete` (trusted), or `untrusted` after all its attempts (the run
            already gave up on it): never measured again, unless `--redo untrusted` (untrusted ones) or
            `--redo all` (every cell of the chosen engines)
  to do     every other cell: never measured, `running` (a crash), `interrupted` or `partial`; its new attempts
            are numbered after the ones on file, so nothing on file is overwritten
  same      the scenario must be the one the run was made with; it may only add cells: load.concurrency and
            load.request_rate values, workload.input_len, output_len, prefix_len and num_prefixes values
            (the last two: shared-prefix), engines. Anything else that
            differs is named in the error. Load points keep the index they have on file; new ones are numbered
            after them, so each keeps its prompts (measure.stream_id).

Time estimate (printed before anything starts, and updated after every cell): server start-ups (the engine's
ready_s on file, else its kind's rough_startup_s) plus, per cell, the measured duration of the same point (same engine first,
else another engine of the run), else a rough guess: closed loop c, n requests: n / c waves of one request's
time (prompt, a shared prefix included, at 10,000 tok/s for the whole wave, 30 ms per output token); open loop:
n / rate plus one request's time; with load.converge its max_s plus one request's time, an upper bound (the point
sends until it converges or max_s passes, then lets its requests in flight finish). Rough guesses are labelled,
and scaled by measured / guessed of the cells done so far as the run goes. A profiled pass (profile.points) takes
its waves (capture.pass_requests / c) at its point's time per wave; the passes are added to the total, not to
the load left. A capacity search is estimated apart: its first probe, and its doubling phase if no probe fails
(probes sized as serve/capacity_search.py sizes them).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from llmcompare.engines import registry
from llmcompare.errors import ResultsReadError, ScenarioError
from llmcompare.schema.files import RunFile, load_run, planted_links
from llmcompare.schema.run import EngineRecord, LoadKey, ServeRun, now
from llmcompare.schema.scenario import Scenario
from llmcompare.serve.capture import pass_requests
from llmcompare.serve.loadgen import LoadPoint

REDO = ("untrusted", "all")  # --redo: which finished cells to measure again


GROWABLE = {("load", "concurrency"), ("load", "request_rate"), ("workload", "input_len"), ("workload", "output_len"),
            ("workload", "prefix_len"), ("workload", "num_prefixes")}


# no bearing on serving (checks: the same-answer probe is kept per engine with the request it sent)
IGNORED = {"name", "description", "source", "output_dir", "references", "kernel_bench", "checks"}


ROUGH_TPOT_S, ROUGH_PREFILL_TOK_PER_S = 0.030, 10000.0


@dataclass
class Campaign:
    """What serve-bench runs: the plan (stable indices), per engine the cells to do and their first attempt
    number, and the file-dataset prompt blocks (measure.prompt_blocks)."""

    plan: list[LoadPoint]
    todo: dict[str, dict[tuple[int, int], int]]  # engine -> (point index, repeat) -> first attempt number
    blocks: dict[int, tuple[int, int]] = field(default_factory=dict)
    progress: Progress | None = None

    def repeats(self, engine: str) -> list[int]:
        return sorted({r for _, r in self.todo.get(engine, {})})


# ---- what is the same, what is done ------------------------------------------------------------------------
def _as_list(v) -> list:
    return list(v) if isinstance(v, list) else [v]


def scenario_changes(was: dict, now_: dict) -> list[str]:
    """What differs between the scenario on file and now, beyond added cells: 'load.repeats: 3 -> 5'."""
    out = []
    for top in sorted(set(was) | set(now_)):
        if top in IGNORED:
            continue
        a, b = was.get(top), now_.get(top)
        if top == "engines":
            old = {e["name"]: e for e in a or []}
            out += [f"engines[{e['name']}]: changed" for e in b or [] if e["name"] in old and old[e["name"]] != e]
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                x, y = a.get(k), b.get(k)
                if (top, k) in GROWABLE:
                    gone = [v for v in _as_list(x) if v not in _as_list(y)]
                    if gone:
                        out.append(f"{top}.{k}: {gone} on file but not in the scenario (a resume may only add values)")
                elif x != y:
                    out.append(f"{top}.{k}: {x!r} on file, {y!r} now")
        elif a != b:
            out.append(f"{top}: {a!r} on file, {b!r} now")
    return out


def stable_plan(plan: list[LoadPoint], saved: ServeRun | None) -> list[LoadPoint]:
    """The plan with each load key's index on file kept, new keys numbered after them (run order unchanged)."""
    if saved is None:
        return plan
    on_file: dict[LoadKey, int] = {p.key: p.index for e in saved.engines.values() for p in e.points}
    nxt = max(on_file.values(), default=-1) + 1
    out = []
    for p in plan:
        if p.key in on_file:
            out.append(LoadPoint(on_file[p.key], p.key, p.num_prompts, p.num_prompts_why))
        else:
            out.append(LoadPoint(nxt, p.key, p.num_prompts, p.num_prompts_why))
            nxt += 1
    return out


def _finished(p, redo: str | None) -> bool:
    """Complete, or untrusted (the runner measures an untrusted point again itself, as often as max_attempts
    allows, and marks the last one untrusted when it gives up)."""
    if redo == "all":
        return False
    return p.status == "complete" or (p.status in ("untrusted", "failed") and redo != "untrusted")


def cells_to_do(s: Scenario, plan: list[LoadPoint], engines: list[str], saved: ServeRun | None,
                redo: str | None = None) -> dict[str, dict[tuple[int, int], int]]:
    todo: dict[str, dict[tuple[int, int], int]] = {}
    for name in engines:
        rec = saved.engines.get(name) if saved else None
        todo[name] = {}
        for r in range(s.load.repeats):
            for p in plan:
                last = rec.point(p.index, r) if rec else None
                if last is None:
                    todo[name][(p.index, r)] = 1
                elif not _finished(last, redo):
                    todo[name][(p.index, r)] = last.attempt + 1
    return todo


def resume_check(s: Scenario, saved: ServeRun, run_dir: str) -> None:
    changes = scenario_changes(saved.scenario, s.to_dict())
    if changes:
        raise ScenarioError(f"--resume {run_dir}: the scenario is not the one this run was made with: "
                            + "; ".join(changes) + ". A resume may only add load points, workload lengths "
                            "(input_len, output_len, prefix_len, num_prefixes) or engines; start a new run for "
                            "anything else")


# ---- time ----------------------------------------------------------------------------------------------------
def _rough_s(p: LoadPoint, s: Scenario) -> float:
    k = p.key
    i_len, o_len = (k.input_len or 512) + (k.prefix_len or 0), k.output_len or 256  # prompt tokens: prefix too
    c = k.concurrency or k.max_concurrency or 1
    one = i_len * c / ROUGH_PREFILL_TOK_PER_S + o_len * ROUGH_TPOT_S
    if s.load.converge:  # it sends until converged or max_s (with requests planned to last that long: converge.py),
        return s.load.converge.max_s + one  # then lets its requests in flight finish: an upper bound
    if k.concurrency:
        return max(math.ceil(p.num_prompts / c) * one, s.load.min_duration_s)
    if k.request_rate and not math.isinf(k.request_rate):
        return p.num_prompts / k.request_rate + one
    return math.ceil(p.num_prompts / c) * one


def _measured_s(key: LoadKey, engine: str, saved: ServeRun | None) -> float | None:
    """Mean measured duration of this point: this engine's, else any engine's of the run."""
    for names in ([engine], list(saved.engines) if saved else []):
        ds = [p.metrics.duration_s for n in names if saved and n in saved.engines
              for p in saved.engines[n].points if p.key == key and p.metrics and p.metrics.duration_s]
        if ds:
            return sum(ds) / len(ds)
    return None


def _passes_s(s: Scenario, camp: Campaign, by_index: dict[int, LoadPoint], guess: dict) -> float:
    """The profiled passes still to run, in s: an engine with cells to do of a point profile.points captures makes
    one pass of it after them, pass_requests() long, at the point's guessed time per wave (closed loop)."""
    total = 0.0
    for name, cells in camp.todo.items():
        for idx in sorted({i for i, _ in cells}):
            p = by_index[idx]
            if not s.profile.wants(p.key) or not p.key.concurrency:
                continue
            c = p.key.concurrency
            took = [guess[(name, i, r)][0] for i, r in cells if i == idx]
            per_wave = sum(took) / len(took) / max(math.ceil(p.num_prompts / c), 1)
            total += per_wave * pass_requests([p.num_prompts], c, s.profile.waves, s.profile.window_wave) / c
    return total


def _startup_s(rec: EngineRecord | None, kind_name: str) -> tuple[float, bool]:
    """This run's measured start-up of the engine, else its kind's rough one (registry.EngineKind)."""
    return (rec.ready_s, True) if rec and rec.ready_s else (registry.kind(kind_name).rough_startup_s, False)


@dataclass
class Progress:
    """Cells done against cells to do, and the time left; prints one line per cell."""

    guess_s: dict[tuple[str, int, int], tuple[float, bool]]  # (engine, index, repeat) -> (seconds, measured?)
    startups_s: float
    t0: float = field(default_factory=time.monotonic)
    done: int = 0
    rough_done_s: float = 0.0  # rough guesses of the cells done so far ...
    rough_took_s: float = 0.0  # ... and what they took

    def left_s(self) -> float:
        scale = self.rough_took_s / self.rough_done_s if self.rough_done_s else 1.0
        return sum(g if m else g * scale for g, m in self.guess_s.values())

    def cell_done(self, engine: str, index: int, repeat: int, took_s: float) -> None:
        g = self.guess_s.pop((engine, index, repeat), None)
        if g is None:  # not a planned cell (a capacity probe: the search says its own progress)
            return
        if not g[1]:
            self.rough_done_s, self.rough_took_s = self.rough_done_s + g[0], self.rough_took_s + took_s
        self.done += 1
        print(f"progress: {self.done} of {self.done + len(self.guess_s)} cells done, {_hms(time.monotonic() - self.t0)}"
              f" elapsed, about {_hms(self.left_s())} of load left (server start-ups not included)", file=sys.stderr)


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def estimate(s: Scenario, camp: Campaign, saved: ServeRun | None) -> tuple[Progress, str]:
    """The Progress to keep, and the estimate to print before anything starts."""
    by_index = {p.index: p for p in camp.plan}
    guess, starts_s, rough_starts = {}, 0.0, 0
    for name, cells in camp.todo.items():
        if not cells and not s.load.capacity:
            continue
        launched = registry.kind(s.engine(name).kind).command is not None
        per_repeat = s.load.restart_between_repeats or s.load.interleave
        # an engine with a capacity search and no cells to do still starts once for the search
        n_starts = (max(len(camp.repeats(name)), 1) if per_repeat and cells else 1) if launched else 0
        t, measured = _startup_s(saved.engines.get(name) if saved else None, s.engine(name).kind)
        starts_s += n_starts * t
        rough_starts += 0 if measured else n_starts
        for idx, r in cells:
            m = _measured_s(by_index[idx].key, name, saved)
            guess[(name, idx, r)] = (m, True) if m else (_rough_s(by_index[idx], s), False)
    prog = Progress(guess, starts_s)
    n_rough = sum(not m for _, m in guess.values())
    total = sum(len(c) for c in camp.todo.values())
    passes_s = _passes_s(s, camp, by_index, guess)
    line = (f"time estimate: {total} cells to do ({_hms(sum(g for g, _ in guess.values()))} of load: "
            f"{len(guess) - n_rough} from this run's measured durations, {n_rough} a rough guess) + server "
            f"start-ups {_hms(starts_s)}" + (f" ({rough_starts} a rough guess by engine kind)" if rough_starts
                                            else "")
            + (f" + profiled passes {_hms(passes_s)}" if passes_s else "")
            + f" = about {_hms(prog.left_s() + starts_s + passes_s)}")
    if n_rough:
        line += (f"; rough: {ROUGH_TPOT_S * 1000:.0f} ms per output token, prompts at "
                 f"{ROUGH_PREFILL_TOK_PER_S:,.0f} tok/s, warm-ups not counted")
    if cap := s.load.capacity:
        line += (f"; then per engine a capacity search of up to {cap.max_probes} probes x {s.load.repeats} "
                 f"repeat(s), not in this estimate: {_capacity_text(s)}")
    return prog, line


def _capacity_text(s: Scenario) -> str:
    """The capacity search's probes as serve/capacity_search.py sizes them (n requests at rate r: n / r seconds,
    n = max(num_prompts, r x min_duration_s)): the first one's time, and the doubling's if no probe fails."""
    cap = s.load.capacity

    def probe_s(r: float) -> float:
        return min(max(s.workload.num_prompts, math.ceil(r * s.load.min_duration_s)),
                   s.load.max_prompts_per_point) / r

    rates, r = [], cap.min_rate
    while r < cap.max_rate and len(rates) < cap.max_probes:
        rates.append(r)
        r *= 2
    rates = (rates + [cap.max_rate])[: cap.max_probes]
    return (f"the first probe, at {cap.min_rate:g} req/s, about {_hms(probe_s(cap.min_rate))} a repeat; doubling "
            f"to {cap.max_rate:g} req/s without a failing probe, {len(rates)} probes, about "
            f"{_hms(s.load.repeats * sum(probe_s(x) for x in rates))}; then bisection probes near the first rate "
            "that fails")


def resume_note(saved: ServeRun, argv: list[str], todo: dict, host: dict) -> dict:
    """What run.json records of each resume."""
    n = sum(len(c) for c in todo.values())
    note = {"at": now(), "argv": argv, "cells_to_do": n}
    if host.get("hostname") != saved.host.get("hostname") or host.get("gpus") != saved.host.get("gpus"):
        note["host"] = host
        print(f"warning: resuming on another host or GPU set than the run was made on "
              f"({saved.host.get('hostname')} -> {host.get('hostname')}); run.json records both", file=sys.stderr)
    return note


# ---- opening the run -------------------------------------------------------------------------------------------
def saved_run(run_dir: str, s: Scenario) -> ServeRun:
    """The run to resume, read from its files and checked against the scenario."""

    try:
        run = load_run(run_dir)
    except ResultsReadError as e:
        raise ScenarioError(f"--resume {run_dir}: {e}") from None
    if not isinstance(run, ServeRun):
        raise ScenarioError(f"--resume {run_dir}: a kernel-bench run; only serve-bench runs can be resumed")
    links = planted_links(run.dir)
    if links:
        raise ScenarioError(f"--resume {run_dir}: {', '.join(links)} is a symbolic link; no file of a run directory "
                            "is one, and llmcompare writes none through a link: remove it (or start a new run)")
    resume_check(s, run, run_dir)
    return run


def reopen(saved: ServeRun, argv: list[str], todo: dict, host: dict, scenario: dict):
    """The run file of a resumed run: the same directory, marked running again, the resume recorded; its
    scenario becomes the one resumed with (it may add cells), the grid axes it had are kept in the note."""
    from pathlib import Path

    note = resume_note(saved, argv, todo, host)
    note["axes_before"] = {f"{a}.{b}": (saved.scenario.get(a) or {}).get(b) for a, b in sorted(GROWABLE)}
    note["engines_before"] = [e.get("name") for e in saved.scenario.get("engines", [])]
    saved.resumed.append(note)
    saved.scenario = scenario
    saved.status, saved.error, saved.finished_at = "running", None, None
    for name, cells in todo.items():
        if cells and name in saved.engines:
            saved.engines[name].status, saved.engines[name].error = "starting", None
    done = sum(len(e.points) for e in saved.engines.values())
    print(f"resuming {saved.dir}: {done} point results on file, {sum(len(c) for c in todo.values())} cells to do",
          file=sys.stderr)
    return RunFile(Path(saved.dir), saved)
