"""``devs serve`` telling a receiver, with real processes and faults: the
receiver down for a while, the server killed with SIGKILL between a decision
and its delivery, two servers on one PostgreSQL database, a receiver that
answers slowly, one that answers 410 (docs/notifications.md)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from devs.adapters.config import Settings, open_service
from devs.domain.policy import Policy
from tests import devs_process
from tests.e2e.test_serve import DEVS, Server, free_port
from tests.e2e.test_serve_outage import escalate
from tests.helpers import wait_until

SECRET = "whsec_" + base64.b64encode(b"e2e-secret-0123456789abcdef!!").decode()


class Inbox:
    """What a loopback receiver got: each request's id, body and the time
    it came, and how many requests for one id were under way at once."""

    def __init__(self, delay: float = 0.0, status: int = 204) -> None:
        self.delay, self.status = delay, status
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.open: dict[str, int] = {}
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.server: http.server.ThreadingHTTPServer | None = None

    def listen(self, port: int = 0) -> int:
        inbox = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                Webhook(SECRET).verify(body, headers)
                message_id = headers["webhook-id"]
                with inbox.lock:
                    inbox.open[message_id] = inbox.open.get(message_id, 0) + 1
                    inbox.most_at_once = max(inbox.most_at_once, inbox.open[message_id])
                time.sleep(inbox.delay)
                with inbox.lock:
                    inbox.open[message_id] -= 1
                    inbox.received.append((message_id, json.loads(body)))
                self.send_response(inbox.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return int(self.server.server_address[1])

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def ids(self) -> list[str]:
        with self.lock:
            return [message_id for message_id, _ in self.received]

    def tasks(self, kind: str = "session.opened") -> set[str]:
        with self.lock:
            return {
                body["data"]["task_id"]
                for _, body in self.received
                if body["type"] == kind
            }


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    found = Inbox()
    yield found
    found.close()


def hooks_env(port: int, **more: str) -> dict[str, str]:
    return {
        "DEVS_WEBHOOK_URLS": f"http://127.0.0.1:{port}/hook",
        "DEVS_WEBHOOK_SECRET": SECRET,
        "DEVS_WEBHOOK_BACKOFF": "0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5",
        "DEVS_WEBHOOK_TIMEOUT": "3",
        "DEVS_PUBLIC_URL": "https://devs.example",
        **more,
    }


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> dict[str, str]:
    if request.param == "sqlite":
        return {}
    return {"DEVS_DATABASE_URL": request.getfixturevalue("pg_url")}


def devs(db: Path, env: dict[str, str], *arguments: str) -> str:
    done = devs_process.run(
        [DEVS, "--db", str(db), *arguments], env={**os.environ, **env}, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.waits  # retries' back-off
def test_messages_wait_for_a_receiver_that_is_down_and_then_arrive(
    tmp_path: Path, store: dict[str, str], inbox: Inbox
) -> None:
    port = free_port()  # nothing listens there yet
    server = Server(tmp_path / "s.sqlite", env={**store, **hooks_env(port)})
    try:
        time.sleep(1.0)  # the server's sender opens its channel
        for i in range(5):
            escalate(server, f"t{i}")
        time.sleep(1.5)  # tries fail meanwhile
        pending = server.client.get("/webhooks", params={"state": "pending"})
        assert len(pending.json()["deliveries"]) == 5
        assert "ConnectError" in pending.json()["channels"][0]["last_error"]
        inbox.listen(port)
        assert wait_until(lambda: len(set(inbox.ids())) == 5, 20)
    finally:
        server.stop()
    assert inbox.tasks() == {f"t{i}" for i in range(5)}
    first = inbox.received[0][1]
    assert first["data"]["link"].startswith("https://devs.example/console/tasks/")


def test_a_decision_made_before_a_sigkill_is_delivered_after_the_restart(
    tmp_path: Path, store: dict[str, str], inbox: Inbox
) -> None:
    port = free_port()
    db = tmp_path / "s.sqlite"
    env = {**store, **hooks_env(port)}
    server = Server(db, "--workers", "2", env=env)
    time.sleep(1.0)
    escalate(server, "t1")
    # SIGKILL to the supervisor: its workers die with it, nothing delivered.
    server.process.send_signal(signal.SIGKILL)
    server.process.communicate(timeout=30)
    server.client.close()
    inbox.listen(port)
    again = Server(db, env=env)
    try:
        assert wait_until(lambda: inbox.tasks() == {"t1"}, 20)
    finally:
        again.stop()


def test_two_servers_on_one_database_deliver_each_message_one_at_a_time(
    tmp_path: Path, pg_url: str
) -> None:
    inbox = Inbox(delay=0.3)
    port = inbox.listen()
    env = {"DEVS_DATABASE_URL": pg_url, **hooks_env(port)}
    servers = [Server(tmp_path / "a.sqlite", env=env) for _ in range(2)]
    try:
        time.sleep(1.0)
        for i in range(12):
            escalate(servers[i % 2], f"t{i}")
        assert wait_until(lambda: len(set(inbox.ids())) == 12, 30)
        time.sleep(1.0)
    finally:
        for server in servers:
            server.stop()
        inbox.close()
    assert inbox.most_at_once == 1
    assert sorted(inbox.ids()) == sorted(set(inbox.ids()))  # none twice


def test_a_slow_receiver_slows_no_command(tmp_path: Path, inbox: Inbox) -> None:
    inbox.delay = 8.0
    port = inbox.listen()
    server = Server(
        tmp_path / "s.sqlite", env=hooks_env(port, DEVS_WEBHOOK_TIMEOUT="15")
    )
    try:
        time.sleep(1.0)
        escalate(server, "first")
        # A bound for a loaded machine (CI met 5 s once with four workers on
        # two cores), not a speed: the receiver holds each delivery 8 s.
        assert wait_until(lambda: any(inbox.open.values()), 20)
        # The first delivery is under way, held by the receiver: every
        # command meanwhile is answered before it ends.
        for i in range(10):
            escalate(server, f"t{i}")
        assert inbox.received == []
        assert wait_until(lambda: len(inbox.ids()) == 11, 30)
    finally:
        server.stop()


@pytest.mark.waits  # retries' back-off
def test_a_410_disables_the_endpoint(tmp_path: Path) -> None:
    inbox = Inbox(status=410)
    port = inbox.listen()
    db = tmp_path / "s.sqlite"
    env = hooks_env(port)
    server = Server(db, env=env)
    try:
        time.sleep(1.0)
        escalate(server, "t1")
        assert wait_until(lambda: len(inbox.ids()) == 1, 10)
        escalate(server, "t2")
        time.sleep(1.5)
        assert len(inbox.ids()) == 1  # t2's message was not sent
    finally:
        server.stop()
        inbox.close()
    listing = devs(db, {}, "webhooks", "list")
    assert "disabled" in listing
    assert "410" in listing
    report = json.loads(devs(db, {}, "webhooks", "list", "--json"))
    (channel,) = report["channels"]
    assert (channel["enabled"], channel["dead"], channel["pending"]) == (False, 1, 1)


@pytest.mark.waits  # a deadline left to pass
def test_deadlines_that_passed_while_no_server_ran(
    tmp_path: Path, store: dict[str, str], inbox: Inbox
) -> None:
    port = inbox.listen()
    db = tmp_path / "s.sqlite"
    env = {**store, **hooks_env(port)}
    Server(db, env=env).stop()  # its endpoint now hears of what comes next
    # Two tasks stop with a 1 s deadline while no server runs.
    settings = Settings(db=str(db), database_url=store.get("DEVS_DATABASE_URL"))
    service = open_service(settings, policy=Policy(human_deadline=1))
    try:
        for task_id in ("by-cli", "at-start"):
            service.start_task(task_id)
            for i in range(3):
                service.record_gate(task_id, 1, strategy=f"s{i}", error="e")
    finally:
        service.close()
    time.sleep(1.2)
    said = devs(db, store, "deadlines", "run", "--once")
    assert "by-cli: no answer before its deadline; handed off" in said
    assert "at-start: no answer before its deadline; handed off" in said
    assert devs(db, store, "deadlines", "run", "--once").startswith("0 handed off")
    # A server started again sends what the stops and hand-offs ask to send.
    again = Server(db, env=env)
    try:
        expired = "deadline.expired"
        assert wait_until(lambda: inbox.tasks(expired) == {"by-cli", "at-start"}, 15)
        assert inbox.tasks() == {"by-cli", "at-start"}  # their session.opened
        task = again.client.get("/tasks/by-cli").json()
        assert task["state"] == "HAND_OFF"
    finally:
        again.stop()


def test_a_server_started_after_a_deadline_passed_hands_the_task_off(
    tmp_path: Path, inbox: Inbox
) -> None:
    port = inbox.listen()
    db = tmp_path / "s.sqlite"
    service = open_service(Settings(db=str(db)), policy=Policy(human_deadline=1))
    try:
        service.start_task("t1")
        for i in range(3):
            service.record_gate("t1", 1, strategy=f"s{i}", error="e")
    finally:
        service.close()
    time.sleep(1.2)
    server = Server(db, env=hooks_env(port))
    try:
        assert wait_until(
            lambda: server.client.get("/tasks/t1").json()["state"] == "HAND_OFF", 15
        )
    finally:
        server.stop()


def test_the_server_itself_hands_off_a_wait_past_its_deadline(
    tmp_path: Path, inbox: Inbox
) -> None:
    port = inbox.listen()
    db = tmp_path / "s.sqlite"
    env = {**hooks_env(port), "DEVS_HUMAN_DEADLINE": "1"}
    server = Server(db, env=env)
    try:
        time.sleep(1.0)
        escalate(server, "t1")
        assert wait_until(lambda: inbox.tasks("deadline.expired") == {"t1"}, 15)
        queue = server.client.get("/handoffs").json()
        assert [entry["payload"]["reason"] for entry in queue] == ["human_deadline"]
    finally:
        server.stop()
