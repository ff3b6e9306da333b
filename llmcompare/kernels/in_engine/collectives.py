"""The all-reduce of a tensor-parallel layer, timed in an engine's environment: one process per GPU, torch.distributed
over NCCL, the same GPUs the engine shards over. Prints one JSON object per line on stdout (rank 0 only).

  python -m llmcompare.kernels.in_engine.collectives '<config json>'   (config: see config())

A Megatron-style layer (vLLM's, TurboMind's) sums each row-parallel GEMM's partial output over the GPUs: after
o and after down, an all-reduce of M x hidden_size activations (fp16/bf16), M the step's tokens (the decode
batch, or a prefill's prompt tokens). For each M: warm-up calls, then `reps` samples of `iters` back-to-back
calls, timed on each rank (CUDA events; the wall clock for gloo on CPU, which the tests use); a sample's time is
the slowest rank's (the layer waits for it), the point its median per call.

What it is not: vLLM replaces NCCL with its own custom all-reduce for small tensors and replays both inside CUDA
graphs, and TurboMind has its own; eager NCCL through torch.distributed is a bound from above at decode sizes,
not what either engine runs. Imports torch only in main() and the ranks, so llmcompare can plan and parse
without it.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
from dataclasses import asdict

from llmcompare.schema.kernel_run import AllReducePoint

ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def config(world_size: int, hidden_size: int, ms: list[int], dtype: str = "float16", backend: str = "nccl",
           iters: int = 20, reps: int = 10, warmup: int = 5) -> dict:
    """The worker's argument; an error names what is wrong."""
    if world_size < 2:
        raise ValueError(f"world_size: an all-reduce needs 2 or more processes, got {world_size}")
    if dtype not in ELEMENT_BYTES:
        raise ValueError(f"dtype: {dtype!r} is not valid; valid: {', '.join(ELEMENT_BYTES)}")
    if hidden_size <= 0 or not ms or min(ms) <= 0:
        raise ValueError(f"hidden_size and every M must be > 0, got hidden_size {hidden_size}, M {ms}")
    return {"world_size": world_size, "hidden_size": hidden_size, "m": sorted(set(ms)), "dtype": dtype,
            "backend": backend, "iters": iters, "reps": reps, "warmup": warmup}


def plan(cfg: dict) -> list[AllReducePoint]:
    """One point per M, before timing: what each GPU contributes."""
    esize = ELEMENT_BYTES[cfg["dtype"]]
    return [AllReducePoint(world_size=cfg["world_size"], m=m, hidden_size=cfg["hidden_size"], dtype=cfg["dtype"],
                           bytes=m * cfg["hidden_size"] * esize, backend=cfg["backend"], iters=cfg["iters"])
            for m in cfg["m"]]


def summarise(p: AllReducePoint, samples_us: list[float]) -> AllReducePoint:
    """Median and p20/p80 of the per-call samples (each the slowest rank's), and the bandwidths they give."""
    s = sorted(samples_us)
    p.us, p.us_p20, p.us_p80 = statistics.median(s), s[len(s) // 5], s[(4 * len(s)) // 5]
    p.algbw_gbps = p.bytes / (p.us * 1e-6) / 1e9
    p.busbw_gbps = p.algbw_gbps * 2 * (p.world_size - 1) / p.world_size
    p.status = "ok"
    return p


def parse_line(line: str) -> dict | None:
    """One line of the worker's stdout as a message ({"type": env | skip | allreduce | done, ...}), else None
    (anything else a library prints)."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and "type" in msg else None


def point_of(msg: dict) -> AllReducePoint:
    from llmcompare.schema.codec import record

    return record(AllReducePoint, {k: v for k, v in msg.items() if k != "type"})


# ---- the worker (the engine's environment) -------------------------------------------------------------------
def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def _sync(torch, dist, device) -> None:
    """A barrier every backend runs the same way: one tiny all-reduce, then the device drained."""
    dist.all_reduce(torch.zeros(1, device=device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_allreduce(torch, dist, x, iters: int, reps: int, warmup: int) -> list[float]:
    """Per-call µs of `reps` samples of `iters` back-to-back in-place all-reduces of x, on this rank's clock.
    x is zeros, so repeated sums stay finite."""
    cuda = x.device.type == "cuda"
    for _ in range(warmup):
        dist.all_reduce(x)
    out = []
    for _ in range(reps):
        _sync(torch, dist, x.device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(x)
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            ms = (time.perf_counter() - t0) * 1e3
        out.append(ms * 1e3 / iters)
    return out


def _rank(rank: int, cfg: dict, port: int) -> None:
    """One process of the group: rank `rank` on GPU `rank` (or the CPU for gloo)."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    nccl = cfg["backend"] == "nccl"
    device = torch.device("cuda", rank) if nccl else torch.device("cpu")
    if nccl:
        torch.cuda.set_device(device)
    dist.init_process_group(cfg["backend"], rank=rank, world_size=cfg["world_size"])
    try:
        for p in plan(cfg):
            try:
                x = torch.zeros(p.m, p.hidden_size, dtype=getattr(torch, p.dtype), device=device)
                samples = torch.tensor(time_allreduce(torch, dist, x, cfg["iters"], cfg["reps"], cfg["warmup"]),
                                       dtype=torch.float64, device=device)
                dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # each sample: the slowest rank's
                p = summarise(p, samples.cpu().tolist())
            except Exception as e:  # one size failing (e.g. out of memory) leaves the others
                p.status, p.error = "error", f"{type(e).__name__}: {e}"[:500]
            if rank == 0:
                emit({"type": "allreduce", **asdict(p)})
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    cfg = json.loads(sys.argv[1])
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        emit({"type": "skip", "reason": f"torch is not installed in {sys.executable}: {e}"})
        return
    env = {"type": "env", "python_exe": sys.executable, "torch": torch.__version__}
    if cfg["backend"] == "nccl":
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < cfg["world_size"]:
            emit({"type": "skip", "reason": f"tensor_parallel {cfg['world_size']} needs as many GPUs; "
                                            f"torch sees {have}"})
            return
        env |= {"nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "gpus": [torch.cuda.get_device_name(i) for i in range(cfg["world_size"])]}
    emit(env)
    from llmcompare.kernels.in_engine import collectives

    mp.spawn(collectives._rank, args=(cfg, _free_port()), nprocs=cfg["world_size"], join=True)
    emit({"type": "done"})


if __name__ == "__main__":
    main()
