"""``devs serve`` as a user runs it: a real server process, a real HTTP client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from devs.adapters.serving import STOP_GRACE
from tests import devs_process

DEVS = str(Path(sys.executable).with_name("devs"))
TOKEN = "e2e-token-abcdefghijkl"
START_WAIT = 90
"""Seconds a server may take to answer /healthz. A PostgreSQL server comes
up in about 3 s on a quiet machine; beside three other test workers on two
slow cores it once took over 30 s (its worker had said it was listening)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    def __init__(
        self,
        db: Path,
        *extra: str,
        token: str | None = TOKEN,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.cwd = cwd
        self.environ = {**os.environ, **(env or {}), "DEVS_API_TOKEN": token or ""}
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.arguments = [DEVS, "--db", str(db), "serve", *extra]
        # free_port() lets its port go before the server binds it: another
        # process may take it meanwhile. Then: another port.
        for _ in range(3):
            errors = self.start()
            if errors is None:
                return
            if "Address already in use" not in errors:
                break
        raise AssertionError(f"devs serve did not come up: {errors}")

    def start(self) -> str | None:
        """Start on a free port: None once /healthz answers, else its stderr."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*self.arguments, "--port", str(self.port)],
            env=self.environ,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.client = httpx.Client(base_url=self.url, headers=self.headers, timeout=10)
        deadline = time.monotonic() + START_WAIT
        while True:
            try:
                if self.client.get("/healthz").status_code == 200:
                    return None
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.client.close()
                # SIGTERM: the supervisor stops its workers (they hold the
                # pipes too); SIGKILL only if it does not.
                self.process.terminate()  # no-op once it has exited
                try:
                    _, errors = self.process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    _, errors = self.process.communicate(timeout=30)
                return errors
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, and wait for the supervisor to stop its workers: it gives
        each up to STOP_GRACE seconds, then kills it, so the bound here is
        longer (a worker on PostgreSQL once took over 30 s to stop on a
        loaded CI machine; the supervision tests are about that, not these)."""
        self.client.close()
        self.process.terminate()
        self.process.communicate(timeout=STOP_GRACE + 30)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> dict[str, str]:
    """The server's backend: the SQLite file of ``--db``, or PostgreSQL."""
    if request.param == "sqlite":
        return {}
    return {"DEVS_DATABASE_URL": request.getfixturevalue("pg_url")}


@pytest.fixture
def server(tmp_path: Path, store: dict[str, str]) -> Iterator[Server]:
    running = Server(tmp_path / "state.sqlite", "--workers", "2", env=store)
    yield running
    running.stop()


def post(server: Server, path: str, body: dict[str, Any]) -> Any:
    response = server.client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


def read_events(lines: Iterator[str], count: int) -> list[tuple[int, dict[str, Any]]]:
    """``count`` SSE events (id, data) from a stream's lines."""
    events: list[tuple[int, dict[str, Any]]] = []
    event_id: int | None = None
    for line in lines:
        if line.startswith("id: "):
            event_id = int(line[4:])
        elif line.startswith("data: "):
            assert event_id is not None
            events.append((event_id, json.loads(line[6:])))
            if len(events) == count:
                return events
    raise AssertionError("the stream ended")


def test_the_ladder_and_the_stream_over_http(server: Server) -> None:
    post(server, "/tasks", {"task_id": "t1"})
    with server.client.stream("GET", "/notifications/stream") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        for _ in range(3):
            decision = post(server, "/tasks/t1/gates", {"exit_code": 1, "error": "e"})
        assert decision["outcome"] == "escalate"
        [(first_id, escalated)] = read_events(lines, 1)
        assert escalated["kind"] == "USER_ESCALATION"
        assert escalated["task_id"] == "t1"
    # while no client listens, more is recorded ...
    post(server, "/tasks/t1/resume", {"actor": "ann", "reason": "go"})
    post(server, "/tasks", {"task_id": "t2"})
    post(server, "/tasks/t2/entropy", {"score": 0.99})
    # ... and a client reconnecting with Last-Event-ID misses none of it
    headers = {"Last-Event-ID": str(first_id)}
    with server.client.stream(
        "GET", "/notifications/stream", headers=headers
    ) as stream:
        [(later_id, paused)] = read_events(stream.iter_lines(), 1)
    assert later_id > first_id
    assert (paused["kind"], paused["task_id"]) == ("TASK_PAUSED", "t2")
    # read your writes, on either worker
    written = server.client.post("/tasks", json={"task_id": "t3"})
    position = written.headers["X-Devs-Position"]
    for _ in range(4):
        tasks = server.client.get("/tasks", params={"after": position}).json()
        assert "t3" in {entry["task_id"] for entry in tasks}
    assert server.client.get("/readyz").json()["ready"] is True
    # what if a human had been asked at four failures: nobody, for t1
    report = post(
        server,
        "/what-if",
        {"policy": {"escalation_threshold": 4}, "task_ids": ["t1"]},
    )
    assert (report["recorded"]["escalations"], report["what_if"]["escalations"]) == (
        1,
        0,
    )
    assert report["dropped_human_actions"] == 1  # ann's resume answers nothing


def test_the_token_is_checked(server: Server) -> None:
    anonymous = httpx.Client(base_url=server.url, timeout=10)
    try:
        assert anonymous.get("/healthz").json() == {"ok": True}
        refused = anonymous.get("/tasks")
        assert refused.status_code == 401
        assert refused.json()["error"] == "unauthorized"
        assert anonymous.post("/what-if", json={}).status_code == 401
    finally:
        anonymous.close()


def test_serving_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DEVS_API_TOKEN"}
    result = subprocess.run(
        [DEVS, "--db", str(tmp_path / "x.sqlite"), "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 8
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "not a loopback address, without DEVS_API_TOKEN" in lines[0]
    assert not (tmp_path / "x.sqlite").exists()


def _serve_once(
    db: Path, env: dict[str, str], *options: str
) -> subprocess.CompletedProcess[str]:
    """``devs serve`` that is expected to refuse to start: its result."""
    return subprocess.run(
        [DEVS, "--db", str(db), "serve", "--port", str(free_port()), *options],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


@pytest.mark.parametrize(
    ("token", "words"),
    [("   ", "is blank"), ("short-secret", "has 12 characters")],
)
def test_a_blank_or_short_token_is_refused_at_start(
    tmp_path: Path, token: str, words: str
) -> None:
    """A blank token let ``Authorization: Bearer`` and blanks through."""
    result = _serve_once(
        tmp_path / "x.sqlite", {"DEVS_API_TOKEN": token}, "--host", "0.0.0.0"
    )
    assert result.returncode == 6, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"DEVS_API_TOKEN {words}; a token is at least 16" in lines[0]
    assert token.strip() not in lines[0] or not token.strip()
    assert not (tmp_path / "x.sqlite").exists()


def test_a_bad_read_wait_is_refused_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [DEVS, "--db", str(tmp_path / "x.sqlite"), "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DEVS_READ_WAIT": "forever"},
        check=False,
    )
    assert result.returncode == 6
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "DEVS_READ_WAIT must be a number of seconds in (0, 300]" in lines[0]


@pytest.mark.parametrize("value", ["-1", "20", "five", "5.5", "٣"])
def test_a_bad_worker_niceness_is_refused_in_one_line(
    tmp_path: Path, value: str
) -> None:
    result = subprocess.run(
        [DEVS, "--db", str(tmp_path / "x.sqlite"), "serve", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DEVS_WORKER_NICENESS": value},
        check=False,
    )
    assert result.returncode == 6
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "DEVS_WORKER_NICENESS must be an integer from 0 to 19" in lines[0]
    assert repr(value) in lines[0]


def test_a_store_that_cannot_be_opened_is_one_line_and_exit_9(
    tmp_path: Path, pg_url: str
) -> None:
    """As every other command: no traceback, the documented exit code."""
    missing_directory = _serve_once(tmp_path / "no" / "such" / "x.sqlite", {})
    started = time.monotonic()
    no_database = _serve_once(
        tmp_path / "x.sqlite",
        {
            "DEVS_DATABASE_URL": urlsplit(pg_url)._replace(path="/nosuchdb").geturl(),
            "DEVS_STORE_TIMEOUT": "60",  # said at once all the same
        },
    )
    assert time.monotonic() - started < 40  # not the 60 s allowed
    for result in (missing_directory, no_database):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 9, result.stderr
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("devs: error: cannot open ")
    assert "x.sqlite" in missing_directory.stderr
    assert "PostgreSQL database of DEVS_DATABASE_URL" in no_database.stderr
    # libpq's reason, not "couldn't get a connection after 30.00 sec"
    assert 'database "nosuchdb" does not exist' in no_database.stderr
    bad_url = _serve_once(
        tmp_path / "x.sqlite", {"DEVS_DATABASE_URL": "mysql://u:pw@h/d"}
    )
    assert bad_url.returncode == 6, bad_url.stderr
    assert bad_url.stderr.strip().splitlines() == [
        "devs: error: DEVS_DATABASE_URL must start with postgresql://, "
        "got a 'mysql' URL"
    ]


def test_idempotency_keys_hold_across_a_restart_and_workers(
    tmp_path: Path, store: dict[str, str]
) -> None:
    """A client whose answer was lost sends again with the same key: to the
    other worker, then to a restarted server. Nothing is counted twice."""
    db = tmp_path / "state.sqlite"
    first_server = Server(db, "--workers", "2", env=store)
    try:
        post(first_server, "/tasks", {"task_id": "t"})
        keyed = {"Idempotency-Key": "gate-0001"}
        body = {"exit_code": 1, "error": "boom"}
        first = first_server.client.post("/tasks/t/gates", json=body, headers=keyed)
        assert first.status_code == 200, first.text
        for _ in range(6):  # new connections: both workers answer some
            with httpx.Client(
                base_url=first_server.url, headers=first_server.client.headers
            ) as fresh:
                again = fresh.post("/tasks/t/gates", json=body, headers=keyed)
            assert (again.status_code, again.content) == (200, first.content)
    finally:
        first_server.stop()
    second_server = Server(db, env=store)
    try:
        again = second_server.client.post("/tasks/t/gates", json=body, headers=keyed)
        assert (again.status_code, again.content) == (200, first.content)
        other = second_server.client.post(
            "/tasks/t/gates", json={"exit_code": 0}, headers=keyed
        )
        assert other.status_code == 422
        assert other.json()["field"] == "Idempotency-Key"
        task = second_server.client.get("/tasks/t").json()
        assert task["consecutive_failures"] == 1
        history = second_server.client.get("/tasks/t/history").json()
        assert [entry["event"] for entry in history].count("GateFailed") == 1
    finally:
        second_server.stop()


def devs(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return devs_process.run([DEVS, *args], timeout=120, env={**os.environ, **env})


CLIENT = """
import sys, time, httpx
url, token, name, go = sys.argv[1:5]
headers = {"Authorization": "Bearer " + token}
with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
    def post(path, body, key):
        response = client.post(path, json=body, headers={"Idempotency-Key": key})
        assert response.status_code in (200, 201), (path, response.text)
    while not __import__("os").path.exists(go):
        time.sleep(0.01)
    post("/tasks", {"task_id": name}, name)
    for i in range(10):
        post("/tasks/shared/attempts", {"strategy": "the same idea"}, f"{name}-a{i}")
        if i % 2:
            lesson = {"failed_strategy": f"zz-{name}-{i}-qqqq", "rca_summary": "-"}
            post("/tasks/shared/lessons", lesson, f"{name}-l{i}")
    for i in range(2):
        post(f"/tasks/{name}/gates", {"exit_code": 1, "error": "e"}, f"{name}-g{i}")
        # a retry whose answer was lost: once more with the same key
        post(f"/tasks/{name}/gates", {"exit_code": 1, "error": "e"}, f"{name}-g{i}")
"""


def test_client_processes_on_two_workers_on_postgresql(
    tmp_path: Path, pg_url: str
) -> None:
    """4 client processes against 2 workers on one PostgreSQL database: every
    command counted exactly once, and every read model equal to a fold of the
    log (``devs verify``) and unchanged by a rebuild."""
    env = {"DEVS_DATABASE_URL": pg_url}
    running = Server(tmp_path / "unused.sqlite", "--workers", "2", env=env)
    go = tmp_path / "go"
    try:
        post(running, "/tasks", {"task_id": "shared"})
        clients = [
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, running.url, TOKEN, f"c{n}", str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(4)
        ]
        go.touch()
        for client in clients:
            _, errors = client.communicate(timeout=120)
            assert client.returncode == 0, errors
        history = running.client.get("/tasks/shared/history").json()
        events = [entry["event"] for entry in history]
        assert events.count("AttemptBegan") == 40
        assert events.count("LessonLogged") == 20
        position = running.client.post("/tasks", json={"task_id": "last"}).headers[
            "X-Devs-Position"
        ]
        after = {"after": position}

        def read_models() -> list[Any]:
            return [
                running.client.get("/tasks", params=after).json(),
                running.client.get("/tasks/shared/lessons", params=after).json(),
                running.client.get("/sessions", params=after).json(),
                *(
                    running.client.get(f"/tasks/c{n}/gate-status", params=after).json()
                    for n in range(4)
                ),
            ]

        before = read_models()
        assert len(before[1]) == 20
        failures = {
            entry["task_id"]: entry["consecutive_failures"] for entry in before[0]
        }
        assert failures == {"shared": 0, "last": 0} | {f"c{n}": 2 for n in range(4)}
        verified = devs(env, "verify", "--json")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert json.loads(verified.stdout)["ok"] is True
        rebuilt = devs(env, "projections", "rebuild")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert read_models() == before
    finally:
        running.stop()


def test_an_invalid_threshold_is_one_warning_not_one_per_worker(
    tmp_path: Path,
) -> None:
    running = Server(
        tmp_path / "state.sqlite",
        "--workers",
        "2",
        env={"DEVS_ESCALATION_THRESHOLD": "abc"},
    )
    try:
        started = post(running, "/tasks", {"task_id": "t"})
        assert started["policy"]["escalation_threshold"] == 3
    finally:
        running.client.close()
        running.process.terminate()
        _, errors = running.process.communicate(timeout=30)
    warnings = [line for line in errors.splitlines() if "warning" in line]
    assert warnings == [
        "devs: warning: ignoring DEVS_ESCALATION_THRESHOLD='abc' (Input should be "
        "a valid integer, unable to parse string as an integer); using the default 3"
    ], errors
