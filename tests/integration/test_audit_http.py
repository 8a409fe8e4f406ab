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


def test_what_if_over_http(service: RecoveryService, http: TestClient) -> None:
    service.start_task("t")
    service.start_task("u")
    for _ in range(2):
        service.record_gate("t", 1, output="E")
    # Two failures under the policy in force (3): no human was asked.
    version = service.task("t").version
    stricter = {"escalation_threshold": 2}
    answer = http.post("/what-if", json={"policy": stricter})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["policy"]["escalation_threshold"] == 2
    assert report["policy"]["handoff_threshold"] == service.policy.handoff_threshold
    assert report["tasks"] == 2
    assert (report["recorded"]["escalations"], report["what_if"]["escalations"]) == (
        0,
        1,
    )
    assert [c["task_id"] for c in report["changed"]] == ["t"]
    narrowed = http.post("/what-if", json={"policy": stricter, "task_ids": ["u"]})
    assert (narrowed.json()["tasks"], narrowed.json()["changed"]) == (1, [])
    # Nothing written: the log holds what it held.
    assert service.task("t").version == version
    client = HttpRecoveryClient(http, token=TOKEN)
    policy = service.policy.changed(stricter)
    assert client.what_if(policy) == service.what_if(policy)
    assert client.what_if(policy, task_ids=["t"]) == service.what_if(
        policy, task_ids=["t"]
    )


@pytest.mark.parametrize(
    ("body", "status", "field", "detail"),
    [
        ({"policy": {"escalation_threshold": 0}}, 422, "escalation_threshold", ">= 1"),
        ({"policy": {"escalation_threshold": "2"}}, 422, "escalation_threshold", ""),
        ({"policy": {"escalation_threshold": True}}, 422, "escalation_threshold", ""),
        ({"policy": {"stuck_detection": "loud"}}, 422, "stuck_detection", "one of"),
        ({"policy": {"nope": 1}}, 422, "policy", "not a policy field"),
        ({"policy": {}, "task_ids": ["nope"]}, 404, None, "unknown task 'nope'"),
        ({"policy": {}, "run_id": "nope"}, 404, None, "unknown run 'nope'"),
        ({"policy": {}, "task_ids": [""]}, 422, "task_ids", ""),
        ({"policy": {}, "extra": 1}, 422, None, "extra"),
    ],
)
def test_what_if_over_http_refuses_bad_input(
    service: RecoveryService,
    http: TestClient,
    body: dict[str, object],
    status: int,
    field: str | None,
    detail: str,
) -> None:
    service.start_task("t")
    before = service.task("t").version
    answer = http.post("/what-if", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()
    if field is not None:
        assert error["field"] == field, error
    assert detail.replace(">= 1", "greater than or equal to 1") in error["detail"]
    assert service.task("t").version == before


def test_what_if_over_http_refuses_nan(http: TestClient) -> None:
    body = b'{"policy": {"hitl_entropy_threshold": NaN}}'
    answer = http.post(
        "/what-if", content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "hitl_entropy_threshold"
    assert "finite number" in answer.json()["detail"]
