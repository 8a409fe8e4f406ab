"""Every refusal as one JSON shape (:class:`~devs.adapters.http.contract.ErrorBody`):
the service's errors by their kind and status, malformed or unknown input
in HTTP's words."""

from __future__ import annotations

import math

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from devs.adapters.config import (
    Backend,
    backend_of,
)
from devs.adapters.http.contract import (
    _HTTP_KINDS,
    _PARAMETER_SOURCES,
    API_CSP,
    SECURITY_HEADERS,
    STORE_RETRY_AFTER,
    ErrorBody,
    etag,
)
from devs.domain import (
    DevsError,
    InvalidInput,
    RecoveryService,
    StaleAnswer,
    StoreError,
    UnreadableEvent,
)
from devs.domain.redaction import redact
from devs.domain.values import refusal


def error_response(
    status: int, kind: str, detail: str, field: str | None = None
) -> JSONResponse:
    body = ErrorBody(error=kind, detail=redact(detail), field=field)
    return JSONResponse(body.model_dump(), status_code=status)


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
    from devs.adapters.store.postgres import health_of

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
    model = body_model(request.scope.get("route"))
    if model is not None and tuple(first["loc"][:1]) == ("body",):
        body_errors = [
            {**problem, "loc": tuple(problem["loc"][1:])}
            for problem in problems
            if tuple(problem["loc"][:1]) == ("body",)
        ]
        wrong = refusal(model, body_errors)  # type: ignore[arg-type]
        return error_response(422, "invalid_input", str(wrong), wrong.field)
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


def body_model(route: object) -> type[BaseModel] | None:
    """The model of the route's body (``None``: it takes none)."""
    body_field = getattr(route, "body_field", None)
    model = getattr(getattr(body_field, "field_info", None), "annotation", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    return None


def _body_shape(route: object) -> tuple[str, str | None]:
    """The route's body as docs/http.md writes it (``{task_id, run_id?}``),
    and its first required field (``None`` without one)."""
    model = body_model(route)
    if model is None:
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


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (a body it cannot parse, an unknown path, a
    wrong method) in the same shape; a wrong method's ``Allow`` lists every
    method the path takes (Starlette's names only the first route's)."""
    kind = _HTTP_KINDS.get(error.status_code, "bad_request")
    detail = str(error.detail)
    headers = dict(error.headers or {})
    if error.status_code == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = (
            f"{request.method} is not allowed here; this path takes {headers['Allow']}"
        )
    answer = error_response(error.status_code, kind, detail)
    for name, value in headers.items():
        answer.headers[name] = value
    return answer


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """The methods some route of the app takes at the request's path."""
    routes = request.app.router.routes
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in routes):
            allowed.append(method)
    return allowed
