"""DNS rebinding and cross-site forms against a real ``devs serve``.

A page of ``attacker.example``, its name pointed at 127.0.0.1, is served by
the browser as that site: its requests carry ``Host: attacker.example``, and
without a token the server read tasks and recorded gates for it. A form of
another site may POST to a route that takes no JSON body (it needs no
preflight): ``/webhooks/redeliver-failed`` sent every dead letter again
(docs/http.md, "Host names and other sites")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_serve import DEVS, Server, free_port

ATTACKER = "attacker.example"


@pytest.fixture(scope="module")
def tokenless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on 127.0.0.1 without a token: what a page may reach (one for
    the module: each test reads, or is refused)."""
    folder = tmp_path_factory.mktemp("hosts")
    running = Server(folder / "state.sqlite", token=None)
    yield running
    running.stop()


def _as(server: Server, host: str) -> httpx.Client:
    """A client of ``server`` that sends ``Host: host``."""
    return httpx.Client(base_url=server.url, headers={"Host": host}, timeout=10)


def test_a_rebound_name_is_misdirected_on_every_route(tokenless: Server) -> None:
    created = tokenless.client.post("/tasks", json={"task_id": "t1"})
    assert created.status_code in (201, 409), created.text
    with _as(tokenless, f"{ATTACKER}:{tokenless.port}") as page:
        for method, path, body in (
            ("GET", "/tasks", None),
            ("GET", "/tasks/t1", None),
            ("POST", "/tasks/t1/gates", {"exit_code": 1, "error": "e"}),
            ("GET", "/healthz", None),
            ("GET", "/readyz", None),
            ("GET", "/docs", None),
            ("GET", "/openapi.json", None),
            ("GET", "/console/login", None),
            ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ):
            answer = page.request(method, path, json=body)
            assert answer.status_code == 421, (method, path, answer.text)
            error = answer.json()
            assert (error["error"], error["field"]) == ("misdirected_request", "Host")
            assert "DEVS_ALLOWED_HOSTS" in error["detail"]
            assert ATTACKER in error["detail"]
    # nothing was recorded for the page
    task = tokenless.client.get("/tasks/t1").json()
    assert task["consecutive_failures"] == 0


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}"],
)
def test_the_listening_address_and_loopback_names_are_answered(
    tokenless: Server, host: str
) -> None:
    with _as(tokenless, host.format(port=tokenless.port)) as client:
        assert client.get("/healthz").json() == {"ok": True}
        assert client.get("/tasks").status_code == 200


def test_names_of_devs_allowed_hosts_are_answered(tmp_path: Path) -> None:
    server = Server(
        tmp_path / "state.sqlite",
        token=None,
        env={"DEVS_ALLOWED_HOSTS": "devs.example.com, proxy.example:8443"},
    )
    try:
        for host, status in (
            ("devs.example.com", 200),
            ("DEVS.example.com.:9", 200),  # any port, any case, the root's dot
            ("proxy.example:8443", 200),
            ("proxy.example:8444", 421),  # that port only
            ("other.example.com", 421),
        ):
            with _as(server, host) as client:
                assert client.get("/tasks").status_code == status, host
    finally:
        server.stop()


def test_a_bad_allowed_hosts_is_refused_at_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [DEVS, "--db", str(tmp_path / "x.sqlite"), "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DEVS_ALLOWED_HOSTS": "devs.example.com, http://x/"},
        check=False,
    )
    assert result.returncode == 6, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "DEVS_ALLOWED_HOSTS has 'http://x/'" in lines[0]


BODILESS = (
    "/webhooks/redeliver-failed",
    "/webhooks/redeliver/msg_0123456789abcdef0123456789abcdef",
)


@pytest.mark.parametrize("path", BODILESS)
@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": f"http://{ATTACKER}"},
        {"Origin": "null"},  # a sandboxed frame, a file:// page
        {"Origin": "http://localhost:3000"},  # another port: another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_form_of_another_site_is_refused(
    tokenless: Server, path: str, headers: dict[str, str]
) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded", **headers}
    answer = tokenless.client.post(path, headers=form, content=b"x=1")
    assert answer.status_code == 403, answer.text
    error = answer.json()
    assert error["error"] == "cross_site"
    assert "refused, nothing was done" in error["detail"]


@pytest.mark.parametrize("path", BODILESS)
def test_this_origin_and_clients_that_are_not_browsers_are_answered(
    tokenless: Server, path: str
) -> None:
    ours = {"Origin": tokenless.url, "Sec-Fetch-Site": "same-origin"}
    for headers in (ours, {}, {"Sec-Fetch-Site": "none"}):
        answer = tokenless.client.post(path, headers=headers)
        assert answer.status_code in (200, 404), (headers, answer.text)
        assert answer.json().get("error") != "cross_site"


@pytest.mark.parametrize("first_ours", [True, False])
def test_two_host_headers_are_a_400(tokenless: Server, first_ours: bool) -> None:
    """Before, the Host check read the last ``Host`` and the app (and the
    console's own origin check) the first: ``Host: attacker.example`` then
    this server's address was answered as this server (a 200 with the
    tasks); the other order was a 421. Now either order is a 400 naming the
    header, before anything is read or done."""
    ours, theirs = f"127.0.0.1:{tokenless.port}", f"{ATTACKER}:{tokenless.port}"
    hosts = (ours, theirs) if first_ours else (theirs, ours)
    head = (
        f"GET /tasks HTTP/1.1\r\nHost: {hosts[0]}\r\nHost: {hosts[1]}\r\n"
        "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", tokenless.port), timeout=10) as conn:
        conn.sendall(head.encode())
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
    status_line, _, rest = got.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400 "), got[:300]
    error = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert (error["error"], error["field"]) == ("duplicate_header", "Host")
    assert "2 Host headers" in error["detail"]
    assert b"x-frame-options: DENY" in rest
