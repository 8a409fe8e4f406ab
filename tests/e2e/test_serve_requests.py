"""What a curl user meets, against a real ``devs serve``: requests written
byte for byte with ``http.client`` as curl sends them (``-d`` without a
``Content-Type``, an empty body), an unknown task, a bad ``after_version``,
and the task list a page at a time."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_serve import TOKEN, Server

CURL = {"User-Agent": "curl/8.5.0", "Accept": "*/*", "Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    env = {}
    if request.param == "postgres":
        env = {"DEVS_DATABASE_URL": request.getfixturevalue("pg_url")}
    running = Server(tmp_path / "state.sqlite", env=env)
    yield running
    running.stop()


def send(
    server: Server,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One request on its own connection: status, headers (by their
    lower-case names), JSON answer."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers={**CURL, **(headers or {})})
        response = connection.getresponse()
        answer = json.loads(response.read())
        names = {name.lower(): value for name, value in response.getheaders()}
        return response.status, names, answer
    finally:
        connection.close()


def test_what_curl_sends_wrong_is_named(server: Server) -> None:
    # curl -d 'task_id=t1' (form-encoded, its default)
    status, _, answer = send(
        server,
        "POST",
        "/tasks",
        b"task_id=t1",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 415, answer
    assert answer["error"] == "unsupported_media_type"
    assert "Content-Type: application/json" in answer["detail"]
    assert "got Content-Type: application/x-www-form-urlencoded" in answer["detail"]
    # JSON, without its Content-Type
    status, _, answer = send(server, "POST", "/tasks", b'{"task_id": "t1"}')
    assert status == 415, answer
    assert "got no Content-Type" in answer["detail"]
    # curl -X POST with no -d: an empty body
    for body, headers in (
        (b"", {"Content-Type": "application/json"}),
        (None, {"Content-Length": "0"}),
    ):
        status, _, answer = send(server, "POST", "/tasks", body, headers)
        assert status == 422, answer
        assert answer["error"] == "invalid_input"
        assert answer["field"] == "task_id"
        assert answer["detail"].startswith("the body is empty: POST /tasks takes")
    status, _, tasks = send(server, "GET", "/tasks")
    assert (status, tasks) == (200, [])  # nothing was written


def test_unknown_tasks_and_bad_pages_in_http_words(server: Server) -> None:
    status, _, answer = send(server, "GET", "/tasks/ghost")
    assert status == 404
    assert answer["detail"] == "unknown task 'ghost': start it with POST /tasks first"
    status, _, answer = send(
        server,
        "POST",
        "/tasks/ghost/gates",
        b'{"exit_code": 1}',
        {"Content-Type": "application/json"},
    )
    assert status == 404
    assert "start it with POST /tasks first" in answer["detail"]
    json_body = {"Content-Type": "application/json"}
    send(server, "POST", "/tasks", b'{"task_id": "t1"}', json_body)
    status, _, answer = send(server, "GET", "/tasks/t1/history?after_version=-1")
    assert (status, answer["field"]) == (422, "after_version")
    assert answer["detail"] == "after_version must be a non-negative integer, got -1"


def test_the_task_list_a_page_at_a_time(server: Server) -> None:
    ids = ["t3", "t1", "a", "t2", "b"]
    for task_id in ids:
        status, headers, _ = send(
            server,
            "POST",
            "/tasks",
            json.dumps({"task_id": task_id}).encode(),
            {"Content-Type": "application/json"},
        )
        assert status == 201
        written = int(headers["x-devs-position"])
    found: list[str] = []
    path: str | None = f"/tasks?limit=2&after={written}"
    while path is not None:
        status, headers, page = send(server, "GET", path)
        assert status == 200, page
        found += [task["task_id"] for task in page]
        link = headers.get("link")
        path = None if link is None else link.partition(">")[0].removeprefix("<")
    assert found == sorted(ids)
    for query, field in (
        ("limit=0", "limit"),
        ("limit=NaN", "limit"),
        ("limit=" + "9" * 25, "limit"),
        ("after_task_id=%0A", "after_task_id"),
    ):
        status, _, answer = send(server, "GET", f"/tasks?{query}")
        assert (status, answer["error"], answer["field"]) == (
            422,
            "invalid_input",
            field,
        ), answer
