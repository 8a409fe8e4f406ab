"""HttpRecoveryClient: the service's methods over HTTP, its errors as the
service's own exceptions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient, ServiceError, Unauthorized
from devs.adapters.http import create_app
from devs.domain import (
    AlreadyExists,
    IllegalTransition,
    InvalidInput,
    NotFound,
    RecoveryService,
)
from devs.domain.names import NotificationKind

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def client(service: RecoveryService) -> Iterator[HttpRecoveryClient]:
    with TestClient(create_app(service, token=TOKEN)) as http:
        yield HttpRecoveryClient(http, token=TOKEN)


def test_answers_are_the_services_models(
    client: HttpRecoveryClient, service: RecoveryService
) -> None:
    started = client.start_task("t1", agent="coder")
    assert started == service.task("t1").model_copy(update={})
    for _ in range(3):
        decision = client.record_gate("t1", 1, gate="tests", error="assert 1 == 2")
    assert decision.outcome == "escalate"
    assert client.position > 0
    assert client.gate_status("t1").consecutive_failures == 3  # reads its writes
    assert [s.task_id for s in client.pending_sessions()] == ["t1"]
    resumed = client.resume("t1", actor="ann", reason="go on")
    assert resumed.actor == "ann"
    assert client.lessons("t1") == []
    client.log_lesson("t1", "regex tokenizer", "too brittle")
    assert client.is_strategy_blacklisted("t1", "regex tokenizer")
    assert "regex tokenizer" in client.blacklist_directive("t1")
    assert [e.event for e in client.history("t1", after=0, limit=2)] == [
        "Started",
        "GateFailed",
    ]
    assert client.state_at("t1", 1).consecutive_failures == 0
    assert [e.task_id for e in client.tasks(state="RUNNING")] == ["t1"]


def test_errors_are_the_services_exceptions(client: HttpRecoveryClient) -> None:
    with pytest.raises(NotFound, match="unknown task 'ghost'"):
        client.task("ghost")
    client.start_task("t1")
    with pytest.raises(AlreadyExists):
        client.start_task("t1")
    with pytest.raises(InvalidInput) as caught:
        client.report_entropy("t1", 1.5)
    assert caught.value.field == "score"
    with pytest.raises(IllegalTransition):
        client.resume("t1", actor="ann", reason="nothing to resume")
    with client.exactly_once("key-1", request=""):
        client.begin_attempt("t1", "a")
    with (
        pytest.raises(InvalidInput) as reused,
        client.exactly_once("key-1", request=""),
    ):
        client.begin_attempt("t1", "b")
    assert reused.value.field == "idempotency_key"


def test_a_missing_token_is_unauthorized(service: RecoveryService) -> None:
    with TestClient(create_app(service, token=TOKEN)) as http:
        anonymous = HttpRecoveryClient(http, token="wrong")
        with pytest.raises(Unauthorized):
            anonymous.tasks()


def test_an_answer_that_is_not_the_services_is_a_service_error() -> None:
    """A proxy's error page: not one of the service's errors."""

    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>Bad Gateway</html>")

    http = httpx.Client(base_url="http://devs", transport=httpx.MockTransport(proxy))
    with HttpRecoveryClient(http) as client, pytest.raises(ServiceError) as caught:
        client.task("t1")
    assert caught.value.status == 502
    assert "Bad Gateway" in str(caught.value)


def test_notifications_from_an_older_server_keep_their_kind() -> None:
    """Release 0.1.0 named a blocked attempt's notification
    ``task:blacklisted_strategy_attempted``: a client reading such a server
    gets today's kind, ``BLACKLISTED_STRATEGY_ATTEMPTED``."""
    old = [
        {"position": 3, "kind": "task:blacklisted_strategy_attempted",
         "task_id": "t1", "at": "2025-01-01T00:00:00Z", "session_id": None,
         "reason": "BLACKLISTED_STRATEGY", "failure_count": 1},
        {"position": 4, "kind": "TASK_PAUSED", "task_id": "t1",
         "at": "2025-01-01T00:00:00Z", "session_id": "s1",
         "reason": "blacklisted_strategy", "failure_count": None},
    ]  # fmt: skip

    def server(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/notifications"
        return httpx.Response(200, json=old)

    http = httpx.Client(base_url="http://devs", transport=httpx.MockTransport(server))
    with HttpRecoveryClient(http) as client:
        found = client.notifications()
    assert [n.kind for n in found] == [
        NotificationKind.BLACKLISTED_STRATEGY_ATTEMPTED,
        NotificationKind.TASK_PAUSED,
    ]
    assert found[0].model_dump(mode="json")["kind"] == "BLACKLISTED_STRATEGY_ATTEMPTED"


def test_a_command_s_body_is_its_model_s_fields_leaving_defaults_out() -> None:
    """The payload is the command's domain model's fields (but the path's
    ``task_id``); a field left at its default is left out, so a server from
    before it existed (``stop_scope``, ``links``) takes the body too."""
    sent: list[tuple[str, dict[str, object]]] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, json.loads(request.content)))
        return httpx.Response(418, json={"error": "teapot", "detail": "no"})

    http = httpx.Client(base_url="http://devs", transport=httpx.MockTransport(server))
    client = HttpRecoveryClient(http)
    for call in (
        lambda: client.start_run("r", {"a": ("b",), "b": []}),
        lambda: client.start_task("t", run_id="r"),
        lambda: client.record_gate("t", 1, output="E boom"),
        lambda: client.resolve_handoff(
            "t", actor="alice", resolution="skip", reason="done"
        ),
    ):
        with pytest.raises(ServiceError):
            call()
    assert sent == [
        ("/runs", {"run_id": "r", "dag": {"a": ["b"], "b": []}}),
        ("/tasks", {"task_id": "t", "run_id": "r"}),
        ("/tasks/t/gates", {"exit_code": 1, "output": "E boom"}),
        (
            "/tasks/t/resolve",
            {"actor": "alice", "reason": "done", "resolution": "skip"},
        ),
    ]


def test_each_command_of_the_client_is_the_interface_s_method() -> None:
    """Every command of the client is called as the service interface's
    method is: the same parameters (``inspect`` sees them, on the class as
    on an instance), the same defaults."""
    import inspect

    from devs.domain.arguments import COMMANDS
    from devs.domain.service import RecoveryApi

    client = HttpRecoveryClient("http://127.0.0.1:9")
    for command in COMMANDS:
        if command == "what_if":  # a query of the audit, not a command route
            continue
        declared = inspect.signature(getattr(RecoveryApi, command))
        assert inspect.signature(getattr(HttpRecoveryClient, command)) == declared
        bound = inspect.signature(getattr(client, command))
        assert list(bound.parameters) == list(declared.parameters)[1:]
    client.close()
