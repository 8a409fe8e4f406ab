"""The HTTP service: every command and query of ``RecoveryService`` as JSON.

FastAPI over the same service the Python API and the CLI use; the request
bodies and the answers are pydantic models, so ``/openapi.json`` documents
them. Errors are one JSON shape, :class:`ErrorBody`: 404 for an unknown id,
409 for an illegal transition or a lost conflict, 422 for a bad value, 400 for
malformed JSON, 401 without the API token, 503 when the store cannot be used,
504 when a read-your-writes wait runs out. Bad input never writes.

Every command takes an ``Idempotency-Key`` header: sent again with the same
key and body (after a timeout, to another worker, after a restart), it records
nothing new and answers as the first time; the same key with another body is
a 422 (``RecoveryService.exactly_once``).

Every command answer carries ``X-Devs-Position``: a log position at or past
the command's own events. A query given ``?after=N`` (or ``X-Devs-After: N``)
first waits, bounded by ``DEVS_READ_WAIT`` seconds, until the read models have
folded position ``N``.

``devs serve`` runs :func:`app_from_env` under uvicorn; docs/http.md says it
all with examples.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import hashlib
import hmac
import ipaddress
import logging
import math
import os
import re
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib import metadata
from queue import SimpleQueue
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devs.adapters.config import (
    ALLOWED_HOSTS_ENV,
    ANY_HOST,
    DEFAULT_MAX_BODY_BYTES,
    EXTERNAL,
    MAX_BODY_ENV,
    NOTIFIER_ENV,
    Backend,
    Settings,
    backend_of,
    check_secret,
    check_token,
    host_and_port,
    open_service,
)
from devs.adapters.hooks.runner import store_identity
from devs.adapters.notifier import Background, NotifySettings, notify_settings
from devs.adapters.prometheus import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from devs.adapters.prometheus import exposition
from devs.domain import (
    ActionResult,
    AlreadyExists,
    AttemptDecision,
    DevsError,
    EntropyDecision,
    FailureReport,
    Forbidden,
    GateDecision,
    GateStatus,
    HandoffEntry,
    HistoryEntry,
    InvalidInput,
    Lesson,
    Metrics,
    NotCaughtUp,
    Notification,
    PendingSession,
    RecoveryService,
    RunState,
    StaleAnswer,
    StoreError,
    TaskIndexEntry,
    TaskSummary,
    UnknownRun,
    UnknownTask,
    UnreadableEvent,
    Verification,
)
from devs.domain.audit import ReplayCheckReport, TaskAudit, WhatIfReport
from devs.domain.commands import NO_WAIT, WouldWait
from devs.domain.names import ResolutionValue, StopScopeValue
from devs.domain.operators import TOKEN_PREFIX, TOKEN_SHAPE
from devs.domain.outbox import OutboxMessage
from devs.domain.ports import Redelivered, WebhooksReport
from devs.domain.redaction import redact
from devs.domain.values import Limit, Position, TaskId, parse_time, validated

VERSION = metadata.version("devs-recovery")
STREAM_POLL = 0.25  # seconds between looks at the log for new notifications
STREAM_HEARTBEAT = 15.0  # seconds between comment lines on a quiet stream
STREAM_RETRY = 1.0  # seconds between looks at a store that is unavailable
READY_WAIT = 1.0
"""The longest ``/readyz`` waits for its answer: a load balancer's probe gets
one within about a second, whatever the store does."""
STORE_RETRY_AFTER = 1.0
"""``Retry-After`` of a 503 whose error does not say when to ask again (a
SQLite database locked past its timeout)."""
logger = logging.getLogger(__name__)
POSITION_HEADER = "X-Devs-Position"
AFTER_HEADER = "X-Devs-After"
KEY_HEADER = "Idempotency-Key"
T = TypeVar("T")

AfterQuery = Annotated[
    int | None, Query(description="wait until the read models folded this position")
]
AfterHeaderValue = Annotated[
    str | None, Header(alias=AFTER_HEADER, description="as ?after=")
]
RunQuery = Annotated[str | None, Query(description="only the tasks of this run")]
AfterVersionQuery = Annotated[int, Query(description="start after this version")]
PageLimitQuery = Annotated[
    int | None, Query(description="at most this many events (1 to 10,000)")
]
SinceQuery = Annotated[
    str | None,
    Query(
        description=(
            "only tasks started at or after this ISO 8601 time, with a "
            "timezone (2024-05-01T09:30:00Z)"
        )
    ),
]
KeyHeader = Annotated[
    str | None,
    Header(
        alias=KEY_HEADER,
        description=(
            "names this command: sent again with the same key and body, it "
            "records nothing new and answers as the first time"
        ),
    ),
]
IF_MATCH_HEADER = "If-Match"
IfMatchHeader = Annotated[
    str | None,
    Header(
        alias=IF_MATCH_HEADER,
        description=(
            "the task's version this answer is for, as GET /tasks/{task_id} "
            'gave it in its ETag ("7"); if the task has moved on since '
            "(someone else answered first), 412 stale_answer and nothing is "
            "written. `*` answers whatever the task is now"
        ),
        max_length=64,
    ),
]
_ENTITY_TAG = re.compile(r'"([1-9][0-9]{0,18})"')


def if_version(value: str | None) -> int | None:
    """The version an ``If-Match`` header names (``None``: no header, or
    ``*``). RFC 9110's strong comparison: a weak tag (``W/"7"``) or a list
    of several is refused, as is anything that is not ``"<version>"``."""
    if value is None:
        return None
    text = value.strip()
    if text == "*":
        return None
    found = _ENTITY_TAG.fullmatch(text)
    if found is None:
        msg = (
            f"If-Match must be one strong entity tag as GET /tasks/{{task_id}} "
            f'gives it in its ETag (such as "7"), or *; got {text[:64]!r}'
        )
        raise InvalidInput(msg, field=IF_MATCH_HEADER)
    return int(found.group(1))


def etag(version: int) -> str:
    """A task's ``ETag``: its version, as a strong entity tag."""
    return f'"{version}"'


# ------------------------------------------------------------------- bodies


class Body(BaseModel):
    """A request body: JSON types as they are (no coercion), nothing unknown."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _addressable(value: str) -> str:
    """An id the API's paths can name: ``/`` would end the path segment."""
    if isinstance(value, str) and "/" in value:
        msg = "must not contain '/': over HTTP a task or run is named in the URL path"
        raise ValueError(msg)
    return value


class StartRunBody(Body):
    run_id: str
    dag: dict[str, list[str]] = Field(description="node (task id) -> prerequisites")
    stop_scope: StopScopeValue = Field(
        default="run",
        description=(
            "what a task's stop holds up: `run` (the whole run pauses until it "
            "is answered) or `descendants` (ready branches beside it go on)"
        ),
    )

    _run_id = field_validator("run_id")(_addressable)

    @field_validator("dag")
    @classmethod
    def _nodes_addressable(cls, dag: dict[str, list[str]]) -> dict[str, list[str]]:
        for node in dag:
            _addressable(node)
        return dag


class StartTaskBody(Body):
    task_id: str
    run_id: str | None = None
    agent: str | None = None
    last_commit: str | None = None
    links: dict[str, str] | None = Field(
        default=None,
        description=(
            "what the agent's side knows of the task, by name (at most 8): "
            "`transcript` (its session's transcript path), `branch`, `pr` (a "
            "pull request's URL)"
        ),
    )

    _task_id = field_validator("task_id")(_addressable)


class AttemptBody(Body):
    strategy: str


class GateBody(Body):
    exit_code: int | None = Field(description="null: killed or timed out")
    gate: str | None = None
    strategy: str | None = None
    error: str | None = None
    output: str | None = None


class EntropyBody(Body):
    score: float


class LessonBody(Body):
    failed_strategy: str
    rca_summary: str


ActorField = Field(
    default=None,
    description=(
        "who acts: with an operator's token, that operator (may be left out; "
        "another name is a 403); required otherwise"
    ),
)


class ActionBody(Body):
    actor: str | None = ActorField
    reason: str = "(no reason given)"


class RewindBody(ActionBody):
    to_commit: str | None = None


class ClaimBody(Body):
    actor: str | None = ActorField


class TakeOverBody(ClaimBody):
    reason: str = "(no reason given)"


class ResolveBody(ActionBody):
    resolution: ResolutionValue


class WhatIfBody(Body):
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the policy fields to change (escalation_threshold, "
            "handoff_threshold, hitl_entropy_threshold, failure_history_cap, "
            "stuck_detection, human_deadline: a recorded expiry is an input, "
            "so no deadline is ever invented); the others, and any given "
            "null, keep the policy in force"
        ),
    )
    task_ids: list[str] | None = Field(default=None, description="only these tasks")
    run_id: str | None = Field(default=None, description="only this run's tasks")


class ErrorBody(BaseModel):
    """Every error answer."""

    error: str = Field(description="its kind, e.g. not_found, invalid_input")
    detail: str
    field: str | None = Field(description="the argument to blame, if one is")


class BlacklistAnswer(BaseModel):
    task_id: str
    candidate: str | None
    blacklisted: bool | None = Field(description="null when no candidate was given")
    directive: str = Field(description="the prompt directive listing the lessons")


class Health(BaseModel):
    ok: bool


class Readiness(BaseModel):
    ready: bool
    position: int = Field(description="the log position the read models reached")
    reason: str | None = Field(
        default=None, description="why the service is not ready (when it is not)"
    )


class ReadPosition(BaseModel):
    position: int = Field(description="the log position the read models reached")


# ------------------------------------------------------------------- errors

_PARAMETER_SOURCES = ("body", "query", "path", "header", "cookie")
_HTTP_KINDS = {
    400: "malformed_json",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in (
        (400, "malformed JSON"),
        (401, "missing or wrong API token, or an unknown operator token"),
        (
            403,
            "a human action without an operator's token once operators "
            "exist, or an actor other than the operator",
        ),
        (404, "unknown task or run"),
        (409, "illegal transition, already exists, or lost conflict"),
        (415, "a body not sent as JSON (Content-Type: application/json)"),
        (422, "a bad value, or a position past the log's end; nothing was written"),
        (503, "the store cannot be used"),
        (504, "a read-your-writes wait ran out"),
    )
}


DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
DOCS_ASSETS = "/static-offline-docs/"
"""Swagger UI's and ReDoc's scripts, served from the package: no CDN."""


CONSOLE_PREFIX = "/console"
"""The web console's pages (:mod:`devs.adapters.console`): signed in with an
operator's token, kept by a session cookie; never the bearer token."""


def _open(path: str) -> bool:
    """Paths served without the token: liveness, the API's documentation
    (a browser cannot send the token for a page's scripts; Swagger UI's
    "Authorize" sends it with each call it makes) and the console, whose
    pages check their own session cookie."""
    return (
        path == "/healthz"
        or path in DOCS_PATHS
        or path.startswith(DOCS_ASSETS)
        or path == CONSOLE_PREFIX
        or path.startswith(CONSOLE_PREFIX + "/")
    )


OPERATOR_PREFIX = TOKEN_PREFIX.encode()
OPERATOR_STATE = "devs_operator"
"""Where :class:`Callers` leaves the name of the operator whose token a
request carries (``request.state``); absent for the service token."""


def bearer_credentials(given: bytes) -> bytes | None:
    """The token of an ``Authorization`` value whose scheme is Bearer, in any
    case (``bearer``, ``BEARER``: a scheme is case-insensitive, RFC 9110
    section 11.1), after the spaces that follow the scheme; ``None`` for
    another scheme or none."""
    scheme, space, rest = given.partition(b" ")
    if not space or scheme.lower() != b"bearer":
        return None
    return rest.lstrip(b" ")


class Callers:
    """Who is calling. A plain ASGI middleware: a ``@app.middleware("http")``
    function costs about 0.4 ms per request here.

    - ``Authorization: Bearer <DEVS_API_TOKEN>`` (the scheme in any case, the
      token compared in constant time) is the service: an agent or its
      orchestrator;
    - ``Authorization: Bearer devs_op_…`` is an operator, a person: the
      roster is read as the store holds it now (in a thread: never on the
      loop), and the operator's name is left in ``request.state``; a token
      that is unknown, rotated or removed is a 401;
    - anything else is a 401 when the service has a token, and no one in
      particular when it has none.

    ``/healthz``, the documentation and the console pass through (the
    console's pages check their own session cookie)."""

    def __init__(self, app: ASGIApp, expected: bytes | None, served: Served) -> None:
        self.app = app
        self.expected = expected
        """The service's token itself (without the scheme)."""
        self.served = served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _open(scope["path"]):
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
                    break
            credentials = bearer_credentials(given)
            expected = self.expected
            if (
                expected is not None
                and credentials is not None
                and hmac.compare_digest(credentials, expected)
            ):
                pass
            elif credentials is not None and credentials.startswith(OPERATOR_PREFIX):
                token = credentials.decode("latin-1")
                try:
                    # A token of another shape is no one's: refused without
                    # reading the roster.
                    operator = (
                        await self.served.operator_of(token)
                        if TOKEN_SHAPE.fullmatch(token)
                        else None
                    )
                except StoreError as error:
                    answer = error_response(503, StoreError.kind, str(error))
                    answer.headers["Retry-After"] = str(math.ceil(STORE_RETRY_AFTER))
                    await answer(scope, receive, send)
                    return
                if operator is None:
                    answer = error_response(
                        401,
                        "unauthorized",
                        "the operator token is unknown, was rotated or its "
                        "operator removed: `devs operator rotate NAME` gives a "
                        "new one",
                    )
                    answer.headers["WWW-Authenticate"] = "Bearer"
                    await answer(scope, receive, send)
                    return
                scope.setdefault("state", {})[OPERATOR_STATE] = operator
            elif expected is not None:
                answer = error_response(
                    401,
                    "unauthorized",
                    "the API token is missing or wrong: send DEVS_API_TOKEN in "
                    "the Authorization header, as a bearer token (or an "
                    "operator's token)",
                )
                answer.headers["WWW-Authenticate"] = "Bearer"
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


# ------------------------------------------------------------ the front door

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost"})
"""Names that always mean this machine: a browser never asks DNS for them,
so no page can rebind them to another site."""
DOCS_PAGES = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})
API_CSP = b"default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
"""Every answer but the documentation's pages and the console's (which send
their own): nothing in it may run, nor be framed."""
DOCS_CSP = (
    "default-src 'none'; script-src 'self' {scripts}; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
"""Swagger UI's and ReDoc's pages: their scripts from this server (no CDN:
fastapi-offline), the page's own inline script by its hash, the styles the
scripts set, and never in a frame."""
INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
)


class HostCheck:
    """Which ``Host`` headers this server answers (DNS rebinding: a page of
    ``attacker.example``, its name pointed at this machine, sends
    ``Host: attacker.example``).

    Admitted: the address the connection arrived at (the address ``devs
    serve`` listens on; listening on all addresses, whichever of the
    machine's the client used), ``localhost`` and the loopback addresses, and
    the entries of ``DEVS_ALLOWED_HOSTS`` (a name alone: on any port;
    ``name:port``: on that port; ``*``: any ``Host``). A request without
    ``Host`` (HTTP/1.0; never a browser's) is admitted."""

    def __init__(self, allowed: Sequence[str]) -> None:
        self.any = ANY_HOST in allowed
        self.names: set[str] = set()
        self.pairs: set[tuple[str, int]] = set()
        for entry in allowed:
            parsed = host_and_port(entry) if entry != ANY_HOST else None
            if parsed is None:
                continue
            name, port = parsed
            if port is None:
                self.names.add(name)
            else:
                self.pairs.add((name, port))
        self.listed = ", ".join(allowed) or "none"

    def listed_here(self, name: str, port: int | None) -> bool:
        """Whether ``DEVS_ALLOWED_HOSTS`` names ``name`` (on ``port``; no
        port: 80 or 443, the schemes' own)."""
        if self.any or name in self.names:
            return True
        if port is None:
            return (name, 80) in self.pairs or (name, 443) in self.pairs
        return (name, port) in self.pairs

    def admits(self, host: bytes | None, server: Any) -> bool:
        if self.any or host is None:
            return True
        parsed = host_and_port(host.decode("latin-1"))
        if parsed is None:
            return False
        name, port = parsed
        if name in LOOPBACK_NAMES or self.listed_here(name, port):
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        if address.is_loopback:
            return True
        if not (isinstance(server, tuple | list) and server):
            return False
        try:
            local = ipaddress.ip_address(str(server[0]).partition("%")[0])
        except ValueError:
            return False
        if isinstance(local, ipaddress.IPv6Address) and local.ipv4_mapped:
            local = local.ipv4_mapped
        return address == local


class FrontDoor:
    """What every request meets first, before its token is looked at (a
    plain ASGI middleware, outside :class:`Callers`):

    - more than one ``Host`` header is a 400 ``duplicate_header`` (this
      check would read one of them, the app and the console's own origin
      check another);
    - a ``Host`` this server does not answer to (:class:`HostCheck`) is a 421
      ``misdirected_request``, naming ``DEVS_ALLOWED_HOSTS``;
    - a body over ``max_body`` bytes is a 413 ``too_large``: by its
      ``Content-Length`` before a byte of it is read, or as soon as a chunked
      body passes the bound; the connection is then closed;
    - a POST (PUT, PATCH, DELETE) from a page of another site (its
      ``Origin`` another origin, or ``null``; without ``Origin``, its
      ``Sec-Fetch-Site`` ``cross-site`` or ``same-site``) is a 403
      ``cross_site`` (the console's forms check their own, answering a page);
    - every answer carries ``X-Content-Type-Options: nosniff``,
      ``X-Frame-Options: DENY`` and a Content-Security-Policy (the
      documentation's pages one their scripts work with), unless it sets its
      own (the 500 Starlette answers outside this middleware, to an
      unexpected exception, sets them itself: :func:`_internal_error`); an
      answer sent before the request's body was read closes the connection
      (the rest of the body is not read).

    The request line's and headers' size and time, the body's time, and the
    connections per worker, are bounded before this, by ``devs serve``'s
    protocol (:mod:`devs.adapters.serving`)."""

    def __init__(
        self, app: ASGIApp, hosts: HostCheck | None, max_body: int | None
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = fetch_site = None
        hosts_sent = 0
        length: int | None = None
        chunked = False
        for name, value in scope["headers"]:
            if name == b"host":
                host = host or value
                hosts_sent += 1
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                fetch_site = value
            elif name == b"content-length":
                length = int(value) if value.isdigit() else None
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        path: str = scope["path"]
        body = _Body(declared=chunked or bool(length))
        send = _answering(send, path, body)
        if hosts_sent > 1:
            answer = error_response(
                400,
                "duplicate_header",
                f"the request has {hosts_sent} Host headers; HTTP/1.1 allows "
                "one (RFC 9112, section 3.2): refused, nothing was done",
                "Host",
            )
            await answer(scope, receive, send)
            return
        hosts = self.hosts
        if hosts is not None and not hosts.admits(host, scope.get("server")):
            shown = (host or b"").decode("latin-1")[:100]
            answer = error_response(
                421,
                "misdirected_request",
                f"this server does not answer to Host {shown!r}: it answers to "
                "the address it listens on, localhost and the loopback "
                f"addresses, and the names in {ALLOWED_HOSTS_ENV} (now: "
                f"{hosts.listed}); add the name it is reached by (behind a "
                f"proxy, on a public name) to {ALLOWED_HOSTS_ENV}",
                "Host",
            )
            await answer(scope, receive, send)
            return
        limit = self.max_body
        if limit is not None and length is not None and length > limit:
            answer = error_response(
                413, "too_large", _too_large(f"is {length:,} bytes", limit)
            )
            await answer(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS and not _console(path):
            refused = _cross_site(origin, fetch_site, host, hosts)
            if refused is not None:
                answer = error_response(
                    403,
                    "cross_site",
                    f"{scope['method']} {path[:200]} was sent by a page of "
                    f"another site ({refused}): refused, nothing was done; a "
                    "browser may send it only from this server's own origin "
                    f"(or one in {ALLOWED_HOSTS_ENV})",
                    "Origin",
                )
                await answer(scope, receive, send)
                return
        if body.declared:
            receive = _counting(receive, body, limit)
        await self.app(scope, receive, send)


class _Body:
    """What :class:`FrontDoor` knows of a request's body."""

    __slots__ = ("declared", "done", "received")

    def __init__(self, *, declared: bool) -> None:
        self.declared = declared
        self.done = not declared
        self.received = 0


def _too_large(what: str, limit: int) -> str:
    return (
        f"the request body {what}; the limit is {limit:,} bytes "
        f"({MAX_BODY_ENV}); nothing was read or done"
    )


def _console(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def _cross_site(
    origin: bytes | None,
    fetch_site: bytes | None,
    host: bytes | None,
    hosts: HostCheck | None,
) -> str | None:
    """Why a request that changes something comes from another site's page,
    or ``None`` when it does not (its ``Origin`` is this server's own, or a
    name of ``DEVS_ALLOWED_HOSTS``; or it has no ``Origin`` and a
    ``Sec-Fetch-Site`` of ``same-origin`` or ``none``, or neither header:
    not a browser)."""
    if origin is None:
        if fetch_site is not None and fetch_site.lower() in (
            b"cross-site",
            b"same-site",
        ):
            return f"Sec-Fetch-Site: {fetch_site.decode('latin-1')[:20]}"
        return None
    shown = f"Origin: {origin.decode('latin-1')[:100]}"
    if origin == b"null":
        return shown
    _, separator, authority = origin.partition(b"://")
    if not separator or b"/" in authority:
        return shown
    if host is not None and authority.lower() == host.lower():
        return None
    parsed = host_and_port(authority.decode("latin-1"))
    if parsed is not None and hosts is not None and hosts.listed_here(*parsed):
        return None
    return shown


def _counting(receive: Receive, body: _Body, limit: int | None) -> Receive:
    """``receive``, counting the body: past ``limit`` bytes, a 413."""

    async def counted() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            body.received += len(message.get("body", b""))
            if limit is not None and body.received > limit:
                raise StarletteHTTPException(
                    413,
                    _too_large(f"passed {limit:,} bytes", limit),
                    headers={"Connection": "close"},
                )
            if not message.get("more_body", False):
                body.done = True
        elif message["type"] == "http.disconnect":
            body.done = True
        return message

    return counted


def _answering(send: Send, path: str, body: _Body) -> Send:
    """``send``, adding the security headers an answer does not set itself,
    and ``Connection: close`` to an answer sent before the request's body was
    read."""
    docs = path in DOCS_PAGES
    held: list[Message] = []

    def completed(start: Message, content: bytes) -> Message:
        headers = list(start.get("headers", []))
        present = {name.lower() for name, _ in headers}
        for name, value in SECURITY_HEADERS:
            if name not in present:
                headers.append((name, value))
        if b"content-security-policy" not in present:
            if docs:
                hashes = " ".join(
                    "'sha256-"
                    + base64.b64encode(hashlib.sha256(script).digest()).decode()
                    + "'"
                    for script in INLINE_SCRIPT.findall(content)
                )
                policy = DOCS_CSP.format(scripts=hashes).encode()
                headers.append((b"content-security-policy", policy))
            else:
                headers.append((b"content-security-policy", API_CSP))
        if not body.done and b"connection" not in present:
            headers.append((b"connection", b"close"))
        return {**start, "headers": headers}

    async def answer(message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if docs:  # its CSP names its inline script's hash: the body first
                held.append(message)
                return
            await send(completed(message, b""))
            return
        if docs and kind == "http.response.body" and held:
            held.append(message)
            if message.get("more_body", False):
                return
            content = b"".join(part.get("body", b"") for part in held[1:])
            start = held[0]
            held.clear()
            await send(completed(start, content))
            await send({"type": "http.response.body", "body": content})
            return
        await send(message)

    return answer


def acting(service: RecoveryService, operator: str | None, given: str | None) -> str:
    """Who a human action over HTTP is recorded under, or why it is refused.

    With an operator's token: that operator (``actor`` may be left out; one
    that names someone else is :class:`Forbidden`). Without one, once any
    operator exists: :class:`Forbidden` (the service's token is the agents';
    it cannot answer for a person). With no operator at all, as before the
    roster: the body's ``actor``, required."""
    if operator is not None:
        if operator not in service.roster().members:  # removed since its request
            msg = f"operator {operator!r} was removed; nothing was written"
            raise Forbidden(msg)
        if given is not None and given != operator:
            msg = (
                f"actor {given!r} is not the operator whose token was sent "
                f"({operator!r}): leave actor out, or send {given!r}'s own "
                "token; nothing was written"
            )
            raise Forbidden(msg)
        return operator
    if service.roster().members:
        msg = (
            "a human action needs an operator's own token, sent as the bearer "
            "token, once operators exist (`devs operator add NAME` makes one): "
            "the service token, which agents hold, cannot answer for a person; "
            "nothing was written"
        )
        raise Forbidden(msg)
    if given is None:
        msg = "actor is required: name who acts (or send an operator's token)"
        raise InvalidInput(msg, field="actor")
    return given


def _operator(request: Request) -> str | None:
    name: str | None = getattr(request.state, OPERATOR_STATE, None)
    return name


def error_response(
    status: int, kind: str, detail: str, field: str | None = None
) -> JSONResponse:
    body = ErrorBody(error=kind, detail=redact(detail), field=field)
    return JSONResponse(body.model_dump(), status_code=status)


class Writer:
    """The worker's writer: one long-lived thread that runs its commands, one
    at a time, for the event loop.

    A command may wait for SQLite's write lock (``SQLITE_LOCK_TIMEOUT``, held
    by a ``devs`` CLI command, a rebuild, another server), for PostgreSQL, or
    sleep in its conflict back-off; on this thread it does so while the loop
    goes on answering ``/healthz``, ``/readyz`` and queries. One thread, not
    one per request: the loop hands it a command through a queue and is woken
    when the answer is ready. The worker's commands took turns anyway: one
    Python thread at a time, one SQLite writer at a time.

    Handing over costs thread switches (on SQLite a fifth to two fifths of
    one worker's decisions a second, bench/http_bench.py), so on SQLite the
    loop does a command itself while the writer is idle, under ``NO_WAIT``:
    one that would have to wait raises ``WouldWait`` having written nothing,
    and is handed over then (``create_app``'s ``command``).
    """

    def __init__(self, threads: int = 1) -> None:
        self._calls: SimpleQueue[_Call[Any] | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self.size = threads
        """How many threads take the commands handed over (1 on SQLite, whose
        writes take turns anyway; more on PostgreSQL, where one command's
        round trips to the database leave room for another's)."""
        self.busy = 0
        """Commands handed over and not yet answered (read on the loop)."""

    async def run(self, call: Callable[[], T]) -> T:
        """``call()`` on a writer thread (started the first time); its
        value or its exception."""
        if not self._threads:
            for n in range(self.size):
                thread = threading.Thread(
                    target=self._serve, name=f"devs-writer-{n}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.busy += 1  # back to 0 only once the thread is done with it
        context = contextvars.copy_context()  # the request's, not the thread's
        self._calls.put((lambda: context.run(call), future, loop))
        return await future

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future, loop = item
            try:
                value = call()
            except BaseException as error:  # handed to the request, raised there
                loop.call_soon_threadsafe(self._done, future, None, error)
            else:
                loop.call_soon_threadsafe(self._done, future, value, None)

    def _done(
        self, future: asyncio.Future[T], value: T, error: BaseException | None
    ) -> None:
        # busy drops here, once the thread is done with the command, not when
        # the request ends: a request cancelled while its command still runs
        # must not let the loop start another. One wake-up of the loop per
        # command: its answer and its end together.
        self.busy -= 1
        if future.done():  # the request was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def close(self) -> None:
        """Let the commands handed over finish, then end the threads."""
        for _ in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []


_Call = tuple[Callable[[], T], "asyncio.Future[T]", asyncio.AbstractEventLoop]


def _document_the_token(app: FastAPI) -> None:
    """Say in ``/openapi.json`` that every call takes the bearer token, so
    that Swagger UI's "Authorize" sends it."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()
        schemes = document.setdefault("components", {}).setdefault(
            "securitySchemes", {}
        )
        schemes["bearer"] = {"type": "http", "scheme": "bearer"}
        document["security"] = [{"bearer": []}]
        return document

    app.openapi = openapi  # type: ignore[method-assign]


# ---------------------------------------------------------------- the app


# ------------------------------------------------------------ dependencies


POSTGRES_WRITERS = 3
"""Writer threads of a worker on PostgreSQL (one on SQLite)."""


class Served:
    """What one app serves: its service (opened at startup when given as a
    callable), its writer thread and its read-your-writes bound. Held in
    ``app.state.devs``; routes reach it through :data:`Devs`."""

    def __init__(
        self,
        service: RecoveryService | Callable[[], RecoveryService],
        read_wait: float | None,
    ) -> None:
        self._open = None if isinstance(service, RecoveryService) else service
        self._service = service if isinstance(service, RecoveryService) else None
        self.writer = Writer()
        self._read_wait = read_wait
        self.on_loop = False
        """Whether the loop may run a command itself (under ``NO_WAIT``): on
        SQLite, whose waits can be turned off; on PostgreSQL every command
        goes to the writer. Decided by :meth:`open`, with the writer's size."""
        self._prober: ThreadPoolExecutor | None = None
        self._probe: Future[Readiness] | None = None
        self._probe_lock = threading.Lock()

    async def readiness(self, timeout: float = READY_WAIT) -> Readiness:
        """Whether the store answers and the read models caught up with the
        log, known within ``timeout`` seconds: one probe runs at a time in a
        thread of its own, and every request meanwhile awaits it on the loop
        (a store that does not answer holds one thread, not one per request,
        and no request waits for a free thread first)."""
        with self._probe_lock:
            probe = self._probe
            if probe is None or probe.done():
                if self._prober is None:  # started again after a shutdown
                    self._prober = ThreadPoolExecutor(1, "devs-ready")
                probe = self._probe = self._prober.submit(self._ready)
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(probe)), timeout
            )
        except TimeoutError:
            known = last_store_failure(self.service)
            if known is not None:
                reason = (
                    f"the store did not answer within {timeout:g} s; the last "
                    f"attempt to connect said: {known}"
                )
            else:
                reason = (
                    f"no answer within {timeout:g} s: the store is slow, or the "
                    "read models are behind the log"
                )
            return Readiness(ready=False, position=0, reason=redact(reason))

    def _ready(self) -> Readiness:
        try:
            position = self.service.catch_up()
        except (StoreError, NotCaughtUp) as error:
            return Readiness(ready=False, position=0, reason=redact(str(error)))
        return Readiness(ready=True, position=position)

    def close(self) -> None:
        """Stop the writer and the readiness probe (a probe still waiting
        for the store is not waited for)."""
        self.writer.close()
        with self._probe_lock:
            prober, self._prober, self._probe = self._prober, None, None
        if prober is not None:
            prober.shutdown(wait=False, cancel_futures=True)

    @property
    def read_wait(self) -> float:
        """How long a query waits for the position it asked for: as given to
        ``create_app``, else the service's own (``DEVS_READ_WAIT``)."""
        if self._read_wait is not None:
            return self._read_wait
        return self.service.read_wait

    @property
    def service(self) -> RecoveryService:
        if self._service is None:
            msg = "the service is opened when the app starts (its lifespan)"
            raise StoreError(msg)
        return self._service

    def open(self) -> RecoveryService | None:
        """Open the service if the app was given a callable (what it opened,
        else ``None``), and decide by its backend where commands run."""
        opened = None
        if self._open is not None and self._service is None:
            self._service = opened = self._open()
        self.on_loop = backend_of(self.service) is not Backend.POSTGRES
        self.writer.size = 1 if self.on_loop else POSTGRES_WRITERS
        return opened

    async def operator_of(self, token: str) -> str | None:
        """The operator whose current token is ``token``, if any: the roster
        as stored now, read in a thread (never on the loop)."""
        service = self.service
        return await asyncio.to_thread(lambda: service.roster().holder(token))

    async def command(
        self,
        status: int,
        key: str | None,
        path: str,
        body: Body,
        call: Callable[[RecoveryService], BaseModel],
        caller: str | None = None,
    ) -> Response:
        """Do a command (once per ``Idempotency-Key``, when one is given) and
        answer it, with the log position it reached (:class:`Writer` says
        where it runs). The answer is the model's own JSON: FastAPI would
        validate the model again against the endpoint's ``response_model``
        (the same class) before writing it."""
        service = self.service

        def decide() -> tuple[str, int]:
            with service.written() as written:
                if key is None:
                    value = call(service)
                else:
                    request = f"POST {path}\n{body.model_dump_json()}"
                    if caller is not None:  # one operator's key is not another's
                        request += f"\noperator {caller}"
                    try:
                        with service.exactly_once(key, request):
                            value = call(service)
                    except InvalidInput as error:
                        if error.field == "idempotency_key":
                            error.field = KEY_HEADER
                        raise
            position = written.position
            if position is None:  # answered from a receipt: the log's end covers it
                position = service.recorder.max_notification_id() or 0
            return value.model_dump_json(), position

        if self.on_loop and not self.writer.busy and not _heavy(body):
            # On SQLite most commands never wait: one is done on the loop
            # (no hand-over, no thread switch) unless it would have to wait
            # for the write lock or a back-off; then, nothing written, it
            # goes to the writer thread like every command behind it.
            token = NO_WAIT.set(True)
            try:
                answer, position = decide()
            except WouldWait:
                pass
            else:
                return _answer(answer, status, position)
            finally:
                NO_WAIT.reset(token)
        answer, position = await self.writer.run(decide)
        return _answer(answer, status, position)


LOOP_TEXT_MAX = 256 * 1024
"""A gate whose error and output hold more characters than this is decided on
the writer thread, never on the loop: redacting it takes time (about 25 ms a
MB)."""


def _heavy(body: Body) -> bool:
    if not isinstance(body, GateBody):
        return False
    return len(body.output or "") + len(body.error or "") > LOOP_TEXT_MAX


def _answer(answer: str, status: int, position: int) -> Response:
    headers = {POSITION_HEADER: str(position)}
    version = _answered_version(answer)
    if version is not None:  # a human answer: the task's version after it
        headers["ETag"] = etag(version)
    return Response(answer, status, headers, media_type="application/json")


_DIGITS = re.compile(r"\d{1,19}")


def _answered_version(answer: str) -> int | None:
    """The ``version`` of an :class:`ActionResult`'s JSON (``None`` for any
    other answer): linear, as JSON escapes every quote inside a string, so
    ``"action":"`` and ``"version":`` appear only as keys."""
    if '"action":"' not in answer:
        return None
    at = answer.rfind('"version":')
    if at == -1:
        return None
    found = _DIGITS.match(answer, at + len('"version":'))
    return int(found.group()) if found is not None else None


async def _served(request: Request) -> Served:
    served: Served = request.app.state.devs
    return served


Devs = Annotated[Served, Depends(_served)]
"""The app's service, writer and bounds (async: resolved on the loop)."""


def _read_after(
    served: Devs, after: AfterQuery = None, x_after: AfterHeaderValue = None
) -> int | None:
    """The position a query asked for (``?after=`` or ``X-Devs-After``), once
    the read models folded it: waits at most ``read_wait`` seconds (else 504).
    A sync dependency: it waits in a thread, never on the loop."""
    wanted = after
    field = "after"
    if wanted is None and x_after is not None:
        field = AFTER_HEADER
        try:
            wanted = int(x_after)
        except ValueError:
            msg = f"{AFTER_HEADER} must be an integer, got {x_after[:40]!r}"
            raise InvalidInput(msg, field=AFTER_HEADER) from None
    if wanted is None:
        return None
    if wanted < 0:
        msg = f"after must be a non-negative integer, got {wanted}"
        raise InvalidInput(msg, field=field)
    try:
        served.service.wait_for(wanted, timeout=served.read_wait)
    except InvalidInput as error:  # past the log's end, or any there can be
        error.field = field  # named as it was sent (its class kept)
        raise
    return wanted


ReadAfter = Annotated[int | None, Depends(_read_after)]
"""The log position a query reads at (``None``: the log as it ends now); the
query runs in ``service.reading_after(position)``."""


# ------------------------------------------------------------------ routers


class HttpRoute(APIRoute):
    """A route whose refusals say what to do in HTTP's words: an unknown task
    or run names ``POST /tasks`` or ``POST /runs``, one started again the
    requests that go on with it, where the service's own message names its
    Python methods (``start_task()``, ``start_run()``, ``begin_attempt()``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def worded(request: Request) -> Response:
            try:
                return await handler(request)
            except UnknownTask as error:
                raise UnknownTask(error.task_id, start_with="POST /tasks") from None
            except UnknownRun as error:
                raise UnknownRun(error.run_id, start_with="POST /runs") from None
            except AlreadyExists as error:
                if error.task_id is not None:
                    path = f"/tasks/{quote(error.task_id, safe='')}"
                    raise AlreadyExists.task(
                        error.task_id,
                        next_step=f"record its attempts with POST {path}/attempts, "
                        f"or read it with GET {path}",
                    ) from None
                if error.run_id is not None:
                    path = f"/runs/{quote(error.run_id, safe='')}"
                    raise AlreadyExists.run(
                        error.run_id,
                        next_step="start its tasks with POST /tasks (its run_id), "
                        f"or read it with GET {path}",
                    ) from None
                raise

        return worded


service_routes = APIRouter(tags=["service"], route_class=HttpRoute)
runs = APIRouter(tags=["runs"], route_class=HttpRoute)
tasks = APIRouter(tags=["tasks"], route_class=HttpRoute)
humans = APIRouter(tags=["humans"], route_class=HttpRoute)
audits = APIRouter(tags=["audit"], route_class=HttpRoute)
metrics = APIRouter(tags=["metrics"], route_class=HttpRoute)
notifications = APIRouter(tags=["notifications"], route_class=HttpRoute)
ROUTERS = (service_routes, runs, tasks, humans, audits, metrics, notifications)
"""One router per resource; ``create_app`` includes them all."""


@service_routes.get("/healthz", openapi_extra={"security": []})
async def healthz() -> Health:
    """The process is up (no token needed)."""
    return Health(ok=True)


@service_routes.get("/readyz", responses={503: {"model": Readiness}})
async def readyz(served: Devs) -> Any:
    """The store is reachable, can be written, and the read models caught up:
    answered within about a second (503 with the reason otherwise). A store
    opened read-only (its file, folder or mount cannot be written) answers
    queries, but every command there would be a 503: not ready."""
    readiness = await served.readiness()
    if readiness.ready and getattr(served.service.factory, "read_only", False):
        reason = (
            "the database cannot be written here: it was opened read-only (its "
            "file, its folder or its mount is read-only), so every command "
            "fails; queries answer"
        )
        readiness = Readiness(ready=False, position=readiness.position, reason=reason)
    if not readiness.ready:
        return JSONResponse(readiness.model_dump(), 503)
    return readiness


@service_routes.get("/position", responses={504: {"model": ErrorBody}})
def read_position(
    served: Devs,
    after: Annotated[
        int,
        Query(ge=0, le=2**63 - 1, description="the log position to wait for"),
    ] = 0,
    timeout: Annotated[
        float | None,
        Query(
            gt=0,
            le=300,
            allow_inf_nan=False,
            description=(
                "seconds to wait at most, and never longer than the server's "
                "DEVS_READ_WAIT (its default)"
            ),
        ),
    ] = None,
) -> ReadPosition:
    """Wait until the read models folded log position ``after``, at most
    ``timeout`` seconds and never longer than the server's read wait (a
    client cannot hold a worker's thread longer than any query may), and
    give the position they reached (504 ``not_caught_up`` when the wait runs
    out; 422 ``position_not_recorded`` at once past the log's end):
    ``wait_for`` over HTTP."""
    wait = served.read_wait if timeout is None else min(timeout, served.read_wait)
    try:
        position = served.service.wait_for(after, timeout=wait)
    except InvalidInput as error:  # past the log's end: named as sent
        error.field = "after"
        raise
    return ReadPosition(position=position)


# --------------------------------------------------------------------- runs


@runs.post("/runs", status_code=201, response_model=RunState)
async def start_run(
    served: Devs, body: StartRunBody, key: KeyHeader = None
) -> Response:
    return await served.command(
        201,
        key,
        "/runs",
        body,
        lambda s: s.start_run(body.run_id, body.dag, stop_scope=body.stop_scope),
    )


@runs.get("/runs/{run_id}")
def run_state(served: Devs, run_id: str, position: ReadAfter) -> RunState:
    with served.service.reading_after(position):
        return served.service.run_state(run_id)


# -------------------------------------------------------------------- tasks


@tasks.post("/tasks", status_code=201, response_model=TaskSummary)
async def start_task(
    served: Devs, body: StartTaskBody, key: KeyHeader = None
) -> Response:
    return await served.command(
        201,
        key,
        "/tasks",
        body,
        lambda s: s.start_task(
            body.task_id,
            run_id=body.run_id,
            agent=body.agent,
            last_commit=body.last_commit,
            links=body.links,
        ),
    )


@tasks.post("/tasks/{task_id}/attempts", response_model=AttemptDecision)
async def begin_attempt(
    served: Devs, task_id: str, body: AttemptBody, key: KeyHeader = None
) -> Response:
    return await served.command(
        200,
        key,
        f"/tasks/{task_id}/attempts",
        body,
        lambda s: s.begin_attempt(task_id, body.strategy),
    )


@tasks.post("/tasks/{task_id}/gates", response_model=GateDecision)
async def record_gate(
    served: Devs, task_id: str, body: GateBody, key: KeyHeader = None
) -> Response:
    return await served.command(
        200,
        key,
        f"/tasks/{task_id}/gates",
        body,
        lambda s: s.record_gate(
            task_id,
            body.exit_code,
            gate=body.gate,
            strategy=body.strategy,
            error=body.error,
            output=body.output,
        ),
    )


@tasks.post("/tasks/{task_id}/entropy", response_model=EntropyDecision)
async def report_entropy(
    served: Devs, task_id: str, body: EntropyBody, key: KeyHeader = None
) -> Response:
    return await served.command(
        200,
        key,
        f"/tasks/{task_id}/entropy",
        body,
        lambda s: s.report_entropy(task_id, body.score),
    )


@tasks.post("/tasks/{task_id}/lessons", status_code=201, response_model=Lesson)
async def log_lesson(
    served: Devs, task_id: str, body: LessonBody, key: KeyHeader = None
) -> Response:
    return await served.command(
        201,
        key,
        f"/tasks/{task_id}/lessons",
        body,
        lambda s: s.log_lesson(task_id, body.failed_strategy, body.rca_summary),
    )


@tasks.get(
    "/tasks",
    operation_id="tasks_tasks_get",
    responses={
        200: {
            "headers": {
                "Link": {
                    "description": (
                        'the next page, `<…>; rel="next"`: only when there is one'
                    ),
                    "schema": {"type": "string"},
                }
            }
        }
    },
)
def list_tasks(
    served: Devs,
    request: Request,
    response: Response,
    position: ReadAfter,
    state: str | None = None,
    run_id: str | None = None,
    after_task_id: Annotated[
        str | None,
        Query(
            description=(
                "only the tasks whose id sorts after this one (the last of the "
                "page before; it need not name a task)"
            )
        ),
    ] = None,
    limit: Annotated[
        int | None, Query(description="at most this many tasks (1 to 10,000)")
    ] = None,
) -> list[TaskIndexEntry]:
    """Tasks, of one state and/or one run, ordered by task id, a page at a
    time: a page with a next one carries ``Link: <…>; rel="next"``."""
    _task_page(after_task_id, limit)
    chosen: Any = state  # the service says which states there are
    service = served.service
    with service.reading_after(position):
        found = service.tasks(
            state=chosen, run_id=run_id, after=after_task_id, limit=limit
        )
        if limit is None or len(found) < limit or not found:
            return found
        last = found[-1].task_id
        if service.tasks(state=chosen, run_id=run_id, after=last, limit=1):
            following = request.url.include_query_params(after_task_id=last)
            response.headers["Link"] = (
                f'<{following.path}?{following.query}>; rel="next"'
            )
    return found


@validated
def _task_page(after_task_id: TaskId | None, limit: Limit | None) -> None:
    """A page of the task list, checked as the query names it (the
    service's own refusal would name ``after``, the read-your-writes
    position over HTTP)."""


@validated
def _version_page(after_version: Position, limit: Limit | None) -> None:
    """A page of a task's events, checked as the query names it (the
    service's own refusal names ``after``)."""


@tasks.get("/tasks/{task_id}")
def task(served: Devs, task_id: str, response: Response) -> TaskSummary:
    """The task as its events say now (read from the log: always current).
    Its ``ETag`` is its version: send it back as ``If-Match`` with a human
    answer, so that an answer to a task that has moved on is refused."""
    summary = served.service.task(task_id)
    response.headers["ETag"] = etag(summary.version)
    return summary


@tasks.get("/tasks/{task_id}/gate-status")
def gate_status(served: Devs, task_id: str, position: ReadAfter) -> GateStatus:
    with served.service.reading_after(position):
        return served.service.gate_status(task_id)


@tasks.get("/tasks/{task_id}/lessons")
def lessons(served: Devs, task_id: str, position: ReadAfter) -> list[Lesson]:
    with served.service.reading_after(position):
        return served.service.lessons(task_id)


@tasks.get("/tasks/{task_id}/failure-report")
def failure_report(served: Devs, task_id: str, position: ReadAfter) -> FailureReport:
    with served.service.reading_after(position):
        return served.service.failure_report(task_id)


@tasks.get("/tasks/{task_id}/history")
def history(
    served: Devs,
    task_id: str,
    after_version: AfterVersionQuery = 0,
    limit: PageLimitQuery = None,
) -> list[HistoryEntry]:
    """The audited history, a page at a time (read from the log)."""
    _version_page(after_version, limit)
    return served.service.history(task_id, after=after_version, limit=limit)


@tasks.get("/tasks/{task_id}/history/{version}")
def state_at(served: Devs, task_id: str, version: int) -> TaskSummary:
    """The task as it was right after event number ``version``."""
    return served.service.state_at(task_id, version)


@tasks.get("/tasks/{task_id}/audit")
def audit(
    served: Devs,
    task_id: str,
    after_version: AfterVersionQuery = 0,
    limit: PageLimitQuery = None,
) -> TaskAudit:
    """The replayed history, a page at a time, each event with its actor
    and its link in the task's hash chain, and the state of the whole
    chain (intact, unchained, broken)."""
    _version_page(after_version, limit)
    return served.service.audit(task_id, after=after_version, limit=limit)


@tasks.get("/tasks/{task_id}/blacklist")
def blacklist(
    served: Devs, task_id: str, position: ReadAfter, candidate: str | None = None
) -> BlacklistAnswer:
    service = served.service
    with service.reading_after(position):
        return BlacklistAnswer(
            task_id=task_id,
            candidate=candidate,
            blacklisted=None
            if candidate is None
            else service.is_strategy_blacklisted(task_id, candidate),
            directive=service.blacklist_directive(task_id),
        )


# -------------------------------------------------- sessions and hand-offs


async def _human_answer(
    served: Served,
    request: Request,
    key: str | None,
    if_match: str | None,
    path: str,
    body: Body,
    named: str | None,
    answer: Callable[[RecoveryService, str, int | None], BaseModel],
) -> Response:
    """A human action: as the operator whose token was sent (``named``: the
    body's ``actor``), for the task version ``If-Match`` names. The request an
    ``Idempotency-Key`` names is the path with the body, not the ``If-Match``:
    a retry of an answer that was recorded answers as the first time, though
    the task has moved on since (by that answer)."""
    operator = _operator(request)
    version = if_version(if_match)
    return await served.command(
        200,
        key,
        path,
        body,
        lambda s: answer(s, acting(s, operator, named), version),
        caller=operator,
    )


@humans.post("/tasks/{task_id}/resume", response_model=ActionResult)
async def resume(
    served: Devs,
    request: Request,
    task_id: str,
    body: ActionBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/resume",
        body,
        body.actor,
        lambda s, actor, version: s.resume(
            task_id, actor=actor, reason=body.reason, if_version=version
        ),
    )


@humans.post("/tasks/{task_id}/rewind", response_model=ActionResult)
async def rewind(
    served: Devs,
    request: Request,
    task_id: str,
    body: RewindBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/rewind",
        body,
        body.actor,
        lambda s, actor, version: s.rewind(
            task_id,
            actor=actor,
            reason=body.reason,
            to_commit=body.to_commit,
            if_version=version,
        ),
    )


@humans.post("/tasks/{task_id}/skip", response_model=ActionResult)
async def skip(
    served: Devs,
    request: Request,
    task_id: str,
    body: ActionBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/skip",
        body,
        body.actor,
        lambda s, actor, version: s.skip(
            task_id, actor=actor, reason=body.reason, if_version=version
        ),
    )


@humans.post("/tasks/{task_id}/claim", response_model=ActionResult)
async def claim(
    served: Devs,
    request: Request,
    task_id: str,
    body: ClaimBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    """Say "I'm on it" for the stop the task waits in (an escalation, a
    pause or a hand-off): until released or taken over, an answer by anyone
    else is refused (409 ``claimed``, naming who)."""
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/claim",
        body,
        body.actor,
        lambda s, actor, version: s.claim(task_id, actor=actor, if_version=version),
    )


@humans.post("/tasks/{task_id}/release", response_model=ActionResult)
async def release(
    served: Devs,
    request: Request,
    task_id: str,
    body: ClaimBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    """The claimer lets go of the stop: anyone may answer it again."""
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/release",
        body,
        body.actor,
        lambda s, actor, version: s.release(task_id, actor=actor, if_version=version),
    )


@humans.post("/tasks/{task_id}/take-over", response_model=ActionResult)
async def take_over(
    served: Devs,
    request: Request,
    task_id: str,
    body: TakeOverBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    """Take a claimed stop over from its claimer (recorded: who took it from
    whom, and why)."""
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/take-over",
        body,
        body.actor,
        lambda s, actor, version: s.take_over(
            task_id, actor=actor, reason=body.reason, if_version=version
        ),
    )


@humans.post("/tasks/{task_id}/resolve", response_model=ActionResult)
async def resolve(
    served: Devs,
    request: Request,
    task_id: str,
    body: ResolveBody,
    key: KeyHeader = None,
    if_match: IfMatchHeader = None,
) -> Response:
    return await _human_answer(
        served,
        request,
        key,
        if_match,
        f"/tasks/{task_id}/resolve",
        body,
        body.actor,
        lambda s, actor, version: s.resolve_handoff(
            task_id,
            actor=actor,
            resolution=body.resolution,
            reason=body.reason,
            if_version=version,
        ),
    )


@humans.get("/sessions")
def sessions(served: Devs, position: ReadAfter) -> list[PendingSession]:
    with served.service.reading_after(position):
        return served.service.pending_sessions()


@humans.get("/handoffs")
def handoffs(served: Devs, position: ReadAfter) -> list[HandoffEntry]:
    with served.service.reading_after(position):
        return served.service.handoff_queue()


# -------------------------------------------------------------------- audit


@audits.get("/verify")
def verify(served: Devs) -> Verification:
    """``verify()``: every read model against a fold of the log, every
    event decodable, every hash chain unbroken; writes nothing."""
    return served.service.verify()


@audits.get("/replay-check")
def replay_check(
    served: Devs,
    task_id: Annotated[
        list[str] | None, Query(description="only these tasks (repeatable)")
    ] = None,
) -> ReplayCheckReport:
    """``replay_check()``: every recorded history re-decided by today's
    code under its own policy; writes nothing."""
    return served.service.replay_check(task_ids=task_id)


@audits.post("/what-if")
def what_if(served: Devs, body: WhatIfBody) -> WhatIfReport:
    """``what_if(policy)``: every recorded history (or the named tasks, or
    a run's) re-decided under the policy in force with ``policy``'s
    changes; writes nothing (a POST for its body, not a command)."""
    return served.service.what_if(
        body.policy, task_ids=body.task_ids, run_id=body.run_id
    )


# ------------------------------------------------------------------ metrics


def _figures(served: Served, run_id: str | None, since: str | None) -> Metrics:
    moment = None if since is None else parse_time(since, "since")
    return served.service.metrics(run_id=run_id, since=moment)


@metrics.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "the metrics in Prometheus' text format",
        }
    },
)
def prometheus_metrics(
    served: Devs,
    position: ReadAfter,
    run_id: RunQuery = None,
    since: SinceQuery = None,
) -> Response:
    """``metrics()`` in Prometheus' text exposition format (``devs_…``)."""
    with served.service.reading_after(position):
        figures = _figures(served, run_id, since)
    return Response(exposition(figures), media_type=PROMETHEUS_CONTENT_TYPE)


@metrics.get("/metrics/json")
def metrics_json(
    served: Devs,
    position: ReadAfter,
    run_id: RunQuery = None,
    since: SinceQuery = None,
) -> Metrics:
    """``metrics()`` as JSON."""
    with served.service.reading_after(position):
        return _figures(served, run_id, since)


# ------------------------------------------------------------ notifications


@notifications.get("/notifications", operation_id="notifications_notifications_get")
def list_notifications(
    served: Devs,
    after: Annotated[int, Query(description="log position to start after")] = 0,
    limit: Annotated[int, Query(description="at most this many (1 to 10,000)")] = 100,
) -> list[Notification]:
    """Escalations, pauses, hand-offs and blocked attempts, in log order."""
    return served.service.notifications(after=after, limit=limit)


@notifications.get("/outbox")
def outbox_messages(
    served: Devs,
    position: ReadAfter,
    after_position: Annotated[
        int, Query(alias="after_position", description="log position to start after")
    ] = 0,
    limit: Annotated[int, Query(description="at most this many (1 to 10,000)")] = 100,
) -> list[OutboxMessage]:
    """The messages the log asks to send (session.opened, handoff.claimed,
    …), in log order: the ``outbox`` read model."""
    with served.service.reading_after(position):
        return served.service.outbox_messages(after=after_position, limit=limit)


@notifications.get("/webhooks")
def webhooks(
    served: Devs,
    state: Annotated[
        str | None, Query(description="only deliveries in this state")
    ] = None,
    limit: Annotated[int, Query(description="at most this many (1 to 10,000)")] = 50,
) -> WebhooksReport:
    """``webhooks()``: every endpoint the outbox sends to (webhooks, Slack,
    e-mail) with its counts, and the latest deliveries (docs/notifications.md)."""
    return served.service.webhooks(state=state, limit=limit)  # type: ignore[arg-type]


@notifications.post("/webhooks/redeliver/{message_id}")
def redeliver(served: Devs, message_id: str) -> Redelivered:
    """``redeliver(message_id)``: try that message again at once on every
    endpoint it went to (404 when it has no delivery)."""
    return served.service.redeliver(message_id)


@notifications.post("/webhooks/redeliver-failed")
def redeliver_failed(served: Devs) -> Redelivered:
    """``redeliver_failed()``: try every dead letter again at once."""
    return served.service.redeliver_failed()


@notifications.get(
    "/notifications/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def stream(
    served: Devs,
    after: Annotated[int, Query(description="log position to start after")] = 0,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """Server-Sent Events: each notification as it is recorded, ``id:`` its
    log position, ``data:`` its JSON. A client reconnecting with
    ``Last-Event-ID`` misses nothing."""
    start = after
    if last_event_id is not None:
        try:
            start = int(last_event_id)
        except ValueError:
            msg = f"Last-Event-ID must be an integer, got {last_event_id[:40]!r}"
            raise InvalidInput(msg, field="Last-Event-ID") from None
    service = served.service
    service.notifications(after=start, limit=1)  # a bad position fails here, as 422
    return StreamingResponse(_events(service, start), media_type="text/event-stream")


# ---------------------------------------------------------------- the app


def create_app(
    service: RecoveryService | Callable[[], RecoveryService],
    *,
    token: str | None = None,
    read_wait: float | None = None,
    console_secret: str | None = None,
    notify: NotifySettings | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
    hook_store: str = "memory",
) -> FastAPI:
    """The ASGI app over ``service`` (or what ``service()`` opens at startup,
    closed at shutdown). With ``token``, every request but ``/healthz`` and
    the documentation needs ``Authorization: Bearer <token>``.
    ``console_secret`` signs the console's sessions (``DEVS_CONSOLE_SECRET``;
    default: a random one for this app, its sessions ending with it). With
    ``notify``, a thread of the app sends the outbox's messages and sweeps
    the human waits' deadlines while it runs (:mod:`devs.adapters.notifier`).
    With ``allowed_hosts`` (``devs serve`` gives ``DEVS_ALLOWED_HOSTS``), a
    request whose ``Host`` is not the connection's own address, a loopback
    name or one of them is a 421 (:class:`HostCheck`); ``None``: any
    ``Host`` (an app called in process). A body over ``max_body_bytes`` is a
    413 (:class:`FrontDoor`). ``hook_store`` names the store in the hooks'
    state files of this machine (``POST /hooks/AGENT``: an agent's ``http``
    hooks), as ``devs --db FILE hook AGENT`` names it."""
    served = Served(service, read_wait)
    mcp = McpEndpoint(served, guarded=token is not None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        opened = served.open()
        background = None
        try:
            if notify is not None:
                background = Background(served.service, notify).start()
            async with mcp.running():
                yield
        finally:
            if background is not None:
                await asyncio.to_thread(background.stop)
            served.close()
            if opened is not None:
                opened.close()

    app = FastAPIOffline(
        static_url=DOCS_ASSETS.rstrip("/"),
        title="devs-recovery",
        summary="An event-sourced referee for AI coding agents",
        version=VERSION,
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    app.state.devs = served
    if token is not None:
        try:
            check_token(token)
        except ValueError as error:
            raise InvalidInput(str(error), field="token") from None
        _document_the_token(app)
    expected = None if token is None else token.encode()
    app.add_middleware(Callers, expected=expected, served=served)
    hosts = None if allowed_hosts is None else HostCheck(allowed_hosts)
    app.add_middleware(FrontDoor, hosts=hosts, max_body=max_body_bytes)
    app.add_exception_handler(DevsError, _devs_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _bad_request)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, _client_gone)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _internal_error)
    for router in ROUTERS:
        app.include_router(router)
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]))
    app.router.routes.append(
        Route(HOOKS_PATH, _hook_endpoint(served, hook_store), methods=["POST"])
    )
    from devs.adapters import console

    if console_secret is not None:
        try:
            check_secret(console_secret)
        except ValueError as error:
            raise InvalidInput(str(error), field="console_secret") from None
    console.mount(app, lambda: served.service, served.writer, secret=console_secret)
    return app


MCP_PATH = "/mcp"
HOOKS_PATH = "/hooks/{agent}"
"""Where an agent's ``http`` hooks POST their events (docs/agents.md)."""


def _hook_endpoint(
    served: Served, store: str
) -> Callable[[Request], Awaitable[Response]]:
    """``POST /hooks/AGENT``: one hook event of AGENT (Claude Code's ``http``
    hooks), answered as ``devs hook AGENT`` answers it, in a thread (git and
    the store are blocking). Behind the API token like every path."""

    async def answer(request: Request) -> Response:
        from devs.adapters.hooks.registry import AGENTS, load
        from devs.adapters.hooks.runner import over_http

        agent = request.path_params["agent"]
        posting = [name for name in AGENTS if load(name).http]
        if agent not in posting:
            msg = (
                f"no http hooks for agent {agent[:40]!r}: "
                f"{', '.join(posting)} POST their events here"
            )
            raise InvalidInput(msg, field="agent")
        raw = await request.body()
        status, body = await run_in_threadpool(
            over_http, agent, raw, served.service, store, dict(os.environ)
        )
        return Response(body, status, media_type="application/json")

    return answer


class McpEndpoint:
    """``/mcp``: the MCP server (:mod:`devs.adapters.mcp`) over streamable
    HTTP, stateless and answering in JSON (any worker answers any request),
    behind the app's token like every other path. Its commands run on the
    worker's writer thread, as the HTTP API's do.

    The MCP SDK's session manager may run once only: a new MCP server is
    built each time the app starts (a test may start one app twice). Without
    a token, DNS-rebinding protection admits only loopback ``Host`` and
    ``Origin`` headers; with one, the token is the protection (a page in a
    browser cannot send it to another origin)."""

    def __init__(self, served: Served, *, guarded: bool) -> None:
        self.served = served
        self.guarded = guarded
        self._endpoint: ASGIApp | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from mcp.server.transport_security import TransportSecuritySettings

        from devs.adapters.mcp import build_server

        served = self.served
        # Without a token, anyone on this machine may call it: no run_gate
        # (it runs the caller's command).
        server = build_server(
            lambda: served.service,
            commands=served.writer.run,
            run_gates=self.guarded,
        )
        security = (
            TransportSecuritySettings(enable_dns_rebinding_protection=False)
            if self.guarded
            else None
        )
        sub = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
        )
        endpoint = sub.routes[0].app  # type: ignore[attr-defined]
        async with server.session_manager.run():
            self._endpoint = endpoint
            try:
                yield
            finally:
                self._endpoint = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            answer = error_response(
                503, "unavailable", "the MCP server starts with the app"
            )
            await answer(scope, receive, send)
            return
        await endpoint(scope, receive, send)


async def _devs_error(_: Request, error: DevsError) -> JSONResponse:
    """A service error, as its class says (``kind``, ``http_status``); a
    store that cannot be used says when to ask again (``Retry-After``)."""
    field = error.field if isinstance(error, InvalidInput) else None
    answer = error_response(error.http_status, error.kind, str(error), field)
    if isinstance(error, StaleAnswer) and error.version is not None:
        answer.headers["ETag"] = etag(error.version)  # what the task is now
    if isinstance(error, StoreError) and not isinstance(error, UnreadableEvent):
        wait = getattr(error, "retry_after", None) or STORE_RETRY_AFTER
        answer.headers["Retry-After"] = str(math.ceil(wait))
    return answer


def last_store_failure(service: RecoveryService) -> str | None:
    """What the last attempt to connect to the service's PostgreSQL database
    said, if it failed (``None`` on SQLite)."""
    if backend_of(service) is not Backend.POSTGRES:
        return None
    from devs.adapters.postgres import health_of

    datastore = getattr(service.factory, "datastore", None)
    health = health_of(datastore) if datastore is not None else None
    failure = health.failure if health is not None else None
    return failure.reason if failure is not None else None


async def _bad_request(request: Request, error: RequestValidationError) -> JSONResponse:
    """A request FastAPI could not read: a body not sent as JSON (415), an
    empty body or one that is not a JSON object (422), malformed JSON (400),
    or a bad value (422) named by its parameter or field, never by where it
    was sent."""
    refused = _refused_body(request, error)
    if refused is not None:
        return refused
    problems = error.errors()
    first = problems[0] if problems else {"loc": (), "msg": "bad request"}
    if first.get("type") == "json_invalid":
        return error_response(400, "malformed_json", str(first["msg"]))
    where = [str(part) for part in first["loc"]]
    if where and where[0] in _PARAMETER_SOURCES:
        where = where[1:]  # the parameter's name, not where it was sent
    field = where[0] if where else None
    detail = f"{'.'.join(where)}: {first['msg']}" if where else str(first["msg"])
    return error_response(422, "invalid_input", detail, field)


JSON_MEDIA_TYPE = "application/json"
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


def _refused_body(
    request: Request, error: RequestValidationError
) -> JSONResponse | None:
    """The refusal of a body wrong as a whole, saying what the route takes:
    not sent as JSON (415 ``unsupported_media_type``: FastAPI reads a body as
    JSON only when its ``Content-Type`` says so), empty (422, ``field`` the
    first field required), JSON but not an object (422). ``None`` otherwise."""
    route = request.scope.get("route")
    where = f"{request.method} {request.url.path}"
    shape, required = _body_shape(route)
    expected = f"a JSON object {shape} sent with Content-Type: {JSON_MEDIA_TYPE}"
    body = error.body
    if isinstance(body, bytes):  # not read as JSON: not sent as JSON
        sent = request.headers.get("content-type")
        got = f"Content-Type: {sent[:80]}" if sent else "no Content-Type"
        detail = f"{where} takes {expected}; got {got}"
        if sent is not None and sent.partition(";")[0].strip().lower() == (
            FORM_MEDIA_TYPE
        ):
            detail += (
                " (curl -d sends that: add -H 'Content-Type: application/json', "
                "or use curl --json)"
            )
        return error_response(415, "unsupported_media_type", detail)
    problems = error.errors()
    whole = [problem for problem in problems if tuple(problem["loc"]) == ("body",)]
    blank = (
        isinstance(body, str)
        and not body.strip()
        and any(problem.get("type") == "json_invalid" for problem in problems)
    )
    if blank or (whole and whole[0].get("type") == "missing"):
        detail = f"the body is empty: {where} takes {expected}"
        return error_response(422, "invalid_input", detail, required)
    if whole:
        got = _json_kind(whole[0].get("input"))
        detail = f"the body must be a JSON object {shape}, got {got}"
        return error_response(422, "invalid_input", detail)
    return None


def _body_shape(route: object) -> tuple[str, str | None]:
    """The route's body as docs/http.md writes it (``{task_id, run_id?}``),
    and its first required field (``None`` without one)."""
    body_field = getattr(route, "body_field", None)
    model = getattr(getattr(body_field, "field_info", None), "annotation", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return "{…}", None
    fields = model.model_fields
    names = [name if f.is_required() else f"{name}?" for name, f in fields.items()]
    required = [name for name, f in fields.items() if f.is_required()]
    return "{" + ", ".join(names) + "}", (required[0] if required else None)


def _json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


async def _client_gone(_: Request, error: ClientDisconnect) -> Response:
    """The client went before its body was read whole (it closed, or
    ``devs serve`` cut it off: ``DEVS_BODY_TIMEOUT``): no one to answer, and
    no traceback in the log for it."""
    return Response(status_code=400)


async def _internal_error(_: Request, error: Exception) -> Response:
    """An unexpected exception: a 500 in the API's error shape (uvicorn
    logs the traceback). Starlette answers it from its outermost middleware,
    outside :class:`FrontDoor`: the security headers are set here."""
    answer = error_response(
        500,
        "internal_error",
        "the server failed on an unexpected error (its log has the details); "
        "a command may or may not have been recorded: look before sending it "
        "again, or send it again with the same Idempotency-Key",
    )
    for name, value in SECURITY_HEADERS:
        answer.headers[name.decode()] = value.decode()
    answer.headers["content-security-policy"] = API_CSP.decode()
    return answer


async def _http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (a body it cannot parse, an unknown path, a
    wrong method) in the same shape."""
    kind = _HTTP_KINDS.get(error.status_code, "bad_request")
    answer = error_response(error.status_code, kind, str(error.detail))
    for name, value in (error.headers or {}).items():
        answer.headers[name] = value
    return answer


STREAMS_END = threading.Event()
"""Set when this process shuts down (``devs serve`` on SIGTERM): every open
stream ends at once, instead of holding the shutdown until its client goes."""


def end_streams() -> None:
    """End every notification stream of this process (at shutdown)."""
    STREAMS_END.set()


class _Outage:
    """Logs once that the streams wait for the store, and once that it is
    back: one line each, never a traceback, however many streams wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None

    def began(self, error: StoreError) -> None:
        with self._lock:
            if self.since is not None:
                return
            self.since = time.monotonic()
        logger.warning("notification streams wait for the store: %s", error)

    def ended(self) -> None:
        with self._lock:
            if self.since is None:
                return
            lasted, self.since = time.monotonic() - self.since, None
        logger.warning(
            "notification streams go on: the store is back after %.0f s", lasted
        )


_OUTAGE = _Outage()


def _events(service: RecoveryService, after: int) -> Iterator[bytes]:
    """The SSE stream from ``after`` on, until the client goes away or the
    server shuts down. While the store cannot be used the stream stays open,
    a comment line each :data:`STREAM_RETRY`, and goes on from its position
    when the store is back."""
    position = after
    quiet_since = time.monotonic()
    yield b"retry: 1000\n\n"
    while not STREAMS_END.is_set():
        try:
            found = service.notifications(after=position, limit=100)
        except UnreadableEvent:
            raise
        except StoreError as error:
            _OUTAGE.began(error)
            yield b": the store is unavailable; waiting for it\n\n"
            quiet_since = time.monotonic()
            STREAMS_END.wait(STREAM_RETRY)
            continue
        _OUTAGE.ended()
        for notification in found:
            data = orjson.dumps(notification.model_dump(mode="json"))
            yield b"id: %d\ndata: %s\n\n" % (notification.position, data)
            position = notification.position
        if found:
            quiet_since = time.monotonic()
            continue
        if time.monotonic() - quiet_since >= STREAM_HEARTBEAT:
            yield b": still here\n\n"
            quiet_since = time.monotonic()
        STREAMS_END.wait(STREAM_POLL)
        yield b""  # sends nothing; lets the server stop a stream whose client left


# ------------------------------------------------------------------ serving


def app_from_env() -> FastAPI:
    """The app ``devs serve`` runs in each worker, opened with the
    environment's settings (:class:`devs.adapters.config.Settings`): the
    database, the token (``DEVS_API_TOKEN``), the read-your-writes bound
    (``DEVS_READ_WAIT``), the ``Host`` names it answers to
    (``DEVS_ALLOWED_HOSTS``) and the largest body (``DEVS_MAX_BODY_BYTES``)."""
    settings = Settings()
    token = settings.api_token.get_secret_value() if settings.api_token else None
    secret = settings.console_secret
    # Beside a notifier process of ``devs serve``, the workers send nothing.
    notify = None if os.environ.get(NOTIFIER_ENV) == EXTERNAL else notify_settings()
    return create_app(
        lambda: open_service(settings),
        token=token,
        read_wait=settings.read_wait,
        console_secret=secret.get_secret_value() if secret else None,
        notify=notify,
        allowed_hosts=settings.allowed_hosts,
        max_body_bytes=settings.max_body_bytes,
        hook_store=store_identity(settings),
    )
