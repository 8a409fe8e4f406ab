"""The hook server: answers the installed hooks' calls for one store, holding
the service open, so that a call costs a process start of the standard
library and about 10 ms of deciding (:mod:`devs.adapters.hook_client`).

    python -m devs.adapters.hook_server SOCKET [--db DB]

Started by the first hook call that finds none; ends after
``DEVS_HOOK_SERVER_IDLE`` seconds (default 600) without a call, or on
SIGTERM, removing its socket. One call at a time (SQLite takes one writer at a
time anyway), each as ``devs hook`` answers it in process
(:func:`devs.adapters.hook_runner.handle`), with the caller's settings
(``DEVS_*``) and folder. A second server for the same socket sees the first
answer and leaves.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from devs.adapters.hook_client import DEFAULT_IDLE, EVENT_MAX, IDLE_ENV, MAX_IDLE
from devs.adapters.hook_runner import Store, handle

HEADER_MAX = 1024 * 1024


def idle_seconds() -> float:
    try:
        value = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE)
    except ValueError:
        return DEFAULT_IDLE
    return value if 0 < value <= MAX_IDLE else DEFAULT_IDLE


def _exactly(connection: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = connection.recv(min(size, 1 << 20))
        if not chunk:
            msg = "the request ended early"
            raise ValueError(msg)
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_request(connection: socket.socket) -> tuple[dict[str, Any], bytes]:
    (length,) = struct.unpack(">I", _exactly(connection, 4))
    if length > HEADER_MAX:
        msg = "the request's header is too large"
        raise ValueError(msg)
    header = json.loads(_exactly(connection, length))
    (size,) = struct.unpack(">Q", _exactly(connection, 8))
    if size > EVENT_MAX + 1:
        msg = "the hook event is too large"
        raise ValueError(msg)
    if not isinstance(header, dict):
        msg = "the request's header is not an object"
        raise ValueError(msg)
    return header, _exactly(connection, size)


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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listening.bind(str(path))
        finally:
            os.umask(old)
        listening.listen(64)
        return listening
    finally:
        os.close(lock)


def serve(path: Path, db: str | None) -> None:
    listening = bind(path)
    if listening is None:
        return
    inode = os.stat(path).st_ino
    store = Store(db, os.environ)
    signal.signal(signal.SIGTERM, _stop)
    listening.settimeout(idle_seconds())
    try:
        while True:
            try:
                connection, _ = listening.accept()
            except TimeoutError:
                break  # idle: the next call starts another
            with connection:
                answer_one(connection, store)
        # Gone from the folder first, so that no new call comes; then the
        # calls that connected meanwhile are answered, not dropped.
        _unlink(path, inode)
        listening.setblocking(False)
        while True:
            try:
                connection, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                break
            connection.setblocking(True)
            with connection:
                answer_one(connection, store)
    except (Stop, KeyboardInterrupt):
        return
    finally:
        listening.close()
        _unlink(path, inode)
        store.close()


def _unlink(path: Path, inode: int) -> None:
    """Remove the socket, if it is still this server's."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            os.unlink(path)


def answer_one(connection: socket.socket, store: Store) -> None:
    connection.settimeout(30.0)
    try:
        header, raw = read_request(connection)
        environ = header.get("environ")
        agent = header.get("agent")
        cwd = header.get("cwd")
        if not isinstance(environ, dict) or not isinstance(agent, str):
            msg = "the request names no agent or settings"
            raise ValueError(msg)
        caller = {str(k): str(v) for k, v in environ.items()}
        text, errors, code = handle(
            agent,
            None,
            raw,
            caller,
            store=store,
            cwd=cwd if isinstance(cwd, str) else None,
        )
        reply = {"stdout": text, "stderr": errors, "code": code}
    except (OSError, ValueError) as error:
        reply = {
            "stdout": None,
            "stderr": f"devs hook: error: a bad request to the hook server ({error})\n",
            "code": 1,
        }
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(reply).encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devs.adapters.hook_server")
    parser.add_argument("socket", type=Path)
    parser.add_argument("--db", default=None)
    args = parser.parse_args(argv)
    serve(args.socket, args.db)
    sys.exit(0)


if __name__ == "__main__":
    main()
