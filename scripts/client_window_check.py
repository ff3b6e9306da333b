#!/usr/bin/env python3
"""The client ladder's two plans side by side in one run: whole points of max(4c, 256) requests (the plan of the
H200 ladders of sessions 8 and 12) against --seconds points measured over their steady window (client_scaling.py's
plan since session 13), interleaved, with the fake server's own CPU time per send. A benchmark, not a test.

  flock /tmp/llmcompare-cpu.lock .venv/bin/python scripts/client_window_check.py [--concurrency 256 512]
      [--repeats 3] [--seconds 8] [--client-core 0] [--server-core 1] [--out reports/client-window-vs-4waves-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import client_scaling as cs  # noqa: E402 (puts the repository and tests/ on sys.path)
import fakeserver  # noqa: E402


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds (/proc/PID/stat)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def point(base: str, pid: int, c: int, seconds: float) -> dict:
    fakeserver.stats(base, reset=True)
    c0 = cpu_s(pid)
    row = cs.llmcompare_point(base, 1, c, "uvloop", seconds=seconds)
    cpu, w = cpu_s(pid) - c0, row.pop("_window")
    whole, sends = row["whole_point"], fakeserver.stats(base)["sends"]
    return {"c": c, "plan": "4 waves" if not seconds else f"{seconds:g} s", "requests": row["completed"],
            "window": row.get("window_s"), "window_events_per_s": row["events_per_s"] if w else None,
            "window_p99_itl_ms": row["p99_itl_ms"] if w else None, "whole_events_per_s": whole["events_per_s"],
            "whole_p99_itl_ms": whole["p99_itl_ms"], "server_p99_late_ms_whole": fakeserver.stats(base)["p99_late_ms"],
            "server_p99_late_ms_window": fakeserver.stats(base, since=w[0], until=w[1])["p99_late_ms"] if w else None,
            "server_cpu_us_per_send": 1e6 * cpu / max(1, sends), "client_loop_lag_p99_ms": row["loop_lag_p99_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--out", default="reports/client-window-vs-4waves-cpu.json")
    a = ap.parse_args()
    srv, base = cs.start_server(str(a.server_core), 1)
    rows = []
    try:
        os.sched_setaffinity(0, {a.client_core})
        for rep in range(a.repeats):
            for c in a.concurrency:
                for seconds in (0.0, a.seconds):  # 0: max(4c, 256) requests, the old plan
                    rows.append({"repeat": rep, **point(base, srv.pid, c, seconds)})
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        srv.terminate()
        srv.wait()
    Path(a.out).write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": cs.cc.machine(),
        "setup": f"client pinned to core {a.client_core} (1 uvloop process), fake server to core {a.server_core} "
                 "(1 process)", "schedule": {"ttft_ms": cs.TTFT_MS, "itl_ms": cs.ITL_MS, "output_len": cs.OUTPUT_LEN},
        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
