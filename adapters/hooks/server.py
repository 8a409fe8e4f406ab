"""The hook server: answers the installed hooks' calls for one store, holding
the service open, so that a call does not pay for importing it.

    python -m devs.adapters.hooks.server SOCKET [--db DB]

Whoever reaches the socket may be the agent, so requests are read side by side
without blocking (:mod:`selectors`) within bounds, and answered one at a time
in the main thread (SIGALRM timeouts and a swapped ``sys.stderr`` need it;
SQLite takes one writer anyway), as ``devs hook`` answers in process. Its
lifetime, bounds and settings: docs/agents.md, docs/configuration.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from devs.adapters.hooks.client import EVENT_MAX
from devs.adapters.hooks.runner import Store, handle
from devs.adapters.hooks.settings import HookEdgeSettings
from devs.domain.errors import InvalidInput

HEADER_MAX = 1024 * 1024
READ_DEADLINE = 5.0
"""Seconds a connection has to send its whole request (a hook call sends it
at once, in milliseconds); past them it is dropped."""
MAX_CONNECTIONS = 32
"""Requests read at once; a new connection past them drops the oldest."""
REPLY_TIMEOUT = 2.0
"""Seconds to hand an answer to its caller's socket."""
CHUNK = 1 << 20
TURN_MAX = 4 * CHUNK
"""Bytes read from one connection before the others get their turn."""


class Reading:
    """A connection whose request is being read: the length of the header
    (4 bytes), the header (JSON), the length of the event (8 bytes), the
    event (:func:`devs.adapters.hooks.client.frame`)."""

    def __init__(self, connection: socket.socket, number: int, due: float) -> None:
        self.connection = connection
        self.number = number
        self.due = due
        self.data = bytearray()

    def need(self) -> int:
        """Bytes wanted before the request is whole (0: it is); a
        ``ValueError`` as soon as a length read is too large."""
        have = len(self.data)
        if have < 4:
            return 4 - have
        length: int = struct.unpack_from(">I", self.data)[0]
        if length > HEADER_MAX:
            msg = "the request's header is too large"
            raise ValueError(msg)
        end = 4 + length + 8
        if have < end:
            return end - have
        size: int = struct.unpack_from(">Q", self.data, 4 + length)[0]
        if size > EVENT_MAX + 1:
            msg = "the hook event is too large"
            raise ValueError(msg)
        return end + size - have

    def request(self) -> tuple[dict[str, Any], bytes]:
        """The header and the event of a whole request."""
        (length,) = struct.unpack_from(">I", self.data)
        whole = memoryview(self.data)
        header = json.loads(bytes(whole[4 : 4 + length]))
        if not isinstance(header, dict):
            msg = "the request's header is not an object"
            raise ValueError(msg)
        return header, bytes(whole[4 + length + 8 :])


class Stop(BaseException):
    """SIGTERM: not an error a call would catch and say."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stop


def bind(path: Path) -> socket.socket | None:
    """The listening socket at ``path``, or ``None`` when another server
    already answers there (a lock file decides between two starting ones)."""
    lock = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            pass  # nobody answers: a stale socket, or none
        else:
            return None
        finally:
            probe.close()
        # Bound under another name and moved into place (over a stale one)
        # once it listens: a call that finds the socket can connect to it.
        fresh = path.with_suffix(".new")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(fresh)
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                listening.bind(str(fresh))
            finally:
                os.umask(old)
            listening.listen(64)
            os.replace(fresh, path)
        except BaseException:
            listening.close()
            with contextlib.suppress(OSError):
                os.unlink(fresh)
            raise
        return listening
    finally:
        os.close(lock)


def _failure(reason: str, what: str = "a bad request to the hook server") -> bytes:
    """The answer to a call that failed: one line, exit code 1."""
    line = f"devs hook: error: {what} ({reason})\n"
    return json.dumps({"stdout": None, "stderr": line, "code": 1}).encode()


class Server:
    """The connections of one listening socket: read side by side, answered
    one at a time."""

    def __init__(self, listening: socket.socket, store: Store) -> None:
        self.listening = listening
        self.store = store
        self.selector = selectors.DefaultSelector()
        self.reading: dict[socket.socket, Reading] = {}  # in the order accepted
        self.accepted = 0
        self.answering = 0.0
        listening.setblocking(False)
        self.selector.register(listening, selectors.EVENT_READ, None)

    def clock(self) -> float:
        """The time the reads are held to: all but what answering took."""
        return time.monotonic() - self.answering

    def run(self, idle: float) -> None:
        """Until ``idle`` seconds pass without a call."""
        last = time.monotonic()
        while (left := last + idle - time.monotonic()) > 0:
            if self.turn(left):
                last = time.monotonic()

    def drain(self) -> None:
        """The calls that connected already (the socket is gone from its
        folder: no new one comes), answered or dropped, not left."""
        while True:
            before = self.accepted
            self.turn(READ_DEADLINE if self.reading else 0.0)
            if not self.reading and self.accepted == before:
                return

    def turn(self, wait: float) -> int:
        """Wait up to ``wait`` seconds (less when a read is due) for the
        sockets; read what came, answer the requests now whole, drop the
        reads overdue. The number of calls answered."""
        if self.reading:
            due = min(reading.due for reading in self.reading.values())
            wait = min(wait, max(0.0, due - self.clock()))
        whole: list[tuple[Reading, dict[str, Any], bytes]] = []
        for key, _ in self.selector.select(wait):
            if key.data is None:
                self.accept(whole)
            elif key.fileobj in self.reading:  # not dropped meanwhile
                self.read(key.data, whole)
        whole.sort(key=lambda done: done[0].number)
        for reading, header, raw in whole:
            self.answer(reading.connection, header, raw)
        now = self.clock()
        for reading in [r for r in self.reading.values() if r.due <= now]:
            self.drop(reading, f"the request was not read within {READ_DEADLINE:g} s")
        return len(whole)

    def accept(self, whole: list[tuple[Reading, dict[str, Any], bytes]]) -> None:
        for _ in range(MAX_CONNECTIONS):
            try:
                connection, _ = self.listening.accept()
            except OSError:  # none waiting (or no descriptor left: later)
                return
            connection.setblocking(False)
            if len(self.reading) >= MAX_CONNECTIONS:
                oldest = next(iter(self.reading.values()))
                self.drop(oldest, "too many requests at once; this one was the oldest")
            self.accepted += 1
            reading = Reading(connection, self.accepted, self.clock() + READ_DEADLINE)
            self.reading[connection] = reading
            self.selector.register(connection, selectors.EVENT_READ, reading)
            # A hook call sends its request as it connects: most are whole
            # here already.
            self.read(reading, whole)

    def read(
        self, reading: Reading, whole: list[tuple[Reading, dict[str, Any], bytes]]
    ) -> None:
        taken = 0
        try:
            while taken < TURN_MAX:
                chunk = reading.connection.recv(min(reading.need(), CHUNK))
                if not chunk:
                    msg = "the request ended early"
                    raise ValueError(msg)
                reading.data += chunk
                taken += len(chunk)
                if not reading.need():
                    request = reading.request()
                    self.forget(reading)
                    whole.append((reading, *request))
                    return
        except (BlockingIOError, InterruptedError):
            return  # the rest later
        except (OSError, ValueError, RecursionError) as error:
            self.drop(reading, str(error))

    def forget(self, reading: Reading) -> None:
        del self.reading[reading.connection]
        self.selector.unregister(reading.connection)

    def drop(self, reading: Reading, reason: str) -> None:
        """Said in one line (when the caller still reads), and closed."""
        self.forget(reading)
        with contextlib.suppress(OSError):
            reading.connection.send(_failure(reason))
        reading.connection.close()

    def answer(
        self, connection: socket.socket, header: dict[str, Any], raw: bytes
    ) -> None:
        started = time.monotonic()
        try:
            reply = answer_one(header, raw, self.store)
            connection.settimeout(REPLY_TIMEOUT)
            with contextlib.suppress(OSError):
                connection.sendall(reply)
        finally:
            connection.close()
            self.answering += time.monotonic() - started

    def close(self) -> None:
        for reading in list(self.reading.values()):
            self.forget(reading)
            reading.connection.close()
        self.selector.close()


def serve(path: Path, db: str | None) -> None:
    """Answer the calls at ``path`` until idle (``DEVS_HOOK_SERVER_IDLE``)
    or SIGTERM; ``InvalidInput`` naming a bad variable before anything
    is bound."""
    settings = HookEdgeSettings.from_environ(os.environ)
    listening = bind(path)
    if listening is None:
        return
    inode = os.stat(path).st_ino
    store = Store(db, os.environ)
    signal.signal(signal.SIGTERM, _stop)
    server = Server(listening, store)
    try:
        server.run(settings.server_idle)  # idle: the next call starts another
        # Gone from the folder first, so that no new call comes; then the
        # calls that connected meanwhile are answered, not dropped.
        _unlink(path, inode)
        server.drain()
    except (Stop, KeyboardInterrupt):
        return
    finally:
        server.close()
        listening.close()
        _unlink(path, inode)
        store.close()


def _unlink(path: Path, inode: int) -> None:
    """Remove the socket, if it is still this server's."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            os.unlink(path)


def answer_one(header: dict[str, Any], raw: bytes, store: Store) -> bytes:
    """The answer to one whole request, as its caller reads it."""
    environ = header.get("environ")
    agent = header.get("agent")
    cwd = header.get("cwd")
    if not isinstance(environ, dict) or not isinstance(agent, str):
        return _failure("the request names no agent or settings")
    caller = {str(k): str(v) for k, v in environ.items()}
    try:
        text, errors, code = handle(
            agent,
            None,
            raw,
            caller,
            store=store,
            cwd=cwd if isinstance(cwd, str) else None,
        )
    except Exception as error:  # one call's failure, never the server's end
        return _failure(type(error).__name__, "the hook server could not answer")
    return json.dumps({"stdout": text, "stderr": errors, "code": code}).encode()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devs.adapters.hooks.server")
    parser.add_argument("socket", type=Path)
    parser.add_argument("--db", default=None)
    args = parser.parse_args(argv)
    try:
        serve(args.socket, args.db)
    except InvalidInput as error:
        # The calls check these first; said here for whoever starts it by hand.
        sys.stderr.write(f"devs hook server: error: {error}\n")
        sys.exit(2)
    sys.exit(0)


if __name__ == "__main__":
    main()
