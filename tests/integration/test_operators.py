"""Operators: the roster in the log, tokens kept only as hashes, and the rule
that over HTTP only an operator answers for people (docs/security.md)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.adapters.http.auth import acting
from devs.domain import (
    AlreadyExists,
    Forbidden,
    InvalidInput,
    Outcome,
    RecoveryService,
    UnknownOperator,
)
from devs.domain.operators import TOKEN_PREFIX, token_hash
from tests import devs_process
from tests.helpers import event_count

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEVS = str(Path(sys.executable).with_name("devs"))


def escalate(service: RecoveryService, task_id: str = "t1") -> None:
    service.start_task(task_id, agent="coder")
    for _ in range(3):
        service.record_gate(task_id, 1, error="E   assert 1 == 2")


# ------------------------------------------------------------ the roster


def test_add_rotate_remove_are_events_and_the_token_is_kept_only_as_a_hash(
    make_service: Any,
) -> None:
    service: RecoveryService = make_service()
    issued = service.add_operator("alice", actor="root")
    assert issued.token.startswith(TOKEN_PREFIX)
    assert len(issued.token) > 40
    roster = service.roster()
    assert roster.holder(issued.token) == "alice"
    assert roster.holder(issued.token + "x") is None
    [entry] = service.operators()
    assert (entry.name, entry.added_by, entry.rotated_at) == ("alice", "root", None)
    # Another process sees it at once (the roster is never read from a cache).
    other: RecoveryService = make_service()
    assert other.roster().holder(issued.token) == "alice"
    rotated = other.rotate_operator("alice", actor="bob")
    assert rotated.token != issued.token
    assert service.roster().holder(issued.token) is None
    assert service.roster().holder(rotated.token) == "alice"
    [entry] = service.operators()
    assert entry.rotated_by == "bob"
    removed = service.remove_operator("alice", actor="root")
    assert removed.name == "alice"
    assert service.operators() == []
    assert other.roster().holder(rotated.token) is None
    # Every change is an event in the log; no token is in any event.
    events = list(service.recorder.select_events("operators"))
    assert len(events) == 4  # opened, added, rotated, removed
    stored = b"".join(event.state for event in events)
    assert issued.token.encode() not in stored
    assert rotated.token.encode() not in stored
    assert token_hash(rotated.token).encode() in stored


def test_refusals_name_what_was_wrong_and_write_nothing(make_service: Any) -> None:
    service: RecoveryService = make_service()
    service.add_operator("alice", actor="root")
    before = service.recorder.max_notification_id()
    with pytest.raises(AlreadyExists, match="devs operator rotate alice"):
        service.add_operator("alice", actor="root")
    with pytest.raises(UnknownOperator, match="unknown operator 'bob'"):
        service.rotate_operator("bob", actor="root")
    with pytest.raises(UnknownOperator):
        service.remove_operator("bob", actor="root")
    for bad in ("", " alice", "al\nice", "x" * 201, "a\ud800", "ghp_" + "a" * 36):
        with pytest.raises(InvalidInput) as refused:
            service.add_operator(bad, actor="root")
        assert refused.value.field == "name"
    assert service.recorder.max_notification_id() == before


def test_devs_operator_commands_print_the_token_alone(tmp_path: Path) -> None:
    db = str(tmp_path / "ops.sqlite")

    def devs(*args: str) -> subprocess.CompletedProcess[str]:
        return devs_process.run([DEVS, "--db", db, *args])

    added = devs("operator", "add", "alice", "--actor", "root")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert added.stdout == token + "\n"
    assert token.startswith(TOKEN_PREFIX)
    listed = devs("operator", "list", "--json")
    assert '"name":"alice"' in listed.stdout.replace(" ", "")
    assert token not in listed.stdout
    rotated = devs("operator", "rotate", "alice")
    new = rotated.stdout.strip()
    assert rotated.returncode == 0
    assert new != token
    assert new.startswith(TOKEN_PREFIX)
    again = devs("operator", "add", "alice")
    assert again.returncode == 8
    assert "already exists" in again.stderr
    unknown = devs("operator", "remove", "bob")
    assert unknown.returncode == 7
    assert "unknown operator 'bob'" in unknown.stderr
    removed = devs("operator", "remove", "alice")
    assert removed.returncode == 0
    assert "removed" in removed.stdout
    # The database holds no token, only hashes.
    with sqlite3.connect(db) as connection:
        blob = b"".join(
            bytes(row[0])
            for row in connection.execute("SELECT state FROM stored_events")
        )
    assert token.encode() not in blob
    assert new.encode() not in blob
    assert token_hash(new).encode() in blob


# -------------------------------------------------- only people, over HTTP


@pytest.fixture
def served(db_path: Path) -> Iterator[tuple[TestClient, RecoveryService]]:
    service = open_service(Settings(db=str(db_path)))
    app = create_app(service, token=TOKEN, read_wait=0.3)
    with TestClient(app) as client:
        yield client, service
    service.close()


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_without_operators_the_service_token_answers_as_before(
    served: tuple[TestClient, RecoveryService],
) -> None:
    client, service = served
    escalate(service)
    missing = client.post("/tasks/t1/resume", json={"reason": "go"}, headers=AUTH)
    assert missing.status_code == 422
    assert missing.json()["field"] == "actor"
    answer = client.post(
        "/tasks/t1/resume", json={"actor": "ann", "reason": "go"}, headers=AUTH
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["actor"] == "ann"


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("resume", {"reason": "go"}),
        ("rewind", {"reason": "again", "to_commit": "c0"}),
        ("skip", {"reason": "not worth it"}),
    ],
)
def test_once_operators_exist_the_service_token_may_not_answer_for_people(
    served: tuple[TestClient, RecoveryService], action: str, body: dict[str, str]
) -> None:
    client, service = served
    escalate(service)
    alice = service.add_operator("alice", actor="root").token
    before = event_count(service)
    for sent in (body, {**body, "actor": "alice"}):
        refused = client.post(f"/tasks/t1/{action}", json=sent, headers=AUTH)
        assert refused.status_code == 403, refused.text
        assert refused.json() == {
            "error": "forbidden",
            "field": None,
            "detail": "a human action needs an operator's own token, sent as the "
            "bearer token, once operators exist (`devs operator add NAME` makes "
            "one): the service token, which agents hold, cannot answer for a "
            "person; nothing was written",
        }
    assert event_count(service) == before
    # Another name in the body, with alice's token: refused, nothing written.
    posed = client.post(
        f"/tasks/t1/{action}", json={**body, "actor": "bob"}, headers=_as(alice)
    )
    assert posed.status_code == 403
    assert "'bob'" in posed.json()["detail"]
    assert event_count(service) == before
    # Alice's token: recorded as alice, the body's actor left out.
    answer = client.post(f"/tasks/t1/{action}", json=body, headers=_as(alice))
    assert answer.status_code == 200, answer.text
    assert answer.json()["actor"] == "alice"
    assert service.history("t1")[-1].changes["actor"] == "alice"


def test_hand_offs_are_claimed_and_resolved_by_the_operator_only(
    served: tuple[TestClient, RecoveryService],
) -> None:
    client, service = served
    service.start_task("t1", agent="coder")
    for i in range(5):
        decision = service.record_gate(
            "t1", 1, strategy=f"strategy {i}", error=f"failure {i}"
        )
        if decision.outcome is Outcome.ESCALATE:
            service.resume("t1", actor="cli-user", reason="keep going")
    assert decision.outcome is Outcome.HAND_OFF
    bob = service.add_operator("bob", actor="root").token
    claim = client.post("/tasks/t1/claim", json={"actor": "ann"}, headers=AUTH)
    assert claim.status_code == 403
    claim = client.post("/tasks/t1/claim", json={}, headers=_as(bob))
    assert claim.status_code == 200, claim.text
    assert service.handoff_queue()[0].claimed_by == "bob"
    resolved = client.post(
        "/tasks/t1/resolve",
        json={"resolution": "complete", "reason": "fixed by hand"},
        headers=_as(bob),
    )
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["actor"] == "bob"


def test_operator_tokens_that_are_unknown_rotated_or_removed_are_401(
    served: tuple[TestClient, RecoveryService],
) -> None:
    client, service = served
    alice = service.add_operator("alice", actor="root").token
    assert client.get("/sessions", headers=_as(alice)).status_code == 200
    assert client.get("/sessions", headers=_as(alice + "x")).status_code == 401
    fresh = service.rotate_operator("alice", actor="root").token
    stale = client.get("/sessions", headers=_as(alice))
    assert stale.status_code == 401
    assert "rotated" in stale.json()["detail"]
    assert alice not in stale.text
    assert client.get("/sessions", headers=_as(fresh)).status_code == 200
    service.remove_operator("alice", actor="root")
    assert client.get("/sessions", headers=_as(fresh)).status_code == 401
    # The service token still does everything an agent does.
    started = client.post("/tasks", json={"task_id": "t9"}, headers=AUTH)
    assert started.status_code == 201


def test_a_server_without_a_token_still_needs_an_operator_for_people(
    db_path: Path,
) -> None:
    service = open_service(Settings(db=str(db_path)))
    try:
        with TestClient(create_app(service)) as client:
            escalate(service)
            alice = service.add_operator("alice", actor="root").token
            body = {"actor": "alice", "reason": "go"}
            refused = client.post("/tasks/t1/resume", json=body)
            assert refused.status_code == 403
            answer = client.post("/tasks/t1/resume", json=body, headers=_as(alice))
            assert answer.status_code == 200, answer.text
    finally:
        service.close()


def test_an_idempotency_key_is_one_operator_s_and_never_answers_for_another(
    served: tuple[TestClient, RecoveryService],
) -> None:
    client, service = served
    escalate(service)
    alice = service.add_operator("alice", actor="root").token
    bob = service.add_operator("bob", actor="root").token
    body = {"reason": "go"}
    key = {"Idempotency-Key": "answer-1"}
    first = client.post("/tasks/t1/resume", json=body, headers={**_as(alice), **key})
    assert first.status_code == 200
    assert first.json()["actor"] == "alice"
    again = client.post("/tasks/t1/resume", json=body, headers={**_as(alice), **key})
    assert again.json() == first.json()  # alice's retry: her first answer
    before = event_count(service)
    # Bob's request is another request: his key must be his own.
    other = client.post("/tasks/t1/resume", json=body, headers={**_as(bob), **key})
    assert other.status_code == 422
    assert other.json()["field"] == "Idempotency-Key"
    assert "alice" not in other.text
    own = client.post(
        "/tasks/t1/resume", json=body, headers={**_as(bob), "Idempotency-Key": "b"}
    )
    assert own.status_code == 409  # decided as his own: nothing to resume
    agent = client.post("/tasks/t1/resume", json=body, headers={**AUTH, **key})
    assert agent.status_code == 403
    assert event_count(service) == before


def test_an_operator_removed_before_its_action_is_decided_is_refused(
    make_service: Any,
) -> None:
    service: RecoveryService = make_service()
    service.add_operator("alice", actor="root")
    assert acting(service, "alice", None) == "alice"
    service.remove_operator("alice", actor="root")
    with pytest.raises(Forbidden, match="removed"):
        acting(service, "alice", None)
