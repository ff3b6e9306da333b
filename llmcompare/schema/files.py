"""Result files: written atomically as the run goes (run.json rewritten after every change, JSON lines appended),
read back by schema (any version this code knows: upgrade.py). What a run directory holds: schema/run.py."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

from llmcompare.errors import ResultsReadError, ResultsWriteError, RunDirInUse
from llmcompare.schema.codec import _plain
from llmcompare.schema.kernel_run import KernelRun
from llmcompare.schema.run import EngineRecord, PointResult, ServeRun, now

# ---- files -------------------------------------------------------------------------------------------------
# Every file llmcompare writes in a run directory is opened here, without following a link: a link planted in the
# directory (requests.jsonl -> ~/.bashrc) is an error naming the file, never a write outside the directory.
_MODES = {"a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
          "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def _link_error(path: Path) -> ResultsWriteError:
    return ResultsWriteError(f"cannot write results file {path}: it is a symbolic link (to {os.readlink(path)!r}); "
                             "llmcompare writes no file of a run directory through a link: remove the link")


def open_for_write(path: Path, mode: str = "a"):
    """`path` opened to append (a), truncate (w) or create anew (x), text, or binary with a trailing b ("ab");
    never through a symbolic link, and only a regular file. Raises ResultsWriteError naming the file."""
    path = Path(path)
    flags = _MODES[mode[0]] | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a planted FIFO fails
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if os.path.islink(path):
            raise _link_error(path) from None
        raise ResultsWriteError(f"cannot write results file {path}: {e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ResultsWriteError(f"cannot write results file {path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, ("a" if mode[0] == "a" else "w") + ("b" if "b" in mode else ""))


def write_json(path: Path, data: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one. The temporary file is made anew
    (a leftover of a crash is removed first; a link there, or at `path`, is an error)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    for p in (path, tmp):
        if os.path.islink(p):
            raise _link_error(p)
    try:
        tmp.unlink(missing_ok=True)
        with open_for_write(tmp, "x") as f:
            f.write(json.dumps(_plain(data), indent=2, default=str))
        os.replace(tmp, path)
    except OSError as e:
        raise ResultsWriteError(f"cannot write results file {path}: {e}") from None


def append_jsonl(path: Path, rec: dict) -> None:
    try:
        with open_for_write(path, "a") as f:
            f.write(json.dumps(_plain(rec), default=str) + "\n")
    except OSError as e:
        raise ResultsWriteError(f"cannot write results file {path}: {e}") from None


class JsonlAppender:
    """append_jsonl for a stream of lines (a point's finished requests): the file is opened at the first line and
    kept open until close(), each line written and flushed as it comes, so a crash or Ctrl-C keeps every line
    before it, as with append_jsonl. Opening the file for every line cost ~30-60 us of the client's parent per
    request (scripts/parent_cost.py)."""

    def __init__(self, path: Path):
        self.path, self.f = Path(path), None

    def write(self, rec: dict) -> None:
        try:
            if self.f is None:
                self.f = open_for_write(self.path, "a")
            self.f.write(json.dumps(_plain(rec), default=str) + "\n")
            self.f.flush()
        except OSError as e:
            raise ResultsWriteError(f"cannot write results file {self.path}: {e}") from None

    def close(self) -> None:
        if self.f is not None:
            f, self.f = self.f, None
            try:
                f.close()
            except OSError as e:
                raise ResultsWriteError(f"cannot write results file {self.path}: {e}") from None


def planted_links(run_dir: Path) -> list[str]:
    """The symbolic links in a run directory (none of its files is one): checked before a resume writes to it."""
    return sorted(p.name for p in Path(run_dir).iterdir() if p.is_symlink())


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
    for i in range(1, 1000):
        d = base if i == 1 else base.with_name(f"{base.name}-{i}")
        try:
            d.mkdir(parents=True)  # not exist_ok: a run started in the same second by another process has it
            return d
        except FileExistsError:
            continue
        except OSError as e:
            raise ResultsWriteError(f"cannot create run directory {d}: {e}") from None
    raise ResultsWriteError(f"cannot create run directory {base}: 999 of that name exist")


class RunLock:
    """One writer per run directory: an exclusive flock on its `.lock` file, held until release() (or the
    process's end, however it ends). A second serve-bench on the same directory (two `--resume` at once, or a
    resume of a run still going) is refused at once, naming the directory and the holder's pid."""

    NAME = ".lock"

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / self.NAME
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if os.path.islink(self.path):
                raise _link_error(self.path) from None
            raise ResultsWriteError(f"cannot lock run directory {run_dir}: {self.path}: {e}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            raise RunDirInUse(f"run directory {run_dir} is in use by another llmcompare (pid {holder}), which "
                              "writes it now; wait until it ends (or stop it), then run again") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


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
