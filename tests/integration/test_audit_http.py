"""``GET /tasks/{id}/audit`` and ``HttpRecoveryClient.audit``: the replayed
history with each event's link in the hash chain, over HTTP; the stuck score in
the decisions the service answers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.http import create_app
from devs.domain import NotFound, RecoveryService

TOKEN = "audit-token-0123456789"


@pytest.fixture
def http(service: RecoveryService) -> Iterator[TestClient]:
    app = create_app(service, token=TOKEN, read_wait=0.3)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def test_the_audit_of_a_task(service: RecoveryService, http: TestClient) -> None:
    service.start_task("t")
    for _ in range(3):
        service.begin_attempt("t", "same idea")
        service.record_gate("t", 1, output="E")
    service.resume("t", actor="ann", reason="go on")
    response = http.get("/tasks/t/audit")
    assert response.status_code == 200
    audit = response.json()
    assert audit["chain"]["state"] == "intact"
    entries = audit["entries"]
    assert entries[0]["chain_prev"] == "task:t"
    assert [e["actor"] for e in entries if e["actor"]] == ["ann"]
    assert all(b["chain_prev"] == a["hash"] for a, b in itertools.pairwise(entries))
    assert entries[-1]["hash"] == audit["chain"]["head"]
    escalated = next(e for e in entries if e["event"] == "Escalated")
    assert escalated["changes"]["report"]["stuck"]["score"] == 1.0
    assert http.get("/tasks/nope/audit").status_code == 404


def test_the_client_reads_the_audit_and_stuck_scores(
    service: RecoveryService, http: TestClient
) -> None:
    client = HttpRecoveryClient(http, token=TOKEN)
    client.start_task("t")
    client.begin_attempt("t", "same idea")
    client.record_gate("t", 1, output="E")
    client.begin_attempt("t", "same idea")
    decision = client.record_gate("t", 1, output="E")
    assert decision.stuck is not None
    assert decision.stuck.summary == "same strategy 2 times; same error hash 2 times"
    audit = client.audit("t")
    assert audit == service.audit("t")
    with pytest.raises(NotFound):
        client.audit("nope")


def test_verify_and_the_replay_check_over_http(
    service: RecoveryService, http: TestClient
) -> None:
    service.start_task("t")
    service.record_gate("t", 1, output="E")
    verified = http.get("/verify")
    assert verified.status_code == 200
    assert verified.json()["ok"] is True
    assert verified.json()["chains"] == {"intact": 1, "unchained": 0, "broken": 0}
    checked = http.get("/replay-check", params={"task_id": ["t"]})
    assert checked.status_code == 200
    assert (checked.json()["ok"], checked.json()["tasks"]) == (True, 1)
    assert http.get("/replay-check", params={"task_id": ["nope"]}).status_code == 404
    client = HttpRecoveryClient(http, token=TOKEN)
    assert client.verify() == service.verify()
    assert client.replay_check() == service.replay_check()
    assert client.replay_check(task_ids=["t"]).tasks == 1
    page = client.audit("t", after=1, limit=1)
    assert [e.version for e in page.entries] == [2]
    assert page == service.audit("t", after=1, limit=1)
