#!/usr/bin/env python3
"""The client's parent process, per request: how much CPU the process that collects the worker processes' records
spends on each (serve/workers.py's _Point, and the save of serve/measure.py), two source trees side by side in one
run. A benchmark, not a test.

  flock /tmp/llmcompare-cpu.lock .venv/bin/python scripts/parent_cost.py --baseline REV [--workers 2]
      [--concurrency 256] [--seconds 8] [--repeats 3] [--client-cores 0-7 --server-cores 8-15
      --server-processes 8] [--out reports/parent-cost-cpu.json]

Why it exists: with worker processes every finished request comes to one parent, which decodes it, saves it to
<engine>.requests.jsonl and passes it on (progress, load.converge). Its cost per request bounds the whole client:
at the fake server's 64 one-token chunks a request, a parent that spends P us of its core on each takes at most
1e6 / P requests, 64e6 / P events a second, however many workers there are.

How: REV (a commit, e.g. the one before a change) is checked out into a temporary git worktree; each repeat runs one
point of each tree in turn (baseline, current, baseline, current, ...: drift of the machine hits both), each in a
fresh interpreter that imports llmcompare from that tree and runs `WorkerPool.run_point` with N workers against
the same fake server (tests/fakeserver.py of this tree, in --server-processes on one port, one by default: first
chunk after 20 ms, then one chunk of one token every 5 ms, 64 a request), a closed loop at concurrency c, with each
record saved as that tree's serve-bench saves it (`files.JsonlAppender` where the tree has it, as serve/measure.py
uses it, else measure.py's former save: `append_jsonl`, the file opened for every line).
Measured per point: the parent's CPU (time.process_time, this process alone) per finished request; each worker's
CPU (/proc/PID/stat, user + system) per request; events/s over the whole point; the client's p99 loop lag. The
ratio current / baseline is taken pair by pair (one repeat's two points). CPU time, not wall time, so that sharing
the machine's cores with the server and the workers moves it less; on a 2-core machine it still moves (caches,
frequency), which the pairs' spread shows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def child(tree: str, base: str, workers_n: int, c: int, n: int, output_len: int, out_dir: str) -> dict:
    """One point, llmcompare imported from `tree`: what it measured, as a dict."""
    sys.path.insert(0, tree)
    import asyncio

    from llmcompare.schema.request import RequestSpec
    from llmcompare.schema.run import LoadKey
    from llmcompare.serve import loadgen, workers

    path = Path(out_dir) / "x.requests.jsonl"
    tag = {"point": 0, "repeat": 0, "attempt": 0, "label": f"c={c}"}
    saved: list = []
    from llmcompare.schema import files

    if hasattr(files, "JsonlAppender"):  # serve/measure.py's save from this change on: the file kept open a point
        log = files.JsonlAppender(path)

        def save(rec) -> None:
            saved.append(rec)
            log.write({**tag, **rec.to_json()})
    else:  # measure.py's save before (5a2f864 and earlier): append_jsonl, the file opened for every line
        log = None

        def save(rec) -> None:
            saved.append(rec)
            files.append_jsonl(path, {**tag, **rec.to_json()})

    req = loadgen.Request(f"{base}/v1/completions", "fake-model", {"stream": True, "ignore_eos": True}, 120.0)
    specs = [RequestSpec(f"p{i}", 16, output_len) for i in range(n)]

    async def run():
        with workers.WorkerPool(workers_n, req) as pool:
            await pool.idle_floors()  # the workers are up before the clock starts
            pids = [wk.proc.pid for wk in pool.workers]
            w0 = [_proc_cpu_s(p) for p in pids]
            p0 = time.process_time()
            pr = await pool.run_point(LoadKey(concurrency=c), specs, on_record=save)
            parent = time.process_time() - p0
            return pr, parent, [_proc_cpu_s(p) - a for p, a in zip(pids, w0, strict=True)]

    pr, parent_s, worker_s = asyncio.run(run())
    if log is not None:
        log.close()
    ok = [r for r in pr.records if r.success]
    lines = sum(1 for _ in path.open())
    import llmcompare

    return {"llmcompare_from": str(Path(llmcompare.__file__).parents[1]), "completed": len(ok),
            "failed": len(pr.records) - len(ok), "lines_saved": lines,
            "parent_cpu_us_per_request": 1e6 * parent_s / max(1, len(pr.records)),
            "worker_cpu_us_per_request": 1e6 * sum(worker_s) / max(1, len(pr.records)),
            "events_per_s": sum(len(r.chunk_ms) for r in ok) / pr.duration_s if pr.duration_s else 0.0,
            "loop_lag_p99_ms": pr.client_health().get("loop_lag_p99_ms"), "duration_s": pr.duration_s}


def _cpu_model() -> str:
    for ln in Path("/proc/cpuinfo").read_text().splitlines():
        if ln.startswith("model name"):
            return ln.split(":", 1)[1].strip()
    return platform.machine()


def _git(*args: str) -> str:
    """git's answer in this repository ("" where there is no git history, as on the device's copy of the tree)."""
    try:
        p = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except FileNotFoundError:  # no git at all
        p = subprocess.CompletedProcess(args, 127, "", "git is not installed")
    if p.returncode and args[0] == "rev-parse" and len(args) == 2 and args[1] != "HEAD":
        raise SystemExit(f"--baseline {args[1]}: not a revision of this repository ({p.stderr.strip()})")
    return p.stdout.strip() if p.returncode == 0 else ""


def one(tree: Path, a, base: str, n: int, output_len: int) -> dict:
    """One point of `tree`, in a fresh interpreter importing llmcompare from it."""
    with tempfile.TemporaryDirectory() as d:
        pin = ["taskset", "-c", a.client_cores] if a.client_cores else []  # the workers inherit it
        cmd = [*pin, sys.executable, __file__, "--child", str(tree), base, str(a.workers), str(a.concurrency),
               str(n), str(output_len), d]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=d, timeout=600)
    if out.returncode:
        raise SystemExit(f"the point of {tree} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        tree, base, w, c, n, out_len, d = sys.argv[2:9]
        print(json.dumps(child(tree, base, int(w), int(c), int(n), int(out_len), d)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    base_ = ap.add_mutually_exclusive_group(required=True)
    base_.add_argument("--baseline", help="a git revision of this repository (the tree before a change)")
    base_.add_argument("--baseline-tree", type=Path, help="a directory holding the baseline's llmcompare/ (where "
                       "there is no git history, as on the device: git archive REV llmcompare | tar -x -C DIR)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=8.0, help="a point's planned length at the schedule's pace")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--client-cores", default=None, help="taskset's core list for the client (parent and workers)")
    ap.add_argument("--server-cores", default=None, help="taskset's core list for the fake server")
    ap.add_argument("--server-processes", type=int, default=1, help="fake server processes on one port")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "scripts"))
    import client_scaling  # its fake server and schedule: 64 one-token chunks, the first at 20 ms, then every 5 ms

    head, dirty = _git("rev-parse", "HEAD"), bool(_git("status", "--porcelain", "llmcompare"))
    if a.baseline_tree is not None:
        if not (a.baseline_tree / "llmcompare/serve/workers.py").is_file():
            raise SystemExit(f"--baseline-tree {a.baseline_tree}: no llmcompare/serve/workers.py there")
        rev, wt, made = f"tree {a.baseline_tree.resolve()}", a.baseline_tree.resolve(), False
    else:
        rev = _git("rev-parse", a.baseline)
        wt, made = Path(tempfile.mkdtemp(prefix="parent-cost-")) / "baseline", True
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), rev], check=True,
                       capture_output=True)
    n = client_scaling.n_requests(a.concurrency, a.seconds)  # as many as last --seconds at the schedule's pace
    server, base = client_scaling.start_server(a.server_cores, a.server_processes)  # the same server, same schedule
    rows = []
    try:
        for r in range(a.repeats):
            for name, tree in (("baseline", wt), ("current", ROOT)):
                m = one(tree, a, base, n, client_scaling.OUTPUT_LEN)
                rows.append({"repeat": r, "tree": name, **m, "load_1min": os.getloadavg()[0]})
                print(f"repeat {r} {name:8s} parent {m['parent_cpu_us_per_request']:7.1f} us/req  workers "
                      f"{m['worker_cpu_us_per_request']:7.1f} us/req  {m['events_per_s']:8.0f} events/s  "
                      f"loop lag p99 {m['loop_lag_p99_ms']} ms  {m['completed']} ok / {m['failed']} failed, "
                      f"{m['lines_saved']} lines", flush=True)
    finally:
        server.terminate()
        server.wait()
        if made:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)
            shutil.rmtree(wt.parent, ignore_errors=True)
    summary = {}
    for fig in ("parent_cpu_us_per_request", "worker_cpu_us_per_request", "events_per_s"):
        pairs = [(b[fig], c[fig]) for b, c in zip(rows[::2], rows[1::2], strict=True)]
        ratios = [cu / ba for ba, cu in pairs if ba]
        summary[fig] = {"baseline_median": statistics.median(b for b, _ in pairs),
                        "current_median": statistics.median(c for _, c in pairs),
                        "ratio_median": statistics.median(ratios), "ratios": ratios}
        print(f"{fig}: baseline {summary[fig]['baseline_median']:.1f}, current {summary[fig]['current_median']:.1f}, "
              f"current/baseline {summary[fig]['ratio_median']:.3f} (pairs: "
              + ", ".join(f"{x:.3f}" for x in ratios) + ")")
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "baseline": rev,
              "current": (head or "the tree as copied, without git history") + (" + uncommitted changes" if dirty else ""),
              "cores": os.cpu_count(),
              "cpu": _cpu_model(), "python": platform.python_version(),
              "args": {k: v for k, v in vars(a).items() if k != "out"} | {"out": str(a.out) if a.out else None},
              "rows": rows, "summary": summary}
    if a.out:
        a.out.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
