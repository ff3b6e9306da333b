#!/usr/bin/env python3
"""How long SGLang's decode steps took over a whole run, from its own log: each `Decode batch` line (one per 40
decode steps as shipped) gives the requests running and the tokens a second generated since the line before, so
running * 1000 / gen tok/s is the mean ms between a running request's tokens over that interval: the decode step
plus whatever ran or waited between steps (prefill batches, host work). A profiled pass sees one 1-s window; this
sees every interval of the run. It also counts the passes a second (decode: 40 per Decode batch line, or the log's
decode_log_interval; prefill: one per Prefill batch line) over the plateau's seconds, from the log's 1-s stamps
(coarse: a second is counted when a Decode batch line in it had the plateau's running requests).

With --enable-mixed-chunk the running requests also get a token in each mixed prefill pass, and SGLang 0.5.15 does
not count those in the Decode batch line's gen throughput (batch_result_processor adds len(batch.reqs) for decode
passes only; the interval's time includes the mixed passes), so ms per token reads high there: the script says so.
Its /metrics counter (sglang:generation_tokens_total, added per finished request) is not affected.

It also gives the prefill rate of full chunks: each Prefill batch line's `input throughput` is that batch's new
tokens over the time since the previous Prefill batch line (SGLang 0.5.15, metrics_reporter.report_prefill_stats),
so for a full chunk (#new-token = chunked_prefill_size) that followed another prefill pass it is the prompt tokens a
second of back-to-back prefill passes; any pass run between them lowers it. reports/h100-sglang-fixed-c64 used it.
reports/h100-three-engines-c64/README.md used it.

With --step-ms (a decode step, profiled or the client's median gap between chunks) it also gives what is left of
each second after the decode passes, per prefill (or mixed) pass: reports/h100-sglang-mixed-chunk-c64 used it.

  python scripts/sglang_decode_log.py sglang.server.log[.xz] [--min-running N] [--step-ms MS]
"""

from __future__ import annotations

import argparse
import lzma
import re
import statistics
from typing import NamedTuple

PREFILL = re.compile(r"^\[(?P<t>[^\]]+)\] Prefill batch")
PREFILL_RATE = re.compile(r"Prefill batch.*#new-token: (\d+),.*input throughput \(token/s\): ([\d.]+)")
CHUNK = re.compile(r"chunked_prefill_size=(\d+)")
MIXED = re.compile(r"enable_mixed_chunk=(True|False)")
INTERVAL = re.compile(r"decode_log_interval=(\d+)")
DECODE = re.compile(r"^\[(?P<t>[^\]]+)\] Decode batch, #running-req: (?P<running>\d+),.*"
                    r"gen throughput \(token/s\): (?P<tok_s>[\d.]+)")


class Log(NamedTuple):
    """What one pass over the log gives."""

    rows: list[tuple[str, int, float]]  # per Decode batch line, in log order: (timestamp, running, gen tok/s)
    prefill: list[str]  # the timestamp of each Prefill batch line
    every: int  # decode passes per Decode batch line (its decode_log_interval)
    chunk: int | None  # chunked_prefill_size from the ServerArgs line (None: no such line)
    chunk_rates: list[float]  # input throughput (prompt tok/s) of each Prefill batch line of exactly `chunk` tokens
    mixed: bool | None  # enable_mixed_chunk from the ServerArgs line (None: no such line)


def read(path: str) -> Log:
    """One pass over the log."""
    opener = lzma.open if path.endswith(".xz") else open
    rows, prefill, every, chunk, rates, mixed = [], [], 40, None, [], None
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            if m := DECODE.match(line):
                rows.append((m["t"], int(m["running"]), float(m["tok_s"])))
            elif m := PREFILL.match(line):
                prefill.append(m["t"])
                if chunk is not None and (r := PREFILL_RATE.search(line)) and int(r[1]) == chunk:
                    rates.append(float(r[2]))
            elif "ServerArgs(" in line or "server_args=" in line:  # decode_log_interval, chunk size, mixed chunk
                if m := INTERVAL.search(line):
                    every = int(m[1])
                if m := CHUNK.search(line):
                    chunk = int(m[1])
                if m := MIXED.search(line):
                    mixed = m[1] == "True"
    return Log(rows, prefill, every, chunk, rates, mixed)


def passes_per_s(rows: list[tuple[str, int, float]], prefill: list[str], every: int,
                 min_running: int) -> tuple[float, float, int]:
    """(decode passes / s, prefill passes / s, seconds counted) over the seconds with a Decode batch line of at
    least min_running requests."""
    plateau = {t for t, running, _ in rows if running >= min_running}
    if not plateau:
        return 0.0, 0.0, 0
    decode = sum(1 for t, _, _ in rows if t in plateau)
    return every * decode / len(plateau), sum(1 for t in prefill if t in plateau) / len(plateau), len(plateau)


def other_pass_ms(decode_per_s: float, prefill_per_s: float, step_ms: float) -> float | None:
    """The ms each prefill (or mixed) pass takes, with whatever runs between passes, when every decode pass takes
    step_ms: what is left of a second after the decode passes, over the prefill passes. Arithmetic, not a profile:
    the step is the caller's (a profiled decode step, or the client's median gap between chunks)."""
    return (1000.0 - decode_per_s * step_ms) / prefill_per_s if prefill_per_s else None


def summary(rows: list[tuple[str, int, float]], min_running: int | None = None) -> dict:
    """ms per token per running request over the intervals with at least min_running requests (default: 90% of
    the most seen, the plateau of a closed loop): count, p10, median, p90, mean, max."""
    if not rows:
        raise SystemExit("no Decode batch line in the log (an SGLang server log at --log-level info or finer?)")
    floor = min_running if min_running is not None else int(0.9 * max(r for _, r, _ in rows))
    ms = sorted(r * 1000.0 / tok_s for _, r, tok_s in rows if r >= floor and tok_s > 0)
    if not ms:
        raise SystemExit(f"no Decode batch interval with at least {floor} requests running")
    q = statistics.quantiles(ms, n=10) if len(ms) > 1 else ms * 9  # deciles; one interval is its own
    return {"lines": len(rows), "min_running": floor, "intervals": len(ms), "p10_ms": q[0], "median_ms": q[4],
            "p90_ms": q[8], "mean_ms": statistics.fmean(ms), "max_ms": ms[-1]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--min-running", type=int, default=None)
    ap.add_argument("--step-ms", type=float, default=None,
                    help="a decode step (ms; profiled, or the client's median gap): also give each other pass's ms")
    a = ap.parse_args(argv)
    log = read(a.log)
    rows = log.rows
    s = summary(rows, a.min_running)
    print(f"{a.log}: {s['lines']} Decode batch lines, {s['intervals']} with >= {s['min_running']} running")
    print("  ms per token per running request: p10 {p10_ms:.2f}, median {median_ms:.2f}, p90 {p90_ms:.2f}, "
          "mean {mean_ms:.2f}, max {max_ms:.2f}".format(**s))
    dec, pre, n = passes_per_s(rows, log.prefill, log.every, s["min_running"])
    print(f"  passes a second over {n} plateau seconds: decode {dec:.1f}, prefill {pre:.1f}")
    if a.step_ms and (other := other_pass_ms(dec, pre, a.step_ms)) is not None:
        print(f"  with decode steps of {a.step_ms:.2f} ms, each {'mixed' if log.mixed else 'prefill'} pass and what "
              f"runs between passes takes {other:.1f} ms (arithmetic, not a profile)")
    if len(log.chunk_rates) > 1:
        q = statistics.quantiles(log.chunk_rates, n=10)
        print(f"  prefill of full {log.chunk}-token chunks ({len(log.chunk_rates)} passes): prompt tok/s p10 "
              f"{q[0]:.0f}, median {q[4]:.0f}, p90 {q[8]:.0f}")
    if log.mixed:
        print("  mixed chunk on: the running requests' tokens from mixed prefill passes are not in the Decode batch "
              "lines' gen throughput, so ms per token reads high; use the engine's counter or the client's TPOT")


if __name__ == "__main__":
    main()
