"""``devs [--db DB] hook AGENT`` without the imports: the installed hooks'
fast path.

A coding agent waits for every hook call, and a ``devs`` process spends most of
its time importing the service, not deciding. So the installed command, which
imports nothing but the standard library, hands the event to a hook server
(:mod:`devs.adapters.hooks.server`) holding the service open; a call that finds
none, or cannot reach it, is answered in process. Figures:
docs/performance.md; behaviour and variables: docs/agents.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from devs.adapters.hooks import variables

EVENT_MAX = 64 * 1024 * 1024
"""The largest hook event read from stdin (a tool's whole output is in it);
the runner and the server read this one."""
SHARED_ENV = ("HOME", "XDG_STATE_HOME", "PATH")
"""Variables besides ``DEVS_*`` that change what a hook call does (where the
state files are, which ``git`` runs)."""


def server_wanted(environ: Mapping[str, str]) -> bool:
    """Whether hook calls go to a hook server (``DEVS_HOOK_SERVER``); a
    :class:`~devs.adapters.hooks.variables.BadVariable` when it is neither
    on nor off."""
    return variables.server_on(environ.get(variables.SERVER_ENV))


def taken_here(environ: Mapping[str, str]) -> bool:
    """Whether ``devs hook`` takes this module's path (:func:`run`): unless
    ``DEVS_HOOK_SERVER`` is off. A bad value comes here too, where
    :func:`run` says it as the call's failure."""
    try:
        return server_wanted(environ)
    except variables.BadVariable:
        return True


def call_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What of the caller's environment a hook call reads."""
    return {
        name: value
        for name, value in environ.items()
        if name.startswith("DEVS_") or name in SHARED_ENV
    }


def socket_folder(environ: Mapping[str, str]) -> Path | None:
    """A folder only this user can enter (created 0700), for the servers'
    sockets: ``$XDG_RUNTIME_DIR/devs``, else ``/tmp/devs-UID``; ``None`` when
    it is not safe (another owner, other permissions, a link)."""
    runtime = (environ.get("XDG_RUNTIME_DIR") or "").strip()
    base = Path(runtime) / "devs" if runtime and os.path.isdir(runtime) else None
    folder = base or Path("/tmp") / f"devs-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = os.lstat(folder)
    except OSError:
        return None
    private = (
        stat.S_ISDIR(found.st_mode)
        and found.st_uid == os.getuid()
        and not found.st_mode & 0o077
    )
    return folder if private else None


def server_key(db: str | None, environ: Mapping[str, str]) -> str:
    """What one server answers for: the store (``--db``), the settings
    (``DEVS_*`` but the task, which each call names), the interpreter and the
    code (a changed ``devs`` gets a new server)."""
    here = Path(__file__).parent
    stamps = []
    # Every module of this package (a new dialect too): a changed one is a
    # new server.
    with os.scandir(here) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.endswith(".py"):
                try:
                    stamps.append((entry.name, entry.stat().st_mtime_ns))
                except OSError:
                    stamps.append((entry.name, 0))
    settings = {k: v for k, v in call_environ(environ).items() if k != "DEVS_TASK_ID"}
    described = json.dumps(
        {
            # the SQLite file, absolute: a relative one is another file in
            # another folder
            "db": os.path.abspath(
                db or environ.get("DEVS_DB", "").strip() or "devs_state.sqlite"
            ),
            "env": settings,
            "python": sys.executable,
            "code": stamps,
        },
        sort_keys=True,
    )
    return hashlib.sha256(described.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def _receive(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def frame(header: Mapping[str, object], raw: bytes) -> bytes:
    """A request: the header's length, the header (JSON), the event's length,
    the event as the agent wrote it."""
    encoded = json.dumps(header).encode("utf-8", "surrogatepass")
    return struct.pack(">I", len(encoded)) + encoded + struct.pack(">Q", len(raw)) + raw


class Unreachable(Exception):
    """No server took the event (it may be answered elsewhere)."""


def ask(path: Path, request: bytes, timeout: float) -> dict[str, object]:
    """Send a request to the server at ``path`` and read its answer."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(2.0)
        try:
            connection.connect(str(path))
        except OSError as error:
            raise Unreachable(str(error)) from None
        connection.settimeout(timeout)
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        answer = json.loads(_receive(connection) or b"null")
    finally:
        connection.close()
    if not isinstance(answer, dict):
        msg = "the hook server closed the connection without an answer"
        raise OSError(msg)
    return answer


def start_server(path: Path, db: str | None, environ: Mapping[str, str]) -> None:
    """Start the server for ``path``, detached (it outlives this call).
    ``subprocess`` is imported here: a call its server answers never
    needs it (a few milliseconds of each such call)."""
    import subprocess

    argv = [sys.executable, "-m", "devs.adapters.hooks.server", str(path)]
    if db:
        argv += ["--db", db]
    try:
        subprocess.Popen(
            argv,
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return  # this call is answered in process all the same


def refused(
    agent: str, db: str | None, raw: bytes, error: str
) -> tuple[str | None, str, int]:
    """A call that cannot be answered: ``error`` in one line, exit 1; but a
    tool call is still refused when the task was last seen stopped."""
    from devs.adapters.hooks.runner import refusal

    return refusal(agent, db, raw, os.environ, error)


def in_process(
    agent: str,
    db: str | None,
    raw: bytes,
    loading: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> tuple[str | None, str, int]:
    with loading():
        from devs.adapters.hooks.runner import handle

    return handle(agent, db, raw, os.environ)


def run(
    agent: str,
    db: str | None,
    loading: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> int:
    """Answer one hook event from stdin; the exit code. ``loading`` wraps
    the imports of a call answered in process."""
    raw = sys.stdin.buffer.read(EVENT_MAX + 1)
    answered = None
    start: Path | None = None
    folder = None
    try:
        chosen = variables.read(os.environ)
    except variables.BadVariable as error:
        answered = refused(agent, db, raw, str(error))
    else:
        folder = socket_folder(os.environ) if chosen.server else None
    if folder is not None:
        path = folder / f"hook-{server_key(db, os.environ)}.sock"
        header = {
            "agent": agent,
            "environ": call_environ(os.environ),
            "cwd": os.getcwd(),
        }
        try:
            reply = ask(path, frame(header, raw), chosen.timeout + 2.0)
        except Unreachable:
            start = path
        except (OSError, ValueError) as error:
            # It took the event: never answered twice. But a tool is still
            # refused when the task was last seen stopped.
            answered = refused(
                agent, db, raw, f"the hook server did not answer ({error})"
            )
        else:
            text, errors, code = (
                reply.get("stdout"),
                reply.get("stderr"),
                reply.get("code"),
            )
            answered = (
                text if isinstance(text, str) else None,
                errors if isinstance(errors, str) else "",
                code if isinstance(code, int) else 1,
            )
    if answered is None:
        answered = in_process(agent, db, raw, loading)
    text, errors, code = answered
    if errors:
        sys.stderr.write(errors)
    if text is not None:
        sys.stdout.write(text + "\n")
    if start is not None:
        # Once this call is answered: the server's imports do not compete
        # with this one's for the CPU.
        sys.stdout.flush()
        start_server(start, db, os.environ)
    return code
