"""Result files: self-describing, versioned, written as the run goes.

A serve-bench run directory holds
  run.json                    schema SERVE_SCHEMA: scenario, host, and per engine its command line, version,
                              what its log says it chose, and one entry per load point with its metrics;
                              rewritten atomically after every state change, so it is always readable
  <engine>.requests.jsonl     one line per finished request (appended as each finishes)
  <engine>.metrics.jsonl      the engine's Prometheus samples, one line per sample
  <engine>.server.log         the server's stdout and stderr
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import __version__

SERVE_SCHEMA = "llmcompare.serve-bench/1"
KERNEL_SCHEMA = "llmcompare.kernel-bench/1"


class ResultsWriteError(RuntimeError):
    """Results could not be written; the message names the file."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str))
        os.replace(tmp, path)
    except OSError as e:
        raise ResultsWriteError(f"cannot write results file {path}: {e}") from None


def append_jsonl(path: Path, record: dict) -> None:
    try:
        with open(path, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
    except OSError as e:
        raise ResultsWriteError(f"cannot write results file {path}: {e}") from None


def read_jsonl(path: Path) -> list[dict]:
    """Tolerates a last line cut short by a crash."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def gpu_info() -> list[dict]:
    """nvidia-smi's view of the GPUs (none on a CPU machine)."""
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


def new_run_dir(output_dir: str | Path, name: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(output_dir).expanduser() / f"{name}-{stamp}"
    d, i = base, 1
    while d.exists():
        i += 1
        d = base.with_name(f"{base.name}-{i}")
    try:
        d.mkdir(parents=True)
    except OSError as e:
        raise ResultsWriteError(f"cannot create run directory {d}: {e}") from None
    return d


class ServeRun:
    """The run.json of a serve-bench run, kept on disk in step with the run."""

    def __init__(self, run_dir: Path, scenario: dict, argv: list[str]):
        self.dir = Path(run_dir)
        self.data: dict[str, Any] = {
            "schema": SERVE_SCHEMA, "status": "running", "error": None, "created_at": now(),
            "finished_at": None, "argv": argv, "host": host_info(), "scenario": scenario, "engines": {},
        }
        self.save()

    def save(self) -> None:
        write_json(self.dir / "run.json", self.data)

    def path(self, engine: str, what: str) -> Path:
        return self.dir / f"{engine}.{what}"

    def engine(self, name: str, **info: Any) -> dict:
        e = self.data["engines"].setdefault(name, {"status": "starting", "error": None, "points": []})
        e.update(info)
        self.save()
        return e

    def point(self, engine: str, entry: dict) -> None:
        """Adds or replaces (by label) one load point's entry."""
        pts = self.data["engines"][engine]["points"]
        for i, p in enumerate(pts):
            if p["label"] == entry["label"]:
                pts[i] = entry
                break
        else:
            pts.append(entry)
        self.save()

    def finish(self, status: str, error: str | None = None) -> None:
        self.data.update(status=status, error=error, finished_at=now())
        for e in self.data["engines"].values():
            if e.get("status") in ("starting", "running"):
                e["status"] = status
        self.save()


def load_run(run_dir: str | Path) -> dict:
    p = Path(run_dir)
    f = p / "run.json" if p.is_dir() else p
    if not f.exists():
        raise FileNotFoundError(f"{run_dir}: no run.json here (not a serve-bench or kernel-bench run directory)")
    data = json.loads(f.read_text())
    if not str(data.get("schema", "")).startswith("llmcompare."):
        raise ValueError(f"{f}: not an llmcompare result (schema {data.get('schema')!r})")
    data["_dir"] = str(f.parent)
    return data
