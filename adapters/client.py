"""A client of ``devs serve`` with the methods of ``RecoveryService``.

``HttpRecoveryClient("http://127.0.0.1:8765", token=...)`` answers with the
same pydantic models and raises the same exceptions as the in-process service,
so code written against one runs against the other (the LangGraph adapter
takes either). It reads its own writes (``X-Devs-Position`` sent back as
``X-Devs-After``) and sends ``exactly_once`` blocks under ``Idempotency-Key``
(docs/http.md, docs/python-api.md).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from devs.adapters.config import TOKEN_ENV
from devs.domain import (
    ActionResult,
    AttemptDecision,
    BudgetAnswer,
    DevsError,
    EntropyDecision,
    FailureReport,
    GateDecision,
    GateStatus,
    HandoffEntry,
    HistoryEntry,
    InvalidInput,
    Lesson,
    Metrics,
    Notification,
    PendingSession,
    Policy,
    RunState,
    SpendReport,
    StoreError,
    TaskIndexEntry,
    TaskSummary,
    UsageDecision,
    Verification,
)
from devs.domain.arguments import COMMANDS
from devs.domain.audit import ReplayCheckReport, TaskAudit, WhatIfReport
from devs.domain.commands import Written
from devs.domain.errors import StaleAnswer, error_of_kind
from devs.domain.names import DeliveryStateValue
from devs.domain.outbox import OutboxMessage
from devs.domain.ports import Redelivered, WebhooksReport
from devs.domain.service import RecoveryApi
from devs.domain.values import Limit, Position, TaskId, valid_position, validated

KEY_HEADER = "Idempotency-Key"
POSITION_HEADER = "X-Devs-Position"
AFTER_HEADER = "X-Devs-After"

M = TypeVar("M", bound=BaseModel)

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "devs_http_idempotency_key", default=None
)
_WRITTEN: contextvars.ContextVar[Written | None] = contextvars.ContextVar(
    "devs_http_written", default=None
)
_AFTER: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "devs_http_read_after", default=None
)


class Answer(Protocol):
    """What the client reads of an HTTP answer (httpx's ``Response``)."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    text: str

    def json(self) -> Any: ...


class Transport(Protocol):
    """What the client needs of an HTTP client: ``httpx.Client`` (or
    anything with its ``get``, ``post``, ``headers`` and ``close``, such as
    Starlette's ``TestClient`` over the app in process)."""

    @property
    def headers(self) -> Any: ...

    def get(self, url: str, *, params: Any = ..., headers: Any = ...) -> Any: ...
    def post(self, url: str, *, json: Any = ..., headers: Any = ...) -> Any: ...
    def close(self) -> None: ...


class Unauthorized(DevsError):
    """The service wants a token (``DEVS_API_TOKEN``) this client lacks or
    got wrong."""

    kind = "unauthorized"
    http_status = 401


class ServiceError(DevsError):
    """The service answered something this client cannot read as a model or
    as one of the service's errors (a proxy's error page, a 5xx)."""

    kind = "service_error"
    http_status = 502

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


ROUTES: dict[str, str] = {
    "start_run": "/runs",
    "start_task": "/tasks",
    "begin_attempt": "{task}/attempts",
    "record_gate": "{task}/gates",
    "report_entropy": "{task}/entropy",
    "log_lesson": "{task}/lessons",
    "record_usage": "{task}/usage",
    "raise_budget": "{task}/budget",
    "raise_run_budget": "{run}/budget",
    "resume": "{task}/resume",
    "rewind": "{task}/rewind",
    "skip": "{task}/skip",
    "claim": "{task}/claim",
    "release": "{task}/release",
    "take_over": "{task}/take-over",
    "resolve_handoff": "{task}/resolve",
}
"""Where each command of :data:`~devs.domain.arguments.COMMANDS` is POSTed
(docs/http.md); ``{task}`` is ``/tasks/<task_id>``, ``{run}`` ``/runs/<run_id>``."""


def _plain(value: Any) -> Any:
    """An argument as JSON carries it: a mapping of sequences (a DAG) as an
    object of arrays, a sequence as an array."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _error(response: Answer) -> DevsError:
    """The exception an error answer stands for (docs/http.md#errors)."""
    status = response.status_code
    try:
        body = response.json()
        kind, detail = str(body["error"]), str(body["detail"])
        field = body.get("field")
    except (ValueError, KeyError, TypeError):
        text = response.text[:200]
        return ServiceError(f"HTTP {status} from the service: {text!r}", status=status)
    if status == 401:
        return Unauthorized(detail)
    if status in (400, 422) and kind in ("malformed_json", "invalid_input"):
        if field == KEY_HEADER:
            field = "idempotency_key"  # as the in-process service names it
        return InvalidInput(detail, field=field)
    error_class = error_of_kind(kind)
    if error_class is StaleAnswer and status == StaleAnswer.http_status:
        tag = response.headers.get("ETag", "").strip('"')
        return StaleAnswer(detail, version=int(tag) if tag.isdigit() else None)
    if error_class is not None and error_class.http_status == status:
        return error_class(detail)
    if status in (503, 504):  # a proxy's or a balancer's: the store is away
        return StoreError(detail)
    return ServiceError(f"HTTP {status} ({kind}): {detail}", status=status)


P = ParamSpec("P")
R = TypeVar("R")


class _Sent(Generic[P, R]):
    """A command of :class:`HttpRecoveryClient`, declared by the service
    interface's method (``RecoveryApi.record_gate``): called as that method
    is (mypy checks each call against it), it sends the arguments it was
    given (:meth:`HttpRecoveryClient._send`) and reads the answer as
    ``answer``."""

    def __init__(
        self, declared: Callable[Concatenate[Any, P], R], answer: type[R]
    ) -> None:
        self.command = declared.__name__
        self.signature = inspect.signature(declared)
        self.answer = answer
        self.__doc__ = declared.__doc__
        self.__signature__ = self.signature  # as the method's, self first
        self.__name__ = self.__qualname__ = self.command

    def __call__(self, client: HttpRecoveryClient, *args: Any, **kwargs: Any) -> R:
        """As a function of the class: ``HttpRecoveryClient.record_gate(client,
        …)``, as a method can be called."""
        return self.__get__(client, type(client))(*args, **kwargs)

    @overload
    def __get__(self, client: None, owner: type[Any]) -> _Sent[P, R]: ...

    @overload
    def __get__(
        self, client: HttpRecoveryClient, owner: type[Any]
    ) -> Callable[P, R]: ...

    def __get__(
        self, client: HttpRecoveryClient | None, owner: type[Any]
    ) -> _Sent[P, R] | Callable[P, R]:
        if client is None:
            return self
        sender = client

        def sent(*args: P.args, **kwargs: P.kwargs) -> R:
            given = self.signature.bind(sender, *args, **kwargs)
            given.apply_defaults()
            return sender._send(self.command, given.arguments, self.answer)  # type: ignore[type-var]

        sent.__name__ = sent.__qualname__ = self.command
        sent.__doc__ = self.__doc__
        sent.__signature__ = self.signature.replace(  # type: ignore[attr-defined]
            parameters=list(self.signature.parameters.values())[1:]  # bound
        )
        return sent


class HttpRecoveryClient:
    """``RecoveryService``'s commands and queries, over ``devs serve``."""

    def __init__(
        self,
        url: str | Transport,
        *,
        token: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        """``url``: the service's base URL, or an HTTP client set up for it
        (an ``httpx.Client``; FastAPI's ``TestClient`` over the app in process);
        ``token``: its API token (default ``DEVS_API_TOKEN`` from the
        environment, if set)."""
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http: Transport
        if isinstance(url, str):
            self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout)
        else:
            self._http = url
            self._http.headers.update(headers)
        self.position = 0
        """The highest log position this client's commands reached."""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpRecoveryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ plumbing

    @contextmanager
    def exactly_once(self, key: str, request: str) -> Iterator[None]:
        """Within this block, commands are sent with ``Idempotency-Key: key``
        (the server compares their bodies; ``request`` is not sent)."""
        token = _KEY.set(key)
        try:
            yield
        finally:
            _KEY.reset(token)

    @contextmanager
    def written(self) -> Iterator[Written]:
        """The log position the commands of this block reached
        (``X-Devs-Position``)."""
        written = Written()
        token = _WRITTEN.set(written)
        try:
            yield written
        finally:
            _WRITTEN.reset(token)

    @contextmanager
    def reading_after(self, position: int | None) -> Iterator[None]:
        """Within this block, queries wait (``X-Devs-After``) until the read
        models folded log position ``position`` instead of the highest
        position this client's commands reached; ``None``: as outside. A
        position past the end of the server's log: ``PositionNotRecorded``
        at once."""
        token = _AFTER.set(None if position is None else valid_position(position))
        try:
            yield
        finally:
            _AFTER.reset(token)

    def wait_for(self, position: int, *, timeout: float | None = None) -> int:
        """Wait until the server's read models folded log position
        ``position``, at most ``timeout`` seconds and never longer than the
        server's ``DEVS_READ_WAIT`` (its default); the position they reached
        (``GET /position``). ``NotCaughtUp`` when the wait runs out;
        ``PositionNotRecorded`` at once (the server's 409
        ``position_not_recorded``) when ``position`` is past the end of the
        server's log."""
        params: dict[str, Any] = {"after": position}
        if timeout is not None:
            params["timeout"] = timeout
        response: Answer = self._http.get("/position", params=params)
        if response.status_code != 200:
            raise _error(response)
        return int(response.json()["position"])

    def _command(
        self,
        path: str,
        body: Mapping[str, Any],
        model: type[M],
        *,
        if_version: int | None = None,
    ) -> M:
        key = _KEY.get()
        headers = {KEY_HEADER: key} if key is not None else {}
        if if_version is not None:  # the task's version the answer is for
            headers["If-Match"] = f'"{int(if_version)}"'
        response: Answer = self._http.post(path, json=dict(body), headers=headers)
        if response.status_code not in (200, 201):
            raise _error(response)
        position = int(response.headers.get(POSITION_HEADER, "0"))
        self.position = max(self.position, position)
        written = _WRITTEN.get()
        if written is not None:
            written.position = position
        return model.model_validate_json(response.content)

    def _query(
        self, path: str, adapter: TypeAdapter[Any], *, params: Mapping[str, Any] = {}
    ) -> Any:
        after = _AFTER.get()
        if after is None:
            after = self.position
        headers = {AFTER_HEADER: str(after)} if after else {}
        response: Answer = self._http.get(path, params=dict(params), headers=headers)
        if response.status_code != 200:
            raise _error(response)
        return adapter.validate_json(response.content)

    @staticmethod
    def _task(task_id: str) -> str:
        return "/tasks/" + _segment(task_id)

    # ------------------------------------------------------------ commands

    def _send(self, command: str, given: Mapping[str, Any], answer: type[M]) -> M:
        """``command`` with the arguments its method was ``given``: the body
        is the fields of its domain model (:data:`devs.domain.arguments.COMMANDS`)
        but those the path names (``task_id``) and ``if_version`` (the
        ``If-Match`` header); the server checks them, in its words."""
        fields = COMMANDS[command].model_fields
        where = ROUTES[command]
        in_path = {
            name
            for name, mark in (("task_id", "{task}"), ("run_id", "{run}"))
            if mark in where
        }
        path = where
        if "task_id" in in_path:
            path = path.format(task=self._task(given["task_id"]))
        if "run_id" in in_path:
            path = path.format(run="/runs/" + _segment(given["run_id"]))
        # A field left at its default is left out: the body is the one a
        # server from before that field existed takes too (stop_scope, links).
        body = {
            name: _plain(given[name])
            for name, field in fields.items()
            if name != "if_version"
            and name not in in_path
            and (field.is_required() or given[name] != field.default)
        }
        return self._command(path, body, answer, if_version=given.get("if_version"))

    # One line a command: its parameters are the service interface's
    # (RecoveryApi, checked by mypy through _Sent), its body the command's
    # model's fields (_send).
    start_run = _Sent(RecoveryApi.start_run, RunState)
    start_task = _Sent(RecoveryApi.start_task, TaskSummary)
    begin_attempt = _Sent(RecoveryApi.begin_attempt, AttemptDecision)
    record_gate = _Sent(RecoveryApi.record_gate, GateDecision)
    report_entropy = _Sent(RecoveryApi.report_entropy, EntropyDecision)
    log_lesson = _Sent(RecoveryApi.log_lesson, Lesson)
    record_usage = _Sent(RecoveryApi.record_usage, UsageDecision)
    raise_budget = _Sent(RecoveryApi.raise_budget, BudgetAnswer)
    raise_run_budget = _Sent(RecoveryApi.raise_run_budget, RunState)
    resume = _Sent(RecoveryApi.resume, ActionResult)
    rewind = _Sent(RecoveryApi.rewind, ActionResult)
    skip = _Sent(RecoveryApi.skip, ActionResult)
    claim = _Sent(RecoveryApi.claim, ActionResult)
    release = _Sent(RecoveryApi.release, ActionResult)
    take_over = _Sent(RecoveryApi.take_over, ActionResult)
    resolve_handoff = _Sent(RecoveryApi.resolve_handoff, ActionResult)

    def claim_handoff(
        self, task_id: str, *, actor: str, if_version: int | None = None
    ) -> ActionResult:
        return self.claim(task_id, actor=actor, if_version=if_version)

    # ------------------------------------------------------------- queries

    def task(self, task_id: str) -> TaskSummary:
        return self._query(self._task(task_id), _adapter(TaskSummary))  # type: ignore[no-any-return]

    def state_at(self, task_id: str, version: int) -> TaskSummary:
        path = f"{self._task(task_id)}/history/{int(version)}"
        return self._query(path, _adapter(TaskSummary))  # type: ignore[no-any-return]

    def history(
        self, task_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[HistoryEntry]:
        params = _page(after, limit)
        path = self._task(task_id) + "/history"
        return self._query(path, _adapter(list[HistoryEntry]), params=params)  # type: ignore[no-any-return]

    def verify(self) -> Verification:
        return self._query("/verify", _adapter(Verification))  # type: ignore[no-any-return]

    def replay_check(self, *, task_ids: list[str] | None = None) -> ReplayCheckReport:
        params = {"task_id": list(task_ids)} if task_ids else {}
        return self._query(  # type: ignore[no-any-return]
            "/replay-check", _adapter(ReplayCheckReport), params=params
        )

    def what_if(
        self,
        policy: Policy | Mapping[str, object],
        *,
        task_ids: list[str] | None = None,
        run_id: str | None = None,
    ) -> WhatIfReport:
        """As the service's: a whole ``Policy``, or changes to the policy in
        force on the server."""
        changes = (
            policy.model_dump(mode="json")
            if isinstance(policy, Policy)
            else dict(policy)
        )
        body = {"policy": changes, "task_ids": task_ids, "run_id": run_id}
        response: Answer = self._http.post("/what-if", json=body)
        if response.status_code != 200:
            raise _error(response)
        return WhatIfReport.model_validate_json(response.content)

    def audit(
        self, task_id: str, *, after: int = 0, limit: int | None = None
    ) -> TaskAudit:
        params = _page(after, limit)
        path = self._task(task_id) + "/audit"
        return self._query(path, _adapter(TaskAudit), params=params)  # type: ignore[no-any-return]

    def tasks(
        self,
        *,
        state: str | None = None,
        run_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[TaskIndexEntry]:
        """As the service's: ordered by task id, those after ``after``, at
        most ``limit`` (``after_task_id`` and ``limit`` over HTTP); a page
        shorter than ``limit`` is the last."""
        _task_page(after, limit)  # refused here, named as in process
        given = (
            ("state", state),
            ("run_id", run_id),
            ("after_task_id", after),
            ("limit", limit),
        )
        params = {name: value for name, value in given if value is not None}
        return self._query("/tasks", _adapter(list[TaskIndexEntry]), params=params)  # type: ignore[no-any-return]

    def gate_status(self, task_id: str) -> GateStatus:
        path = self._task(task_id) + "/gate-status"
        return self._query(path, _adapter(GateStatus))  # type: ignore[no-any-return]

    def failure_report(self, task_id: str) -> FailureReport:
        path = self._task(task_id) + "/failure-report"
        return self._query(path, _adapter(FailureReport))  # type: ignore[no-any-return]

    def lessons(self, task_id: str) -> list[Lesson]:
        path = self._task(task_id) + "/lessons"
        return self._query(path, _adapter(list[Lesson]))  # type: ignore[no-any-return]

    def _blacklist(self, task_id: str, candidate: str | None) -> dict[str, Any]:
        params = {} if candidate is None else {"candidate": candidate}
        path = self._task(task_id) + "/blacklist"
        return self._query(path, _adapter(dict[str, Any]), params=params)  # type: ignore[no-any-return]

    def is_strategy_blacklisted(self, task_id: str, candidate: str) -> bool:
        return bool(self._blacklist(task_id, candidate)["blacklisted"])

    def blacklist_directive(self, task_id: str) -> str:
        return str(self._blacklist(task_id, None)["directive"])

    def pending_sessions(self) -> list[PendingSession]:
        return self._query("/sessions", _adapter(list[PendingSession]))  # type: ignore[no-any-return]

    def handoff_queue(self) -> list[HandoffEntry]:
        return self._query("/handoffs", _adapter(list[HandoffEntry]))  # type: ignore[no-any-return]

    def run_state(self, run_id: str) -> RunState:
        path = "/runs/" + _segment(run_id)
        return self._query(path, _adapter(RunState))  # type: ignore[no-any-return]

    def task_spend(self, task_id: str) -> SpendReport:
        path = self._task(task_id) + "/spend"
        return self._query(path, _adapter(SpendReport))  # type: ignore[no-any-return]

    def run_spend(self, run_id: str) -> SpendReport:
        path = "/runs/" + _segment(run_id) + "/spend"
        return self._query(path, _adapter(SpendReport))  # type: ignore[no-any-return]

    def metrics(
        self, *, run_id: str | None = None, since: datetime | None = None
    ) -> Metrics:
        """``since`` must carry a timezone (as the service asks): a naive one
        is ``InvalidInput`` here, before anything is sent."""
        params: dict[str, Any] = {}
        if run_id is not None:
            params["run_id"] = run_id
        if since is not None:
            if not isinstance(since, datetime) or since.utcoffset() is None:
                msg = (
                    "since must be a datetime with a timezone, got "
                    f"{type(since).__name__} {since!r:.60}"
                )
                raise InvalidInput(msg, field="since")
            params["since"] = since.isoformat()
        return self._query("/metrics/json", _adapter(Metrics), params=params)  # type: ignore[no-any-return]

    def outbox_messages(
        self, *, after: int = 0, limit: int = 100
    ) -> list[OutboxMessage]:
        params = {"after_position": after, "limit": limit}
        return self._query(  # type: ignore[no-any-return]
            "/outbox", _adapter(list[OutboxMessage]), params=params
        )

    def webhooks(
        self, *, state: DeliveryStateValue | None = None, limit: int = 50
    ) -> WebhooksReport:
        params: dict[str, Any] = {"limit": limit}
        if state is not None:
            params["state"] = state
        return self._query(  # type: ignore[no-any-return]
            "/webhooks", _adapter(WebhooksReport), params=params
        )

    def redeliver(self, message_id: str) -> Redelivered:
        path = "/webhooks/redeliver/" + _segment(message_id)
        return self._command(path, {}, Redelivered)

    def redeliver_failed(self) -> Redelivered:
        return self._command("/webhooks/redeliver-failed", {}, Redelivered)

    def notifications(self, *, after: int = 0, limit: int = 100) -> list[Notification]:
        params = {"after": after, "limit": limit}
        return self._query(  # type: ignore[no-any-return]
            "/notifications", _adapter(list[Notification]), params=params
        )


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    """One TypeAdapter per answer type (building one costs more than a query)."""
    return TypeAdapter(kind)


@validated
def _page(after: Position, limit: Limit | None) -> dict[str, Any]:
    """The query of a page of a task's events (history, audit); a bad value
    refused here, named as the service names it (``after``, not the query's
    ``after_version``)."""
    return {"after_version": after, **({} if limit is None else {"limit": limit})}


@validated
def _task_page(after: TaskId | None, limit: Limit | None) -> None:
    """A page of the task list, checked as the service checks it."""


def _segment(value: str) -> str:
    """``value`` as one path segment (``/``, ``?``, ``#``, ``%`` escaped)."""
    return quote(value, safe="")


if TYPE_CHECKING:
    from devs.domain import RecoveryService

    def _satisfied(
        service: RecoveryService, client: HttpRecoveryClient
    ) -> tuple[RecoveryApi, RecoveryApi]:
        """Not run: mypy checks here that the service and this client both
        have the service's interface (``devs.domain.service.RecoveryApi``)."""
        return service, client
