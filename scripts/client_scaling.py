#!/usr/bin/env python3
"""Client scaling: the streamed events per second llmcompare's load generator sustains with 1, 2, 4, ... worker
processes (serve/workers.py), side by side in one run, against a fake server that itself runs in several
processes (tests/fakeserver.py --processes, SO_REUSEPORT) on other cores, so the server is not the limit.
A benchmark, not a test.

  python scripts/client_scaling.py [--workers 1 2 4 8] [--concurrency 64 256 512 1024] [--client-cores 0-7]
      [--server-cores 8-15] [--server-processes 8] [--out reports/client-scaling.json]

The server sends every request's OUTPUT_LEN one-token chunks on absolute deadlines (first after TTFT_MS, then one
every ITL_MS). Per worker count and concurrency c: a closed loop of max(4c, 256) requests; events/s = chunks
received / the point's duration; added ITL error = p99 of the gaps between chunks - ITL_MS - the server's own
p99 send lateness (its /stats, from one of its processes: the floor any client sees). A worker count
sustains the highest events/s among its concurrencies whose added error is below ERROR_MS ("sustained"). The
client's processes are pinned to --client-cores (taskset of this process: its workers inherit it), the server's
to --server-cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import fakeserver  # noqa: E402

from llmcompare.engines.server import free_port  # noqa: E402
from llmcompare.schema.request import RequestSpec  # noqa: E402
from llmcompare.schema.run import LoadKey  # noqa: E402
from llmcompare.serve import loadgen, workers  # noqa: E402

TTFT_MS, ITL_MS, OUTPUT_LEN = 20.0, 5.0, 64
ERROR_MS = 1.0


def cores(text: str) -> set[int]:
    out = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def point(base: str, n_workers: int, c: int) -> dict:
    req = loadgen.Request(f"{base}/v1/completions", fakeserver.MODEL, {"stream": True, "ignore_eos": True}, 120.0)
    specs = [RequestSpec(f"p{i}", 16, OUTPUT_LEN) for i in range(max(4 * c, 256))]
    key = LoadKey(concurrency=c)

    async def run():
        if n_workers == 1:
            async with loadgen.session() as s:
                return await loadgen.run_point(s, req, key, specs)
        with workers.WorkerPool(n_workers, req) as pool:
            await pool.idle_floors()  # the workers are up before the clock starts
            return await pool.run_point(key, specs)

    t = time.monotonic()
    fakeserver.stats(base, reset=True)
    pr = asyncio.run(run())
    late = fakeserver.stats(base).get("p99_late_ms") or 0.0  # one server process's own send lateness
    ok = [r for r in pr.records if r.success]
    gaps = sorted(g for r in ok for g in r.itl_ms())
    events = sum(len(r.chunk_ms) for r in ok)
    p99 = gaps[int(0.99 * (len(gaps) - 1))] if gaps else None
    return {"workers": n_workers, "concurrency": c, "requests": len(specs), "completed": len(ok),
            "events_per_s": events / pr.duration_s if pr.duration_s else 0.0, "p99_itl_ms": p99,
            "server_p99_late_ms": late, "added_p99_itl_error_ms": None if p99 is None else p99 - ITL_MS - late,
            "ideal_events_per_s": c * 1000.0 / ITL_MS * OUTPUT_LEN / (OUTPUT_LEN + TTFT_MS / ITL_MS),
            "loop_lag_p99_ms": pr.client_health().get("loop_lag_p99_ms"), "wall_s": round(time.monotonic() - t, 1)}


def sustained(rows: list[dict], n: int) -> float | None:
    good = [r["events_per_s"] for r in rows if r["workers"] == n and r["completed"] == r["requests"]
            and r["added_p99_itl_error_ms"] is not None and r["added_p99_itl_error_ms"] < ERROR_MS]
    return max(good) if good else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 128, 256])
    ap.add_argument("--client-cores", default=None, help="e.g. 0-7 (default: all)")
    ap.add_argument("--server-cores", default=None, help="e.g. 8-15 (default: all)")
    ap.add_argument("--server-processes", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "reports/client-scaling.json"))
    a = ap.parse_args()
    port = free_port("127.0.0.1")
    pin = ["taskset", "-c", a.server_cores] if a.server_cores else []
    import subprocess

    srv = subprocess.Popen([*pin, sys.executable, str(ROOT / "tests/fakeserver.py"), str(port), "--ttft-ms",
                            str(TTFT_MS), "--itl-ms", str(ITL_MS), "--processes", str(a.server_processes)])
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            fakeserver.stats(base)
            break
        except OSError:
            time.sleep(0.1)
    if a.client_cores:
        os.sched_setaffinity(0, cores(a.client_cores))
    rows = []
    try:
        for c in a.concurrency:
            for n in a.workers:  # interleaved: drift of the machine hits every worker count alike
                rows.append(point(base, n, c))
                r = rows[-1]
                print(f"workers {n} c={c}: {r['completed']}/{r['requests']} ok, {r['events_per_s']:,.0f} events/s, "
                      f"added p99 ITL error {r['added_p99_itl_error_ms']} ms, loop lag p99 {r['loop_lag_p99_ms']} ms",
                      flush=True)
    finally:
        srv.terminate()
        srv.wait()
    base_rate = sustained(rows, a.workers[0])
    summary = {n: sustained(rows, n) for n in a.workers}
    result = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
              f"Linux {platform.release()}", "python": platform.python_version(),
              "client_cores": a.client_cores or "all", "server_cores": a.server_cores or "all",
              "server_processes": a.server_processes, "schedule": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS,
              "output_len": OUTPUT_LEN}, "error_limit_ms": ERROR_MS, "rows": rows,
              "sustained_events_per_s": summary,
              "ratio_to_first": {n: (v / base_rate if v and base_rate else None) for n, v in summary.items()}}
    Path(a.out).write_text(json.dumps(result, indent=1))
    print("workers | sustained events/s (p99 added ITL error < 1 ms) | x first")
    for n, v in summary.items():
        ratio = result["ratio_to_first"][n]
        print(f"{n:>7} | {v or 0:>12,.0f} | {ratio:.2f}" if ratio else f"{n:>7} | none sustained |")
    print(f"median loop lag p99 {statistics.median([r['loop_lag_p99_ms'] or 0 for r in rows]):.2f} ms")
    print(json.dumps({"sustained_events_per_s": summary}))


if __name__ == "__main__":
    main()
