"""Result files: written atomically as the run goes (run.json rewritten after every change, JSON lines appended),
read back by schema (any version this code knows: upgrade.py). What a run directory holds: schema/run.py."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from llmcompare.errors import ResultsReadError, ResultsWriteError
from llmcompare.schema.codec import _plain
from llmcompare.schema.kernel_run import KernelRun
from llmcompare.schema.run import EngineRecord, PointResult, ServeRun, now


# ---- files -------------------------------------------------------------------------------------------------
def write_json(path: Path, data: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(_plain(data), indent=2, default=str))
        os.replace(tmp, path)
    except OSError as e:
        raise ResultsWriteError(f"cannot write results file {path}: {e}") from None


def append_jsonl(path: Path, rec: dict) -> None:
    try:
        with open(path, "a") as f:
            f.write(json.dumps(_plain(rec), default=str) + "\n")
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


READERS = {"llmcompare.serve-bench": ServeRun, "llmcompare.kernel-bench": KernelRun}


KNOWN_VERSIONS = {"llmcompare.serve-bench": ("1", "2", "3"), "llmcompare.kernel-bench": ("1", "2")}


def load_run(run_dir: str | Path) -> ServeRun | KernelRun:
    """Reads a serve-bench or kernel-bench run (any schema version this code knows)."""
    p = Path(run_dir)
    f = p / "run.json" if p.is_dir() else p
    if not f.exists():
        raise ResultsReadError(f"{run_dir}: no run.json here (not a serve-bench or kernel-bench run directory)")
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ResultsReadError(f"{f}: cannot read it as JSON ({e}); the file is corrupt or cut short") from None
    schema = str(data.get("schema", "")) if isinstance(data, dict) else ""
    family, _, version = schema.rpartition("/")
    if family not in READERS or version not in KNOWN_VERSIONS[family]:
        known = ", ".join(f"{k}/{v}" for k in READERS for v in KNOWN_VERSIONS[k])
        raise ResultsReadError(f"{f}: not an llmcompare result this version reads (schema {schema!r}; known: {known})")
    try:
        run = READERS[family].from_json(data)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ResultsReadError(f"{f}: malformed {schema} file: {type(e).__name__}: {e}") from None
    run.dir = str(f.parent)
    return run


class RunFile:
    """A serve-bench run.json kept on disk in step with the run (rewritten atomically after every change)."""

    def __init__(self, run_dir: Path, run: ServeRun):
        self.dir, self.run = Path(run_dir), run
        run.dir = str(self.dir)
        self.save()

    def save(self) -> None:
        write_json(self.dir / "run.json", self.run)

    def path(self, engine: str, what: str) -> Path:
        return self.dir / f"{engine}.{what}"

    def record(self, name: str) -> EngineRecord:
        """Engine `name`'s record, made when it has none yet; change its fields, then save()."""
        return self.run.engines.setdefault(name, EngineRecord(name=name))

    def point(self, engine: str, p: PointResult) -> None:
        """Adds, or replaces the same (index, repeat, attempt), one point's result."""
        pts = self.run.engines[engine].points
        for i, q in enumerate(pts):
            if (q.index, q.repeat, q.attempt) == (p.index, p.repeat, p.attempt):
                pts[i] = p
                break
        else:
            pts.append(p)
        self.save()

    def finish(self, status: str, error: str | None = None) -> None:
        self.run.status, self.run.error, self.run.finished_at = status, error, now()
        for e in self.run.engines.values():
            if e.status in ("starting", "running"):
                e.status = status
        self.save()
