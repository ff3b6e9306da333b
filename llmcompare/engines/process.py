"""A child process that llmcompare owns: its own process group (so everything it forks is stopped with it), a
deadline, a log file that is always closed, TERM-then-KILL of the whole group on the way out, and a leash: a
watchdog that stops the group when llmcompare is gone, however it ends (kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from llmcompare.schema.files import open_for_write


class ProcessTimeout(RuntimeError):
    pass


def group_alive(pgid: int, proc: subprocess.Popen | None = None) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if proc is not None:
        proc.poll()  # a zombie leader keeps the group "alive" until reaped
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_group(proc: subprocess.Popen, term_wait_s: float = 10.0) -> None:
    """TERM the group, wait, then KILL it; returns once no process of the group is left."""
    pgid = proc.pid  # the group id, since the leader started a new session
    for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(pgid, proc):
            time.sleep(0.05)
        if not group_alive(pgid, proc):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


# The watchdog, run as `python -I -S -c WATCHDOG FD`: it reads the pipe whose only write end is llmcompare's. The
# owner writes the group's id once the group exists, and `q` once it has stopped the group itself; at the end of
# the pipe without `q` (llmcompare is gone: exited, crashed or killed, SIGKILL included) it sends the group SIGTERM,
# then SIGKILL after TERM_WAIT_S. Its own session: Ctrl-C at llmcompare's terminal does not reach it.
WATCHDOG = """
import os, signal, sys, time
fd, term_wait_s, buf = int(sys.argv[1]), float(sys.argv[2]), b""
while chunk := os.read(fd, 64):
    buf += chunk
    if b"q" in buf:
        sys.exit(0)
groups = [int(x) for x in buf.split() if x.isdigit()]
def alive():
    out = []
    for g in groups:
        try:
            os.killpg(g, 0)
            out.append(g)
        except ProcessLookupError:
            pass
        except PermissionError:
            out.append(g)
    return out
for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, 10.0)):
    for g in alive():
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


class Leash:
    """A watchdog for one process group: Leash() before the group's leader starts, hold(pgid) once it has,
    release(gone) when the owner is done with it (gone: no process of the group is left, so the watchdog just
    exits; else it stops what is left). If llmcompare dies first, the watchdog stops the group."""

    def __init__(self, term_wait_s: float = 5.0):
        r, self._w = os.pipe()  # neither end is inherited by other children (close_fds)
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHDOG, str(r), f"{term_wait_s:g}"],
                                         pass_fds=(r,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        except OSError:
            os.close(self._w)
            raise
        finally:
            os.close(r)

    def hold(self, pgid: int) -> None:
        os.write(self._w, f"{pgid}\n".encode())

    def release(self, gone: bool = True) -> None:
        if self._w < 0:
            return
        try:
            if gone:
                os.write(self._w, b"q")
        finally:
            os.close(self._w)
            self._w = -1
        try:
            self.proc.wait(timeout=0 if not gone else 5)
        except subprocess.TimeoutExpired:
            pass  # it stops what is left of the group on its own, then exits (init reaps it)


class OwnedProcess:
    """with OwnedProcess(cmd, log, timeout_s=...) as p: for line in p.lines(): ...  (stdout as text lines)."""

    def __init__(self, cmd: list[str], log_path: Path, env: dict[str, str] | None = None, timeout_s: float = 3600.0):
        self.cmd, self.log_path, self.env, self.timeout_s = cmd, Path(log_path), env, timeout_s
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    def __enter__(self) -> OwnedProcess:
        self._log = open_for_write(self.log_path, "w")  # never through a link planted in the run directory
        self._leash = None
        try:
            self._leash = Leash()
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self._log, text=True, env=self.env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            if self._leash:
                self._leash.release()
            self._log.close()
            raise
        self._leash.hold(self.proc.pid)
        self.started = time.monotonic()
        return self

    def lines(self):
        """stdout lines until it ends; raises ProcessTimeout past the deadline (the group is then stopped)."""
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        while True:
            left = self.started + self.timeout_s - time.monotonic()
            if left <= 0:
                raise ProcessTimeout(f"{self.cmd[0]} ran past its {self.timeout_s:.0f} s deadline; stopped. "
                                     f"Its log: {self.log_path}")
            if not sel.select(timeout=min(left, 1.0)):
                continue
            line = self.proc.stdout.readline()
            if not line:
                return
            yield line

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            if self.proc.poll() is None and exc[0] is None:
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            stop_group(self.proc)
            self._leash.release(gone=not group_alive(self.proc.pid, self.proc))
        self._log.close()

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode
