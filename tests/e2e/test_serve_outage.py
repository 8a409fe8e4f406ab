"""``devs serve`` on PostgreSQL while the database is stopped, as an operator
meets it: real server processes (two workers and the projector), a real SSE
client, and PostgreSQL stopped (fast shutdown) and started again on its data.

What must hold: ``/readyz`` says so within about a second; a command gives up
within ``DEVS_STORE_TIMEOUT`` with a 503 that says why and when to ask again;
an open notification stream stays open (a comment line while the store is
away) and goes on when it is back; nothing logs a traceback; and everything
works again without a restart.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_serve import Server
from tests.postgres import PostgresServer, create_database, start_server


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own: the session's is shared, never stopped."""
    server = start_server()
    yield server
    server.stop()


def follow(server: Server, lines: queue.Queue[str | None]) -> threading.Thread:
    """Read the notification stream on a connection of its own, line by line."""

    def read() -> None:
        with (
            httpx.Client(
                base_url=server.url, headers=server.headers, timeout=None
            ) as client,
            client.stream("GET", "/notifications/stream") as stream,
        ):
            try:
                for line in stream.iter_lines():
                    lines.put(line)
            except httpx.HTTPError:
                pass
        lines.put(None)  # the stream ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def next_line(lines: queue.Queue[str | None], wanted: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        assert line is not None, f"the stream ended before {wanted!r}"
        if wanted in line:
            return line
    raise AssertionError(f"no {wanted!r} within {seconds} s")


def escalate(server: Server, task_id: str) -> None:
    assert server.client.post("/tasks", json={"task_id": task_id}).status_code == 201
    for _ in range(3):
        answer = server.client.post(
            f"/tasks/{task_id}/gates", json={"exit_code": 1, "error": "e"}
        )
        assert answer.status_code == 200, answer.text


def test_an_outage_is_answered_in_seconds_and_ridden_out(
    tmp_path: Path, own_server: PostgresServer
) -> None:
    url = create_database(own_server, "outage")
    server = Server(
        tmp_path / "unused.sqlite",
        "--workers",
        "2",
        env={"DEVS_DATABASE_URL": url, "DEVS_STORE_TIMEOUT": "2"},
    )
    lines: queue.Queue[str | None] = queue.Queue()
    try:
        follow(server, lines)
        escalate(server, "before")
        next_line(lines, '"task_id":"before"', 30)

        own_server.halt()
        started = time.monotonic()
        ready = server.client.get("/readyz")
        ready_seconds = time.monotonic() - started
        assert ready.status_code == 503, ready.text
        assert ready_seconds < 5, ready_seconds  # about 1 s; minutes before

        started = time.monotonic()
        refused = server.client.post("/tasks", json={"task_id": "during"})
        refused_seconds = time.monotonic() - started
        assert refused.status_code == 503, refused.text
        assert refused_seconds < 15, refused_seconds  # about 2 s; minutes before
        assert "PostgreSQL is unreachable" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        # The stream stays open, and says why it is quiet.
        next_line(lines, ": the store is unavailable", 30)

        own_server.restart()
        deadline = time.monotonic() + 60
        while server.client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready again without a restart"
            time.sleep(0.5)
        escalate(server, "after")
        # The same stream goes on from where it was.
        next_line(lines, '"task_id":"after"', 60)
    finally:
        server.client.close()
        server.process.terminate()
        _, errors = server.process.communicate(timeout=60)
    assert "Traceback" not in errors, errors
    assert "response already started" not in errors, errors
    assert own_server.log_path.read_text(errors="replace").count("already exists") == 0


def test_the_console_and_operator_tokens_during_an_outage(
    tmp_path: Path, own_server: PostgresServer
) -> None:
    """A console page, a console answer and an operator's API call while the
    database is stopped: a 503 (a page for the console) within seconds,
    nothing written, no traceback; all works again once it is back."""
    from devs.adapters.config import open_service

    url = create_database(own_server, "console_outage")
    service = open_service(env={"DEVS_DATABASE_URL": url})
    token = service.add_operator("alice", actor="root").token
    service.close()
    server = Server(
        tmp_path / "unused.sqlite",
        env={"DEVS_DATABASE_URL": url, "DEVS_STORE_TIMEOUT": "2"},
    )
    console = httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)
    origin = {"Origin": server.url}
    try:
        escalate(server, "stuck")
        signed = console.post("/console/login", data={"token": token}, headers=origin)
        assert signed.status_code == 303, signed.text
        assert console.get("/console/").status_code == 200
        # The console's forms say which version of the task they answer.
        version = str(server.client.get("/tasks/stuck").json()["version"])

        own_server.halt()
        started = time.monotonic()
        page = console.get("/console/")
        assert page.status_code == 503, page.text[:300]
        assert page.headers["content-type"].startswith("text/html")
        assert "PostgreSQL is unreachable" in page.text
        assert time.monotonic() - started < 15
        answer = console.post(
            "/console/actions/resume",
            data={"task_id": "stuck", "reason": "during", "version": version},
            headers=origin,
        )
        assert answer.status_code == 503, answer.text[:300]
        api = httpx.get(
            f"{server.url}/sessions",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert api.status_code == 503, api.text
        assert int(api.headers["Retry-After"]) >= 1

        own_server.restart()
        deadline = time.monotonic() + 60
        while console.get("/console/").status_code != 200:
            assert time.monotonic() < deadline, "the console did not come back"
            time.sleep(0.5)
        done = console.post(
            "/console/actions/resume",
            data={"task_id": "stuck", "reason": "after", "version": version},
            headers=origin,
        )
        assert done.status_code == 303, done.text[:300]
        history = server.client.get("/tasks/stuck/history").json()
        reasons = [entry["changes"].get("reason") for entry in history]
        assert "during" not in reasons
        assert "after" in reasons
    finally:
        console.close()
        server.client.close()
        server.process.terminate()
        _, errors = server.process.communicate(timeout=60)
    assert "Traceback" not in errors, errors
