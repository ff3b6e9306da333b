"""The pipe between the load generator and a client worker process (serve/workers.py): two one-way pipes used as
one connection, and a receive that waits on the event loop instead of blocking it."""

from __future__ import annotations

import asyncio
import os
import select
from multiprocessing.connection import Connection


class Duplex:
    """Two one-way pipes as one connection: recv/poll/fileno on the reading end, send on the writing end."""

    def __init__(self, reader: Connection, writer: Connection):
        self.reader, self.writer = reader, writer

    def recv(self):
        return self.reader.recv()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.reader.poll(timeout)

    def fileno(self) -> int:
        return self.reader.fileno()

    def send(self, obj) -> None:
        self.writer.send(obj)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def readable(conn: Connection) -> bool:
    """Whether a message (or the pipe's end) waits on conn: one poll(2) of its fd. Connection.poll(0) answers the
    same through a new selector each call, ~10x the cost, twice a request in the client's parent
    (scripts/parent_cost.py)."""
    p = select.poll()
    p.register(conn.fileno(), select.POLLIN)
    return bool(p.poll(0))


async def recv(conn: Connection, timeout_s: float | None = None):
    """The next line from a pipe, waited for on the event loop (its fd registered with the loop); None when none
    came within timeout_s."""
    if not readable(conn):
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(conn.fileno(), lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(conn.fileno())
            # uvloop's add_reader leaves the fd non-blocking, and a message over 16 KiB comes as two writes (its
            # length, then its bytes): a non-blocking recv between them raised BlockingIOError. Blocking again
            # until the next add_reader, so a message that was already waiting is read whole as well.
            os.set_blocking(conn.fileno(), True)
    return conn.recv()
