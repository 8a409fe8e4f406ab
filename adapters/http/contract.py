"""What the API says of itself: its headers, request bodies, answers and
the error shape, as ``/openapi.json`` documents them."""

from __future__ import annotations

import logging
import re
from importlib import metadata
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Header, Path, Query
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    create_model,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from devs.domain import (
    InvalidInput,
)
from devs.domain.arguments import (
    Arguments,
    BeginAttempt,
    Claim,
    LogLesson,
    RaiseBudget,
    RaiseRunBudget,
    RecordGate,
    RecordUsage,
    ReportEntropy,
    ResolveHandoff,
    Resume,
    Rewind,
    StartRun,
    StartTask,
    TakeOver,
    WhatIf,
)
from devs.domain.values import (
    ID_MAX,
    ID_PATTERN,
    KEY_MAX,
    LIMIT_MAX,
    POSITION_MAX,
    SPACES,
    VERSION_MAX,
    Actor,
    Dag,
    Pattern,
    Reason,
    TaskId,
)

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

POSITION_TEXT = r"^(0|[1-9][0-9]{0,17})$"
"""A log position written in a header: digits (a value past the log's end is
refused by the service, one that does not fit 64 bits by this)."""


def id_query(description: str, *, alias: str | None = None) -> Any:
    """A query parameter naming a task or a run: an id's limits and rules."""
    return Query(
        alias=alias,
        json_schema_extra={
            "minLength": 1,
            "maxLength": ID_MAX,
            "pattern": ID_PATTERN.regex,
        },
        description=description,
    )


def position_query(description: str, *, alias: str | None = None) -> Any:
    """A query parameter holding a log position. Its range is in the schema
    and checked by the service, which words the refusal."""
    return Query(
        alias=alias,
        json_schema_extra={"minimum": 0, "maximum": POSITION_MAX},
        description=description,
    )


def limit_query(description: str) -> Any:
    """A page's size (the range: as :func:`position_query`)."""
    return Query(
        json_schema_extra={"minimum": 1, "maximum": LIMIT_MAX},
        description=f"{description} (1 to {LIMIT_MAX:,})",
    )


TaskPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=ID_MAX,
        pattern=ID_PATTERN.regex,
        description="the task's id",
    ),
]
RunPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=ID_MAX,
        pattern=ID_PATTERN.regex,
        description="the run's id",
    ),
]
MessagePath = Annotated[
    str,
    Path(
        pattern=r"^msg_[0-9a-f]{32}$",
        description="an outbox message's id, as GET /outbox or /webhooks give it",
    ),
]
VersionPath = Annotated[
    int, Path(ge=1, le=VERSION_MAX, description="an event number of the task")
]

AfterQuery = Annotated[
    int | None, position_query("wait until the read models folded this position")
]
AfterHeaderValue = Annotated[
    str | None,
    Header(
        alias=AFTER_HEADER,
        description="as ?after=",
        json_schema_extra={"pattern": POSITION_TEXT},
    ),
]
RunQuery = Annotated[str | None, id_query("only the tasks of this run")]
AfterVersionQuery = Annotated[
    int,
    Query(
        json_schema_extra={"minimum": 0, "maximum": POSITION_MAX},
        description="start after this version",
    ),
]
PageLimitQuery = Annotated[int | None, limit_query("at most this many events")]
SinceQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=64,
        json_schema_extra={"format": "date-time"},
        description=(
            "only tasks started at or after this ISO 8601 time, with a "
            "timezone (2024-05-01T09:30:00Z)"
        ),
    ),
]
KeyHeader = Annotated[
    str | None,
    Header(
        alias=KEY_HEADER,
        json_schema_extra={
            "minLength": 1,
            "maxLength": KEY_MAX,
            "pattern": r"^[!-~]+$",
        },
        description=(
            "names this command: sent again with the same key and body, it "
            "records nothing new and answers as the first time (with another "
            "body, 422)"
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
        json_schema_extra={"pattern": r'^(\*|"[1-9][0-9]{0,17}"|[1-9][0-9]{0,17})$'},
    ),
]
_ENTITY_TAG = re.compile(r'"([1-9][0-9]{0,18})"|([1-9][0-9]{0,18})')


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
            f'gives it in its ETag (such as "7", or 7 unquoted), or *; got '
            f"{text[:64]!r}"
        )
        raise InvalidInput(msg, field=IF_MATCH_HEADER)
    return int(found.group(1) or found.group(2))


def etag(version: int) -> str:
    """A task's ``ETag``: its version, as a strong entity tag."""
    return f'"{version}"'


# ------------------------------------------------------------------- bodies


class Body(BaseModel):
    """A request body: JSON types as they are (no coercion), nothing unknown."""

    model_config = ConfigDict(extra="forbid", strict=True)

    def arguments(self, **path: Any) -> dict[str, Any]:
        """The command's arguments: the body's fields (validated), with the
        path's (``task_id``)."""
        return {**dict(self), **path}


def _addressable(value: str) -> str:
    """An id the API's paths can name: ``/`` would end the path segment."""
    if "/" in value:
        msg = "must not contain '/': over HTTP a task or run is named in the URL path"
        raise PydanticCustomError("slash", msg)
    return value


_ID_CHAR = rf"[^{SPACES}\x00-\x1f\x7f/]"
_ID_INNER = r"[^\x00-\x1f\x7f/]"


def _addressable_nodes(dag: dict[str, Any]) -> dict[str, Any]:
    for node in dag:
        _addressable(node)
    return dag


_NO_SLASH = rf"^{_ID_CHAR}(?:{_ID_INNER}*{_ID_CHAR})?$"
AddressableId = Annotated[TaskId, AfterValidator(_addressable), Pattern(_NO_SLASH)]
"""A task or run id as a body names one: as any id, and no ``/`` (over HTTP
a task or run is named in the URL path)."""


class _AddressableNodes:
    """A DAG's schema over HTTP: its node ids as :data:`AddressableId`'s."""

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        described = handler(schema)
        described.setdefault("propertyNames", {})["pattern"] = _NO_SLASH
        described.setdefault("additionalProperties", {}).setdefault("items", {})[
            "pattern"
        ] = _NO_SLASH
        return described


ActorField = Field(
    default=None,
    description=(
        "who acts: with an operator's token, that operator (may be left out; "
        "another name is a 403); required otherwise"
    ),
)
ReasonField = Field(
    default="(no reason given)",
    description="why, in a sentence: kept in the task's history",
)


def derived(
    command: type[Arguments],
    name: str,
    *,
    path: tuple[str, ...] = ("task_id",),
    **changed: tuple[Any, Any],
) -> type[Body]:
    """The body of ``command``'s route: the command's fields (their types,
    limits and descriptions: :mod:`devs.domain.arguments`) but those the path
    names (``task_id``) and ``if_version`` (the ``If-Match`` header), with
    the HTTP-only ``changed`` (an actor the operator's token gives)."""
    fields: dict[str, Any] = {
        field: (info.annotation, info)
        for field, info in command.model_fields.items()
        if field not in path and field != "if_version"
    }
    fields.update(changed)
    model: type[Body] = create_model(
        name, __base__=Body, __doc__=command.__doc__, **fields
    )
    return model


if TYPE_CHECKING:  # derived at import: to mypy, each is a Body
    StartRunBody = Body
    StartTaskBody = Body
    AttemptBody = Body
    GateBody = Body
    EntropyBody = Body
    LessonBody = Body
    UsageBody = Body
    BudgetBody = Body
    RunBudgetBody = Body
    ActionBody = Body
    RewindBody = Body
    ClaimBody = Body
    TakeOverBody = Body
    ResolveBody = Body
    WhatIfBody = Body
else:
    StartRunBody = derived(
        StartRun,
        "StartRunBody",
        path=(),
        run_id=(AddressableId, StartRun.model_fields["run_id"]),
        dag=(
            Annotated[
                Dag,
                AfterValidator(
                    lambda dag: {_addressable(n): p for n, p in dag.items()}
                ),
                _AddressableNodes(),
            ],
            StartRun.model_fields["dag"],
        ),
    )
    StartTaskBody = derived(
        StartTask,
        "StartTaskBody",
        path=(),
        task_id=(AddressableId, StartTask.model_fields["task_id"]),
    )
    AttemptBody = derived(BeginAttempt, "AttemptBody")
    GateBody = derived(RecordGate, "GateBody")
    EntropyBody = derived(ReportEntropy, "EntropyBody")
    LessonBody = derived(LogLesson, "LessonBody")
    UsageBody = derived(RecordUsage, "UsageBody")
    _ANSWER = {"actor": (Actor | None, ActorField), "reason": (Reason, ReasonField)}
    BudgetBody = derived(RaiseBudget, "BudgetBody", **_ANSWER)
    RunBudgetBody = derived(
        RaiseRunBudget, "RunBudgetBody", path=("run_id",), **_ANSWER
    )
    ActionBody = derived(Resume, "ActionBody", **_ANSWER)
    RewindBody = derived(Rewind, "RewindBody", **_ANSWER)
    ClaimBody = derived(Claim, "ClaimBody", actor=_ANSWER["actor"])
    TakeOverBody = derived(TakeOver, "TakeOverBody", **_ANSWER)
    ResolveBody = derived(ResolveHandoff, "ResolveBody", **_ANSWER)
    WhatIfBody = derived(WhatIf, "WhatIfBody", path=())


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
_REFUSALS = {
    400: "malformed JSON",
    401: "missing or wrong API token, or an unknown operator token",
    403: (
        "a human action without an operator's token once operators exist, or "
        "an actor other than the operator"
    ),
    404: "unknown task or run",
    409: (
        "illegal transition, already exists, claimed by someone else, or lost conflict"
    ),
    412: "stale_answer: the task moved on since the version If-Match names",
    413: "the body is larger than DEVS_MAX_BODY_BYTES",
    421: "the Host is not one this server answers to (DEVS_ALLOWED_HOSTS)",
    415: "a body not sent as JSON (Content-Type: application/json)",
    422: "a bad value, or a position past the log's end; nothing was written",
    503: "the store cannot be used (Retry-After says when to ask again)",
    504: "a read-your-writes wait ran out",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in _REFUSALS.items()
}
"""Every refusal the API can answer, by status (``answers`` picks a route's)."""

POSITION_HEADERS = {
    POSITION_HEADER: {
        "description": "a log position at or past the command's own events: "
        "send it as ?after= (or X-Devs-After) to read them",
        "schema": {"type": "integer", "minimum": 0},
    }
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before asking again",
        "schema": {"type": "integer", "minimum": 1},
    }
}
ETAG_HEADERS = {
    "ETag": {
        "description": 'the task\'s version, as If-Match takes it ("7")',
        "schema": {"type": "string"},
    }
}


def answers(
    method: str,
    path: str,
    *,
    body: bool,
    queries: bool,
    tag: str | None,
    ids: bool = False,
) -> dict[int | str, dict[str, Any]]:
    """The refusals one route can really answer, with the headers they carry:
    what ``/openapi.json`` says of it (each status with :class:`ErrorBody`)."""
    statuses = {503}
    if path != "/healthz":
        statuses.add(401)
    if body:
        statuses |= {400, 413, 415, 422}
    if queries or "{" in path:
        statuses.add(422)
    if ids or "{task_id}" in path or "{run_id}" in path or "{message_id}" in path:
        statuses.add(404)
    if method == "POST" and path not in ("/what-if",):
        statuses |= {409, 422}
    if tag == "humans" and method == "POST":
        statuses.add(403)
        if "{task_id}" in path:  # a task's answer may say its version
            statuses.add(412)
    if queries and method == "GET":
        statuses |= {409, 504}  # a position past the log's end; a wait ran out
    if path == "/healthz":
        statuses = set()
    statuses.add(421)  # the front door's, before any route
    chosen: dict[int | str, dict[str, Any]] = {}
    for status in sorted(statuses):
        chosen[status] = dict(ERROR_RESPONSES[status])
        if status == 503:
            chosen[status]["headers"] = _RETRY_AFTER
        if status == 412:
            chosen[status]["headers"] = ETAG_HEADERS
    return chosen


def operation_id(name: str, method: str) -> str:
    """A route's ``operationId`` as a generated SDK names its method: the
    command's name in camel case (``record_gate`` -> ``recordGate``); a query
    reads (``task`` -> ``getTask``) unless its name says so already."""
    first, *rest = name.split("_")
    words = [first, *(word.capitalize() for word in rest)]
    if method == "GET" and first not in ("list", "read", "get", "stream"):
        words = ["get", *(word.capitalize() for word in words)]
    return "".join(words)


DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
DOCS_ASSETS = "/static-offline-docs/"
"""Swagger UI's and ReDoc's scripts, served from the package: no CDN."""


MCP_PATH = "/mcp"
"""The MCP server over streamable HTTP (:class:`devs.adapters.http.app.McpEndpoint`)."""
WELL_KNOWN = "/.well-known/"
"""RFC 8615's URIs: answered without the token (none is served: a 404 tells an
MCP client that this server has no OAuth to discover, where a 401 would send
it into an authorization flow)."""

CONSOLE_PREFIX = "/console"
"""The web console's pages (:mod:`devs.adapters.console`): signed in with an
operator's token, kept by a session cookie; never the bearer token."""


API_CSP = b"default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
"""Every answer but the documentation's pages and the console's (which send
their own): nothing in it may run, nor be framed."""

SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
)
