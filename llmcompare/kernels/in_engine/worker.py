"""kernel-bench's worker: runs in an engine's environment, prints one JSON object per line on stdout.

  python -m llmcompare.kernels.in_engine.worker '<config json>'

For each shape it makes the same seeded AWQ tensors (numpy, so every process and torch version agrees),
and for each backend and M: checks the output against an fp32 reference of the dequantized weight (poisoned
output buffers; a backend over the bound is reported wrong and not timed), then times
  eager_us  per call, events around back-to-back eager calls: what an engine pays without CUDA graphs
  graph_us  per call, from CUDA-graph replays of many calls: the kernels without launch gaps
cycling through enough copies of weights and inputs that no call finds its operands in L2 (as a model's
successive layers do not), and lists the CUDA kernels one call launches (torch.profiler).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import traceback

import numpy as np

from llmcompare.engines.gemm_backends import runs_on, weight_bytes
from llmcompare.models import awq

L2_FLUSH_BYTES = 256 << 20  # rotate over copies totalling > 4x the H200's 60 MB L2


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def _events_ms(torch, fn, inner: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def ceilings(torch) -> dict:
    """Measured in this run: device-to-device copy bandwidth (bytes read + written) and cuBLAS fp16 peak."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    ms = statistics.median(_events_ms(torch, lambda: b.copy_(a), 5) / 5 for _ in range(10))
    copy_gbps = 2 * a.numel() / (ms * 1e-3) / 1e9
    n = 8192
    x = torch.randn(n, n, dtype=torch.float16, device="cuda")
    w = torch.randn(n, n, dtype=torch.float16, device="cuda")
    for _ in range(3):
        x @ w
    ms = statistics.median(_events_ms(torch, lambda: x @ w, 5) / 5 for _ in range(10))
    return {"copy_gbps": copy_gbps, "fp16_tflops": 2 * n**3 / (ms * 1e-3) / 1e12, "peak_gemm": f"{n}x{n}x{n} fp16"}


def gpu_facts(torch) -> dict:
    p = torch.cuda.get_device_properties(0)
    facts = {"name": p.name, "sm_count": p.multi_processor_count, "capability": ".".join(map(str, (p.major, p.minor))),
             "memory_gib": round(p.total_memory / 2**30, 1)}
    q = "driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,temperature.gpu"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.splitlines()[0]
        facts.update(dict(zip(q.split(","), (v.strip() for v in out.split(",")), strict=False)))
    except (OSError, IndexError, subprocess.TimeoutExpired):
        pass
    return facts


def tensors(torch, n: int, k: int, g: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, n, k])
    qw, qz, sc = awq.random_awq(k, n, g, rng)
    cuda = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
    t = {"k": k, "n": n, "g": g, "qweight": cuda(qw), "qzeros": cuda(qz), "scales": cuda(sc),
         "q": cuda(awq.unpack(qw).astype(np.int32)), "z": cuda(awq.unpack(qz).astype(np.int32))}
    s32 = t["scales"].float()
    w32 = ((t["q"].view(k // g, g, n).float() - t["z"].float()[:, None, :]) * s32[:, None, :]).view(k, n)
    t["w32"], t["w16"] = w32, w32.half()
    return t


def profile_kernels(torch, fn, calls: int) -> list[dict]:
    """Device activities (kernels, memsets, copies) of `calls` eager calls, per call, read from the profiler's
    chrome trace (its format is stable across torch versions)."""
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    agg: dict[str, list[float]] = {}
    for e in trace.get("traceEvents", []):
        if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and "dur" in e:
            agg.setdefault(e.get("name", "?"), []).append(float(e["dur"]))
    return sorted(({"name": name[:160], "launches_per_call": len(v) / calls, "us_per_call": sum(v) / calls}
                   for name, v in agg.items()), key=lambda r: -r["us_per_call"])


def bench_point(torch, impl, t: dict, ws: list, m: int, cfg: dict) -> dict:
    k, n = t["k"], t["n"]
    copies = len(ws)
    xs = [torch.randn(m, k, dtype=torch.float16, device="cuda") for _ in range(copies)]
    outs = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in range(copies)]
    for x, w in zip(xs, ws, strict=True):
        impl.setup(x, w)
    # correctness, on a fresh input, output poisoned with NaN
    xc = torch.randn(m, k, dtype=torch.float16, device="cuda")
    impl.setup(xc, ws[0])
    oc = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    y = impl(xc, ws[0], out=oc)
    torch.cuda.synchronize()
    ref = xc.float() @ t["w32"]
    rel = float((y.float() - ref).norm() / ref.norm())
    res = {"rel_err": rel if math.isfinite(rel) else None, "copies": copies}
    if not math.isfinite(rel) or rel > cfg["rtol"]:
        res["status"] = "wrong"
        return res
    calls = [lambda x=x, w=w, o=o: impl(x, w, out=o) for x, w, o in zip(xs, ws, outs, strict=True)]

    def round_(reps: int = 1) -> None:
        for _ in range(reps):
            for c in calls:
                c()

    round_(3)  # warm-up
    torch.cuda.synchronize()
    # eager: back-to-back calls, events around them; per-call = elapsed / calls
    one_ms = max(_events_ms(torch, round_, 1) / copies, 1e-4)
    reps = max(1, min(200, int(cfg["rep_ms"] / 10 / (one_ms * copies))))
    eager = sorted(_events_ms(torch, lambda: round_(reps), 1) / (reps * copies) for _ in range(10))
    res |= {"eager_us": statistics.median(eager) * 1e3, "eager_us_p20": eager[2] * 1e3, "eager_us_p80": eager[7] * 1e3}
    # graph: capture R rounds over the copies, time replays
    res["graph_ok"] = True
    try:
        rounds = max(1, min(100, math.ceil(1.0 / (one_ms * copies))))  # >= ~1 ms of work per replay
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            round_(2)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):  # s is warm: TurboMind made its context and workspace for it
            round_(rounds)
        graph.replay()
        torch.cuda.synchronize()
        replays = max(5, min(100, int(cfg["rep_ms"] / (one_ms * copies * rounds))))
        g = sorted(_events_ms(torch, graph.replay, 1) / (rounds * copies) for _ in range(replays))
        res |= {"graph_us": statistics.median(g) * 1e3, "graph_us_p20": g[len(g) // 5] * 1e3,
                "graph_us_p80": g[(4 * len(g)) // 5] * 1e3}
        del graph
    except Exception as e:  # a backend that cannot be captured still has its eager time
        res["graph_ok"] = False
        res["graph_error"] = f"{type(e).__name__}: {e}"[:300]
        torch.cuda.synchronize()
    if m in cfg["profile_m"]:
        try:
            res["kernels"] = profile_kernels(torch, calls[0], 5)
        except Exception as e:
            res["kernels_error"] = f"{type(e).__name__}: {e}"[:300]
    res["status"] = "ok"
    return res


def load_impl(name: str):
    """The implementation class of a backend (versioned names too), named lazily in llmcompare.backends."""
    import importlib

    from llmcompare.engines.gemm_backends import backend

    module, cls = backend(name).impl.split(":")
    return getattr(importlib.import_module(module), cls)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    try:
        import torch
    except ImportError as e:
        for b in cfg["backends"]:
            emit({"type": "skip", "backend": b, "reason": f"torch is not installed in {sys.executable}: {e}"})
        return
    from llmcompare.kernels.in_engine.impls import versions

    emit({"type": "env", "python_exe": sys.executable, "versions": versions()})
    if not torch.cuda.is_available():
        for b in cfg["backends"]:
            emit({"type": "skip", "backend": b, "reason": "CUDA is not available"})
        return
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference is fp32
    emit({"type": "gpu", **gpu_facts(torch)})
    if cfg.get("ceilings", True):
        emit({"type": "ceilings", **ceilings(torch)})
    impls = {}
    for b in cfg["backends"]:
        try:
            impls[b] = load_impl(b)()
        except Exception as e:
            emit({"type": "skip", "backend": b, "reason": f"{type(e).__name__}: {e}"[:500]})
    for name, n, k in cfg["shapes"]:
        t = tensors(torch, n, k, cfg["group_size"], cfg["seed"])
        for b, impl in impls.items():
            if not runs_on(b, name):
                continue
            copies = max(1, min(32, math.ceil(L2_FLUSH_BYTES / weight_bytes(b, n, k, cfg["group_size"]))))
            try:
                ws = [impl.prepare(t) for _ in range(copies)]
            except Exception as e:
                emit({"type": "point", "backend": b, "shape": name, "n": n, "k": k, "m": None, "status": "error",
                      "error": f"prepare: {type(e).__name__}: {e}"[:500]})
                continue
            facts = getattr(impl, "point_facts", None)  # a backend's own extra fields (turbomind: tm_gemm)
            for m in cfg["m"]:
                base = {"type": "point", "backend": b, "shape": name, "n": n, "k": k, "m": m}
                try:
                    emit(base | bench_point(torch, impl, t, ws, m, cfg) | (facts(ws[0], m) if facts else {}))
                except Exception as e:
                    emit(base | {"status": "error", "error": f"{type(e).__name__}: {e}"[:500],
                                 "trace": traceback.format_exc()[-1500:]})
                    torch.cuda.synchronize()
            del ws
            torch.cuda.empty_cache()
        del t
        torch.cuda.empty_cache()
    emit({"type": "done"})


if __name__ == "__main__":
    main()
