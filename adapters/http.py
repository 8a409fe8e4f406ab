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

import hmac
import os
import time
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import orjson
from fastapi import FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from devs.adapters.prometheus import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from devs.adapters.prometheus import exposition
from devs.domain import (
    ActionResult,
    AlreadyExists,
    AttemptDecision,
    Conflict,
    DevsError,
    EntropyDecision,
    FailureReport,
    GateDecision,
    GateStatus,
    HandoffEntry,
    HistoryEntry,
    IllegalTransition,
    InvalidInput,
    Lesson,
    Metrics,
    NotFound,
    Notification,
    PendingSession,
    RecoveryService,
    RunState,
    StoreError,
    TaskIndexEntry,
    TaskSummary,
    Verification,
)
from devs.domain.application import DB_ENV, DEFAULT_DB
from devs.domain.audit import ReplayCheckReport, TaskAudit, WhatIfReport
from devs.domain.database import DEFAULT_READ_WAIT, READ_WAIT_ENV, read_wait
from devs.domain.redaction import redact
from devs.domain.values import parse_time

TOKEN_ENV = "DEVS_API_TOKEN"
STREAM_POLL = 0.25  # seconds between looks at the log for new notifications
STREAM_HEARTBEAT = 15.0  # seconds between comment lines on a quiet stream
POSITION_HEADER = "X-Devs-Position"
AFTER_HEADER = "X-Devs-After"
KEY_HEADER = "Idempotency-Key"

AfterQuery = Annotated[
    int | None, Query(description="wait until the read models folded this position")
]
AfterHeaderValue = Annotated[
    str | None, Header(alias=AFTER_HEADER, description="as ?after=")
]
RunQuery = Annotated[str | None, Query(description="only the tasks of this run")]
AfterVersionQuery = Annotated[int, Query(description="start after this version")]
PageLimitQuery = Annotated[int | None, Query(description="at most this many events")]
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


class ActionBody(Body):
    actor: str
    reason: str = "(no reason given)"


class RewindBody(ActionBody):
    to_commit: str | None = None


class ClaimBody(Body):
    actor: str


class ResolveBody(ActionBody):
    resolution: Literal["return", "complete", "skip"]


class WhatIfBody(Body):
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the policy fields to change (escalation_threshold, "
            "handoff_threshold, hitl_entropy_threshold, failure_history_cap, "
            "stuck_detection); the others, and any given null, keep the "
            "policy in force"
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


# ------------------------------------------------------------------- errors

_ERRORS: tuple[tuple[type[DevsError], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (InvalidInput, 422, "invalid_input"),
    (IllegalTransition, 409, "illegal_transition"),
    (AlreadyExists, 409, "already_exists"),
    (Conflict, 409, "conflict"),
    (StoreError, 503, "store_unavailable"),
    (DevsError, 409, "refused"),
)
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
        (401, "missing or wrong API token"),
        (404, "unknown task or run"),
        (409, "illegal transition, already exists, or lost conflict"),
        (422, "a bad value; nothing was written"),
        (503, "the store cannot be used"),
        (504, "a read-your-writes wait ran out"),
    )
}


class BearerToken:
    """Every request but ``/healthz`` needs ``Authorization: Bearer <token>``
    (compared in constant time), else 401. A plain ASGI middleware: a
    ``@app.middleware("http")`` function costs about 0.4 ms per request here."""

    def __init__(self, app: ASGIApp, expected: bytes) -> None:
        self.app = app
        self.expected = expected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/healthz":
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self.expected):
                answer = error_response(
                    401, "unauthorized", "send Authorization: Bearer <DEVS_API_TOKEN>"
                )
                answer.headers["WWW-Authenticate"] = "Bearer"
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


def error_response(
    status: int, kind: str, detail: str, field: str | None = None
) -> JSONResponse:
    body = ErrorBody(error=kind, detail=redact(detail), field=field)
    return JSONResponse(body.model_dump(), status_code=status)


class NotYet(Exception):
    """A read-your-writes wait ran out."""


# ---------------------------------------------------------------- the app


def create_app(
    service: RecoveryService | Callable[[], RecoveryService],
    *,
    token: str | None = None,
    read_wait: float = DEFAULT_READ_WAIT,
) -> FastAPI:
    """The ASGI app over ``service`` (or what ``service()`` opens at startup,
    closed at shutdown). With ``token``, every request but ``/healthz`` needs
    ``Authorization: Bearer <token>``."""
    holder: dict[str, RecoveryService] = {}
    if isinstance(service, RecoveryService):
        holder["service"] = service

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        opened = None
        if "service" not in holder:
            assert callable(service)
            opened = holder["service"] = service()
        try:
            yield
        finally:
            if opened is not None:
                opened.close()

    app = FastAPI(
        title="devs-recovery",
        summary="An event-sourced referee for AI coding agents",
        version="0.1.0",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    expected = f"Bearer {token}".encode() if token else None

    def svc() -> RecoveryService:
        return holder["service"]

    # ------------------------------------------------------------ plumbing

    if expected is not None:
        app.add_middleware(BearerToken, expected=expected)

    @app.exception_handler(DevsError)
    async def devs_error(_: Request, error: DevsError) -> JSONResponse:
        for error_class, status, kind in _ERRORS:
            if isinstance(error, error_class):
                field = error.field if isinstance(error, InvalidInput) else None
                return error_response(status, kind, str(error), field)
        raise error  # unreachable: DevsError is the last entry

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        first = problems[0] if problems else {"loc": (), "msg": "bad request"}
        if first.get("type") == "json_invalid":
            return error_response(400, "malformed_json", str(first["msg"]))
        where = [str(part) for part in first["loc"] if part not in ("body",)]
        field = where[0] if where else None
        detail = f"{'.'.join(where)}: {first['msg']}" if where else str(first["msg"])
        return error_response(422, "invalid_input", detail, field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        """FastAPI's own refusals (a body it cannot parse, an unknown path, a
        wrong method) in the same shape."""
        kind = _HTTP_KINDS.get(error.status_code, "bad_request")
        answer = error_response(error.status_code, kind, str(error.detail))
        for name, value in (error.headers or {}).items():
            answer.headers[name] = value
        return answer

    @app.exception_handler(NotYet)
    async def not_yet(_: Request, error: NotYet) -> JSONResponse:
        return error_response(504, "not_caught_up", str(error))

    # Commands run on the event loop, not in a worker thread: handing each to
    # a thread and back costs more than the decision itself (1,350 against 740
    # decisions/s on one worker, bench/http_bench.py), and a worker's commands
    # take turns anyway (one Python thread at a time, one SQLite writer at a
    # time). A command blocks its worker's loop only while it decides and
    # commits; queries, which may wait for the read models (``?after=``), run
    # in threads.
    def command(
        status: int,
        key: str | None,
        path: str,
        body: Body,
        call: Callable[[RecoveryService], BaseModel],
    ) -> Response:
        """Do a command (once per ``Idempotency-Key``, when one is given) and
        answer it, with the log position it reached. The answer is the
        model's own JSON: FastAPI would validate the model again against the
        endpoint's ``response_model`` (the same class) before writing it."""
        service = svc()
        with service.written() as written:
            if key is None:
                value = call(service)
            else:
                request = f"POST {path}\n{body.model_dump_json()}"
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
        return Response(
            value.model_dump_json(),
            status,
            {POSITION_HEADER: str(position)},
            media_type="application/json",
        )

    def caught_up(after: int | None, header: str | None) -> None:
        """Wait until the read models folded ``after`` (query or header)."""
        wanted = after
        if wanted is None and header is not None:
            try:
                wanted = int(header)
            except ValueError:
                msg = f"{AFTER_HEADER} must be an integer, got {header[:40]!r}"
                raise InvalidInput(msg, field=AFTER_HEADER) from None
        if wanted is None:
            return
        if wanted < 0:
            msg = f"after must be a non-negative integer, got {wanted}"
            raise InvalidInput(msg, field="after")
        deadline = time.monotonic() + read_wait
        while svc().catch_up() < wanted:
            if time.monotonic() >= deadline:
                msg = (
                    f"the read models did not reach position {wanted} within "
                    f"{read_wait:g} s"
                )
                raise NotYet(msg)
            time.sleep(0.01)

    # ------------------------------------------------------------ liveness

    @app.get("/healthz", tags=["service"])
    def healthz() -> Health:
        """The process is up (no token needed)."""
        return Health(ok=True)

    @app.get("/readyz", tags=["service"], responses={503: {"model": Readiness}})
    def readyz() -> Any:
        """The store is reachable and the read models caught up."""
        try:
            position = svc().catch_up()
        except StoreError:
            return JSONResponse(Readiness(ready=False, position=0).model_dump(), 503)
        return Readiness(ready=True, position=position)

    # ------------------------------------------------------------ commands

    @app.post("/runs", status_code=201, tags=["runs"], response_model=RunState)
    async def start_run(body: StartRunBody, key: KeyHeader = None) -> Response:
        return command(
            201, key, "/runs", body, lambda s: s.start_run(body.run_id, body.dag)
        )

    @app.post("/tasks", status_code=201, tags=["tasks"], response_model=TaskSummary)
    async def start_task(body: StartTaskBody, key: KeyHeader = None) -> Response:
        return command(
            201,
            key,
            "/tasks",
            body,
            lambda s: s.start_task(
                body.task_id,
                run_id=body.run_id,
                agent=body.agent,
                last_commit=body.last_commit,
            ),
        )

    @app.post(
        "/tasks/{task_id}/attempts", tags=["tasks"], response_model=AttemptDecision
    )
    async def begin_attempt(
        task_id: str, body: AttemptBody, key: KeyHeader = None
    ) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/attempts",
            body,
            lambda s: s.begin_attempt(task_id, body.strategy),
        )

    @app.post("/tasks/{task_id}/gates", tags=["tasks"], response_model=GateDecision)
    async def record_gate(
        task_id: str, body: GateBody, key: KeyHeader = None
    ) -> Response:
        return command(
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

    @app.post(
        "/tasks/{task_id}/entropy", tags=["tasks"], response_model=EntropyDecision
    )
    async def report_entropy(
        task_id: str, body: EntropyBody, key: KeyHeader = None
    ) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/entropy",
            body,
            lambda s: s.report_entropy(task_id, body.score),
        )

    @app.post(
        "/tasks/{task_id}/lessons",
        status_code=201,
        tags=["tasks"],
        response_model=Lesson,
    )
    async def log_lesson(
        task_id: str, body: LessonBody, key: KeyHeader = None
    ) -> Response:
        return command(
            201,
            key,
            f"/tasks/{task_id}/lessons",
            body,
            lambda s: s.log_lesson(task_id, body.failed_strategy, body.rca_summary),
        )

    @app.post("/tasks/{task_id}/resume", tags=["humans"], response_model=ActionResult)
    async def resume(task_id: str, body: ActionBody, key: KeyHeader = None) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/resume",
            body,
            lambda s: s.resume(task_id, actor=body.actor, reason=body.reason),
        )

    @app.post("/tasks/{task_id}/rewind", tags=["humans"], response_model=ActionResult)
    async def rewind(task_id: str, body: RewindBody, key: KeyHeader = None) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/rewind",
            body,
            lambda s: s.rewind(
                task_id, actor=body.actor, reason=body.reason, to_commit=body.to_commit
            ),
        )

    @app.post("/tasks/{task_id}/skip", tags=["humans"], response_model=ActionResult)
    async def skip(task_id: str, body: ActionBody, key: KeyHeader = None) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/skip",
            body,
            lambda s: s.skip(task_id, actor=body.actor, reason=body.reason),
        )

    @app.post("/tasks/{task_id}/claim", tags=["humans"], response_model=ActionResult)
    async def claim(task_id: str, body: ClaimBody, key: KeyHeader = None) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/claim",
            body,
            lambda s: s.claim_handoff(task_id, actor=body.actor),
        )

    @app.post("/tasks/{task_id}/resolve", tags=["humans"], response_model=ActionResult)
    async def resolve(
        task_id: str, body: ResolveBody, key: KeyHeader = None
    ) -> Response:
        return command(
            200,
            key,
            f"/tasks/{task_id}/resolve",
            body,
            lambda s: s.resolve_handoff(
                task_id,
                actor=body.actor,
                resolution=body.resolution,
                reason=body.reason,
            ),
        )

    # ------------------------------------------------------------- queries

    @app.get("/runs/{run_id}", tags=["runs"])
    def run_state(
        run_id: str, after: AfterQuery = None, x_after: AfterHeaderValue = None
    ) -> RunState:
        caught_up(after, x_after)
        return svc().run_state(run_id)

    @app.get("/tasks", tags=["tasks"])
    def tasks(
        state: str | None = None,
        run_id: str | None = None,
        after: AfterQuery = None,
        x_after: AfterHeaderValue = None,
    ) -> list[TaskIndexEntry]:
        caught_up(after, x_after)
        chosen: Any = state  # the service says which states there are
        return svc().tasks(state=chosen, run_id=run_id)

    @app.get("/tasks/{task_id}", tags=["tasks"])
    def task(task_id: str) -> TaskSummary:
        """The task as its events say now (read from the log: always current)."""
        return svc().task(task_id)

    @app.get("/tasks/{task_id}/gate-status", tags=["tasks"])
    def gate_status(
        task_id: str, after: AfterQuery = None, x_after: AfterHeaderValue = None
    ) -> GateStatus:
        caught_up(after, x_after)
        return svc().gate_status(task_id)

    @app.get("/tasks/{task_id}/lessons", tags=["tasks"])
    def lessons(
        task_id: str, after: AfterQuery = None, x_after: AfterHeaderValue = None
    ) -> list[Lesson]:
        caught_up(after, x_after)
        return svc().lessons(task_id)

    @app.get("/tasks/{task_id}/failure-report", tags=["tasks"])
    def failure_report(
        task_id: str, after: AfterQuery = None, x_after: AfterHeaderValue = None
    ) -> FailureReport:
        caught_up(after, x_after)
        return svc().failure_report(task_id)

    @app.get("/tasks/{task_id}/history", tags=["tasks"])
    def history(
        task_id: str,
        after_version: AfterVersionQuery = 0,
        limit: PageLimitQuery = None,
    ) -> list[HistoryEntry]:
        """The audited history, a page at a time (read from the log)."""
        return svc().history(task_id, after=after_version, limit=limit)

    @app.get("/tasks/{task_id}/history/{version}", tags=["tasks"])
    def state_at(task_id: str, version: int) -> TaskSummary:
        """The task as it was right after event number ``version``."""
        return svc().state_at(task_id, version)

    @app.get("/verify", tags=["audit"])
    def verify() -> Verification:
        """``verify()``: every read model against a fold of the log, every
        event decodable, every hash chain unbroken; writes nothing."""
        return svc().verify()

    @app.get("/replay-check", tags=["audit"])
    def replay_check(
        task_id: Annotated[
            list[str] | None, Query(description="only these tasks (repeatable)")
        ] = None,
    ) -> ReplayCheckReport:
        """``replay_check()``: every recorded history re-decided by today's
        code under its own policy; writes nothing."""
        return svc().replay_check(task_ids=task_id)

    @app.post("/what-if", tags=["audit"])
    def what_if(body: WhatIfBody) -> WhatIfReport:
        """``what_if(policy)``: every recorded history (or the named tasks, or
        a run's) re-decided under the policy in force with ``policy``'s
        changes; writes nothing (a POST for its body, not a command)."""
        return svc().what_if(body.policy, task_ids=body.task_ids, run_id=body.run_id)

    @app.get("/tasks/{task_id}/audit", tags=["tasks"])
    def audit(
        task_id: str,
        after_version: AfterVersionQuery = 0,
        limit: PageLimitQuery = None,
    ) -> TaskAudit:
        """The replayed history, a page at a time, each event with its actor
        and its link in the task's hash chain, and the state of the whole
        chain (intact, unchained, broken)."""
        return svc().audit(task_id, after=after_version, limit=limit)

    @app.get("/tasks/{task_id}/blacklist", tags=["tasks"])
    def blacklist(
        task_id: str,
        candidate: str | None = None,
        after: AfterQuery = None,
        x_after: AfterHeaderValue = None,
    ) -> BlacklistAnswer:
        caught_up(after, x_after)
        service = svc()
        return BlacklistAnswer(
            task_id=task_id,
            candidate=candidate,
            blacklisted=None
            if candidate is None
            else service.is_strategy_blacklisted(task_id, candidate),
            directive=service.blacklist_directive(task_id),
        )

    @app.get("/sessions", tags=["humans"])
    def sessions(
        after: AfterQuery = None, x_after: AfterHeaderValue = None
    ) -> list[PendingSession]:
        caught_up(after, x_after)
        return svc().pending_sessions()

    @app.get("/handoffs", tags=["humans"])
    def handoffs(
        after: AfterQuery = None, x_after: AfterHeaderValue = None
    ) -> list[HandoffEntry]:
        caught_up(after, x_after)
        return svc().handoff_queue()

    def figures(run_id: str | None, since: str | None) -> Metrics:
        moment = None if since is None else parse_time(since, "since")
        return svc().metrics(run_id=run_id, since=moment)

    @app.get(
        "/metrics",
        tags=["metrics"],
        response_class=Response,
        responses={
            200: {
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "description": "the metrics in Prometheus' text format",
            }
        },
    )
    def prometheus_metrics(
        run_id: RunQuery = None,
        since: SinceQuery = None,
        after: AfterQuery = None,
        x_after: AfterHeaderValue = None,
    ) -> Response:
        """``metrics()`` in Prometheus' text exposition format (``devs_…``)."""
        caught_up(after, x_after)
        return Response(
            exposition(figures(run_id, since)), media_type=PROMETHEUS_CONTENT_TYPE
        )

    @app.get("/metrics/json", tags=["metrics"])
    def metrics_json(
        run_id: RunQuery = None,
        since: SinceQuery = None,
        after: AfterQuery = None,
        x_after: AfterHeaderValue = None,
    ) -> Metrics:
        """``metrics()`` as JSON."""
        caught_up(after, x_after)
        return figures(run_id, since)

    @app.get("/notifications", tags=["notifications"])
    def notifications(
        after: Annotated[int, Query(description="log position to start after")] = 0,
        limit: Annotated[
            int, Query(description="at most this many (1 to 10,000)")
        ] = 100,
    ) -> list[Notification]:
        """Escalations, pauses, hand-offs and blocked attempts, in log order."""
        return svc().notifications(after=after, limit=limit)

    @app.get(
        "/notifications/stream",
        tags=["notifications"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    def stream(
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
        svc().notifications(after=start, limit=1)  # a bad position fails here, as 422
        return StreamingResponse(_events(svc, start), media_type="text/event-stream")

    return app


def _events(svc: Callable[[], RecoveryService], after: int) -> Iterator[bytes]:
    """The SSE stream from ``after`` on, until the client goes away."""
    position = after
    quiet_since = time.monotonic()
    yield b"retry: 1000\n\n"
    while True:
        found = svc().notifications(after=position, limit=100)
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
        time.sleep(STREAM_POLL)
        yield b""  # sends nothing; lets the server stop a stream whose client left


# ------------------------------------------------------------------ serving


def read_wait_from_env() -> float:
    """``DEVS_READ_WAIT`` in seconds, in (0, 300]; ``InvalidInput`` otherwise."""
    return read_wait(os.environ.get(READ_WAIT_ENV))


def app_from_env() -> FastAPI:
    """The app ``devs serve`` runs in each worker: the database from
    ``DEVS_DB`` (default ./devs_state.sqlite), the token from
    ``DEVS_API_TOKEN``, the read-your-writes bound from ``DEVS_READ_WAIT``."""
    db = os.environ.get(DB_ENV) or DEFAULT_DB
    token = os.environ.get(TOKEN_ENV) or None
    read_wait = read_wait_from_env()

    def open_service() -> RecoveryService:
        return RecoveryService(env={"SQLITE_DBNAME": db})

    return create_app(open_service, token=token, read_wait=read_wait)
