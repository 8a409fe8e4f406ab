"""What a client may hold of a real ``devs serve`` before it authenticates:
the size and time of a request's head, the connections, the body.

Measured before the bounds: a 100 MB header read for 21 s, the worker's
memory up; ~1,100 idle connections and every request failed, ``/healthz``
too; a 200 MB JSON body parsed for 15 s (docs/http.md, "Bounds before the
token"). All traffic here goes to 127.0.0.1, bounded in count and time."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_serve import DEVS, TOKEN, Server

HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _connect(server: Server, timeout: float = 10.0) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    conn.settimeout(timeout)
    return conn


def _answer(conn: socket.socket) -> bytes:
    """Whatever the server sends until it closes (or a reset, or the
    socket's timeout)."""
    got = b""
    with contextlib.suppress(OSError):
        while chunk := conn.recv(65536):
            got += chunk
    return got


def _error_of(raw: bytes) -> tuple[int, dict[str, Any]]:
    """The status and the JSON error of a raw answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One worker, with a token: every bound holds before it is checked."""
    folder = tmp_path_factory.mktemp("limits")
    running = Server(
        folder / "state.sqlite",
        env={"DEVS_MAX_BODY_BYTES": str(1024 * 1024), "DEVS_HEADER_TIMEOUT": "2"},
    )
    yield running
    running.stop()


# ------------------------------------------------------------- the head


def test_headers_over_the_bound_are_a_431_naming_the_setting(server: Server) -> None:
    with _connect(server) as conn:
        conn.sendall(HEAD + b"X-Big: " + b"a" * (100 * 1024))  # never ended
        status, error = _error_of(_answer(conn))
    assert status == 431
    assert error["error"] == "headers_too_large"
    assert "65,536 bytes (DEVS_MAX_HEADER_BYTES)" in error["detail"]
    # under the bound, a request is answered
    with _connect(server) as conn:
        conn.sendall(HEAD + b"X-Big: " + b"a" * (60 * 1024) + b"\r\n\r\n")
        assert _answer_head(conn).startswith(b"HTTP/1.1 200 ")


def _answer_head(conn: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_a_huge_header_is_cut_off_not_read(server: Server) -> None:
    """The 100 MB header of the report, at a third: before, all of it was
    read (21 s for 100 MB) and kept in the worker's memory."""
    pid = server.process.pid  # one worker: the process itself
    before = _rss_kib(pid)
    sent = 0
    started = time.monotonic()
    chunk = b"a" * (1024 * 1024)
    with _connect(server, timeout=30) as conn:
        conn.sendall(HEAD + b"X-Big: ")
        with contextlib.suppress(OSError):  # the server closes: a reset, a pipe
            while sent < 32 * len(chunk) and time.monotonic() - started < 60:
                conn.sendall(chunk)
                sent += len(chunk)
        grown = _rss_kib(pid) - before
    # What the server did not read fills the sockets' buffers (a few MB on
    # loopback) before the sender notices: far from the 32 MB offered.
    assert sent < 16 * len(chunk), f"{sent:,} bytes sent: the server read on"
    assert grown < 16 * 1024, f"the worker grew by {grown:,} KiB"
    assert server.client.get("/healthz").json() == {"ok": True}


def test_headers_sent_too_slowly_are_dropped(server: Server) -> None:
    """DEVS_HEADER_TIMEOUT=2 here: a request head trickled a byte at a time
    is answered 408 and closed, where before it held its connection as long
    as it trickled."""
    started = time.monotonic()
    closed_after = None
    got = b""
    with _connect(server, timeout=0.2) as conn:
        for byte in HEAD + b"X-Slow: " + b"z" * 200:
            if time.monotonic() - started > 15:
                break
            try:
                conn.sendall(bytes([byte]))
                chunk = conn.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.monotonic() - started
                break
            got += chunk
            if not chunk:
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None, "the slow head was never dropped"
    assert closed_after < 10  # 2 s and the machine's noise, far from 15
    status, error = _error_of(got)
    assert status == 408
    assert "DEVS_HEADER_TIMEOUT" in error["detail"]


def test_a_silent_connection_is_closed(server: Server) -> None:
    with _connect(server, timeout=15) as conn:
        started = time.monotonic()
        assert _answer(conn) == b""  # closed, nothing said
        assert time.monotonic() - started < 10


# ------------------------------------------------------------- the body


def test_a_declared_body_over_the_bound_is_refused_before_it_is_sent(
    server: Server,
) -> None:
    """Before: the server waited for the 200 MB (and parsed them for 15 s)."""
    with _connect(server) as conn:
        conn.sendall(
            b"POST /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: 200000000\r\n\r\n"
        )  # and not a byte of the body
        status, error = _error_of(_answer(conn))
    assert status == 413
    assert error["error"] == "too_large"
    assert "200,000,000 bytes" in error["detail"]
    assert "1,048,576 bytes (DEVS_MAX_BODY_BYTES)" in error["detail"]


def _chunks(size: int) -> Iterator[bytes]:
    yield b'{"task_id": "t-big", "agent": "'
    for _ in range(size // 65536):
        yield b"a" * 65536
    yield b'"}'


def test_a_chunked_body_over_the_bound_is_refused_while_it_streams(
    server: Server,
) -> None:
    headers = {"Content-Type": "application/json"}
    answer = server.client.post(
        "/tasks", content=_chunks(4 * 1024 * 1024), headers=headers
    )
    assert answer.status_code == 413, answer.text
    assert "passed 1,048,576 bytes" in answer.json()["detail"]
    assert server.client.get("/tasks/t-big").status_code == 404


def test_a_body_under_the_bound_is_taken(server: Server) -> None:
    created = server.client.post("/tasks", json={"task_id": "t-gate"})
    assert created.status_code == 201, created.text
    output = "x" * (1024 * 1024 - 200)  # the body just under 1 MiB
    decision = server.client.post(
        "/tasks/t-gate/gates", json={"exit_code": 0, "output": output}
    )
    assert decision.status_code == 200, decision.text


def test_the_default_bound_admits_a_gate_output_at_its_limit(tmp_path: Path) -> None:
    """A gate's output is kept up to 10,000,000 characters: the default
    DEVS_MAX_BODY_BYTES (64 MiB) takes one that long sent whole, even every
    character escaped by the client's JSON (\\u001b: 6 bytes)."""
    running = Server(tmp_path / "state.sqlite")
    try:
        assert running.client.post("/tasks", json={"task_id": "t"}).status_code == 201
        body = json.dumps({"exit_code": 1, "output": "\x1b" * 10_000_000}).encode()
        assert 60_000_000 < len(body) < 64 * 1024 * 1024
        decision = running.client.post(
            "/tasks/t/gates",
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=120,
        )
        assert decision.status_code == 200, decision.text[:300]
    finally:
        running.stop()


# ------------------------------------------------------------- connections

OPEN_FILES = 1024
"""The open-files limit (``ulimit -n``) of many a shell and of systemd's
services: the worker runs under it here."""
SLOWLORIS = 1100


class LimitedServer(Server):
    """``devs serve`` under ``ulimit -n`` :data:`OPEN_FILES` (soft and hard:
    the worker cannot raise it)."""

    def start(self) -> str | None:
        if self.arguments[0] == DEVS:
            limit = (
                "import os, resource, sys; "
                f"resource.setrlimit(resource.RLIMIT_NOFILE, ({OPEN_FILES}, "
                f"{OPEN_FILES})); os.execv(sys.argv[1], sys.argv[1:])"
            )
            self.arguments = [sys.executable, "-c", limit, *self.arguments]
        return super().start()


def test_healthz_is_answered_under_a_slowloris(tmp_path: Path) -> None:
    """1,100 connections each sending half a request head, to a worker that
    may open 1,024 files: before, it could accept no more and /healthz
    failed; now the connections idle the longest make room."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = SLOWLORIS + 200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"this test process may open {hard} files only")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    server = LimitedServer(tmp_path / "state.sqlite")
    held: list[socket.socket] = []
    try:
        for _ in range(SLOWLORIS):
            conn = socket.socket()
            conn.settimeout(5)
            with contextlib.suppress(OSError):
                conn.connect(("127.0.0.1", server.port))
                conn.sendall(HEAD)  # and never the end of it
            held.append(conn)
        started = time.monotonic()
        answer = httpx.get(
            f"{server.url}/healthz", timeout=20, headers={"Connection": "close"}
        )
        took = time.monotonic() - started
        assert answer.json() == {"ok": True}
        assert took < 10, f"/healthz took {took:.1f} s"
        authed = httpx.get(
            f"{server.url}/tasks",
            timeout=20,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert authed.status_code == 200
    finally:
        for conn in held:
            conn.close()
        server.stop()


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("DEVS_MAX_BODY_BYTES", "10", "DEVS_MAX_BODY_BYTES must be a number of bytes"),
        ("DEVS_MAX_HEADER_BYTES", "lots", "DEVS_MAX_HEADER_BYTES must be a number"),
        ("DEVS_HEADER_TIMEOUT", "0", "DEVS_HEADER_TIMEOUT must be a number of seconds"),
        ("DEVS_BODY_TIMEOUT", "301", "DEVS_BODY_TIMEOUT must be a number of seconds"),
        ("DEVS_MAX_CONNECTIONS", "3", "DEVS_MAX_CONNECTIONS must be an integer"),
    ],
)
def test_a_bad_bound_is_refused_at_start(
    tmp_path: Path, variable: str, value: str, words: str
) -> None:
    result = subprocess.run(
        [DEVS, "--db", str(tmp_path / "x.sqlite"), "serve", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, variable: value},
        check=False,
    )
    assert result.returncode == 6, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert words in lines[0]
