"""``GET /tasks/{id}/audit`` and ``HttpRecoveryClient.audit``: the replayed
history with each event's link in the hash chain, over HTTP; the stuck score in
the decisions the service answers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.config import open_service
from devs.adapters.http import create_app
from devs.domain import InvalidInput, NotFound, Policy, RecoveryService

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


@pytest.fixture
def stricter_service(tmp_path: Path) -> Iterator[RecoveryService]:
    """A service whose policy in force is not the default one."""
    env = {"SQLITE_DBNAME": str(tmp_path / "s.sqlite"), "DEVS_HANDOFF_THRESHOLD": "8"}
    with open_service(env=env) as service:
        yield service


def test_what_if_over_http(stricter_service: RecoveryService) -> None:
    service = stricter_service
    service.start_run("r", {"t": [], "u": []})
    service.start_task("t", run_id="r")
    service.start_task("u", run_id="r")
    service.start_task("v")
    for _ in range(2):
        service.record_gate("t", 1, output="E")
    # Two failures under the policy in force (escalate at 3): nobody was asked.
    written = service.recorder.max_notification_id()
    stricter = {"escalation_threshold": 2}
    app = create_app(service, token=TOKEN, read_wait=0.3)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(app, headers=headers) as http:
        answer = http.post("/what-if", json={"policy": stricter})
        assert answer.status_code == 200, answer.text
        report = answer.json()
        # the changes over the policy in force, not over the defaults
        assert report["policy"]["escalation_threshold"] == 2
        assert report["policy"]["handoff_threshold"] == 8
        assert report["tasks"] == 3
        recorded, what_if = report["recorded"], report["what_if"]
        assert (recorded["escalations"], what_if["escalations"]) == (0, 1)
        assert [c["task_id"] for c in report["changed"]] == ["t"]
        narrowed = http.post("/what-if", json={"policy": stricter, "task_ids": ["u"]})
        assert (narrowed.json()["tasks"], narrowed.json()["changed"]) == (1, [])
        in_run = http.post("/what-if", json={"run_id": "r"})  # the policy in force
        assert in_run.status_code == 200, in_run.text
        assert (in_run.json()["tasks"], in_run.json()["changed"]) == (2, [])
        nulls = http.post("/what-if", json={"policy": {"escalation_threshold": None}})
        assert nulls.json()["policy"] == service.policy.model_dump(mode="json")
        client = HttpRecoveryClient(http, token=TOKEN)
        whole = Policy(escalation_threshold=2)  # handoff_threshold: the default
        assert client.what_if(whole) == service.what_if(whole)
        assert client.what_if(whole).policy.handoff_threshold == 5
        assert client.what_if(stricter) == service.what_if(stricter)
        assert client.what_if(stricter).policy.handoff_threshold == 8
        assert client.what_if(stricter, task_ids=["t"]) == service.what_if(
            stricter, task_ids=["t"]
        )
        assert client.what_if(stricter, run_id="r").tasks == 2
        assert client.what_if(stricter, run_id="r") == service.what_if(
            stricter, run_id="r"
        )
        with pytest.raises(InvalidInput, match="escalation_threshold is invalid"):
            client.what_if({"escalation_threshold": 0})
    # Nothing written: the log holds what it held.
    assert service.recorder.max_notification_id() == written


@pytest.mark.parametrize(
    ("body", "status", "field", "detail"),
    [
        (
            {"policy": {"escalation_threshold": 0}},
            422,
            "policy",
            "escalation_threshold is invalid: Input should be greater than or equal",
        ),
        (
            {"policy": {"escalation_threshold": "2"}},
            422,
            "policy",
            "escalation_threshold is invalid: Input should be a valid integer",
        ),
        (
            {"policy": {"escalation_threshold": True}},
            422,
            "policy",
            "escalation_threshold is invalid: Input should be a valid integer",
        ),
        (
            {"policy": {"stuck_detection": "loud"}},
            422,
            "policy",
            "policy.stuck_detection is invalid: Input should be 'observe', 'gate' "
            "or 'off'",
        ),
        (
            {"policy": {"nope": 1}},
            422,
            "policy",
            "unknown field 'nope' of policy (known: escalation_threshold,",
        ),
        ({"policy": []}, 422, "policy", "valid dictionary"),
        ({"task_ids": ["nope"]}, 404, None, "unknown task 'nope'"),
        ({"run_id": "nope"}, 404, None, "unknown run 'nope'"),
        ({"task_ids": [""]}, 422, "task_ids", "task_ids[0] must not be empty"),
        ({"extra": 1}, 422, "extra", "unknown field 'extra'"),
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
    written = service.recorder.max_notification_id()
    answer = http.post("/what-if", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["field"] == field, error
    assert detail in error["detail"], error
    assert service.recorder.max_notification_id() == written


def test_what_if_over_http_refuses_nan(http: TestClient) -> None:
    body = b'{"policy": {"hitl_entropy_threshold": NaN}}'
    answer = http.post(
        "/what-if", content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "policy"
    assert "hitl_entropy_threshold is invalid" in answer.json()["detail"]
    assert "finite number" in answer.json()["detail"]
