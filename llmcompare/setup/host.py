"""The machine a run ran on: host, python, GPUs as nvidia-smi sees them (none on a CPU machine), and for a
tensor-parallel run how the GPUs connect (`nvidia-smi topo -m`)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata

from llmcompare import __version__
from llmcompare.schema.machine import Machine
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
        "client": client_stack(),
    }


def client_stack() -> dict:
    """The load generator's HTTP client and event loop: aiohttp's version, and uvloop's where installed (the client
    worker processes run on it; without it, asyncio's own loop: serve/workers.py). None for what is missing."""
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {"aiohttp": version("aiohttp"), "uvloop": version("uvloop")}


PROCESS_START = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def boot_id() -> str:
    try:
        return open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        return ""


def visible_gpus(found: list[dict], env: dict[str, str]) -> list[dict]:
    """The GPUs a process with this environment sees: CUDA_VISIBLE_DEVICES (indices or UUIDs) picks from
    nvidia-smi's list; unset, every GPU."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return found
    picked = []
    for item in (x.strip() for x in cvd.split(",") if x.strip()):
        if item.isdigit():
            if int(item) < len(found):
                picked.append(found[int(item)])
        else:
            picked += [g for g in found if str(g.get("uuid", "")).startswith(item)]
    return picked


def machine(env: dict[str, str], server_host: str = "local", found: list[dict] | None = None) -> Machine:
    """This machine, as an engine started with `env` (over this process's environment) sees it."""
    found = gpu_info() if found is None else found
    mine = visible_gpus(found, {**os.environ, **env})
    uuids = [str(g["uuid"]) for g in mine if g.get("uuid") not in (None, "", "N/A")]
    boot = boot_id()
    local = server_host == "local"
    # a physical GPU sits in one host: its UUIDs name the machine; without a GPU the kernel's boot id; without
    # that, this serve-bench process (one process runs on one machine; a resume is another process)
    key = (f"gpus {','.join(uuids)}" if uuids else f"boot {boot}" if boot else
           f"process {os.getpid()} on {socket.gethostname()} since {PROCESS_START}")
    key = key if local else ""
    return Machine(key=key, hostname=socket.gethostname(), cpu_model=cpu_model(), cpu_count=os.cpu_count(),
                   boot_id=boot, gpu_name=str(mine[0].get("name", "")) if mine else "", gpu_uuids=uuids,
                   server_host=server_host, source="recorded" if local else "server at another address")
