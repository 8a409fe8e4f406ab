"""What the agent's side knows of a task — its session's transcript, its
branch, a pull request — given when it starts, recorded with its start, and
shown to the people who answer it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import InvalidInput, RecoveryService
from tests.helpers import event_count
from tests.integration.test_console import SAME, SECRET, TOKEN, sign_in

DEVS = str(Path(sys.executable).with_name("devs"))
LINKS = {
    "transcript": "/home/ann/.claude/projects/x/0089.jsonl",
    "branch": "fix/login-500",
    "pr": "https://github.example/acme/app/pull/42",
}


@pytest.fixture
def served(db_path: Path) -> Iterator[tuple[TestClient, RecoveryService]]:
    service = open_service(Settings(db=str(db_path)))
    app = create_app(service, token=TOKEN, read_wait=0.3, console_secret=SECRET)
    with TestClient(app, follow_redirects=False) as client:
        yield client, service
    service.close()


def test_links_are_recorded_with_the_start(service: RecoveryService) -> None:
    summary = service.start_task("t1", agent="coder", links=LINKS)
    assert summary.links == LINKS
    assert service.task("t1").links == LINKS
    assert service.history("t1")[0].changes["links"] == LINKS
    assert service.start_task("t2").links is None


@pytest.mark.parametrize(
    ("links", "why"),
    [
        ({"PR": "x"}, "links"),
        ({"pr": ""}, "links"),
        ({"pr": "a\nb"}, "links"),
        ({"pr": "x" * 2_001}, "links"),
        ({f"l{i}": "x" for i in range(9)}, "links"),
    ],
)
def test_bad_links_are_refused_and_write_nothing(
    service: RecoveryService, links: dict[str, str], why: str
) -> None:
    before = event_count(service)
    with pytest.raises(InvalidInput) as refused:
        service.start_task("t1", links=links)
    assert refused.value.field is not None
    assert refused.value.field.startswith(why)
    assert event_count(service) == before


def test_a_credential_in_a_link_is_redacted(service: RecoveryService) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
    summary = service.start_task("t1", links={"pr": f"https://x:{secret}@h/p"})
    assert summary.links is not None
    assert secret not in summary.links["pr"]


def test_http_cli_and_console_carry_the_links(
    served: tuple[TestClient, RecoveryService], db_path: Path
) -> None:
    client, service = served
    auth = {"Authorization": f"Bearer {TOKEN}"}
    started = client.post(
        "/tasks", json={"task_id": "t1", "links": LINKS}, headers=auth
    )
    assert started.status_code == 201, started.text
    assert started.json()["links"] == LINKS
    for _ in range(3):
        service.record_gate("t1", 1, output="E boom")
    sign_in(client, service)
    for page in ("/console/", "/console/tasks/t1"):
        body = client.get(page, headers=SAME).text
        assert (
            '<a href="https://github.example/acme/app/pull/42" '
            'rel="noopener noreferrer">' in body
        ), page
        assert "<code>/home/ann/.claude/projects/x/0089.jsonl</code>" in body
    hostile = client.post(
        "/tasks",
        json={"task_id": "t2", "links": {"pr": "javascript:alert(1)"}},
        headers=auth,
    )
    assert hostile.status_code == 201
    for _ in range(3):
        service.record_gate("t2", 1, output="E boom")
    body = client.get("/console/tasks/t2", headers=SAME).text
    assert 'href="javascript' not in body
    assert "<code>javascript:alert(1)</code>" in body
    shown = subprocess.run(
        [DEVS, "--db", str(db_path), "task", "show", "t1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "  pr: https://github.example/acme/app/pull/42" in shown
    started_cli = subprocess.run(
        [
            *(DEVS, "--db", str(db_path), "task", "start", "t3", "--json"),
            *("--link", "branch=main", "--link", "pr=https://h/p/1"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(started_cli)["links"] == {"branch": "main", "pr": "https://h/p/1"}
