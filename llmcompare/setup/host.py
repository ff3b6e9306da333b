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
from llmcompare.setup import gpus


def gpu_info() -> list[dict]:
    """Each GPU as nvidia-smi describes it, with its UUID (which GPU of a machine ran the run); [] without one."""
    q = "name,uuid,driver_version,memory.total,clocks.max.sm,clocks.max.memory,power.limit"
    try:
        rows = gpus.query(q, timeout_s=20, units=True)
    except gpus.GpuQueryError:
        return []
    return [dict(zip(q.split(","), row, strict=False)) for row in rows or []]


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; platform's answer elsewhere)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
    found = gpu_info()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": found,
        "gpu_count": len(found),
        "tensor_parallel": tensor_parallel,
        "gpu_topology": gpu_topology() if tensor_parallel > 1 else None,
        "llmcompare": __version__,
    }
