"""The HTTP API in process (FastAPI's TestClient): every endpoint, its errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import InvalidInput, RecoveryService
from tests.helpers import event_count

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(db_path: Path) -> Iterator[TestClient]:
    def opened() -> RecoveryService:
        return open_service(Settings(db=str(db_path)))

    app = create_app(opened, token=TOKEN, read_wait=0.3)
    with TestClient(app, headers=AUTH) as test_client:
        yield test_client


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def error(response: Any, status: int, kind: str, field: str | None = None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail", "field"}
    assert body["error"] == kind
    assert body["field"] == field
    detail: str = body["detail"]
    return detail


def test_the_whole_ladder_over_http(client: TestClient) -> None:
    run = ok(
        client.post("/runs", json={"run_id": "r1", "dag": {"t1": [], "t2": ["t1"]}}),
        201,
    )
    assert run["ready"] == ["t1"]
    started = client.post(
        "/tasks",
        json={"task_id": "t1", "run_id": "r1", "agent": "a", "last_commit": "c1"},
    )
    assert ok(started, 201)["state"] == "RUNNING"
    assert int(started.headers["X-Devs-Position"]) >= 2
    attempt = ok(client.post("/tasks/t1/attempts", json={"strategy": "use a regex"}))
    assert attempt["proceed"] is True
    lesson = ok(
        client.post(
            "/tasks/t1/lessons",
            json={"failed_strategy": "use a regex", "rca_summary": "cannot nest"},
        ),
        201,
    )
    assert lesson["failed_strategy"] == "use a regex"
    blocked = ok(client.post("/tasks/t1/attempts", json={"strategy": "use a regex"}))
    assert blocked["proceed"] is False
    assert [s["task_id"] for s in ok(client.get("/sessions"))] == ["t1"]
    ok(client.post("/tasks/t1/resume", json={"actor": "ann", "reason": "try else"}))
    outcomes: list[str] = []
    while "escalate" not in outcomes and len(outcomes) < 3:
        decision = ok(
            client.post("/tasks/t1/gates", json={"exit_code": 1, "error": "boom"})
        )
        outcomes.append(decision["outcome"])
    assert outcomes[-1] == "escalate"
    ok(client.post("/tasks/t1/rewind", json={"actor": "ann", "to_commit": "c0"}))
    outcomes.clear()
    while "hand_off" not in outcomes and len(outcomes) < 5:
        decision = ok(client.post("/tasks/t1/gates", json={"exit_code": None}))
        outcomes.append(decision["outcome"])
        if decision["outcome"] == "escalate":
            ok(client.post("/tasks/t1/resume", json={"actor": "ann"}))
    assert outcomes[-1] == "hand_off"
    queue = ok(client.get("/handoffs"))
    assert [entry["payload"]["task_id"] for entry in queue] == ["t1"]
    ok(client.post("/tasks/t1/claim", json={"actor": "bob"}))
    resolved = ok(
        client.post(
            "/tasks/t1/resolve",
            json={"actor": "bob", "resolution": "complete", "reason": "fixed it"},
        )
    )
    assert resolved["state"] == "COMPLETED"
    run = ok(client.get("/runs/r1"))
    assert run["completed"] == ["t1"]
    assert run["ready"] == ["t2"]
    ok(client.post("/tasks", json={"task_id": "t2", "run_id": "r1"}), 201)
    entropy = ok(client.post("/tasks/t2/entropy", json={"score": 0.9}))
    assert entropy["triggered"] is True
    ok(client.post("/tasks/t2/skip", json={"actor": "ann", "reason": "dup"}))
    assert ok(client.get("/runs/r1"))["status"] == "COMPLETED"
    kinds = [n["kind"] for n in ok(client.get("/notifications"))]
    assert "HAND_OFF_REQUIRED" in kinds


def test_queries(client: TestClient) -> None:
    ok(client.post("/tasks", json={"task_id": "t1"}), 201)
    ok(client.post("/tasks/t1/gates", json={"exit_code": 1, "error": "e1"}))
    ok(
        client.post(
            "/tasks/t1/lessons", json={"failed_strategy": "s1", "rca_summary": "why"}
        ),
        201,
    )
    assert ok(client.get("/tasks/t1"))["consecutive_failures"] == 1
    assert [t["task_id"] for t in ok(client.get("/tasks?state=GATE_FAILED"))] == ["t1"]
    assert ok(client.get("/tasks?state=RUNNING")) == []
    assert ok(client.get("/tasks/t1/gate-status"))["last_passed"] is False
    assert ok(client.get("/tasks/t1/failure-report"))["failure_count"] == 1
    assert [x["failed_strategy"] for x in ok(client.get("/tasks/t1/lessons"))] == ["s1"]
    history = ok(client.get("/tasks/t1/history"))
    assert [h["version"] for h in history] == [1, 2, 3]
    page = ok(client.get("/tasks/t1/history?after_version=1&limit=1"))
    assert page == history[1:2]
    assert ok(client.get("/tasks/t1/history/1"))["state"] == "RUNNING"
    blacklist = ok(client.get("/tasks/t1/blacklist?candidate=s1"))
    assert blacklist["blacklisted"] is True
    assert "s1" in blacklist["directive"]
    assert ok(client.get("/tasks/t1/blacklist"))["blacklisted"] is None
    assert ok(client.get("/readyz"))["ready"] is True


def test_read_your_writes(client: TestClient) -> None:
    written = client.post("/tasks", json={"task_id": "t1"})
    position = int(written.headers["X-Devs-Position"])
    entries = ok(client.get(f"/tasks?after={position}"))
    assert [e["task_id"] for e in entries] == ["t1"]
    header = {"X-Devs-After": str(position)}
    assert ok(client.get("/tasks/t1/gate-status", headers=header))["state"] == "RUNNING"
    late = error(
        client.get(f"/sessions?after={position + 5}"),
        409,
        "position_not_recorded",
        "after",
    )
    assert late.startswith(
        f"position {position + 5} has not been recorded: the log ends at "
        f"position {position} "
    )
    error(
        client.get("/sessions", headers={"X-Devs-After": "soon"}),
        422,
        "invalid_input",
        "X-Devs-After",
    )


@pytest.mark.parametrize(
    ("path", "body", "field", "text"),
    [
        ("/tasks", {"task_id": ""}, "task_id", "task_id must not be empty"),
        ("/tasks", {"task_id": "t", "extra": 1}, "extra", "unknown field 'extra'"),
        ("/tasks", {}, "task_id", "task_id is required"),
        (
            "/tasks/t1/gates",
            {"exit_code": "1"},
            "exit_code",
            "must be an integer or None, got str '1'",
        ),
        ("/tasks/t1/gates", {"exit_code": 2**40}, "exit_code", "out of range"),
        ("/tasks/t1/entropy", {"score": 1.5}, "score", "out of range [0, 1]"),
        ("/tasks/t1/entropy", {"score": True}, "score", "must be a number, got bool"),
        ("/tasks/t1/attempts", {"strategy": "x" * 100_001}, "strategy", "characters"),
        ("/tasks/t1/resume", {"actor": "a", "reason": ""}, "reason", "must not be"),
        ("/runs", {"run_id": "r", "dag": {"a": ["a"]}}, "dag", "cycle"),
    ],
)
def test_bad_values_are_422_and_write_nothing(
    client: TestClient,
    db_path: Path,
    path: str,
    body: dict[str, Any],
    field: str,
    text: str,
) -> None:
    ok(client.post("/tasks", json={"task_id": "t1"}), 201)
    before = event_count(db_path)
    detail = error(client.post(path, json=body), 422, "invalid_input", field)
    assert text in detail
    assert event_count(db_path) == before


def test_malformed_json_is_400(client: TestClient, db_path: Path) -> None:
    before = event_count(db_path) if db_path.exists() else 0
    response = client.post(
        "/tasks", content=b'{"task_id": ', headers={"Content-Type": "application/json"}
    )
    error(response, 400, "malformed_json")
    assert (event_count(db_path) if db_path.exists() else 0) == before


def test_the_frameworks_refusals_have_the_same_shape(client: TestClient) -> None:
    assert "Not Found" in error(client.get("/nowhere"), 404, "not_found")
    error(client.delete("/tasks"), 405, "method_not_allowed")
    form = client.post("/tasks", content=b"task_id=t1", headers={"Content-Type": "x"})
    assert "Content-Type: application/json" in error(
        form, 415, "unsupported_media_type"
    )


def test_unknown_ids_are_404(client: TestClient) -> None:
    for response in (
        client.get("/tasks/ghost"),
        client.get("/tasks/ghost/gate-status"),
        client.get("/tasks/ghost/history"),
        client.get("/runs/ghost"),
        client.post("/tasks/ghost/gates", json={"exit_code": 0}),
    ):
        assert "ghost" in error(response, 404, "not_found")


def test_illegal_transitions_and_duplicates_are_409(client: TestClient) -> None:
    ok(client.post("/tasks", json={"task_id": "t1"}), 201)
    error(client.post("/tasks", json={"task_id": "t1"}), 409, "already_exists")
    detail = error(
        client.post("/tasks/t1/resume", json={"actor": "a"}), 409, "illegal_transition"
    )
    assert "cannot resume" in detail
    error(
        client.post("/tasks/t1/claim", json={"actor": "a"}), 409, "illegal_transition"
    )


def test_the_token_is_required_but_for_healthz(db_path: Path) -> None:
    app = create_app(lambda: open_service(Settings(db=str(db_path))), token=TOKEN)
    with TestClient(app) as anonymous:
        assert ok(anonymous.get("/healthz")) == {"ok": True}
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
        ):
            response = anonymous.get("/tasks", headers=headers)
            assert "send DEVS_API_TOKEN in the Authorization header" in error(
                response, 401, "unauthorized"
            )
            assert response.headers["WWW-Authenticate"] == "Bearer"
        error(anonymous.post("/tasks", json={"task_id": "t"}), 401, "unauthorized")
        assert ok(anonymous.get("/tasks", headers=AUTH)) == []
    assert not db_path.exists() or event_count(db_path) == 0


def test_a_leaked_secret_is_redacted_in_answers(client: TestClient) -> None:
    ok(client.post("/tasks", json={"task_id": "t1"}), 201)
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    decision = client.post(
        "/tasks/t1/gates", json={"exit_code": 1, "error": f"boom {key}"}
    )
    assert key not in decision.text
    refused = client.post("/tasks", json={"task_id": f"t-{key}"})
    assert key not in error(refused, 422, "invalid_input", "task_id")


def test_openapi_documents_every_path_and_the_error_shape(client: TestClient) -> None:
    document = ok(client.get("/openapi.json"))
    paths = document["paths"]
    for path in (
        "/runs",
        "/runs/{run_id}",
        "/tasks",
        "/tasks/{task_id}",
        "/tasks/{task_id}/attempts",
        "/tasks/{task_id}/gates",
        "/tasks/{task_id}/entropy",
        "/tasks/{task_id}/lessons",
        "/tasks/{task_id}/resume",
        "/tasks/{task_id}/rewind",
        "/tasks/{task_id}/skip",
        "/tasks/{task_id}/claim",
        "/tasks/{task_id}/resolve",
        "/tasks/{task_id}/gate-status",
        "/tasks/{task_id}/failure-report",
        "/tasks/{task_id}/history",
        "/tasks/{task_id}/history/{version}",
        "/tasks/{task_id}/blacklist",
        "/sessions",
        "/handoffs",
        "/notifications",
        "/notifications/stream",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, path
    gates = paths["/tasks/{task_id}/gates"]["post"]
    for status in ("400", "401", "404", "409", "422"):
        schema = gates["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}
    assert "GateDecision" in document["components"]["schemas"]


def test_a_bad_stream_position_is_422(client: TestClient) -> None:
    error(
        client.get("/notifications/stream", headers={"Last-Event-ID": "x"}),
        422,
        "invalid_input",
        "Last-Event-ID",
    )
    error(client.get("/notifications/stream?after=-1"), 422, "invalid_input", "after")


@pytest.mark.parametrize(
    ("path", "headers", "field"),
    [
        ("/notifications?after=x", {}, "after"),
        ("/notifications?limit=many", {}, "limit"),
        ("/tasks/t1/history?after_version=one", {}, "after_version"),
        ("/tasks/t1/history/v2", {}, "version"),
        ("/tasks?after=soon", {}, "after"),
        ("/tasks", {"X-Devs-After": "soon"}, "X-Devs-After"),
    ],
)
def test_a_bad_parameter_is_named_by_its_name(
    client: TestClient, path: str, headers: dict[str, str], field: str
) -> None:
    """The error names the query, path or header parameter, as it names a
    body's field, never where it was sent ("query")."""
    detail = error(client.get(path, headers=headers), 422, "invalid_input", field)
    assert detail.startswith(field), detail  # named first, as a body's field is


def test_the_docs_are_served_without_a_cdn_and_without_the_token(
    db_path: Path,
) -> None:
    """``/docs`` and ``/redoc`` load their scripts from the service itself (it
    often runs where nothing outside is reachable), and a browser gets them
    without the token it cannot send; the API itself still needs it."""
    app = create_app(lambda: open_service(Settings(db=str(db_path))), token=TOKEN)
    with TestClient(app) as browser:
        for page in ("/docs", "/redoc"):
            html = browser.get(page)
            assert html.status_code == 200, html.text
            assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
            assets += re.findall(r"""url: ?["']([^"']+)["']""", html.text)
            assert assets, html.text
            for asset in assets:
                assert not asset.startswith(("http:", "https:", "//")), asset
                fetched = browser.get(asset)
                assert fetched.status_code == 200, (asset, fetched.status_code)
        document = ok(browser.get("/openapi.json"))
        assert document["info"]["version"] == metadata.version("devs-recovery")
        assert document["security"] == [{"bearer": []}]
        assert document["components"]["securitySchemes"]["bearer"]["scheme"] == (
            "bearer"
        )
        error(browser.get("/tasks"), 401, "unauthorized")


# --------------------------------------------------------------- Idempotency-Key

KEYED_POSTS: list[tuple[str, dict[str, Any], int]] = [
    ("/runs", {"run_id": "r9", "dag": {"z": []}}, 201),
    ("/tasks", {"task_id": "t9"}, 201),
    ("/tasks/t/attempts", {"strategy": "bisect"}, 200),
    ("/tasks/t/gates", {"exit_code": 1, "error": "E"}, 200),
    ("/tasks/t/entropy", {"score": 0.1}, 200),
    ("/tasks/t/lessons", {"failed_strategy": "x", "rca_summary": "y"}, 201),
]


@pytest.mark.parametrize(("path", "body", "status"), KEYED_POSTS)
def test_a_keyed_post_sent_again_answers_the_same_and_writes_nothing(
    client: TestClient, db_path: Path, path: str, body: dict[str, Any], status: int
) -> None:
    ok(client.post("/tasks", json={"task_id": "t"}), 201)
    headers = {"Idempotency-Key": f"k-{path}"}
    first = client.post(path, json=body, headers=headers)
    assert first.status_code == status, first.text
    written = event_count(db_path)
    again = client.post(path, json=body, headers=headers)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert int(again.headers["X-Devs-Position"]) >= int(
        first.headers["X-Devs-Position"]
    )
    assert event_count(db_path) == written


def test_a_key_sent_with_another_body_is_a_422(
    client: TestClient, db_path: Path
) -> None:
    ok(client.post("/tasks", json={"task_id": "t"}), 201)
    headers = {"Idempotency-Key": "gate-1"}
    ok(client.post("/tasks/t/gates", json={"exit_code": 1}, headers=headers))
    written = event_count(db_path)
    for path, body in (
        ("/tasks/t/gates", {"exit_code": 0}),
        ("/tasks/t/entropy", {"score": 0.1}),
    ):
        refused = client.post(path, json=body, headers=headers)
        assert "another request" in error(
            refused, 422, "invalid_input", "Idempotency-Key"
        )
    assert event_count(db_path) == written
    assert ok(client.get("/tasks/t"))["consecutive_failures"] == 1


@pytest.mark.parametrize("key", ["has space", "x" * 256, "caf\u00e9"])
def test_a_bad_key_is_a_422_naming_the_header(
    client: TestClient, db_path: Path, key: str
) -> None:
    ok(client.post("/tasks", json={"task_id": "t"}), 201)
    written = event_count(db_path)
    refused = client.post(
        "/tasks/t/gates",
        json={"exit_code": 1},
        headers={b"Idempotency-Key": key.encode("utf-8")},
    )
    error(refused, 422, "invalid_input", "Idempotency-Key")
    assert event_count(db_path) == written


def test_a_refused_keyed_command_is_decided_again(client: TestClient) -> None:
    headers = {"Idempotency-Key": "early"}
    error(
        client.post("/tasks/t/gates", json={"exit_code": 1}, headers=headers),
        404,
        "not_found",
    )
    ok(client.post("/tasks", json={"task_id": "t"}), 201)
    decided = ok(client.post("/tasks/t/gates", json={"exit_code": 1}, headers=headers))
    assert decided["consecutive_failures"] == 1


def test_the_key_is_in_the_openapi_document(client: TestClient) -> None:
    """On every command: each POST but /what-if, a question with a body, and
    the redeliveries, which record nothing in the log (a message due again
    twice is due again once)."""
    document = ok(client.get("/openapi.json"))
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", [])}
            logged = path != "/what-if" and not path.startswith("/webhooks/")
            command = method == "post" and logged
            assert ("Idempotency-Key" in names) == command, (method, path)


def test_the_position_header_is_the_last_event_each_command_wrote(
    client: TestClient, db_path: Path
) -> None:
    """The position comes from the command's own recordings: exactly the last
    event it wrote, even when other writers recorded more since."""
    first = client.post("/tasks", json={"task_id": "t1"})
    assert int(first.headers["X-Devs-Position"]) == event_count(db_path)
    with open_service(Settings(db=str(db_path))) as other:
        other.start_task("elsewhere")
    gate = client.post("/tasks/t1/gates", json={"exit_code": 1})
    assert int(gate.headers["X-Devs-Position"]) == event_count(db_path)
    keyed = {"Idempotency-Key": "k-1"}
    entropy = client.post("/tasks/t1/entropy", json={"score": 0.1}, headers=keyed)
    written = int(entropy.headers["X-Devs-Position"])
    with open_service(Settings(db=str(db_path))) as other:
        other.start_task("later")
    # the receipt is saved with the command's events: they end where it ends
    assert written == event_count(db_path) - 1
    again = client.post("/tasks/t1/entropy", json={"score": 0.1}, headers=keyed)
    assert int(again.headers["X-Devs-Position"]) == event_count(db_path)


def test_create_app_refuses_a_token_that_cannot_be_one(
    service: RecoveryService,
) -> None:
    for token in ("", "   ", "short", "with space 0123456789"):
        with pytest.raises(InvalidInput, match="DEVS_API_TOKEN") as refused:
            create_app(service, token=token)
        assert refused.value.field == "token"


def test_a_command_s_arguments_are_validated_once(
    client: TestClient, db_path: Path
) -> None:
    """The body validated each argument against the command's model; the
    service then runs the command without validating them again (whose
    trace is what ``validated`` remembers of a call of short texts), and
    what the path gives is validated apart."""
    from devs.domain import values

    assert client.post("/tasks", json={"task_id": "t1"}).status_code == 201
    values._KNOWN.clear()
    answered = client.post("/tasks/t1/gates", json={"exit_code": 1, "gate": "tests"})
    assert answered.status_code == 200
    assert answered.json()["consecutive_failures"] == 1
    remembered = {key[0].__qualname__ for key in values._KNOWN}
    assert "RecoveryService.record_gate" not in remembered
    with open_service(Settings(db=str(db_path))) as service:  # a direct call
        service.record_gate("t1", 1, gate="tests")
    remembered = {key[0].__qualname__ for key in values._KNOWN}
    assert "RecoveryService.record_gate" in remembered  # validates, as it must
    too_long = "t" * 201
    refused = client.post(f"/tasks/{too_long}/gates", json={"exit_code": 1})
    assert refused.status_code == 422
    assert refused.json()["field"] == "task_id"
    assert "200 characters" in refused.json()["detail"]
