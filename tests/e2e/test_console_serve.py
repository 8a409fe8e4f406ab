"""The console's sessions across real ``devs serve`` processes: its workers
share the secret ``devs serve`` makes, servers share ``DEVS_CONSOLE_SECRET``,
and a bad secret stops the server at start."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from devs.adapters.config import Settings, open_service
from tests.e2e.test_serve import DEVS, Server

SECRET = "shared-console-secret-0123456789abcdef"


def _signed_in(server: Server, token: str) -> str:
    answer = httpx.post(
        f"{server.url}/console/login",
        data={"token": token},
        headers={"Origin": server.url},
        timeout=10,
    )
    assert answer.status_code == 303, answer.text
    cookie = answer.cookies.get("devs_console")
    assert cookie
    return cookie


def _inbox(server: Server, cookie: str) -> int:
    # A new connection each time: the workers take turns at the socket.
    with httpx.Client(timeout=10) as client:
        answer = client.get(
            f"{server.url}/console/", headers={"Cookie": f"devs_console={cookie}"}
        )
    return answer.status_code


def test_every_worker_honours_a_session_signed_by_another(tmp_path: Path) -> None:
    db = tmp_path / "serve.sqlite"
    service = open_service(Settings(db=str(db)))
    token = service.add_operator("alice", actor="root").token
    service.close()
    server = Server(db, "--workers", "2", env={"DEVS_DATABASE_URL": ""})
    try:
        cookie = _signed_in(server, token)
        assert {_inbox(server, cookie) for _ in range(30)} == {200}
    finally:
        server.stop()


def test_servers_with_one_console_secret_share_sessions(tmp_path: Path) -> None:
    db = tmp_path / "serve.sqlite"
    service = open_service(Settings(db=str(db)))
    token = service.add_operator("alice", actor="root").token
    service.close()
    env = {"DEVS_DATABASE_URL": "", "DEVS_CONSOLE_SECRET": SECRET}
    first = Server(db, env=env)
    second = Server(db, env=env)
    try:
        cookie = _signed_in(first, token)
        assert _inbox(second, cookie) == 200
    finally:
        first.stop()
        second.stop()
    # Restarted without the shared secret: a new random one signs everyone out.
    third = Server(db, env={"DEVS_DATABASE_URL": ""})
    try:
        assert _inbox(third, cookie) == 303
    finally:
        third.stop()


def test_a_console_secret_too_short_stops_the_server_at_start(tmp_path: Path) -> None:
    started = subprocess.run(
        [DEVS, "--db", str(tmp_path / "x.sqlite"), "serve", "--port", "0"],
        env={"PATH": "/usr/bin:/bin", "DEVS_CONSOLE_SECRET": "too-short"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 6
    assert started.stderr.count("\n") == 1
    assert "DEVS_CONSOLE_SECRET has 9 characters" in started.stderr
    assert "too-short" not in started.stderr
