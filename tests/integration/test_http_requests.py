"""What a curl user meets over HTTP (in process, FastAPI's TestClient): a
body not sent as JSON, an empty body, a bad ``after_version``, an unknown
task; and the task list a page at a time (``limit``, ``after_task_id``,
``Link: rel="next"``), over HTTP and through ``HttpRecoveryClient``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import InvalidInput, NotFound, RecoveryService
from tests.helpers import event_count

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def client(db_path: Path) -> Iterator[TestClient]:
    def opened() -> RecoveryService:
        return open_service(Settings(db=str(db_path)))

    app = create_app(opened, token=TOKEN, read_wait=0.3)
    with TestClient(app, headers=AUTH) as test_client:
        test_client.post("/tasks", json={"task_id": "t1"}).raise_for_status()
        yield test_client


def error(response: Any, status: int, kind: str, field: str | None = None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail", "field"}
    assert (body["error"], body["field"]) == (kind, field), body
    detail: str = body["detail"]
    return detail


# ------------------------------------------------------ the body's content type


@pytest.mark.parametrize(
    ("content", "headers", "got"),
    [
        (b"task_id=t2", FORM, "got Content-Type: application/x-www-form-urlencoded"),
        (b'{"task_id": "t2"}', FORM, "Content-Type: application/x-www-form-urlencoded"),
        (b'{"task_id": "t2"}', {"Content-Type": "text/plain"}, "text/plain"),
        (b'{"task_id": "t2"}', {}, "got no Content-Type"),
    ],
)
def test_a_body_not_sent_as_json_is_a_415_naming_both_content_types(
    client: TestClient,
    db_path: Path,
    content: bytes,
    headers: dict[str, str],
    got: str,
) -> None:
    before = event_count(db_path)
    detail = error(
        client.post("/tasks", content=content, headers=headers),
        415,
        "unsupported_media_type",
    )
    assert detail.startswith(
        "POST /tasks takes a JSON object "
        "{task_id, run_id?, agent?, last_commit?, links?} "
        "sent with Content-Type: application/json; "
    ), detail
    assert got in detail
    if headers is FORM:  # what curl -d sends: say how to send JSON
        assert "add -H 'Content-Type: application/json'" in detail
    assert event_count(db_path) == before


def test_json_is_taken_with_any_json_content_type(client: TestClient) -> None:
    for task_id, content_type in (
        ("t2", "application/json; charset=utf-8"),
        ("t3", "application/vnd.devs+json"),
    ):
        body = f'{{"task_id": "{task_id}"}}'.encode()
        answer = client.post(
            "/tasks", content=body, headers={"Content-Type": content_type}
        )
        assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    ("path", "field", "shape"),
    [
        ("/tasks", "task_id", "{task_id, run_id?, agent?, last_commit?, links?}"),
        ("/tasks/t1/gates", "exit_code", "{exit_code, gate?, strategy?, error?, "),
        # actor may be left out: an operator token names who acts
        ("/tasks/t1/resume", None, "{actor?, reason?}"),
        ("/what-if", None, "{policy?, task_ids?, run_id?}"),
    ],
)
@pytest.mark.parametrize(
    ("content", "headers"),
    [(b"", {}), (b"", JSON), (b"", FORM), (b" \n ", JSON)],
)
def test_an_empty_body_is_a_422_saying_so_and_what_to_send(
    client: TestClient,
    db_path: Path,
    path: str,
    field: str | None,
    shape: str,
    content: bytes,
    headers: dict[str, str],
) -> None:
    before = event_count(db_path)
    detail = error(
        client.post(path, content=content, headers=headers),
        422,
        "invalid_input",
        field,  # the first field the body needs, if any
    )
    assert detail.startswith(f"the body is empty: POST {path} takes a JSON object ")
    assert shape in detail
    assert detail.endswith("sent with Content-Type: application/json")
    assert event_count(db_path) == before


@pytest.mark.parametrize(
    ("content", "kind"),
    [(b"null", "null"), (b"[]", "an array"), (b'"t2"', "a string"), (b"7", "a number")],
)
def test_json_that_is_not_an_object_is_a_422_saying_what_it_is(
    client: TestClient, content: bytes, kind: str
) -> None:
    detail = error(
        client.post("/tasks", content=content, headers=JSON), 422, "invalid_input"
    )
    assert detail == (
        "the body must be a JSON object "
        f"{{task_id, run_id?, agent?, last_commit?, links?}}, "
        f"got {kind}"
    )


# --------------------------------------------------- names as HTTP gives them


@pytest.mark.parametrize("path", ["/tasks/t1/history", "/tasks/t1/audit"])
@pytest.mark.parametrize(
    ("query", "field", "text"),
    [
        ("after_version=-1", "after_version", "after_version must be a non-negative"),
        ("after_version=" + "9" * 20, "after_version", "after_version 99"),
        ("after_version=x", "after_version", "after_version: Input should be"),
        ("limit=0", "limit", "limit must be an integer in [1, 10000], got 0"),
        ("limit=10001", "limit", "limit must be an integer in [1, 10000]"),
    ],
)
def test_a_bad_page_of_events_names_the_query_parameter(
    client: TestClient, path: str, query: str, field: str, text: str
) -> None:
    detail = error(client.get(f"{path}?{query}"), 422, "invalid_input", field)
    assert detail.startswith(text), detail


def test_an_unknown_task_or_run_names_the_request_that_starts_it(
    client: TestClient,
) -> None:
    for response in (
        client.get("/tasks/ghost"),
        client.get("/tasks/ghost/gate-status"),
        client.get("/tasks/ghost/history"),
        client.post("/tasks/ghost/gates", json={"exit_code": 0}),
        client.post("/tasks/ghost/attempts", json={"strategy": "s"}),
        client.post("/what-if", json={"task_ids": ["ghost"]}),
    ):
        assert error(response, 404, "not_found") == (
            "unknown task 'ghost': start it with POST /tasks first"
        )
    for response in (client.get("/runs/ghost"), client.get("/metrics?run_id=ghost")):
        assert error(response, 404, "not_found") == (
            "unknown run 'ghost': start it with POST /runs first"
        )


def test_the_python_api_keeps_naming_its_methods(service: RecoveryService) -> None:
    with pytest.raises(NotFound, match=r"start it with start_task\(\) first"):
        service.task("ghost")
    with pytest.raises(NotFound, match=r"start it with start_run\(\) first"):
        service.run_state("ghost")


# ------------------------------------------------------------- the task list

IDS = ("t1", "b", "a", "Z", "é", "c", "t10", "t2")


def start(client: TestClient, ids: tuple[str, ...] = IDS) -> None:
    for task_id in ids:
        if task_id != "t1":  # the fixture's
            assert client.post("/tasks", json={"task_id": task_id}).status_code == 201


def test_the_list_comes_a_page_at_a_time_with_a_link_to_the_next(
    client: TestClient,
) -> None:
    start(client)
    everything = client.get("/tasks")
    assert [t["task_id"] for t in everything.json()] == sorted(IDS)
    assert "Link" not in everything.headers
    pages: list[list[str]] = []
    url: str | None = "/tasks?limit=3"
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text
        pages.append([t["task_id"] for t in answer.json()])
        url = answer.links.get("next", {}).get("url")
    assert pages == [["Z", "a", "b"], ["c", "t1", "t10"], ["t2", "é"]]
    last = client.get("/tasks?limit=2&after_task_id=t2")
    assert [t["task_id"] for t in last.json()] == ["é"]
    assert "Link" not in last.headers
    exact = client.get("/tasks?limit=2&after_task_id=t10")  # a full last page
    assert [t["task_id"] for t in exact.json()] == ["t2", "é"]
    assert "Link" not in exact.headers


def test_the_next_link_keeps_the_other_parameters(client: TestClient) -> None:
    start(client)
    client.post("/tasks/a/gates", json={"exit_code": 1}).raise_for_status()
    client.post("/tasks/c/gates", json={"exit_code": 1}).raise_for_status()
    first = client.get("/tasks?state=RUNNING&limit=2&after_task_id=b")
    assert [t["task_id"] for t in first.json()] == ["t1", "t10"]
    assert first.headers["Link"] == (
        '</tasks?state=RUNNING&limit=2&after_task_id=t10>; rel="next"'
    )
    url = first.links["next"]["url"]
    assert [t["task_id"] for t in client.get(url).json()] == ["t2", "é"]
    failed = client.get("/tasks?state=GATE_FAILED&limit=1")
    assert [t["task_id"] for t in failed.json()] == ["a"]
    assert "after_task_id=a" in failed.headers["Link"]


@pytest.mark.parametrize(
    ("query", "field", "text"),
    [
        ("limit=0", "limit", "limit must be an integer in [1, 10000], got 0"),
        ("limit=-5", "limit", "limit must be an integer in [1, 10000], got -5"),
        ("limit=10001", "limit", "limit must be an integer in [1, 10000]"),
        ("limit=" + "9" * 30, "limit", "limit must be an integer in [1, 10000]"),
        ("limit=NaN", "limit", "limit: Input should be a valid integer"),
        ("limit=1.5", "limit", "limit: Input should be a valid integer"),
        ("after_task_id=", "after_task_id", "after_task_id must not be empty"),
        ("after_task_id=a%0Ab", "after_task_id", "after_task_id must not contain"),
        ("after_task_id=a%00", "after_task_id", "after_task_id must not contain"),
        ("after_task_id=%20a", "after_task_id", "after_task_id must not start"),
        ("after_task_id=" + "x" * 201, "after_task_id", "after_task_id is 201"),
        ("after=-1", "after", "after must be a non-negative integer"),
        ("state=DONE", "state", "state must be one of"),
    ],
)
def test_a_bad_page_of_tasks_is_a_422_naming_the_parameter(
    client: TestClient, db_path: Path, query: str, field: str, text: str
) -> None:
    before = event_count(db_path)
    detail = error(client.get(f"/tasks?{query}"), 422, "invalid_input", field)
    assert detail.startswith(text), detail
    assert event_count(db_path) == before


def test_the_openapi_document_has_the_pages_and_the_415(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    listing = document["paths"]["/tasks"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"state", "run_id", "after_task_id", "limit", "after"} <= names
    assert "Link" in listing["responses"]["200"]["headers"]
    started = document["paths"]["/tasks"]["post"]["responses"]
    schema = started["415"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/ErrorBody"}


# ----------------------------------------------------------------- the client


def test_the_client_pages_through_the_list(client: TestClient) -> None:
    start(client)
    devs = HttpRecoveryClient(client, token=TOKEN)
    found: list[str] = []
    after = None
    while True:
        page = devs.tasks(after=after, limit=3)
        found += [entry.task_id for entry in page]
        if len(page) < 3:
            break
        after = page[-1].task_id
    assert found == sorted(IDS)
    assert [e.task_id for e in devs.tasks(after="t", limit=2)] == ["t1", "t10"]


@pytest.mark.parametrize(
    ("given", "field", "text"),
    [
        ({"limit": 0}, "limit", "limit must be an integer in [1, 10000], got 0"),
        ({"limit": float("nan")}, "limit", "limit must be an integer in [1, 10000]"),
        ({"after": ""}, "after", "after must not be empty"),
        ({"after": "a\nb"}, "after", "after must not contain control characters"),
    ],
)
def test_the_client_refuses_a_bad_page_as_the_service_does(
    client: TestClient,
    service: RecoveryService,
    given: dict[str, Any],
    field: str,
    text: str,
) -> None:
    devs = HttpRecoveryClient(client, token=TOKEN)
    for caller in (devs, service):
        with pytest.raises(InvalidInput) as refused:
            caller.tasks(**given)
        assert (refused.value.field, str(refused.value)[: len(text)]) == (field, text)


def test_the_client_names_a_bad_history_page_as_the_service_does(
    client: TestClient, service: RecoveryService
) -> None:
    devs = HttpRecoveryClient(client, token=TOKEN)  # t1 started (the fixture)
    for caller in (devs, service):
        with pytest.raises(InvalidInput) as refused:
            caller.history("t1", after=-1)
        assert refused.value.field == "after"
        assert str(refused.value) == "after must be a non-negative integer, got -1"
