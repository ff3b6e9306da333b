"""The machine a run ran on: host, python, GPUs as nvidia-smi sees them (none on a CPU machine)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys

from . import __version__


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


def host_info() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_info(),
        "llmcompare": __version__,
    }
