"""The machine a run ran on: host, python, GPUs as nvidia-smi sees them (none on a CPU machine), and for a
tensor-parallel run how the GPUs connect (`nvidia-smi topo -m`)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys

from llmcompare import __version__


def gpu_info() -> list[dict]:
    if not shutil.which("nvidia-smi"):
        return []
    q = "name,driver_version,memory.total,clocks.max.sm,clocks.max.memory,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    keys = q.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
            for line in out.strip().splitlines() if line.strip()]


def gpu_topology() -> str | None:
    """`nvidia-smi topo -m` as printed: the link between each pair of GPUs (NV# NVLinks, PIX/PXB/PHB/NODE/SYS
    PCIe paths), which bounds a tensor-parallel all-reduce. None without nvidia-smi or when it fails."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        p = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 and p.stdout.strip() else None


def host_info(tensor_parallel: int = 1) -> dict:
    """`tensor_parallel`: the largest degree the run uses; above 1 the GPU topology is recorded too."""
    gpus = gpu_info()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "gpu_count": len(gpus),
        "tensor_parallel": tensor_parallel,
        "gpu_topology": gpu_topology() if tensor_parallel > 1 else None,
        "llmcompare": __version__,
    }
