#!/usr/bin/env python3
"""Client scaling: the streamed events per second llmcompare's load generator sustains with 1, 2, 4, ... worker
processes (serve/workers.py), side by side in one run with the peers that have worker processes of their own
(guidellm, inference-perf: --peers) at the same counts, against a fake server that itself runs in several
processes (tests/fakeserver.py --processes, SO_REUSEPORT), so the server is not the limit. A benchmark, not a test.

  flock /tmp/llmcompare-cpu.lock .venv/bin/python scripts/client_scaling.py [--workers 1 2 4 8]
      [--concurrency 64 256 512 1024] [--loops uvloop asyncio] [--peers guidellm inference_perf [--peer-workers 4 8]]
      [--client-cores 0-7] [--server-cores 8-15] [--server-processes 8] [--repeats 1]
      [--out reports/client-scaling.json]
  python scripts/client_scaling.py --table reports/client-scaling.json   (the README table of a saved run)

The server sends every request's OUTPUT_LEN one-token chunks on absolute deadlines (first after TTFT_MS, then one
every ITL_MS), so output tok/s = events/s. Per concurrency c, worker count N and client (interleaved in that
order, the whole ladder --repeats times: drift of the machine hits every client and count alike): a closed loop of
16-token requests, as many as last --seconds (default 10) at the schedule's pace (at least 4c and 256). llmcompare:
N = 1 is the in-process client (loadgen.run_point), N > 1 the worker pool, each on every event loop of --loops,
each finished request saved as serve-bench saves it (a line of requests.jsonl, schema/files.JsonlAppender; runs
before 2026-12-07, session 34, saved nothing, so their figures leave out that cost); its
figures are taken over the point's steady window: from --warm-s (default 2 s) after its start, past the opening
burst in which all c streams open at once, to its last dispatch, before the drain (events/s = chunks that arrived in
the window / its length; ITL over the gaps that ended in it; the server's lateness over the sends due in it, /stats
?since=&until= on the shared monotonic clock); the whole point's figures are kept beside them ("whole_point"). The
H200 run of 2026-12-04 (session 12) took whole points of 4 waves (about 5-11 s at c = 1024 and 2048), where the
opening burst was a large part of each. guidellm with N worker processes
(GUIDELLM__MAX_WORKER_PROCESSES) and inference-perf with load.num_workers = N, each started afresh per point with
min(c, 16) warm-up requests first (scripts/client_capacity.py's runners, read from their own result files), over
their whole points: their files give no arrival times to window.
Added ITL error = the client's p99 ITL - ITL_MS - the server's own p99 send lateness (/stats, the lowest of its
processes': the floor any client sees, not overstated). guidellm has no chunk-level ITL (it keeps first and last
token times only): its figure is the p99 of each request's mean gap - ITL_MS, marked †. A client and N sustain
the highest events/s among the concurrencies where no request failed and the added error is within ±ERROR_MS
(not only below: a p99 gap far under ITL_MS means chunks read in bulk by a client that fell behind) (per repeat; the summary gives their median and its ratio to the first worker count); "with the server on time"
also asks, where the lateness is subtracted, that every server process's p99 lateness be below SERVER_ON_TIME_MS.
The clients are pinned to --client-cores (taskset; llmcompare's workers inherit this process's), the server to
--server-cores; left out, both may use every core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
import client_capacity as cc  # noqa: E402  (the peers' runners)
import fakeserver  # noqa: E402

from llmcompare.engines.server import free_port  # noqa: E402
from llmcompare.schema.files import JsonlAppender  # noqa: E402
from llmcompare.schema.request import RequestSpec  # noqa: E402
from llmcompare.schema.run import LoadKey  # noqa: E402
from llmcompare.serve import loadgen, workers  # noqa: E402

TTFT_MS, ITL_MS, OUTPUT_LEN = cc.TTFT_MS, cc.ITL_MS, cc.OUTPUT_LEN  # 20 ms, 5 ms, 64 chunks
ERROR_MS = 1.0
# A second reading of "sustained" where client and server share cores: only points at which the server kept its
# schedule (p99 send lateness below this in every process; ~1.1 ms at c=16 on the 2-core machine), since past
# that the lateness subtracted is large, noisy, and raised by the client's own use of the shared cores.
SERVER_ON_TIME_MS = 2.0
PEERS = ("guidellm", "inference_perf")
LOOPS = ("uvloop", "asyncio")
STATS_CALLS = 16  # /stats calls per server process (each lands on a random one): every process is reached


def cores(text: str) -> set[int]:
    out = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def core_list(cs: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cs))


STREAM_S = (TTFT_MS + (OUTPUT_LEN - 1) * ITL_MS) / 1000  # one request's life on the schedule: 0.335 s
SECONDS = 10.0  # a point's planned length at the schedule's pace (--seconds)
WARM_S = 2.0  # the steady window starts this long after the point's start (--warm-s): after the opening burst


def n_requests(c: int, seconds: float = SECONDS) -> int:
    """Enough requests for `seconds` at the schedule's pace (at least 4 waves and 256 requests)."""
    return max(4 * c, 256, math.ceil(seconds * c / STREAM_S))


def steady_window(records: list, t0: float, warm_s: float) -> tuple[float, float] | None:
    """The steady window on the monotonic clock: from t0 + warm_s (past the opening burst, when all c streams
    open at once) to the last dispatch (after it, fewer than c requests are in flight: the drain). None when the
    point is too short to have one."""
    last = max((r.dispatch_s for r in records), default=0.0)
    return (t0 + warm_s, t0 + last) if last > warm_s + 1.0 else None


def window_figures(records: list, t0: float, window: tuple[float, float]) -> dict:
    """Events/s and p99 ITL over the chunks that arrived inside the window (a gap counts when its later chunk
    did)."""
    lo, hi = window[0] - t0, window[1] - t0  # s from the point's start
    events, gaps = 0, []
    for r in records:
        at = [r.dispatch_s + ms / 1000 for ms in r.token_chunk_ms]
        for k, a in enumerate(at):
            if lo <= a <= hi:
                events += 1
                if k:
                    gaps.append((a - at[k - 1]) * 1000)
    gaps.sort()
    return {"events_per_s": events / (hi - lo), "p99_itl_ms": gaps[int(0.99 * (len(gaps) - 1))] if gaps else None,
            "window_s": [round(lo, 3), round(hi, 3)]}


# ---- the server's own lateness, from every process -----------------------------------------------------------
def reset_server(base: str, procs: int) -> None:
    for _ in range(STATS_CALLS * procs):
        fakeserver.stats(base, reset=True)


def server_lateness(base: str, procs: int, window: tuple[float, float] | None = None) -> list[float]:
    """Each server process's p99 send lateness (ms) since the reset (of the sends due in `window`, monotonic s,
    when given), as many as the calls reached."""
    seen = {}
    lo, hi = window or (None, None)
    for _ in range(STATS_CALLS * procs):
        s = fakeserver.stats(base, since=lo, until=hi)
        seen[(s.get("sends"), s.get("p99_late_ms"))] = s.get("p99_late_ms") or 0.0
    return sorted(seen.values())


# ---- one point of each client: a dict of what it measured ------------------------------------------------------
def llmcompare_point(base: str, n_workers: int, c: int, loop: str, seconds: float = SECONDS,
                     warm_s: float = WARM_S) -> dict:
    """One point of llmcompare's client; its figures over the steady window (steady_window), the whole point's
    beside them."""
    req = loadgen.Request(f"{base}/v1/completions", fakeserver.MODEL, {"stream": True, "ignore_eos": True}, 120.0)
    specs = [RequestSpec(f"p{i}", 16, OUTPUT_LEN) for i in range(n_requests(c, seconds))]
    key = LoadKey(concurrency=c)

    tag = {"point": 0, "repeat": 0, "attempt": 0, "label": f"c={c}"}
    tmp = tempfile.TemporaryDirectory(prefix="client-scaling-")
    log = JsonlAppender(Path(tmp.name) / "x.requests.jsonl")

    def save(rec) -> None:  # each record saved as serve-bench saves it (serve/measure.py): its cost is the client's
        log.write({**tag, **rec.to_json()})

    async def run():
        if n_workers == 1:
            async with loadgen.session() as s:
                return await loadgen.run_point(s, req, key, specs, on_record=save)
        with workers.WorkerPool(n_workers, req, loop=loop) as pool:
            await pool.idle_floors()  # the workers are up before the clock starts
            return await pool.run_point(key, specs, on_record=save)

    try:
        if n_workers == 1 and loop == "uvloop":
            import uvloop

            pr = uvloop.run(run())
        else:
            pr = asyncio.run(run())
    finally:
        log.close()
        tmp.cleanup()  # the lines were written for their cost, not kept
    ok = [r for r in pr.records if r.success]
    gaps = sorted(g for r in ok for g in r.itl_ms())
    loops = sorted({w.get("loop", "?") for w in pr.workers}) if n_workers > 1 else [loop + " (in-process)"]
    why = Counter(str(r.error)[:200] for r in pr.records if not r.success).most_common(3)
    whole = {"events_per_s": sum(len(r.chunk_ms) for r in ok) / pr.duration_s if pr.duration_s else 0.0,
             "p99_itl_ms": gaps[int(0.99 * (len(gaps) - 1))] if gaps else None}
    window = steady_window(ok, pr.t0, warm_s)
    return {"completed": len(ok), "failed": len(specs) - len(ok), **({"errors": why} if why else {}),
            **({"notes": pr.notes} if pr.notes else {}), **({"unfinished": pr.unfinished} if pr.unfinished else {}),
            **(window_figures(ok, pr.t0, window) if window else whole), "whole_point": whole,
            "worker_loops": loops, "loop_lag_p99_ms": pr.client_health().get("loop_lag_p99_ms"),
            # which client process ran out of core, if one did: the in-process client's or the workers' parent's
            # CPU over the point (1.0 = a whole core), and each worker's
            "cpu_share": pr.client_health().get("cpu_share"),
            "worker_cpu_shares": [w.get("cpu_share") for w in pr.workers], "_window": window}


def peer_point(name: str, base: str, model: str, n_workers: int, c: int, client_cores: str, tmp: Path,
               seconds: float = SECONDS) -> dict:
    """One point of a peer, over the whole point (its result files give no arrival times to window)."""
    fn = {"guidellm": cc.run_guidellm, "inference_perf": cc.run_inference_perf}[name]
    try:
        r = fn(base, model, c, tmp, workers=n_workers, cores=client_cores, n=n_requests(c, seconds))
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, OSError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {str(e)[-600:]}"}
    return {"completed": r["completed"], "failed": r.get("failed"), "events_per_s": r["output_tok_per_s"],
            "p99_itl_ms": r["p99_itl_ms"], "p99_ttft_ms": r.get("p99_ttft_ms"), "itl_kind": r.get("itl_kind")}


def measure(label: dict, run, base: str, procs: int) -> dict:
    """One client's point with the server's lateness around it, the machine's load and the added error."""
    reset_server(base, procs)
    t = time.monotonic()
    row = {**label, **run()}
    late = server_lateness(base, procs, row.pop("_window", None))  # over the client's window where it has one
    row.update(wall_s=round(time.monotonic() - t, 1), loadavg_1m=round(os.getloadavg()[0], 2),
               server_p99_late_ms_by_process=late, server_p99_late_ms=min(late) if late else 0.0)
    p99 = row.get("p99_itl_ms")
    if p99 is None:
        row["added_p99_itl_error_ms"] = None
    elif row.get("itl_kind"):  # a per-request mean: the server's lateness is not in it as in a gap
        row["added_p99_itl_error_ms"] = p99 - ITL_MS
    else:
        row["added_p99_itl_error_ms"] = p99 - ITL_MS - row["server_p99_late_ms"]
    return row


def series(row: dict) -> str:
    return f"llmcompare ({row['loop']})" if row["client"] == "llmcompare" else cc.LABELS[row["client"]]


def sustained(rows: list[dict], name: str, n: int, repeat: int, server_late_max: float | None) -> float | None:
    """The highest events/s of one client, worker count and repeat with no failed request and an added p99 ITL
    error within ±ERROR_MS (and, given server_late_max, where the server's lateness is subtracted, that lateness
    below it in every process). Within, not below: on a schedule of one chunk every ITL_MS, a p99 gap shorter than
    ITL_MS by more than ERROR_MS is not a client that kept up but one that fell behind and read chunks in bulk
    (most of its gaps are ~0 ms: the H200 ladder of 2026-12-05 had p99 ITL 0.0 ms with a p99 loop lag of 1-2 s),
    or a server lateness that was subtracted and swamps the figure."""
    good = [r["events_per_s"] for r in rows if series(r) == name and r["workers"] == n and r["repeat"] == repeat
            and r.get("failed") == 0 and r.get("completed") and r["added_p99_itl_error_ms"] is not None
            and abs(r["added_p99_itl_error_ms"]) < ERROR_MS
            and (server_late_max is None or r.get("itl_kind")  # guidellm's † ITL: no lateness subtracted
                 or max(r["server_p99_late_ms_by_process"]) < server_late_max)]
    return max(good) if good else None


# ---- the run ---------------------------------------------------------------------------------------------------
def start_server(server_cores: str | None, processes: int) -> tuple[subprocess.Popen, str]:
    """The fake server on the schedule, in `processes` processes pinned to `server_cores` (taskset's list; None:
    any core), once it answers; (its process, its base URL)."""
    port = free_port("127.0.0.1")
    pin = ["taskset", "-c", server_cores] if server_cores else []
    srv = subprocess.Popen([*pin, sys.executable, str(ROOT / "tests/fakeserver.py"), str(port), "--ttft-ms",
                            str(TTFT_MS), "--itl-ms", str(ITL_MS), "--processes", str(processes)])
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            fakeserver.stats(base)
            break
        except OSError:
            time.sleep(0.1)
    return srv, base


def ladder(a, base: str, client_cores: str, save=lambda rows: None) -> list[dict]:
    """Every point of the run, in order; save(rows) after each one (a run cut short keeps what it finished)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rp, c in ((rp, c) for rp in range(a.repeats) for c in a.concurrency):
            for n in a.workers:
                jobs = [({"client": "llmcompare", "loop": lp},
                         lambda n=n, c=c, lp=lp: llmcompare_point(base, n, c, lp, a.seconds, a.warm_s))
                        for lp in a.loops]
                jobs += [({"client": p}, lambda n=n, c=c, p=p: peer_point(p, base, a.model, n, c, client_cores, Path(tmp), a.seconds))
                         for p in a.peers if a.peer_workers is None or n in a.peer_workers]
                for label, run in jobs:
                    rows.append(measure({**label, "repeat": rp, "workers": n, "concurrency": c,
                                         "requests": n_requests(c, a.seconds)}, run, base, a.server_processes))
                    print(line(rows[-1]), flush=True)
                    save(rows)
    return rows


def line(r: dict) -> str:
    if "error" in r:
        return f"{series(r)} workers {r['workers']} c={r['concurrency']}: {r['error']}"
    err = r["added_p99_itl_error_ms"]
    return (f"[{r['repeat']}] {series(r)} workers {r['workers']} c={r['concurrency']}: {r['completed']}/{r['requests']} ok "
            f"({r['failed']} failed), {r['events_per_s']:,.0f} events/s, added p99 ITL error "
            f"{'-' if err is None else f'{err:.2f}'} ms{'†' if r.get('itl_kind') else ''}, server p99 late "
            f"{r['server_p99_late_ms_by_process']} ms, load {r['loadavg_1m']}, {r['wall_s']} s"
            + (f", client CPU {r['cpu_share']} of a core, workers {r.get('worker_cpu_shares')}"
               if r.get("cpu_share") is not None else "")
            + "".join(f"; {x}" for x in [*r.get("notes", []), *map(str, r.get("errors", []))]))


def versions(peers: list[str]) -> dict:
    from llmcompare.setup.host import client_stack

    return {"python": platform.python_version(), "llmcompare": "this tree", **client_stack(),
            **{p: f"{cc.peer_version(p)} (python {cc.PEERS[p][1]})" for p in peers}}


def summarise(rows: list[dict], workers: list[int], repeats: int) -> dict:
    """Per rule (any server lateness; the server on time), client and worker count: the sustained events/s of
    each repeat (0 where none was), their median, and that median over the first worker count's."""
    names = list(dict.fromkeys(series(r) for r in rows))
    ran = {s: [n for n in workers if any(series(r) == s and r["workers"] == n for r in rows)] for s in names}
    out = {}  # per client, only the worker counts it ran at (--peer-workers); x its own first count
    for rule, late_max in (("sustained", None), ("sustained_server_on_time", SERVER_ON_TIME_MS)):
        per = {s: {n: [sustained(rows, s, n, rp, late_max) or 0.0 for rp in range(repeats)] for n in ran[s]}
               for s in names}
        med = {s: {n: statistics.median(v) for n, v in d.items()} for s, d in per.items()}
        out[rule] = {"per_repeat": per, "median": med,
                     "ratio_to_first": {s: {n: (v / d[ran[s][0]] if d[ran[s][0]] else None)
                                            for n, v in d.items()} for s, d in med.items()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 128, 256])
    ap.add_argument("--loops", nargs="+", choices=LOOPS, default=["uvloop"], help="llmcompare's event loops")
    ap.add_argument("--peers", nargs="*", choices=PEERS, default=[])
    ap.add_argument("--peer-workers", type=int, nargs="+", default=None,
                    help="the peers only at these of --workers (default: all; one peer process is slow at high c)")
    ap.add_argument("--model", default=str(cc.CACHE / "models/qwen2-tiny-bf16"), help="the peers' tokenizer")
    ap.add_argument("--client-cores", default=None, help="e.g. 0-7 (default: all)")
    ap.add_argument("--server-cores", default=None, help="e.g. 8-15 (default: all)")
    ap.add_argument("--server-processes", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="the whole ladder this many times, one after another")
    ap.add_argument("--seconds", type=float, default=SECONDS, help="a point's planned length at the schedule's pace")
    ap.add_argument("--warm-s", type=float, default=WARM_S, help="the steady window starts this long into a point")
    ap.add_argument("--out", default=str(ROOT / "reports/client-scaling.json"))
    ap.add_argument("--table", metavar="JSON", help="only print the README table of a saved result")
    a = ap.parse_args()
    if a.peer_workers and (odd := sorted(set(a.peer_workers) - set(a.workers))):
        ap.error(f"--peer-workers {odd}: not among --workers {a.workers} (valid: any of those)")
    if a.table:
        return print(table(json.loads(Path(a.table).read_text())))
    missing = [p for p in a.peers if cc.peer_version(p) is None]
    if missing:
        raise SystemExit(f"not installed: {missing} (scripts/client_capacity.py --install-peers)")
    if a.peers:
        from llmcompare.models import checkpoint

        if not checkpoint.is_complete(a.model):
            checkpoint.make_model(a.model, "tiny")
    if a.client_cores:
        os.sched_setaffinity(0, cores(a.client_cores))
    client_cores = core_list(os.sched_getaffinity(0))
    srv, base = start_server(a.server_cores, a.server_processes)
    t0 = time.time()
    head = {"date": time.strftime("%Y-%m-%d"), "machine": cc.machine(), "versions": versions(a.peers),
            "argv": sys.argv[1:], "client_cores": client_cores + ("" if a.client_cores else " (all: shared with the server)"),
            "server_cores": a.server_cores or "all (shared with the client)", "server_processes": a.server_processes,
            "schedule": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_len": OUTPUT_LEN, "input_len": 16},
            "seconds": a.seconds, "warm_s": a.warm_s, "error_limit_ms": ERROR_MS, "server_on_time_ms": SERVER_ON_TIME_MS}

    def write(rows: list[dict], complete: bool) -> dict:
        result = {**head, "complete": complete, "total_wall_s": round(time.time() - t0), "rows": rows,
                  **summarise(rows, a.workers, a.repeats)}
        tmp = Path(a.out + ".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(a.out)  # whole or not at all
        return result

    try:
        rows = ladder(a, base, client_cores, save=lambda rows: write(rows, complete=False))
    finally:
        srv.terminate()
        srv.wait()
    print(table(write(rows, complete=True)))


def table(result: dict) -> str:
    """One row per client and worker count: the median over repeats of the sustained events/s (added p99 ITL error
    within ±1 ms; and with the server on time), x the first count, then per concurrency the median events/s / median
    added p99 ITL error ms (min-max over repeats; † guidellm's per-request mean ITL)."""
    rows, conc = result["rows"], sorted({r["concurrency"] for r in result["rows"]})
    ok = [r for r in rows if "error" not in r]  # summarised again from the rows: the rule of this script
    sums = summarise(rows, sorted({r["workers"] for r in ok}), 1 + max((r["repeat"] for r in ok), default=0))
    a, b = sums["sustained"], sums["sustained_server_on_time"]
    lines = ["| client | workers | sustained events/s (x 1st count) | with the server on time (x 1st count) | "
             + " | ".join(f"c={c}" for c in conc) + " |", "|" + "---|" * (4 + len(conc))]
    for name, per_n in a["median"].items():
        for n in per_n:
            cells = [cell([r for r in rows if series(r) == name and str(r["workers"]) == str(n)
                           and r["concurrency"] == c]) for c in conc]
            lines.append(f"| {name} | {n} | {rule_cell(a, name, n)} | {rule_cell(b, name, n)} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


def rule_cell(rule: dict, name: str, n) -> str:
    med, ratio, per = rule["median"][name][n], rule["ratio_to_first"][name][n], rule["per_repeat"][name][n]
    each = f" [{', '.join(f'{v:,.0f}' for v in per)}]" if len(per) > 1 else ""
    if not med:
        return f"none{each}"
    return f"{med:,.0f} ({f'{ratio:.2f}' if ratio is not None else '-'}){each}"


def cell(rs: list[dict]) -> str:
    ok = [r for r in rs if "error" not in r and r.get("completed")]  # a run with nothing completed: counted apart
    if not ok:
        return "failed" if rs else "-"
    ev = statistics.median(r["events_per_s"] for r in ok)
    errs = [r["added_p99_itl_error_ms"] for r in ok if r["added_p99_itl_error_ms"] is not None]
    mark = "†" if ok[0].get("itl_kind") else ""
    spread = f" ({min(errs):.2f}..{max(errs):.2f})" if len(errs) > 1 else ""
    fails, broken = sum(r.get("failed") or 0 for r in ok), len(rs) - len(ok)
    err = f"{statistics.median(errs):.2f}{mark}{spread}" if errs else "-"
    return (f"{ev:,.0f} / {err}" + (f" ({fails} requests failed)" if fails else "")
            + (f" ({broken} of {len(rs)} runs failed)" if broken else ""))


if __name__ == "__main__":
    main()
