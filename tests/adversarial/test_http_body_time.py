"""The time a client of a real ``devs serve`` has to send a request's body.

Before ``DEVS_BODY_TIMEOUT``, a complete head ``POST /console/login`` (a
route without the token check) with ``Content-Length: 16000`` and no body
held its connection as long as the client liked: the head's timer ended with
the head, and a connection in a request was never closed for a new one. With
``DEVS_MAX_CONNECTIONS=16``, 16 such connections were all still open 12 s
later, and ``/healthz`` was a 503 ``too_many_connections`` (with the default
1,000, one client sufficed). All traffic here goes to 127.0.0.1, bounded in
count and time."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_serve import TOKEN, Server

CONNECTIONS = 16
BODY_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One worker, with a token, 16 connections at most, 2 s for a body."""
    folder = tmp_path_factory.mktemp("body-time")
    running = Server(
        folder / "state.sqlite",
        env={
            "DEVS_MAX_CONNECTIONS": str(CONNECTIONS),
            "DEVS_BODY_TIMEOUT": str(BODY_TIMEOUT),
            "DEVS_MAX_BODY_BYTES": str(4 * 1024 * 1024),
        },
    )
    yield running
    running.stop()


def _head(server: Server, path: str, length: int, *extra: str) -> bytes:
    """A complete request head announcing a body of ``length`` bytes."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        f"Origin: http://127.0.0.1:{server.port}",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _login_head(server: Server) -> bytes:
    """The reviewer's: the console's sign-in form, never sent."""
    return _head(
        server,
        "/console/login",
        16000,
        "Content-Type: application/x-www-form-urlencoded",
    )


def _connect(server: Server, timeout: float) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    conn.settimeout(timeout)
    return conn


def _until_closed(conn: socket.socket) -> tuple[bytes, bool]:
    """What the server sends until it closes (``True``) or the socket's
    timeout passes (``False``: still open)."""
    got = b""
    try:
        while chunk := conn.recv(65536):
            got += chunk
    except TimeoutError:
        return got, False
    except OSError:  # a reset: closed
        return got, True
    return got, True


def _error_of(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


@pytest.mark.waits  # bodies left to time out
def test_bodies_never_sent_do_not_keep_out_healthz(tmp_path: Path) -> None:
    """The reviewer's attack: 16 heads without their bodies filled the
    worker's 16 connections, and /healthz was a 503 for as long as the
    client liked. Now a new connection makes room at once, long before the
    bodies' deadline (the default 30 s here): the request whose body came
    last the longest ago is cut, a 503 to it."""
    server = Server(
        tmp_path / "state.sqlite",
        env={"DEVS_MAX_CONNECTIONS": str(CONNECTIONS)},
    )
    held: list[socket.socket] = []
    try:
        for _ in range(CONNECTIONS):
            conn = _connect(server, timeout=10)
            conn.sendall(_login_head(server))
            held.append(conn)
        time.sleep(0.3)  # every head read: all 16 in a request
        for _ in range(3):
            answer = httpx.get(
                f"{server.url}/healthz", headers={"Connection": "close"}, timeout=5
            )
            assert answer.status_code == 200, answer.text
        authed = httpx.get(
            f"{server.url}/tasks",
            headers={"Authorization": f"Bearer {TOKEN}", "Connection": "close"},
            timeout=5,
        )
        assert authed.status_code == 200, authed.text
        # the first head made room (one connection was wanted at a time),
        # and was told why; the others wait on for their bodies
        held[0].settimeout(1)
        got, closed = _until_closed(held[0])
        assert closed
        status, error = _error_of(got)
        assert (status, error["error"]) == (503, "too_many_connections")
        assert "body came last the longest ago" in error["detail"]
        for conn in held[1:]:
            conn.setblocking(False)
            with pytest.raises(BlockingIOError):
                conn.recv(1)
    finally:
        for conn in held:
            conn.close()
        server.stop()


@pytest.mark.waits  # waits out DEVS_BODY_TIMEOUT
@pytest.mark.parametrize(
    ("path", "authorized"),
    [("/console/login", False), ("/tasks", True), ("/tasks/t1/gates", True)],
)
def test_a_body_that_does_not_come_is_a_408_at_the_deadline(
    server: Server, path: str, authorized: bool
) -> None:
    """On every route, with a token or without one: before, the connection
    was still open 12 s later (and for as long as the client kept it)."""
    extra = [f"Authorization: Bearer {TOKEN}"] if authorized else []
    extra.append(
        "Content-Type: application/json"
        if path != "/console/login"
        else "Content-Type: application/x-www-form-urlencoded"
    )
    started = time.monotonic()
    with _connect(server, timeout=BODY_TIMEOUT * 5) as conn:
        conn.sendall(_head(server, path, 16000, *extra) + b'{"task_id": ')
        got, closed = _until_closed(conn)
    took = time.monotonic() - started
    assert closed, "the connection was still open after 10 s"
    assert BODY_TIMEOUT - 0.2 < took < BODY_TIMEOUT + 3, f"closed after {took:.1f} s"
    status, error = _error_of(got)
    assert status == 408
    assert error["error"] == "request_timeout"
    assert "DEVS_BODY_TIMEOUT" in error["detail"]
    assert b"x-frame-options: DENY" in got


@pytest.mark.waits  # trickles until DEVS_BODY_TIMEOUT cuts it
def test_a_body_trickled_below_the_rate_is_cut(server: Server) -> None:
    """A byte every 0.2 s keeps coming, but far under 16 KiB a second: it
    earns no time to speak of, and is cut at about DEVS_BODY_TIMEOUT."""
    started = time.monotonic()
    with _connect(server, timeout=0.2) as conn:
        conn.sendall(_login_head(server))
        got, closed = b"", False
        while time.monotonic() - started < BODY_TIMEOUT * 5:
            with contextlib.suppress(OSError):
                conn.sendall(b"a")
            got, closed = _until_closed(conn)
            if closed:
                break
    took = time.monotonic() - started
    assert closed, "the trickle was never cut"
    assert took < BODY_TIMEOUT + 3, f"cut after {took:.1f} s"
    assert _error_of(got)[0] == 408


@pytest.mark.waits  # sends for twice DEVS_BODY_TIMEOUT
def test_a_large_body_at_a_steady_pace_is_taken(server: Server) -> None:
    """A gate's 2 MiB output sent over about 4 s, twice DEVS_BODY_TIMEOUT:
    each 16 KiB received earns a second more, so a body that keeps coming
    at 512 KiB/s is never cut off."""
    created = server.client.post("/tasks", json={"task_id": "t-steady"})
    assert created.status_code == 201, created.text
    body = json.dumps({"exit_code": 0, "output": "x" * (2 * 1024 * 1024)}).encode()
    head = _head(
        server,
        "/tasks/t-steady/gates",
        len(body),
        f"Authorization: Bearer {TOKEN}",
        "Content-Type: application/json",
        "Connection: close",
    )
    step = 64 * 1024
    started = time.monotonic()
    with _connect(server, timeout=30) as conn:
        conn.sendall(head)
        for offset in range(0, len(body), step):
            conn.sendall(body[offset : offset + step])
            time.sleep(0.125)
        got, closed = _until_closed(conn)
    took = time.monotonic() - started
    assert took > BODY_TIMEOUT * 1.5, f"sent in {took:.1f} s: not slow enough"
    assert closed
    assert got.startswith(b"HTTP/1.1 200 "), got[:300]


def test_a_request_whose_body_came_is_not_cut(server: Server) -> None:
    """The body's time ends with the body: a keep-alive connection answers
    request after request, each body sent at once, past the deadline."""
    with httpx.Client(
        base_url=server.url, headers=server.headers, timeout=10
    ) as client:
        started = time.monotonic()
        for number in range(4):
            answer = client.post("/tasks", json={"task_id": f"t-kept-{number}"})
            assert answer.status_code == 201, answer.text
            time.sleep(0.8)
        assert time.monotonic() - started > BODY_TIMEOUT
