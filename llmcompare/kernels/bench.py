"""`kernel-bench`: runs worker.py in each backend's environment, normalises what comes back, keeps the files.

Backends sharing a python run in one worker. The parent never imports torch or an engine. Every point is
normalised against ceilings measured in the same worker process:
  tflops, pct_peak     2*M*N*K / time, and as % of cuBLAS fp16's measured 8192^3 rate
  gbps, pct_copy_bw    minimal bytes (weights in the backend's format, x and y once) / time, % of copy bandwidth
  floor_us, pct_roofline   max(flops / peak, bytes / copy bandwidth): no kernel runs much faster than this
  speedup_vs_cublas    cuBLAS fp16's graph time / this backend's, same shape and M
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from ..results import KERNEL_SCHEMA, host_info, new_run_dir, now, write_json
from ..scenario import Scenario, expand
from .backends import BACKENDS
from .shapes import layers, unique_shapes
from .worker import weight_bytes  # numpy only at import: no torch, no engine

RTOL = 2e-3  # ||y - ref|| / ||ref|| against the fp32 product of the dequantized weight; fp16 output rounding is ~3e-4
PROFILE_M = (1, 16, 64, 256, 4096)
CSV_FIELDS = ["backend", "shape", "n", "k", "m", "status", "rel_err", "graph_us", "graph_us_p20", "graph_us_p80",
              "eager_us", "eager_us_p20", "eager_us_p80", "tflops", "pct_peak", "gbps", "pct_copy_bw", "floor_us",
              "pct_roofline", "speedup_vs_cublas", "gemm_kernel_us", "other_kernels_us", "kernel_names"]


def point_bytes(backend: str, n: int, k: int, m: int, g: int) -> int:
    """Fewest bytes one call moves: the weight in the backend's format, x [M, K] and y [M, N] in fp16, once."""
    return weight_bytes(backend, n, k, g) + 2 * m * k + 2 * m * n


def derive(p: dict, ceil: dict, g: int) -> dict:
    if p.get("status") != "ok" or not ceil:
        return p
    t_us = p.get("graph_us") or p.get("eager_us")
    flops = 2.0 * p["m"] * p["n"] * p["k"]
    nbytes = point_bytes(p["backend"], p["n"], p["k"], p["m"], g)
    p["tflops"] = flops / (t_us * 1e-6) / 1e12
    p["pct_peak"] = 100 * p["tflops"] / ceil["fp16_tflops"]
    p["gbps"] = nbytes / (t_us * 1e-6) / 1e9
    p["pct_copy_bw"] = 100 * p["gbps"] / ceil["copy_gbps"]
    p["floor_us"] = max(flops / (ceil["fp16_tflops"] * 1e12), nbytes / (ceil["copy_gbps"] * 1e9)) * 1e6
    p["pct_roofline"] = 100 * p["floor_us"] / t_us
    if ks := p.get("kernels"):
        p["gemm_kernel_us"] = ks[0]["us_per_call"]  # the longest device activity of one call
        p["other_kernels_us"] = sum(k["us_per_call"] for k in ks[1:])
        p["kernel_names"] = "; ".join(f"{k['name'][:60]} x{k['launches_per_call']:g}" for k in ks)
    return p


def add_speedups(points: list[dict]) -> None:
    ref = {(p["shape"], p["m"]): p.get("graph_us") for p in points if p["backend"] == "cublas" and p.get("graph_us")}
    for p in points:
        r = ref.get((p["shape"], p.get("m")))
        if r and p.get("graph_us"):
            p["speedup_vs_cublas"] = r / p["graph_us"]


def groups(s: Scenario) -> dict[str, list[str]]:
    """python -> backends that run in it. Default: this interpreter (which may lack torch: then skipped)."""
    out: dict[str, list[str]] = {}
    for b in s.kernel_bench.backends:
        py = expand(s.kernel_bench.python.get(b) or os.environ.get("LLMCOMPARE_KERNEL_PYTHON") or sys.executable)
        out.setdefault(py, []).append(b)
    return out


def write_csv(path: Path, points: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for p in points:
            if p.get("m") is not None:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in p.items()})


def table(points: list[dict], ms: list[int]) -> str:
    """Graph-replayed µs per call by shape, backend and M; the short table printed last."""
    show = [m for m in ms if m in (1, 16, 64, 256, 1024, 4096, 16384)] or ms
    backends = list(dict.fromkeys(p["backend"] for p in points))
    by = {(p["shape"], p["backend"], p.get("m")): p for p in points}
    lines = [f"{'shape':<10}{'backend':<11}" + "".join(f"{'M=' + str(m):>10}" for m in show)]
    for shape in dict.fromkeys(p["shape"] for p in points):
        for b in backends:
            cells = []
            for m in show:
                p = by.get((shape, b, m), {})
                v = p.get("graph_us") or p.get("eager_us")
                cells.append(f"{v:>10.1f}" if p.get("status") == "ok" and v else f"{p.get('status', '-'):>10}")
            lines.append(f"{shape:<10}{b:<11}" + "".join(cells))
    return "\n".join(lines) + "\n(µs per call, CUDA-graph replay; 'wrong' = failed the correctness check)"


def kernel_bench(s: Scenario, argv: list[str]) -> Path:
    shapes = unique_shapes(s)
    kb = s.kernel_bench
    run_dir = new_run_dir(s.output_dir, f"kernels-{s.name}")
    data = {"schema": KERNEL_SCHEMA, "status": "running", "created_at": now(), "argv": argv, "host": host_info(),
            "scenario": s.name, "model": s.model.path, "layers": layers(s), "group_size": kb.group_size,
            "rtol": RTOL, "m": kb.m, "shapes": [sh.__dict__ for sh in shapes], "backends": {}, "workers": [],
            "points": []}
    write_json(run_dir / "run.json", data)
    print(f"run directory: {run_dir}", file=sys.stderr)
    pkg_root = str(Path(__file__).resolve().parents[2])
    try:
        for py, backends in groups(s).items():
            cfg = {"backends": backends, "shapes": [[sh.name, sh.n, sh.k] for sh in shapes], "m": kb.m,
                   "group_size": kb.group_size, "seed": 0, "rtol": RTOL, "rep_ms": kb.rep_ms,
                   "profile_m": list(PROFILE_M) if kb.profile else []}
            worker = {"python": py, "backends": backends, "env": None, "gpu": None, "ceilings": None}
            data["workers"].append(worker)
            for b in backends:
                data["backends"][b] = {"python": py, "status": "running", "description": BACKENDS[b].description}
            env = {**os.environ, "PYTHONPATH": pkg_root + os.pathsep + os.environ.get("PYTHONPATH", "")}
            log = open(run_dir / f"worker-{'-'.join(backends)}.log", "w")
            try:
                proc = subprocess.Popen([py, "-m", "llmcompare.kernels.worker", json.dumps(cfg)], stdout=subprocess.PIPE,
                                        stderr=log, text=True, env=env, start_new_session=True)
            except OSError as e:
                for b in backends:
                    data["backends"][b].update(status="skipped", reason=f"cannot run {py}: {e}")
                continue
            try:
                for line in proc.stdout:
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    kind = msg.pop("type", None)
                    if kind == "env":
                        worker["env"] = msg
                    elif kind == "gpu":
                        worker["gpu"] = msg
                    elif kind == "ceilings":
                        worker["ceilings"] = msg
                        print(f"ceilings: copy {msg['copy_gbps']:.0f} GB/s, cuBLAS fp16 {msg['fp16_tflops']:.0f} TFLOP/s",
                              file=sys.stderr)
                    elif kind == "skip":
                        data["backends"][msg["backend"]].update(status="skipped", reason=msg["reason"])
                        print(f"{msg['backend']}: skipped: {msg['reason']}", file=sys.stderr)
                    elif kind == "point":
                        msg = derive(msg, worker["ceilings"] or {}, kb.group_size)
                        data["points"].append(msg)
                        t = msg.get("graph_us") or msg.get("eager_us")
                        print(f"{msg['backend']:>9} {msg['shape']:>8} M={msg['m']}: {msg.get('status')}"
                              + (f" {t:.1f} µs, rel err {msg['rel_err']:.1e}" if t else f" {msg.get('error', '')}"),
                              file=sys.stderr)
                    write_json(run_dir / "run.json", data)
                proc.wait()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
            for b in backends:
                if data["backends"][b]["status"] == "running":
                    ok = proc.returncode == 0
                    data["backends"][b]["status"] = "complete" if ok else "failed"
                    if not ok:
                        data["backends"][b]["reason"] = f"worker exited with {proc.returncode}; see {log.name}"
    except KeyboardInterrupt:
        data["status"] = "interrupted"
        raise
    finally:
        add_speedups(data["points"])
        if data["status"] == "running":
            data["status"] = "complete"
        data["finished_at"] = now()
        write_json(run_dir / "run.json", data)
        write_csv(run_dir / "kernels.csv", data["points"])
    print(table(data["points"], kb.m), file=sys.stderr)
    return run_dir
