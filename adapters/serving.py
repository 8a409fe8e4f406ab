"""How ``devs serve`` listens: each worker process its own listening socket.

uvicorn's ``--workers`` shares one socket among its worker processes. Two
things follow on Linux, both measured by bench/http_bench.py: that socket is
created with protocol 0, so asyncio does not set ``TCP_NODELAY`` on the
connections it accepts and every request after the first on a keep-alive
connection waits about 40 ms for Nagle's algorithm (uvicorn issue #3149); and
a burst of new connections is accepted by whichever worker wakes first, so a
few long-lived clients may all land on one worker while the other idles.

Here every worker binds its own TCP socket (protocol ``IPPROTO_TCP``: asyncio
sets ``TCP_NODELAY``) to the same address with ``SO_REUSEPORT``, and the
kernel spreads new connections over the workers. A small supervisor starts
the workers, starts again one that dies, and stops them all on SIGTERM or
Ctrl-C.

On PostgreSQL the supervisor also runs the read models' projection runner,
in a process of its own (what ``devs project`` runs), and the workers run
none (``DEVS_PROJECTIONS=external``): a runner thread inside a worker shares
that worker's one Python thread at a time with the commands, and under load
it fell seconds behind the log (bench/http_bench.py). With
``DEVS_PROJECTIONS=external`` set for ``devs serve`` itself, it runs none
either: ``devs project`` workers run elsewhere.

Beside a projector, the workers run ``DEVS_WORKER_NICENESS`` (default 5)
nicer than it. On a machine whose cores the workers keep busy, the one
process that folds every worker's events gets the CPU first, so the read
models stay within about 100 ms of the log instead of seconds behind it, for
about an eighth fewer decisions a second (docs/performance.md).

Each worker and the projector dies with the supervisor, ``kill -9`` of it
included: the kernel sends it SIGTERM when its parent dies (Linux's
``PR_SET_PDEATHSIG``), and a thread watching the parent does the same where
that is not available; either way, a process still running
:data:`STOP_GRACE` seconds later exits. Killing the PID a process manager
knows stops the service.

With an endpoint to notify (webhooks, Slack, e-mail), the supervisor also
runs a notifier process (:func:`run_notifier`, even beside one worker): the
outbox's sender and the deadline sweeper, at nice :data:`NOTIFIER_NICENESS`,
so that deliveries take the CPU the commands leave; the workers then run
neither. Without one, each worker sweeps the deadlines in a thread.

At start each worker prints one line to stderr (its PID, its address, the
store, the version), the projector too; with ``DEVS_ACCESS_LOG`` on, each
request is logged to stdout, in the Common Log Format.
"""

from __future__ import annotations

import ctypes
import logging
import logging.config
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from importlib import metadata
from multiprocessing.context import SpawnProcess
from types import FrameType
from typing import Any

import uvicorn

from devs.adapters.config import (
    DEFAULT_NICENESS,
    EXTERNAL,
    NOTIFIER_ENV,
    POSTGRES_MODULES,
    PROJECTIONS_ENV,
    Backend,
    Projections,
    Settings,
    assemble,
    open_service,
)

APP = "devs.adapters.http:app_from_env"
PACKAGE = "devs-recovery"
RESTART_PAUSE = 1.0
"""A worker that died sooner after its start is started again this late."""
STOP_GRACE = 30.0
"""How long a worker or the projector may take to stop (its requests to
finish) once asked to, by the supervisor or by its death: then it is killed
(by the supervisor), or exits (orphaned)."""
PARENT_POLL = 0.5
"""How often, in seconds, a worker or the projector looks whether its
supervisor is still its parent."""
NOTIFIER_NICENESS = 19
"""How much nicer than the supervisor the notifier runs: the lowest
priority there is. Commands come first; deliveries take the CPU left (on a
busy machine they arrive later, and no decision is slower for them)."""
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal the calling process gets when its parent dies."""
ACCESS_DATE = "%d/%b/%Y:%H:%M:%S %z"
"""The Common Log Format's time, ``10/Oct/2000:13:55:36 -0700``."""


def parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send this process ``signum`` when its parent dies
    (Linux's ``prctl(PR_SET_PDEATHSIG)``): whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    unused = ctypes.c_ulong(0)
    done = prctl(
        ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signum), unused, unused, unused
    )
    return bool(done == 0)


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Make this process get ``signum`` (SIGTERM: uvicorn stops listening and
    finishes its requests) when ``parent``, the process that started it,
    dies, and exit :data:`STOP_GRACE` seconds later if it is still running.

    The parent-death signal where the kernel has it, a thread watching the
    parent otherwise. A parent that died before this was asked sends no
    signal: this process is then no longer its child, and signals itself."""
    signalled = parent_death_signal(signum)
    watcher = threading.Thread(
        target=_watch_parent,
        args=(parent, signum, signalled),
        name="devs-parent-watcher",
        daemon=True,
    )
    watcher.start()
    if os.getppid() != parent:  # gone already: no signal will come
        os.kill(os.getpid(), signum)


def _watch_parent(parent: int, signum: int, signalled: bool) -> None:
    """Until ``parent`` is no longer this process's parent; then ``signum``
    to this process (unless the kernel sends it), and after
    :data:`STOP_GRACE` an exit that waits for nothing."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    if not signalled:
        os.kill(os.getpid(), signum)
    time.sleep(STOP_GRACE)
    os._exit(1)


def store_of(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """The store ``settings`` open, in words for a log (never a password,
    nor the user): the SQLite file, or PostgreSQL's database, host and port,
    as the assembly chooses them (``DEVS_DATABASE_URL``, or eventsourcing's
    ``POSTGRES_*`` settings from ``environ``, default ``os.environ``)."""
    given = {**(os.environ if environ is None else environ), **settings.environ()}
    env = {**given, **assemble(given)}
    if env.get("PERSISTENCE_MODULE") in POSTGRES_MODULES:
        host, port = env.get("POSTGRES_HOST", "?"), env.get("POSTGRES_PORT", "5432")
        return f"PostgreSQL {env.get('POSTGRES_DBNAME', '?')} on {host}:{port}"
    db = str(env.get("SQLITE_DBNAME") or settings.db)
    if settings.backend is Backend.MEMORY or db.startswith("file:"):
        return f"SQLite {settings.db}"
    return f"SQLite {os.path.abspath(db)}"


def version() -> str:
    """This package and its version, ``devs-recovery 0.1.0``."""
    try:
        return f"{PACKAGE} {metadata.version(PACKAGE)}"
    except metadata.PackageNotFoundError:
        return f"{PACKAGE} (version unknown)"


class CommonLogFormatter(logging.Formatter):
    """uvicorn's access records in the Common Log Format, ``host ident
    authuser [time] "request line" status size``: ``127.0.0.1 - -
    [10/Oct/2000:13:55:36 +0000] "GET /tasks?limit=10 HTTP/1.1" 200 -`` (no
    user is known, nor the size). Never a header, so never a token."""

    def __init__(self) -> None:
        super().__init__(datefmt=ACCESS_DATE)

    def format(self, record: logging.LogRecord) -> str:
        fields = record.args
        if not (isinstance(fields, tuple) and len(fields) == 5):
            return super().format(record)  # not a request's: as it is
        client, method, target, http_version, status = fields
        host = str(client).rsplit(":", 1)[0] if client else "-"  # host:port
        when = self.formatTime(record, self.datefmt)
        request = f"{method} {target} HTTP/{http_version}"
        request = request.replace("\\", "\\\\").replace('"', '\\"')
        return f'{host} - - [{when}] "{request}" {status} -'


def log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging: warnings and errors to stderr, and with
    ``access_log`` each request to stdout (:class:`CommonLogFormatter`)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {
                "()": "uvicorn.logging.DefaultFormatter",
                "fmt": "%(levelprefix)s %(message)s",
                "use_colors": None,
            },
            "access": {"()": CommonLogFormatter},
        },
        "handlers": {
            "default": {
                "formatter": "default",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
            "access": {
                "formatter": "access",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
            },
        },
        "loggers": {
            "uvicorn": {
                "handlers": ["default"],
                "level": "WARNING",
                "propagate": False,
            },
            "uvicorn.error": {"level": "WARNING"},
            # The outbox's dead letters, disabled endpoints and store outages
            # (adapters/notifier.py); its INFO lines (each failed try) stay out.
            "devs.outbox": {
                "handlers": ["default"],
                "level": "WARNING",
                "propagate": False,
            },
            "uvicorn.access": {
                "handlers": ["access"],
                "level": "INFO" if access_log else "WARNING",
                "propagate": False,
            },
        },
    }


class AnnouncedServer(uvicorn.Server):
    """uvicorn's server, printing ``line`` to stderr once it listens, and
    ending every notification stream at once when told to stop: uvicorn
    waits for open responses to finish, and a stream never does."""

    def __init__(self, config: uvicorn.Config, line: str) -> None:
        super().__init__(config)
        self.line = line

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            print(self.line, file=sys.stderr, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        from devs.adapters.http import end_streams

        end_streams()
        super().handle_exit(sig, frame)


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (``IPPROTO_TCP``, so its
    connections get ``TCP_NODELAY``), shared by port with other processes
    when ``reuse_port``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def run_worker(
    host: str,
    port: int,
    reuse_port: bool,
    niceness: int = 0,
    parent: int | None = None,
) -> None:
    """One worker: its own socket, uvicorn serving the app from the env,
    ``niceness`` nicer than the process that started it, and stopping when
    ``parent`` (that process, when given) dies."""
    if parent is not None:
        die_with_parent(parent)
    if niceness:
        os.nice(niceness)
    settings = Settings()
    sock = listening_socket(host, port, reuse_port=reuse_port)
    bound, actual = sock.getsockname()[:2]
    shown = f"[{bound}]" if ":" in bound else bound
    line = (
        f"devs serve: worker {os.getpid()} listening on http://{shown}:{actual} "
        f"({store_of(settings)}, {version()})"
    )
    config = uvicorn.Config(
        APP,
        factory=True,
        log_level=None,
        log_config=log_config(settings.access_log),
        access_log=settings.access_log,
    )
    AnnouncedServer(config, line).run(sockets=[sock])


def run_projector(parent: int | None = None) -> None:
    """The read models' projection runner, until SIGTERM (``devs project``),
    or until ``parent`` (when given) dies."""
    if parent is not None:
        die_with_parent(parent)
    from devs.projections.postgres import PostgresReadModels

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops it
    settings = Settings().model_copy(update={"projections": Projections.RUNNER})
    with open_service(settings) as service:
        models = service.read_models
        assert isinstance(models, PostgresReadModels)
        print(
            f"devs serve: projector {os.getpid()} keeping the read models of "
            f"{store_of(settings)} ({version()})",
            file=sys.stderr,
            flush=True,
        )
        models.follow(stop)


def run_notifier(parent: int | None = None, niceness: int = 0) -> None:
    """The outbox's sender and the deadline sweeper, until SIGTERM, or until
    ``parent`` (when given) dies; ``niceness`` nicer than its parent."""
    if parent is not None:
        die_with_parent(parent)
    if niceness:
        os.nice(niceness)
    from devs.adapters.notifier import Background, channels_of, notify_settings

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops it
    logging.config.dictConfig(log_config(access_log=False))
    settings = Settings()
    notify = notify_settings()
    with open_service(settings) as service:
        background = Background(service, notify, in_worker=False).start()
        print(
            f"devs serve: notifier {os.getpid()} sending to "
            f"{len(channels_of(notify))} endpoint(s) and sweeping deadlines "
            f"({store_of(settings)}, {version()})",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
        background.stop()


def serve(
    host: str,
    port: int,
    workers: int,
    *,
    projector: bool = False,
    notifier: bool = False,
    niceness: int = DEFAULT_NICENESS,
) -> None:
    """Serve on ``host``:``port`` with ``workers`` processes (1, no
    ``projector`` and no ``notifier``: this one), with ``projector`` a
    process that keeps the PostgreSQL read models (the workers ``niceness``
    nicer than it), and with ``notifier`` one that sends the outbox's
    messages and sweeps the deadlines (:data:`NOTIFIER_NICENESS` nicer
    than the supervisor: the commands come first)."""
    if projector:
        os.environ[PROJECTIONS_ENV] = "external"  # the workers' (spawned: they inherit)
    if workers == 1 and not projector and not notifier:
        run_worker(host, port, reuse_port=False)
        return
    if not hasattr(socket, "SO_REUSEPORT"):  # not on this platform: uvicorn's own
        access_log = Settings().access_log
        uvicorn.run(
            APP,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=None,
            log_config=log_config(access_log),
            access_log=access_log,
        )
        return
    if notifier:  # the supervisor's notifier sends: its workers do not
        os.environ[NOTIFIER_ENV] = EXTERNAL
    # First a plain bind: SO_REUSEPORT would let this server join another
    # one's group on a taken port (the same user's) instead of failing.
    probe = listening_socket(host, port, reuse_port=False)
    port = probe.getsockname()[1]
    probe.close()
    # Bound, never listening: holds the port (chosen here when it is 0) for
    # the workers, and gets no connections itself.
    holder = listening_socket(host, port, reuse_port=True)
    try:
        port = holder.getsockname()[1]
        Supervisor(
            host,
            port,
            workers,
            projector=projector,
            notifier=notifier,
            niceness=niceness if projector else 0,
            notifier_niceness=NOTIFIER_NICENESS,
        ).run()
    finally:
        holder.close()


class Supervisor:
    """Starts the workers, starts again one that dies, stops them all on
    SIGTERM, SIGINT or SIGHUP; they die with it (:func:`die_with_parent`)."""

    def __init__(
        self,
        host: str,
        port: int,
        workers: int,
        *,
        projector: bool = False,
        notifier: bool = False,
        niceness: int = 0,
        notifier_niceness: int = NOTIFIER_NICENESS,
    ) -> None:
        self.host, self.port, self.count = host, port, workers
        self.projector, self.niceness = projector, niceness
        self.notifier, self.notifier_niceness = notifier, notifier_niceness
        self.extra = (["projector"] if projector else []) + (
            ["notifier"] if notifier else []
        )
        """The processes beside the workers, at indices ``workers`` and on."""
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[SpawnProcess] = []
        self.started: dict[int, float] = {}
        self.stopping = False

    def start_one(self, index: int) -> SpawnProcess:
        """Worker ``index``; past the workers, the projector and the
        notifier (those there are, in that order)."""
        me = os.getpid()
        kind = self.extra[index - self.count] if index >= self.count else None
        if kind == "projector":
            worker = self.context.Process(
                target=run_projector, args=(me,), name="projector"
            )
        elif kind == "notifier":
            worker = self.context.Process(
                target=run_notifier,
                args=(me, self.notifier_niceness),
                name="notifier",
            )
        else:
            worker = self.context.Process(
                target=run_worker, args=(self.host, self.port, True, self.niceness, me)
            )
        worker.start()
        self.started[id(worker)] = time.monotonic()
        return worker

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.stop)
        total = self.count + len(self.extra)
        self.workers = [self.start_one(index) for index in range(total)]
        try:
            while not self.stopping:
                time.sleep(0.2)
                for index, worker in enumerate(self.workers):
                    if not worker.is_alive() and not self.stopping:
                        what = worker.name if index >= self.count else "worker"
                        print(
                            f"devs serve: {what} {worker.pid} exited with "
                            f"{worker.exitcode}; starting another",
                            file=sys.stderr,
                        )
                        lived = time.monotonic() - self.started.pop(id(worker))
                        if lived < RESTART_PAUSE:  # dying at start: not in a loop
                            time.sleep(RESTART_PAUSE - lived)
                        self.workers[index] = self.start_one(index)
        finally:
            for worker in self.workers:
                if worker.is_alive():
                    worker.terminate()  # SIGTERM: uvicorn finishes its requests
            for worker in self.workers:
                worker.join(timeout=STOP_GRACE)
                if worker.is_alive():
                    worker.kill()
                    worker.join()
