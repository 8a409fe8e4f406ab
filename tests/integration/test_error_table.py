"""Each error class says once how it is reported — its kind, HTTP status and
CLI exit code (domain/errors.py) — and the HTTP app, its client and the CLI
all read that one table."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from devs.adapters.cli.base import ExitCode, handles_errors
from devs.adapters.client import HttpRecoveryClient, ServiceError
from devs.adapters.http import create_app
from devs.domain import RecoveryService
from devs.domain.errors import (
    AlreadyExists,
    Conflict,
    DevsError,
    IllegalTransition,
    InvalidInput,
    NotCaughtUp,
    NotFound,
    PositionNotRecorded,
    StoreError,
    UnknownTask,
    UnreadableEvent,
    error_of_kind,
)

_ANY: TypeAdapter[object] = TypeAdapter(object)

TABLE: list[tuple[type[DevsError], str, int, ExitCode]] = [
    (InvalidInput, "invalid_input", 422, ExitCode.BAD_INPUT),
    (NotFound, "not_found", 404, ExitCode.NOT_FOUND),
    (IllegalTransition, "illegal_transition", 409, ExitCode.REFUSED),
    (AlreadyExists, "already_exists", 409, ExitCode.REFUSED),
    (Conflict, "conflict", 409, ExitCode.CONFLICT),
    (StoreError, "store_unavailable", 503, ExitCode.STORE),
    (NotCaughtUp, "not_caught_up", 504, ExitCode.STORE),
    (PositionNotRecorded, "position_not_recorded", 409, ExitCode.BAD_INPUT),
    (DevsError, "refused", 409, ExitCode.REFUSED),
]


def raising(error: DevsError) -> TestClient:
    def open_service() -> RecoveryService:
        raise AssertionError("not opened")

    app = create_app(open_service)

    @app.get("/boom")
    def boom() -> None:
        raise error

    return TestClient(app)


@pytest.mark.parametrize(("cls", "kind", "status", "code"), TABLE)
def test_every_edge_reports_an_error_as_its_class_says(
    cls: type[DevsError], kind: str, status: int, code: ExitCode
) -> None:
    assert (cls.kind, cls.http_status, cls.exit_code) == (kind, status, int(code))
    assert error_of_kind(kind) is cls
    error = cls("what went wrong")
    answer = raising(error).get("/boom")
    assert answer.status_code == status
    assert answer.json()["error"] == kind
    assert answer.json()["detail"] == "what went wrong"
    client = HttpRecoveryClient(raising(error))
    with pytest.raises(DevsError) as raised:
        client._query("/boom", _ANY)
    assert type(raised.value) is cls  # the client raises the service's class
    assert str(raised.value) == "what went wrong"

    @handles_errors
    def command() -> None:
        raise error

    with pytest.raises(SystemExit) as exited:
        command()
    assert exited.value.code == int(code)


def test_a_subclass_reports_as_the_class_that_declares_its_kind() -> None:
    assert (UnknownTask.kind, UnknownTask.http_status) == ("not_found", 404)
    unreadable = UnreadableEvent(
        "damaged", originator_id="task:t", originator_version=2, topic="x"
    )
    assert (unreadable.kind, unreadable.http_status, unreadable.exit_code) == (
        "store_unavailable",
        503,
        9,
    )
    assert error_of_kind("no_such_kind") is None


def test_an_answer_the_client_cannot_place_is_a_service_error() -> None:
    class Teapot(DevsError):
        kind = "teapot"
        http_status = 418

    client = HttpRecoveryClient(raising(Teapot("short and stout")))
    with pytest.raises(ServiceError, match=r"HTTP 418 \(teapot\): short and stout"):
        client._query("/boom", _ANY)
