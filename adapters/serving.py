"""How ``devs serve`` listens: each worker process its own listening socket.

uvicorn's ``--workers`` shares one socket, whose connections lose
``TCP_NODELAY`` and pile up on one worker; here each worker binds its own
``IPPROTO_TCP`` socket with ``SO_REUSEPORT`` under a small supervisor that
restarts a worker that dies and takes them all with it when it stops or dies.
It also runs PostgreSQL's projector (a thread in a worker fell behind) and the
notifier (nicer: deliveries take the CPU commands leave) as processes apart.
:class:`Guarded` bounds what a client may hold before its token is checked
(docs/http.md#workers, docs/deploy.md, docs/configuration.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import logging.config
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from multiprocessing.context import SpawnProcess
from types import FrameType
from typing import Any
from urllib.parse import quote, unquote_plus

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from devs.adapters.config import (
    BODY_TIMEOUT_ENV,
    DEFAULT_NICENESS,
    EXTERNAL,
    HEADER_TIMEOUT_ENV,
    MAX_CONNECTIONS_ENV,
    MAX_HEADER_ENV,
    NOTIFIER_ENV,
    POSTGRES_MODULES,
    PROJECTIONS_ENV,
    Backend,
    Projections,
    Settings,
    assemble,
    open_service,
)
from devs.domain.redaction import redact

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
FD_RESERVE = 128
"""Open files a worker keeps for itself beyond its connections: the
database's, the log's, the notifier's sockets."""
LOGGED_SAFE = "/?&=:;,+@!$'()*[]~"
"""What a redacted request target keeps unescaped in the access log."""
BODY_RATE = 16 * 1024
"""Bytes of a request's body that earn it one more second beyond
``DEVS_BODY_TIMEOUT`` (128 kbit/s): a large body sent at least this fast is
never cut off, one trickled slower is (Apache's ``mod_reqtimeout``
``MinRate``)."""
SECURITY_HEADERS = (
    b"x-content-type-options: nosniff\r\n"
    b"x-frame-options: DENY\r\n"
    b"content-security-policy: default-src 'none'; frame-ancestors 'none'; "
    b"base-uri 'none'\r\n"
)
"""What every answer the protocol writes itself carries, as the app's do
(:data:`devs.adapters.http.contract.API_CSP`)."""


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
    user is known, nor the size). Never a header, so never a token; the
    path and query pass through the redaction (:func:`logged_target`)."""

    def __init__(self) -> None:
        super().__init__(datefmt=ACCESS_DATE)

    def format(self, record: logging.LogRecord) -> str:
        fields = record.args
        if not (isinstance(fields, tuple) and len(fields) == 5):
            return super().format(record)  # not a request's: as it is
        client, method, target, http_version, status = fields
        host = str(client).rsplit(":", 1)[0] if client else "-"  # host:port
        when = self.formatTime(record, self.datefmt)
        request = f"{method} {logged_target(str(target))} HTTP/{http_version}"
        request = request.replace("\\", "\\\\").replace('"', '\\"')
        return f'{host} - - [{when}] "{request}" {status} -'


def logged_target(target: str) -> str:
    """A request's path and query as the access log shows them: as sent,
    unless they hold something that looks like a secret, as sent or
    percent-decoded (``?candidate=export%20GITHUB_TOKEN%3Dghp_…``); then
    decoded, redacted (:func:`devs.domain.redaction.redact`) and escaped
    again."""
    decoded = unquote_plus(target)
    cleaned = redact(decoded)
    if cleaned != decoded:
        return quote(cleaned, safe=LOGGED_SAFE)
    return redact(target)


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
            # (adapters/notify/sender.py); its INFO lines (each failed try) stay out.
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


@dataclass(frozen=True)
class Bounds:
    """What one worker's protocol bounds (:class:`Guarded`)."""

    header_bytes: int
    header_timeout: float
    body_timeout: float
    connections: int
    asked: int
    """``DEVS_MAX_CONNECTIONS``; :attr:`connections` is lower when the open
    files a process may have leave no room for so many."""
    open_files: int


def raise_open_files(wanted: int) -> int:
    """Raise this process's limit of open files (its soft ``RLIMIT_NOFILE``)
    to ``wanted``, as far as its hard limit allows: the limit it has then."""
    try:
        import resource
    except ImportError:  # not on this platform
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return wanted if soft == resource.RLIM_INFINITY else int(soft)


@functools.cache
def worker_bounds() -> Bounds:
    """This worker's bounds, from the environment's settings, once: the open
    files it may have raised for ``DEVS_MAX_CONNECTIONS`` connections and
    :data:`FD_RESERVE` more, and the connections lowered to what fits."""
    settings = Settings()
    asked = settings.max_connections
    files = raise_open_files(asked + FD_RESERVE)
    fits = files - FD_RESERVE if files > 2 * FD_RESERVE else files // 2
    return Bounds(
        header_bytes=settings.max_header_bytes,
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
        connections=max(1, min(asked, fits)),
        asked=asked,
        open_files=files,
    )


def raw_refusal(status: int, reason: bytes, kind: str, detail: str) -> bytes:
    """A whole HTTP answer, written by the protocol before any app: the
    API's error shape (``{"error", "detail", "field"}``), and the connection
    closed after it."""
    body = orjson.dumps({"error": kind, "detail": detail, "field": None})
    return b"".join(
        (
            b"HTTP/1.1 %d %s\r\n" % (status, reason),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            SECURITY_HEADERS,
            b"connection: close\r\n\r\n",
            body,
        )
    )


_IDLE: weakref.WeakKeyDictionary[ServerState, dict[Guarded, None]] = (
    weakref.WeakKeyDictionary()
)
"""Per server, its connections that are not in a request (opened and
silent, sending their headers, or kept alive between requests), the one idle
the longest first."""
_WAITING: weakref.WeakKeyDictionary[ServerState, dict[Guarded, None]] = (
    weakref.WeakKeyDictionary()
)
"""Per server, its connections in a request whose body the client still
owes (the app may be waiting for it), the one whose body came last the
longest ago first."""


class Guarded(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounded before any app sees a request
    (:func:`worker_bounds`):

    - the request line and headers: past ``DEVS_MAX_HEADER_BYTES`` a 431 and
      the connection closed (httptools buffers a header whole, without a
      bound, before it hands it on; uvicorn's ``h11_max_incomplete_event_size``
      bounds only h11);
    - their time: ``DEVS_HEADER_TIMEOUT`` seconds from the connection's
      opening, or from a later request's first byte, to the end of the
      headers; then the connection is closed (a 408 if it sent anything);
      uvicorn's own keep-alive timeout closes a connection silent between
      requests;
    - the body's time, on every route: ``DEVS_BODY_TIMEOUT`` seconds from
      the end of the headers, a second more per :data:`BODY_RATE` bytes of
      it received, for the whole body to come; then a 408 (or, the answer
      begun, nothing) and the connection closed, and the app reads that the
      client is gone. The time the app leaves a body unread (the protocol
      then stops reading, and the client cannot send) is not counted; nor
      a pipelined request's before its turn;
    - the connections: past ``DEVS_MAX_CONNECTIONS`` open ones, a new
      connection closes the one idle the longest; none idle, the one in a
      request whose body came last the longest ago (a 503 to it); neither:
      the new one is a 503. A client that holds idle connections, or
      requests whose bodies it never sends, cannot keep out one that asks
      for something."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.bounds = worker_bounds()
        self.idle = _IDLE.setdefault(server_state, {})
        self.waiting = _WAITING.setdefault(server_state, {})
        self.in_head = False
        """A request's head began (its first byte came) and has not ended."""
        self.began_here = False
        self.heads = 0
        self.head_bytes = 0
        self.head_timer: asyncio.TimerHandle | None = None
        self.body_pending = False
        """The latest request's headers ended and its body has not."""
        self.body_since = 0.0
        self.body_bytes = 0
        self.body_timer: asyncio.TimerHandle | None = None

    # the connections

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.bounds.connections:
            oldest = next(iter(self.idle), None)
            slowest = next(iter(self.waiting), None)
            if oldest is not None:
                oldest.drop()
            elif slowest is not None:
                detail = (
                    f"this worker needed room for a new connection "
                    f"({MAX_CONNECTIONS_ENV}={self.bounds.connections:,}): "
                    "this request's body came last the longest ago of all; "
                    "send it again"
                )
                slowest.cut(503, b"Service Unavailable", "too_many_connections", detail)
            else:
                detail = (
                    f"this worker has {len(self.connections) - 1:,} connections "
                    f"open, all in a request ({MAX_CONNECTIONS_ENV}="
                    f"{self.bounds.connections:,}); try again"
                )
                self.refuse(503, b"Service Unavailable", "too_many_connections", detail)
                return
        self.idle[self] = None
        self.arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.idle.pop(self, None)
        self.cancel_head_timer()
        self.cancel_body_timer()
        super().connection_lost(exc)

    def drop(self) -> None:
        """Close this idle connection, to make room for a new one."""
        self.idle.pop(self, None)
        self.cancel_head_timer()
        self.cancel_body_timer()
        if not self.transport.is_closing():
            self.transport.close()

    def cut(self, status: int, reason: bytes, kind: str, detail: str) -> None:
        """End this connection inside a request whose body has not all
        come: ``status`` if nothing was answered yet, then closed; the app,
        reading on, reads that the client is gone (and anything it sends
        then is dropped)."""
        self.idle.pop(self, None)
        self.cancel_head_timer()
        self.cancel_body_timer()
        self.body_pending = False
        if self.transport.is_closing():
            return
        cycle = self.cycle
        answered = cycle is not None and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        if not answered:
            self.transport.write(raw_refusal(status, reason, kind, detail))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to what does not parse as HTTP, with the
        security headers every answer carries."""
        content = msg.encode("ascii")
        lines = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            lines.append(b"%s: %s\r\n" % (name, value))
        lines += (
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(content),
            SECURITY_HEADERS,
            b"connection: close\r\n\r\n",
            content,
        )
        self.transport.write(b"".join(lines))
        self.transport.close()

    def refuse(self, status: int, reason: bytes, kind: str, detail: str) -> None:
        """Answer ``status`` and close: nothing more is read."""
        self.idle.pop(self, None)
        self.cancel_head_timer()
        self.cancel_body_timer()
        if self.transport.is_closing():
            return
        self.transport.write(raw_refusal(status, reason, kind, detail))
        self.transport.close()

    # the head's size

    def data_received(self, data: bytes) -> None:
        self.began_here = False
        fresh = self.heads == 0 and not self.in_head
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self.body_pending and self.body_timer is None and not self.pipeline:
            self.arm_body_timer()
        if not self.in_head:
            return
        # Every byte of this chunk is the head's when the head began before
        # it, or it began this connection; a pipelined request's head that
        # began inside it is counted from the next one.
        if not self.began_here or fresh:
            self.head_bytes += len(data)
        limit = self.bounds.header_bytes
        if self.head_bytes > limit:
            detail = (
                f"the request line and headers passed {limit:,} bytes "
                f"({MAX_HEADER_ENV}); nothing was read or done"
            )
            self.refuse(
                431,
                b"Request Header Fields Too Large",
                "headers_too_large",
                detail,
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head = True
        self.began_here = True
        self.head_bytes = 0
        if self.head_timer is None:
            self.arm_head_timer()

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.heads += 1
        self.idle.pop(self, None)
        self.cancel_head_timer()
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a request (not an upgrade): its body next
            self.body_pending = True
            self.body_bytes = 0

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if not pipelined and not self.in_head:
            self.idle.pop(self, None)
            self.idle[self] = None  # idle since now: the last to make room
        # A pipelined request's turn came: its body's time begins.
        if self.body_pending and self.body_timer is None and not self.pipeline:
            self.arm_body_timer()

    # the body's time

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        if self.body_timer is not None:  # it came now: the last to be cut
            self.waiting.pop(self, None)
            self.waiting[self] = None
        super().on_body(body)

    def on_message_complete(self) -> None:
        self.body_pending = False
        self.cancel_body_timer()
        super().on_message_complete()

    def arm_body_timer(self, wait: float | None = None) -> None:
        """Begin the body's time now (``wait``: look again that late)."""
        self.cancel_body_timer()
        if wait is None:
            self.body_since = self.loop.time()
            wait = self.bounds.body_timeout
        self.body_timer = self.loop.call_later(wait, self.body_timed_out)
        self.waiting.setdefault(self, None)

    def cancel_body_timer(self) -> None:
        self.waiting.pop(self, None)
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def body_timed_out(self) -> None:
        self.body_timer = None
        if self.transport.is_closing() or not self.body_pending:
            self.waiting.pop(self, None)
            return
        if self.flow.read_paused:  # the app has not taken what came: not late
            self.arm_body_timer()
            return
        timeout = self.bounds.body_timeout
        due = self.body_since + timeout + self.body_bytes / BODY_RATE
        left = due - self.loop.time()
        if left > 0:  # it kept coming: its time grew
            self.arm_body_timer(left)
            return
        detail = (
            f"the request body did not all come within {timeout:g} s "
            f"({BODY_TIMEOUT_ENV}) and a second per {BODY_RATE:,} bytes of "
            f"it received ({self.body_bytes:,}); nothing was done"
        )
        self.cut(408, b"Request Timeout", "request_timeout", detail)

    # the head's time

    def arm_head_timer(self) -> None:
        self.cancel_head_timer()
        self.head_timer = self.loop.call_later(
            self.bounds.header_timeout, self.head_timed_out
        )

    def cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if not self.in_head:  # opened and silent: nothing to answer
            self.drop()
            return
        detail = (
            f"the request line and headers took over "
            f"{self.bounds.header_timeout:g} s ({HEADER_TIMEOUT_ENV})"
        )
        self.refuse(408, b"Request Timeout", "request_timeout", detail)


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
        from devs.adapters.http.streams import end_streams

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
    bounds = worker_bounds()
    if bounds.connections < bounds.asked:
        print(
            f"devs serve: worker {os.getpid()}: {MAX_CONNECTIONS_ENV}="
            f"{bounds.asked} lowered to {bounds.connections}: this process may "
            f"open {bounds.open_files} files (ulimit -n)",
            file=sys.stderr,
            flush=True,
        )
    config = uvicorn.Config(
        APP,
        factory=True,
        http=Guarded,
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
    from devs.adapters.notify.registry import channels_of
    from devs.adapters.notify.sender import Background
    from devs.adapters.notify.settings import notify_settings

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
            http=Guarded,
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
