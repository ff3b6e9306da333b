"""A served engine as a context manager (after vLLM's benchmark ServerProcess): it owns its process group,
logs to a file, waits until the server answers, notices when it dies, and leaves nothing running behind: not
even when llmcompare itself is killed (kill -9), as a watchdog (process.Leash) then stops the group.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from llmcompare.engines.process import Leash, group_alive
from llmcompare.errors import ResultsWriteError
from llmcompare.schema.files import open_for_write


class ServerError(RuntimeError):
    """The server failed to start, stopped answering or exited; the message quotes its log's tail."""


def free_port(host: str = "127.0.0.1", highest: int = 65535) -> int:
    """A port free now, at most `highest` (SGLang derives port + 10000 for its gRPC port: EngineKind.max_port):
    the kernel's pick when it fits, else random tries from 20000 up."""
    for i in range(100):
        with socket.socket() as s:
            try:
                s.bind((host, 0 if i == 0 else random.randint(20000, highest)))
            except OSError:  # taken
                continue
            port = s.getsockname()[1]
        if port <= highest:
            return port
    raise ServerError(f"no free port at most {highest} found on {host} in 100 tries")


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join("    | " + ln for ln in tail) if tail else "    | (log is empty)"


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def served_models(base_url: str, timeout_s: float = 5.0) -> list[str] | None:
    status, body = http_get(f"{base_url}/v1/models", timeout_s)
    if status != 200:
        return None
    try:
        return [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        return None


def last_log_line(path: Path, width: int = 160) -> str:
    """The log's last non-empty line (progress bars' carriage returns count as line ends), cut to `width`."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    if not lines:
        return "(nothing yet)"
    return lines[-1] if len(lines[-1]) <= width else lines[-1][:width - 3] + "..."


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class ServerProcess:
    """`stop_timeout_s`: how long a ready server gets to exit after SIGTERM before SIGKILL; a server still starting
    gets `starting_stop_timeout_s` (vLLM ignores SIGTERM during parts of its start-up). While it starts, a line
    of progress is printed every `progress_interval_s`."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, host: str, port: int,
                 env: dict[str, str] | None = None, startup_timeout_s: float = 900.0, stop_timeout_s: float = 30.0,
                 starting_stop_timeout_s: float = 5.0, progress_interval_s: float = 10.0):
        self.name, self.cmd, self.log_path = name, cmd, Path(log_path)
        self.host, self.port = host, port
        self.env = {**os.environ, **(env or {})}
        self.startup_timeout_s, self.stop_timeout_s = startup_timeout_s, stop_timeout_s
        self.starting_stop_timeout_s, self.progress_interval_s = starting_stop_timeout_s, progress_interval_s
        self._t0 = 0.0
        self.proc: subprocess.Popen | None = None
        self.model_ids: list[str] = []
        self.ready_s: float | None = None  # seconds from launch until /v1/models answered

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ServerProcess:
        if port_in_use(self.host, self.port):
            raise ServerError(f"{self.name}: port {self.port} on {self.host} is already in use; "
                              "free it or leave the engine's port unset to get a free one")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._log = open_for_write(self.log_path, "ab")  # never through a link planted in the run directory
        except ResultsWriteError as e:
            raise ServerError(f"{self.name}: {e}") from None
        self._log.write(("$ " + " ".join(self.cmd) + "\n").encode())
        self._log.flush()
        try:
            self._leash = Leash(self.starting_stop_timeout_s)  # stops the group if llmcompare is killed (-9 too)
        except OSError as e:
            self._log.close()
            raise ServerError(f"{self.name}: cannot start the watchdog of its process group: {e}") from None
        try:
            # start_new_session: the server and every process it forks share one group we can signal
            self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self._leash.release()
            self._log.close()
            raise ServerError(f"{self.name}: cannot start {self.cmd[0]!r}: {e}") from None
        self._leash.hold(self.proc.pid)
        self._t0 = time.monotonic()
        try:
            self._wait_ready()
        except BaseException as ex:
            grace = self.starting_stop_timeout_s
            if isinstance(ex, KeyboardInterrupt):  # Ctrl-C, or SIGTERM (the CLI raises KeyboardInterrupt("SIGTERM"))
                say(f"{self.name}: {str(ex) or 'Ctrl-C'} while starting ({time.monotonic() - self._t0:.0f} s in): stopping "
                    f"the server (SIGTERM, then SIGKILL after {grace:g} s)")
            self.stop(grace, announce=isinstance(ex, KeyboardInterrupt))
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        if interrupted:
            say(f"{self.name}: {str(exc) or 'Ctrl-C'}: stopping the server (SIGTERM, then SIGKILL after "
                f"{self.stop_timeout_s:g} s)")
        self.stop(announce=interrupted)

    def death(self) -> str | None:
        """None while the server runs; otherwise why it is gone, with its log's tail."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return (f"{self.name} server exited with code {self.proc.returncode}; last lines of {self.log_path}:\n"
                + log_tail(self.log_path))

    def check(self) -> None:
        if reason := self.death():
            raise ServerError(reason)

    def _wait_ready(self) -> None:
        t0 = self._t0 or time.monotonic()
        deadline = t0 + self.startup_timeout_s
        health_ok = False
        next_note = t0 + self.progress_interval_s
        while time.monotonic() < deadline:
            self.check()
            if time.monotonic() >= next_note:
                say(f"{self.name}: starting, {time.monotonic() - t0:.0f} s, log: {self.log_path}, "
                    f"last line: {last_log_line(self.log_path)}")
                next_note += self.progress_interval_s
            if not health_ok:
                status, _ = http_get(f"{self.base_url}/health", timeout_s=2.0)
                health_ok = status == 200
            if health_ok:
                ids = served_models(self.base_url, timeout_s=5.0)
                if ids:
                    self.model_ids = ids
                    self.ready_s = time.monotonic() - t0
                    return
            time.sleep(0.5)
        raise ServerError(f"{self.name} server did not become ready within {self.startup_timeout_s:.0f} s "
                          f"(polled {self.base_url}/health and /v1/models); last lines of {self.log_path}:\n"
                          + log_tail(self.log_path))

    def _group_alive(self, pgid: int) -> bool:
        return group_alive(pgid, self.proc)

    def _signal(self, pgid: int, sig: int) -> bool:
        try:
            os.killpg(pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def _wait_gone(self, pgid: int, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self._group_alive(pgid):
            time.sleep(0.1)
        return not self._group_alive(pgid)

    def stop(self, grace_s: float | None = None, announce: bool = False) -> None:
        """TERM the whole group, wait `grace_s` (default stop_timeout_s), then KILL it; returns once no process of
        the group is left. A Ctrl-C or SIGTERM while it waits sends KILL at once (and is raised after)."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # the group id, since the leader started a new session
        grace = self.stop_timeout_s if grace_s is None else grace_s
        t0, interrupted, gone = time.monotonic(), False, True
        try:
            gone = not self._signal(pgid, signal.SIGTERM) or self._wait_gone(pgid, grace)
        except KeyboardInterrupt:
            interrupted = announce = True
            say(f"{self.name}: interrupted again: killing the server now (SIGKILL)")
        if not gone or interrupted:
            if not interrupted:
                announce = True
                state = "still starting" if self.ready_s is None else "running"
                say(f"{self.name}: {state} {grace:g} s after SIGTERM: killing it (SIGKILL)")
            self._signal(pgid, signal.SIGKILL)
            while True:
                try:
                    self._wait_gone(pgid, 10.0)
                    break
                except KeyboardInterrupt:  # KILL is sent: the wait is short, and it is what leaves nothing behind
                    interrupted = True
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if not self._log.closed:
            self._log.close()
        self._leash.release(gone=not self._group_alive(pgid))
        if announce:
            left = "" if not self._group_alive(pgid) else f"; some of its processes (group {pgid}) are still there"
            say(f"{self.name}: server stopped ({time.monotonic() - t0:.1f} s){left}")
        if interrupted:
            raise KeyboardInterrupt
