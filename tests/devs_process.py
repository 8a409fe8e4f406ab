"""``devs COMMAND`` as a process of its own, forked from one that has already
imported the CLI, instead of a fresh interpreter per command.

A fresh ``devs`` process spends about 0.35 of its 0.45 CPU-seconds importing
the domain and the CLI; the CLI tests start some 600 of them. :func:`run`
takes ``subprocess.run``'s arguments and returns what it returns, but the
process it runs is forked from a *zygote*: a process per test worker that
imported :mod:`devs.adapters.cli` as ``devs`` imports it
(:func:`devs.adapters.launch.loading`) and then only waits. Each command is
still a process of its own: its own pid, its standard streams on files of
its own, the environment, working directory and ``argv`` the test gave it,
its exit status (a signal included), what ``atexit`` does at its end, and a
kill at the timeout. What it shares with the zygote is only what importing
left in memory, which for ``devs`` is what every fresh process also has.

Not forked, so still a fresh interpreter each: ``devs hook`` (its own entry
path imports the standard library only), what needs an environment variable
read at import (rich's consoles read ``COLUMNS``, ``NO_COLOR`` and
``FORCE_COLOR`` when the CLI module makes them: :data:`READ_AT_IMPORT`), and
every test that starts ``devs`` with ``subprocess`` itself (servers, hooks,
the import checks). ``DEVS_TEST_FRESH_PROCESSES=1`` runs every call of
:func:`run` as a fresh ``devs`` process too, as before this module.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

DEVS = str(Path(sys.executable).with_name("devs"))
FRESH_ENV = "DEVS_TEST_FRESH_PROCESSES"
READ_AT_IMPORT = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM")
"""Variables a ``devs`` process reads while it imports (rich's ``Console``):
a call that sets or clears one runs as a fresh process."""

_LENGTH = struct.Struct("!I")
_REPORT = struct.Struct("!cq")


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, capture_output=True, text=True, ...)`` for a
    command line whose first item is the ``devs`` executable."""
    argv = [str(arg) for arg in args]
    environment = dict(os.environ if env is None else env)
    done = None
    if (
        Path(argv[0]).name == "devs"
        and "hook" not in argv[1:4]
        and not os.environ.get(FRESH_ENV)
        and sys.platform == "linux"
    ):
        zygote = _zygote()
        if all(
            environment.get(name) == zygote.env.get(name) for name in READ_AT_IMPORT
        ):
            folder = os.fspath(cwd or os.getcwd())
            done = zygote.run(argv, environment, folder, input, timeout)
    if done is None:
        done = fresh(argv, env=environment, cwd=cwd, input=input, timeout=timeout)
    if check:
        done.check_returncode()
    return done


def fresh(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """The same command as a fresh interpreter: ``subprocess.run``."""
    return subprocess.run(
        list(argv),
        env=env,
        cwd=cwd,
        input=input,
        timeout=timeout,
        capture_output=True,
        text=True,
        check=False,
    )


class Zygote:
    """The forking process and its socket, one per test worker."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="devs-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        self.process = subprocess.Popen(
            # -P: the tests' folder is not put on the zygote's path.
            [sys.executable, "-P", __file__, self.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd=self.folder,
            env=self.env,
        )
        ready = os.path.join(self.folder, "ready")
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the devs zygote did not start")
            time.sleep(0.01)
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for name in ("socket", "ready"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.folder, name))
        os.rmdir(self.folder)

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        input: str | None,
        timeout: float | None,
    ) -> subprocess.CompletedProcess[str]:
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        with (
            tempfile.TemporaryFile() as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection,
        ):
            if input is not None:
                stdin.write(input.encode())
                stdin.seek(0)
            connection.connect(self.path)
            socket.send_fds(
                connection,
                [_LENGTH.pack(len(request))],
                [stdin.fileno(), stdout.fileno(), stderr.fileno()],
            )
            connection.sendall(request)
            kind, pid = _REPORT.unpack(_receive(connection, _REPORT.size))
            assert kind == b"P", kind
            connection.settimeout(timeout)
            try:
                kind, status = _REPORT.unpack(_receive(connection, _REPORT.size))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                connection.settimeout(None)
                _receive(connection, _REPORT.size)
                raise subprocess.TimeoutExpired(
                    argv, timeout or 0, _read(stdout), _read(stderr)
                ) from None
            assert kind == b"S", kind
            return subprocess.CompletedProcess(
                argv, os.waitstatus_to_exitcode(status), _read(stdout), _read(stderr)
            )


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the devs zygote closed the connection")
        data += chunk
    return data


def _read(file: IO[bytes]) -> str:
    """What subprocess's ``text=True`` makes of the bytes."""
    file.seek(0)
    data = file.read()
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


_lock = threading.Lock()
_current: Zygote | None = None


def _zygote() -> Zygote:
    global _current
    with _lock:
        if _current is None or not _current.alive():
            _current = Zygote()
        return _current


def serve(path: str) -> None:
    """The zygote: import the CLI as ``devs`` does, then fork a command per
    connection. A monitor process per command waits for it and reports its
    status, so commands run side by side and the zygote stays single-threaded
    (a fork from a process with threads is not safe)."""
    from devs.adapters import launch

    with launch.loading():
        import devs.adapters.cli  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors reap themselves
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    Path(path).with_name("ready").touch()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getppid()
    listener.settimeout(1)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test worker is gone
                return
            continue
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _monitor(connection, launch.main)
            finally:
                os._exit(0)
        connection.close()


def _monitor(connection: socket.socket, main: Callable[[], None]) -> None:
    header, fds, _, _ = socket.recv_fds(connection, _LENGTH.size, 3)
    (length,) = _LENGTH.unpack(
        header + _receive(connection, _LENGTH.size - len(header))
    )
    request = json.loads(_receive(connection, length))
    pid = os.fork()
    if pid == 0:
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        os._exit(_command(main))
    for fd in fds:
        os.close(fd)
    connection.sendall(_REPORT.pack(b"P", pid))
    _, status = os.waitpid(pid, 0)
    connection.sendall(_REPORT.pack(b"S", status))


def _command(main: Callable[[], None]) -> int:
    """Run ``devs`` to its end as the interpreter would: its exit code, or
    a traceback and 1; then its threads joined and ``atexit`` run."""
    code = 0
    try:
        main()
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code & 0xFF


if __name__ == "__main__":
    serve(sys.argv[1])
