"""A profiled pass of a load point: the capture hook on the engine's PYTHONPATH, signalled during one extra pass
that runs after the point's measured repeats, so no captured window is ever among the point's figures.

Protocol with the hook (profile/in_engine/sitecustomize.py), in the directory LLMC_PROFILE_DIR (`.<engine>.capture/` in the
run directory): each Python process of the server writes pid-<pid>.json; SIGUSR2 goes only to registered pids that
are alive and in the server's process group (the signal's default action would kill anything else); a process
answers a start with started-<pid> (or skipped-<pid>: it has not imported torch), a stop with trace-<pid>.json
and trace-<pid>.meta.json. Traces are gzipped into the run directory as
<engine>.profile-p<index>.pid<pid>.trace.json.gz and analysed per step (profile/timeline.py).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmcompare.analysis import steady
from llmcompare.engines import prefix_cache
from llmcompare.engines.server import ServerError
from llmcompare.profile.timeline import analyze
from llmcompare.schema.files import RunFile, append_jsonl, open_for_write
from llmcompare.schema.profile import ProfileRecord, TraceFile
from llmcompare.schema.run import LoadKey, now
from llmcompare.serve import loadgen

HOOK_DIR = Path(__file__).resolve().parent.parent / "profile" / "in_engine"  # put first on the PYTHONPATH


START_WAIT_S = 10.0  # for every signalled process to answer a start


WRITE_WAIT_S = 300.0  # for traces to be written (a 1-2 s window on a GPU is 50-190 MB of JSON)


POLL_S = 0.01  # how often a profiled pass looks at its requests in flight


def hook_env(enabled: bool, work_dir: Path, engine_env: dict[str, str]) -> dict[str, str]:
    """What the server's environment gets so that the hook loads in each of its Python processes."""
    if not enabled:
        return {}
    if work_dir.exists():
        shutil.rmtree(work_dir)  # pid files of an earlier life of the server
    work_dir.mkdir(parents=True)
    rest = engine_env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return {"LLMC_PROFILE_DIR": str(work_dir), "PYTHONPATH": os.pathsep.join(p for p in (str(HOOK_DIR), rest) if p)}


def role(title: str, roles: tuple[tuple[str, str], ...]) -> str:
    """The role a process title names (roles: the engine kind's process_roles, registry.py); "other" if none."""
    t = title.lower()
    return next((r for piece, r in roles if piece in t), "other")


@dataclass
class Capture:
    """The hook's directory and the server's process group (its leader's pid)."""

    dir: Path
    pgid: int
    roles: tuple[tuple[str, str], ...] = ()  # the engine kind's process_roles (registry.py)

    def pids(self) -> list[int]:
        """Registered pids that are alive and still in the server's group."""
        out = []
        for f in sorted(self.dir.glob("pid-*.json")):
            pid = int(f.stem.split("-")[1])
            try:
                if os.getpgid(pid) == self.pgid:
                    out.append(pid)
            except ProcessLookupError:
                continue
        return out

    def _signal(self, pids: list[int]) -> list[int]:
        sent = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGUSR2)
                sent.append(pid)
            except ProcessLookupError:
                continue
        return sent

    async def start(self) -> list[int]:
        """Starts the capture; the pids that started one (those with torch imported)."""
        for f in [*self.dir.glob("started-*"), *self.dir.glob("trace-*")]:
            f.unlink()
        sent = self._signal(self.pids())
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            answered = {_pid(f) for f in self.dir.glob("s*ed-*")} - {None}
            if answered >= set(sent):
                break
            await asyncio.sleep(0.02)
        return [p for p in sent if (self.dir / f"started-{p}").exists()]

    def stop(self, pids: list[int]) -> list[int]:
        return self._signal(pids)

    async def collect(self, rf: RunFile, engine: str, index: int, pids: list[int], anchor: str | None = None
                      ) -> list[TraceFile]:
        """Waits for each stopped process's trace, gzips it into the run directory and analyses it. Waits with
        asyncio and does the gzip and the analysis in a thread: the pass's requests keep streaming meanwhile."""
        out, deadline = [], time.monotonic() + WRITE_WAIT_S
        for pid in pids:
            meta_f = self.dir / f"trace-{pid}.meta.json"
            while not meta_f.exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if not meta_f.exists():
                out.append(TraceFile("", pid, "other", error=f"no trace within {WRITE_WAIT_S:g} s of the stop"))
                continue
            meta = json.loads(meta_f.read_text())
            meta_f.unlink()  # the next pass (another point) waits for its own
            title = meta.get("title", "")
            tf = TraceFile("", pid, role(title, self.roles), title, meta.get("start_unix_s"), meta.get("end_unix_s"),
                           cuda=meta.get("cuda"), error=meta.get("error"))
            if meta.get("trace"):
                await asyncio.to_thread(_keep_trace, self.dir / meta["trace"],
                                        rf.path(engine, f"profile-p{index}.pid{pid}.trace.json.gz"), tf, anchor)
            out.append(tf)
        return out


def _keep_trace(src: Path, dst: Path, tf: TraceFile, anchor: str | None) -> None:
    """The trace gzipped into the run directory (the raw one removed) and its per-step analysis, into `tf`."""
    tf.json_bytes = src.stat().st_size
    with open(src, "rb") as fi, open_for_write(dst, "wb") as raw, gzip.open(raw, "wb", compresslevel=6) as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    src.unlink()
    tf.file = dst.name
    try:
        tf.steps = analyze(dst, anchor)
    except (OSError, ValueError, KeyError) as e:
        tf.error = f"analysis failed: {type(e).__name__}: {e}"


def point_tok_s(rf: RunFile, engine: str, index: int) -> tuple[float | None, str | None]:
    """The point's measured repeats: median of steady-state (else whole-point) output tok/s of the usable ones
    (of any with figures when none is usable, and then a warning says so)."""
    pts = [p for p in rf.run.engines[engine].points if p.index == index and p.metrics and p.metrics.completed]
    usable = [p for p in pts if p.usable]
    vals = [p.steady.output_throughput if p.steady else p.metrics.output_throughput for p in usable or pts]
    warn = None if usable or not pts else "no measured repeat of the point is usable: the capture's cost is " \
        "against untrusted repeats"
    return (statistics.median(vals) if vals else None), warn


async def profile_points(session, cap: Capture, rf: RunFile, engine: str, req: loadgen.Request, plan: list,
                         profile, abort, specs_for) -> None:
    """A profiled pass of every point of `plan` whose concurrency profile.points lists, pass_requests() long;
    specs_for(point, n): the pass's own prompts."""
    for point in plan:
        if profile.wants(point.key):
            pts = [p for p in rf.run.engines[engine].points if p.index == point.index]
            n = pass_requests([p.num_prompts for p in pts], point.key.concurrency or 1, profile.waves,
                              profile.window_wave)
            await profiled_pass(session, cap, rf, engine, req, point.index, point.key, specs_for(point, n),
                                profile.seconds, abort, profile.anchor, cap_s=decode_cap_s(pts),
                                window_wave=profile.window_wave)


def pass_requests(sent: list[int], c: int, waves: int | None, window_wave: int = 2) -> int:
    """How many requests a profiled pass at concurrency c sends: `waves` x c (profile.waves), else as many as the
    point's longest measured repeat sent; window_wave + 2 waves at least either way (four by default: an
    uncaptured window in the second, the captured one in the third, and a wave to spare; on the H200 a 3-wave
    pass at c=256 ended before its third wave's window opened)."""
    n = waves * c if waves else max(sent, default=0)
    return max(n, (window_wave + 2) * c)


def decode_cap_s(pts: list) -> float:
    """How long, after a wave's last request finished, a window may wait for the decode phase, in s: the point's
    median E2EL (the median over its repeats with figures; 60 s without one)."""
    vals = [v for p in pts if p.metrics and p.metrics.completed and (v := p.metrics.stat("median_e2el_ms"))]
    return round(statistics.median(vals) / 1000.0, 3) if vals else 60.0


def all_decoding(live, c: int) -> bool:
    """A full load (c requests) in flight and every one past its first token: no prompt is being prefilled or
    waits in the engine's queue, so the engine's steps are decode steps until the first of them finishes. (On the
    H200 at c=256 with 1024-token prompts, both engines spent ~7 s of each ~10 s wave prefilling the next wave's
    prompts in chunks inside every step, ~190 ms a step for vLLM; the pure decode phase lasted ~2.5 s.)"""
    live = list(live)
    return len(live) >= c and all(r.chunk_ms for r in live)


def in_flight(records: list, window: list[float]) -> tuple[int, int] | None:
    """The pass's requests in flight at the window's middle (sent, not finished), and how many of them were still
    waiting for their first token (in prefill, or queued for it); None without a window or a request in it."""
    if len(window) != 2:
        return None
    mid = (window[0] + window[1]) / 2.0
    live = [r for r in records if r.success and r.e2el_ms is not None and r.dispatch_s <= mid < r.dispatch_s
            + r.e2el_ms / 1000.0]
    if not live:
        return None
    return len(live), sum(1 for r in live if r.ttft_ms is None or r.dispatch_s + r.ttft_ms / 1000.0 > mid)


def set_window_phase(rec: ProfileRecord, records: list) -> None:
    """rec.window_in_flight and window_prefill_share (of those in flight, the share before their first token: near
    0 when the window holds decode steps, near 1 when it holds a prefill) from the pass's requests."""
    n = in_flight(records, rec.window_s)
    if n:
        rec.window_in_flight, rec.window_prefill_share = n[0], round(n[1] / n[0], 3)


@dataclass
class _Pass:
    """A profiled pass's windows as it runs: times in s from the pass's start (t0, perf_counter)."""

    c: int  # the point's concurrency
    t0: float
    window_wave: int = 2  # waves finished before the captured window (profile.window_wave)
    done: int = 0  # requests finished
    live: dict = field(default_factory=dict)  # id -> RequestRecord of the requests in flight
    base: list[float] = field(default_factory=list)  # the uncaptured window [start, end]
    window: list[float] = field(default_factory=list)  # the captured window [start, end]
    started: list[int] = field(default_factory=list)  # pids capturing now

    def at(self) -> float:
        return time.perf_counter() - self.t0


async def _decode_phase(st: _Pass, rec: ProfileRecord, which: str, cap_s: float) -> None:
    """Waits for all_decoding (at most cap_s) and records the wait in rec.delay_s."""
    t_wave = time.perf_counter()
    while not all_decoding(st.live.values(), st.c):
        if time.perf_counter() - t_wave > cap_s:
            rec.warnings.append(f"the {which} window opened {cap_s:g} s after its wave ended without a moment when "
                                "every request in flight was past its first token: it may hold prefill")
            break
        await asyncio.sleep(POLL_S)
    rec.delay_s = round(time.perf_counter() - t_wave, 3)


async def _windows(st: _Pass, cap: Capture, rec: ProfileRecord, seconds: float, cap_s: float) -> None:
    """The baseline window after wave window_wave - 1, the captured one after wave window_wave (the first and the
    second by default), each in its decode phase."""
    for wave, marks in ((st.window_wave - 1, st.base), (st.window_wave, None)):
        while st.done < wave * st.c:
            await asyncio.sleep(POLL_S)
        await _decode_phase(st, rec, "baseline" if marks is not None else "captured", cap_s)
        if marks is not None:  # the baseline: same phase, one wave earlier, nothing captured
            marks.append(st.at())
            await asyncio.sleep(seconds)
            marks.append(st.at())
    st.window.append(st.at())
    st.started.extend(await cap.start())
    await asyncio.sleep(seconds)
    cap.stop(st.started)
    st.window.append(st.at())
    st.started.clear()


async def profiled_pass(session, cap: Capture, rf: RunFile, engine: str, req: loadgen.Request, index: int,
                        key: LoadKey, specs: list, seconds: float, abort=None, anchor: str | None = None,
                        cap_s: float = 60.0, window_wave: int = 2) -> ProfileRecord:
    """One extra pass of the point: once (window_wave - 1) x c of its requests have finished (c by default), at
    the first moment every request in flight is past its first token (all_decoding; at most `cap_s` later), an
    uncaptured window of `seconds` (the baseline); once window_wave x c have finished, the captured window, at
    the same phase of the next wave. The capture's cost is the captured window's output tok/s against the
    baseline's (the trace is written after the capture stops, a stall that falls after both windows)."""
    cell = {name: getattr(key, name) for name in ("concurrency", "input_len", "output_len", "prefix_len", "num_prefixes")}
    rec = ProfileRecord(index=index, label=key.label, **cell, started_at=now(), requests=len(specs),
                        window_wave=window_wave)
    rf.run.engines[engine].profiles.append(rec)
    rf.save()
    metrics_url = req.url.rsplit("/v1/", 1)[0] + "/metrics"
    cache_before = await prefix_cache.read(session, metrics_url)
    # the pass's clock starts here, after every await before it
    st = _Pass(c=key.concurrency or 1, t0=time.perf_counter(), window_wave=window_wave)

    def on_record(r) -> None:
        st.done += 1
        st.live.pop(id(r), None)
        append_jsonl(rf.path(engine, "profile.requests.jsonl"), {"point": index, "label": key.label, **r.to_json()})

    ctl = asyncio.create_task(_windows(st, cap, rec, seconds, cap_s))
    try:
        pr = await loadgen.run_point(session, req, key, specs, on_record=on_record, abort=abort,
                                     desc=f"{engine} {key.label} (profiled)",
                                     on_start=lambda r: st.live.__setitem__(id(r), r))
    finally:
        ctl.cancel()
        await asyncio.gather(ctl, return_exceptions=True)
        if st.started:  # the pass ended (or was interrupted) inside the window: stop it now
            cap.stop(st.started)
            st.window.append(st.at())
            rec.warnings.append("the pass ended before the capture window did: the window was cut short")
    if pr.abort_reason:
        rec.status, rec.error = "failed", pr.abort_reason
        rf.save()
        raise ServerError(pr.abort_reason)
    rec.prefix_cache = prefix_cache.delta(cache_before, await prefix_cache.read(session, metrics_url))
    point, warn = point_tok_s(rf, engine, index)
    rec.warnings += [warn] if warn else []
    _figures(rec, pr, st.window, point, st.base)
    rec.traces = await cap.collect(rf, engine, index, _answered(cap), anchor) if len(st.window) == 2 else []
    rec.status = "complete" if rec.traces and not rec.error else "failed"
    if not rec.traces and not rec.error:
        rec.error = "no process answered the capture signal (is torch imported in the server's processes?)"
    rf.save()
    _say(engine, rec)
    return rec


def _pid(f: Path) -> int | None:
    """The pid in an answer file's name (started-<pid>); None for a file still being written (<name>.tmp)."""
    tail = f.name.split("-", 1)[1]
    return int(tail) if tail.isdigit() else None


def _answered(cap: Capture) -> list[int]:
    return sorted(p for f in cap.dir.glob("started-*") if (p := _pid(f)) is not None)


def _tok_s(pr, window: list[float]) -> float | None:
    span = window[1] - window[0]
    return round(steady.tokens_between(pr.records, *window) / span, 3) if span > 0 else None


def _figures(rec: ProfileRecord, pr, window: list[float], point: float | None, base: list[float]) -> None:
    done = [r for r in pr.records if r.success]
    if pr.duration_s > 0:
        rec.pass_output_tok_s = round(sum(r.output_tokens or 0 for r in done) / pr.duration_s, 3)
    if len(window) != 2:
        rec.error = (f"the pass ended before its capture window opened (after {2 * (rec.concurrency or 1)} "
                     "requests finished, once every request in flight was past its first token): nothing was "
                     "captured")
        return
    rec.window_s = [round(w, 4) for w in window]
    rec.window_output_tok_s = _tok_s(pr, window)
    set_window_phase(rec, pr.records)
    rec.point_output_tok_s = point
    if len(base) == 2:
        rec.baseline_window_s = [round(w, 4) for w in base]
        rec.baseline_output_tok_s = _tok_s(pr, base)
    ref = rec.baseline_output_tok_s or point  # the same phase uncaptured; else the point's measured figure
    if ref and rec.window_output_tok_s is not None:
        rec.overhead_pct = round(100.0 * (1.0 - rec.window_output_tok_s / ref), 2)


def _say(engine: str, rec: ProfileRecord) -> None:
    if rec.error:
        print(f"warning: {engine} {rec.label} profiled pass: {rec.error}", file=sys.stderr)
        return
    files = ", ".join(f"{t.file} ({t.role})" for t in rec.traces if t.file)
    oh = f"{rec.overhead_pct:+.1f}%" if rec.overhead_pct is not None else "n/a"
    print(f"{engine} {rec.label} profiled: {rec.window_output_tok_s} tok/s in the window (capture cost {oh}); "
          f"traces: {files}", file=sys.stderr)
