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
import dataclasses
import json
import os
import sys
from pathlib import Path

from llmcompare.engines.gemm_backends import backend, base_name, point_bytes
from llmcompare.engines.process import OwnedProcess, ProcessTimeout
from llmcompare.expand import resolve
from llmcompare.kernels.in_engine import collectives
from llmcompare.models.shapes import hidden_size, layers, unique_shapes
from llmcompare.schema.codec import record
from llmcompare.schema.files import new_run_dir, open_for_write, write_json
from llmcompare.schema.kernel_run import KernelPoint, KernelRun
from llmcompare.schema.run import now
from llmcompare.schema.scenario import Scenario
from llmcompare.setup.host import host_info

RTOL = 2e-3  # ||y - ref|| / ||ref|| against the fp32 product of the dequantized weight; fp16 output rounding is ~3e-4


PROFILE_M = (1, 16, 64, 256, 4096)


CSV_FIELDS = ["backend", "shape", "n", "k", "m", "status", "rel_err", "graph_us", "graph_us_p20", "graph_us_p80",
              "eager_us", "eager_us_p20", "eager_us_p80", "tflops", "pct_peak", "gbps", "pct_copy_bw", "floor_us",
              "pct_roofline", "speedup_vs_cublas", "gemm_kernel_us", "other_kernels_us", "kernel_names"]


def derive(p: KernelPoint, ceil: dict, g: int) -> KernelPoint:
    t_us = p.time_us
    if p.status != "ok" or not ceil or not t_us:
        return p
    flops = 2.0 * p.m * p.n * p.k
    nbytes = point_bytes(p.backend, p.n, p.k, p.m, g)
    p.tflops = flops / (t_us * 1e-6) / 1e12
    p.pct_peak = 100 * p.tflops / ceil["fp16_tflops"]
    p.gbps = nbytes / (t_us * 1e-6) / 1e9
    p.pct_copy_bw = 100 * p.gbps / ceil["copy_gbps"]
    p.floor_us = max(flops / (ceil["fp16_tflops"] * 1e12), nbytes / (ceil["copy_gbps"] * 1e9)) * 1e6
    p.pct_roofline = 100 * p.floor_us / t_us
    if ks := p.kernels:
        p.gemm_kernel_us = ks[0]["us_per_call"]  # the longest device activity of one call
        p.other_kernels_us = sum(k["us_per_call"] for k in ks[1:])
        p.kernel_names = "; ".join(f"{k['name'][:60]} x{k['launches_per_call']:g}" for k in ks)
    return p


def add_speedups(points: list[KernelPoint]) -> None:
    ref = {(p.shape, p.m): p.graph_us for p in points if base_name(p.backend) == "cublas" and p.graph_us}
    for p in points:
        r = ref.get((p.shape, p.m))
        if r and p.graph_us:
            p.speedup_vs_cublas = r / p.graph_us


def groups(s: Scenario) -> dict[str, list[str]]:
    """python -> backends that run in it. Default: this interpreter (which may lack torch: then skipped)."""
    out: dict[str, list[str]] = {}
    for b in s.kernel_bench.backends:
        py = s.kernel_bench.python.get(b) or os.environ.get("LLMCOMPARE_KERNEL_PYTHON") or sys.executable
        out.setdefault(py, []).append(b)
    return out


def write_csv(path: Path, points: list[KernelPoint]) -> None:
    with open_for_write(path, "w") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for p in points:
            if p.m is not None:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in dataclasses.asdict(p).items()})


def table(points: list[KernelPoint], ms: list[int]) -> str:
    """Graph-replayed µs per call by shape, backend and M; the short table printed last."""
    show = [m for m in ms if m in (1, 16, 64, 256, 1024, 4096, 16384)] or ms
    backends = list(dict.fromkeys(p.backend for p in points))
    by = {(p.shape, p.backend, p.m): p for p in points}
    width = max([11] + [len(b) + 2 for b in backends])
    lines = [f"{'shape':<10}{'backend':<{width}}" + "".join(f"{'M=' + str(m):>10}" for m in show)]
    for shape in dict.fromkeys(p.shape for p in points):
        for b in backends:
            cells = []
            for m in show:
                p = by.get((shape, b, m))
                v = p.time_us if p else None
                cells.append(f"{v:>10.1f}" if p and p.status == "ok" and v else f"{p.status if p else '-':>10}")
            lines.append(f"{shape:<10}{b:<{width}}" + "".join(cells))
    return "\n".join(lines) + "\n(µs per call, CUDA-graph replay; 'wrong' = failed the correctness check)"


def _handle(run: KernelRun, worker: dict, msg: dict, g: int) -> None:
    """One line from a worker: its environment, GPU, ceilings, a skipped backend, or a point."""
    kind = msg.pop("type", None)
    if kind in ("env", "gpu", "ceilings"):
        worker[kind] = msg
        if kind == "ceilings":
            print(f"ceilings: copy {msg['copy_gbps']:.0f} GB/s, cuBLAS fp16 {msg['fp16_tflops']:.0f} TFLOP/s",
                  file=sys.stderr)
    elif kind == "skip":
        run.backends[msg["backend"]].update(status="skipped", reason=msg["reason"])
        print(f"{msg['backend']}: skipped: {msg['reason']}", file=sys.stderr)
    elif kind == "point":
        p = derive(record(KernelPoint, msg), worker.get("ceilings") or {}, g)
        run.points.append(p)
        t = p.time_us
        print(f"{p.backend:>9} {p.shape:>8} M={p.m}: {p.status}"
              + (f" {t:.1f} µs, rel err {p.rel_err:.1e}" if t else f" {p.error or ''}"), file=sys.stderr)


def _stream(cmd: list[str], log: Path, timeout_s: float, on_msg) -> tuple[int | None, str]:
    """Runs a worker with llmcompare on its PYTHONPATH, passing each JSON line of its stdout to on_msg;
    (exit code or None, why it failed)."""
    pkg_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": pkg_root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        with OwnedProcess(cmd, log, env, timeout_s) as proc:
            for line in proc.lines():
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    on_msg(msg)
        return proc.returncode, f"worker exited with {proc.returncode}; see {log.name}"
    except OSError as e:
        return None, f"cannot run {cmd[0]}: {e}"
    except ProcessTimeout as e:
        return None, str(e)


def _run_worker(run: KernelRun, run_dir: Path, py: str, backends: list[str], cfg: dict, s: Scenario) -> None:
    worker = {"python": py, "backends": backends, "env": None, "gpu": None, "ceilings": None,
              "log": f"worker-{'-'.join(b.replace('@', '_') for b in backends)}.log"}
    run.workers.append(worker)
    for b in backends:
        run.backends[b] = {"python": py, "status": "running", "description": backend(b).description}
    cmd = [py, "-m", "llmcompare.kernels.in_engine.worker", json.dumps({**cfg, "backends": backends})]

    def on_msg(msg: dict) -> None:
        _handle(run, worker, msg, s.kernel_bench.group_size)
        write_json(run_dir / "run.json", run)

    rc, reason = _stream(cmd, run_dir / worker["log"], s.kernel_bench.timeout_s, on_msg)
    for b in backends:
        if run.backends[b]["status"] == "running":
            run.backends[b]["status"] = "complete" if rc == 0 else "failed"
            if rc != 0:
                run.backends[b]["reason"] = reason


def _run_collectives(run: KernelRun, run_dir: Path, py: str, s: Scenario) -> None:
    """tensor_parallel > 1: the layers' all-reduce at every M, over that many GPUs, in the first worker's python."""
    cfg = collectives.config(run.tensor_parallel, hidden_size(s), s.kernel_bench.m)
    info = run.collectives_worker = {"python": py, "status": "running", "env": None, "log": "worker-collectives.log",
                                     "config": cfg}

    def on_msg(msg: dict) -> None:
        kind = msg.get("type")
        if kind == "env":
            info["env"] = msg
        elif kind == "skip":
            info.update(status="skipped", reason=msg.get("reason"))
            print(f"all-reduce: skipped: {msg.get('reason')}", file=sys.stderr)
        elif kind == "allreduce":
            p = collectives.point_of(msg)
            run.collectives.append(p)
            print(f"all-reduce x{p.world_size} M={p.m}: {p.status}" + (f" {p.us:.1f} µs" if p.us else ""),
                  file=sys.stderr)
        write_json(run_dir / "run.json", run)

    rc, reason = _stream([py, "-m", "llmcompare.kernels.in_engine.collectives", json.dumps(cfg)], run_dir / info["log"],
                         s.kernel_bench.timeout_s, on_msg)
    if info["status"] == "running":
        info["status"] = "complete" if rc == 0 else "failed"
        if rc != 0:
            info["reason"] = reason


def kernel_bench(s: Scenario, argv: list[str]) -> Path:
    s = resolve(s, engines=[])  # model.path, output_dir, kernel_bench.python; run.json records them as written
    shapes = unique_shapes(s)  # one GPU's share at kernel_bench.tensor_parallel
    kb = s.kernel_bench
    tp = kb.tensor_parallel or 1
    run_dir = new_run_dir(s.output_dir, f"kernels-{s.name}")
    run = KernelRun(created_at=now(), argv=argv, host=host_info(tp), scenario=s.to_dict(), scenario_name=s.name,
                    model=s.model.path, layers=layers(s), group_size=kb.group_size, rtol=RTOL, m=kb.m,
                    shapes=[dataclasses.asdict(sh) for sh in shapes], tensor_parallel=tp)
    run.dir = str(run_dir)
    write_json(run_dir / "run.json", run)
    print(f"run directory: {run_dir}" + (f" (per-GPU shapes at tensor_parallel {tp})" if tp > 1 else ""),
          file=sys.stderr)
    cfg = {"shapes": [[sh.name, sh.n, sh.k] for sh in shapes], "m": kb.m, "group_size": kb.group_size, "seed": 0,
           "rtol": RTOL, "rep_ms": kb.rep_ms, "profile_m": list(PROFILE_M) if kb.profile else []}
    try:
        for py, backends in groups(s).items():
            _run_worker(run, run_dir, py, backends, cfg, s)
        if tp > 1:
            _run_collectives(run, run_dir, next(iter(groups(s))), s)
    except KeyboardInterrupt:
        run.status = "interrupted"
        raise
    finally:
        add_speedups(run.points)
        if run.status == "running":
            run.status = "complete"
        run.finished_at = now()
        write_json(run_dir / "run.json", run)
        write_csv(run_dir / "kernels.csv", run.points)
    print(table(run.points, kb.m), file=sys.stderr)
    return run_dir
