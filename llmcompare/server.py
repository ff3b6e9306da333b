"""A served engine as a context manager (after vLLM's benchmark ServerProcess): it owns its process group,
logs to a file, waits until the server answers, notices when it dies, and leaves nothing running behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


class ServerError(RuntimeError):
    """The server failed to start, stopped answering or exited; the message quotes its log's tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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


class ServerProcess:
    def __init__(self, name: str, cmd: list[str], log_path: Path, host: str, port: int,
                 env: dict[str, str] | None = None, startup_timeout_s: float = 900.0, stop_timeout_s: float = 30.0):
        self.name, self.cmd, self.log_path = name, cmd, Path(log_path)
        self.host, self.port = host, port
        self.env = {**os.environ, **(env or {})}
        self.startup_timeout_s, self.stop_timeout_s = startup_timeout_s, stop_timeout_s
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
        self._log = open(self.log_path, "ab")
        self._log.write(("$ " + " ".join(self.cmd) + "\n").encode())
        self._log.flush()
        try:
            # start_new_session: the server and every process it forks share one group we can signal
            self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self._log.close()
            raise ServerError(f"{self.name}: cannot start {self.cmd[0]!r}: {e}") from None
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

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
        t0 = time.monotonic()
        deadline = t0 + self.startup_timeout_s
        health_ok = False
        while time.monotonic() < deadline:
            self.check()
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
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # a zombie leader keeps the group "alive" until reaped
        if self.proc is not None:
            self.proc.poll()
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False

    def stop(self) -> None:
        """TERM the whole group, wait, then KILL it; returns once no process of the group is left."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # the group id, since the leader started a new session
        for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self._group_alive(pgid):
                time.sleep(0.1)
            if not self._group_alive(pgid):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if not self._log.closed:
            self._log.close()
