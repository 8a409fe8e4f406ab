"""Two people at once, over HTTP: two operators, each with their own token,
each talking to their own server on one store (two services, as two
``devs serve`` processes would be), on SQLite and PostgreSQL.

An answer says what it answers (``If-Match``: the ``ETag`` of ``GET
/tasks/{id}``); an answer to a task that has moved on is refused with 412
``stale_answer`` and writes nothing. A claim holds every stop for its
claimer: another operator's answer is refused with 409 ``claimed`` naming
who, until a recorded take-over or a release."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.http import create_app
from devs.domain import RecoveryService
from devs.domain.names import MessageType
from tests.conftest import MakeService

# FastAPI builds a route's parameter fields at its first request, and hides
# pydantic's UnsupportedFieldAttributeWarning about them with
# warnings.catch_warnings(), which is not thread-safe: two first requests at
# once (at_once, below) can let it through. FastAPI's own warning, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.UnsupportedFieldAttributeWarning"
)

TOKEN = "test-token-0123456789"


class Desk:
    """One operator at their own server."""

    def __init__(self, client: TestClient, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, task_id: str) -> Any:
        return self.client.get(f"/tasks/{task_id}", headers=self.headers)

    def post(
        self, task_id: str, action: str, body: dict[str, Any], tag: str | None = None
    ) -> Any:
        headers = dict(self.headers)
        if tag is not None:
            headers["If-Match"] = tag
        return self.client.post(
            f"/tasks/{task_id}/{action}", json=body, headers=headers
        )


@pytest.fixture
def desks(
    make_service: MakeService, backend: dict[str, str]
) -> Iterator[tuple[Desk, Desk, RecoveryService]]:
    if "DEVS_DB" in backend and backend["DEVS_DB"].startswith("file:"):
        pytest.skip("two servers on one store: not the in-memory backend")
    first, second = make_service(), make_service()
    alice = first.add_operator("alice", actor="root").token
    bob = first.add_operator("bob", actor="root").token
    with (
        TestClient(create_app(first, token=TOKEN, read_wait=1.0)) as one,
        TestClient(create_app(second, token=TOKEN, read_wait=1.0)) as two,
    ):
        yield Desk(one, alice), Desk(two, bob), first


def escalate(service: RecoveryService, task_id: str = "fix-login-500") -> None:
    service.start_task(task_id, agent="coder", run_id=None)
    for _ in range(3):
        service.record_gate(task_id, 1, output="E   KeyError: 'session_token'")


def hand_off(service: RecoveryService, task_id: str = "fix-login-500") -> None:
    service.start_task(task_id, agent="coder")
    for attempt in range(5):
        decision = service.record_gate(task_id, 1, strategy=f"try {attempt}")
        if str(decision.outcome) == "escalate":
            service.resume(task_id, actor="cli", reason="again")


def written(service: RecoveryService) -> int:
    return service.recorder.max_notification_id() or 0


def refused(response: Any, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == kind
    detail: str = body["detail"]
    return detail


def test_get_gives_the_version_as_an_etag(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    alice, _, service = desks
    escalate(service)
    seen = alice.get("fix-login-500")
    assert seen.status_code == 200
    assert seen.headers["ETag"] == f'"{seen.json()["version"]}"'
    answered = alice.post("fix-login-500", "claim", {}, seen.headers["ETag"])
    assert answered.status_code == 200, answered.text
    assert answered.json()["version"] == seen.json()["version"] + 1
    assert answered.headers["ETag"] == f'"{seen.json()["version"] + 1}"'


def test_the_stale_skip_of_the_issue_is_refused_and_writes_nothing(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    """Bob resumes; a second later Alice presses Skip on the page she had
    open: refused, the task stays RUNNING, nothing written, nothing sent."""
    alice, bob, service = desks
    escalate(service)
    alice_saw = alice.get("fix-login-500").headers["ETag"]
    bob_saw = bob.get("fix-login-500").headers["ETag"]
    assert alice_saw == bob_saw
    resumed = bob.post("fix-login-500", "resume", {"reason": "env fixed"}, bob_saw)
    assert resumed.status_code == 200, resumed.text
    before = written(service)
    skipped = alice.post("fix-login-500", "skip", {"reason": "give up"}, alice_saw)
    detail = refused(skipped, 412, "stale_answer")
    assert "RUNNING" in detail
    assert "someone else may have answered first" in detail
    assert skipped.headers["ETag"] == resumed.headers["ETag"]  # what it is now
    assert written(service) == before
    assert alice.get("fix-login-500").json()["state"] == "RUNNING"
    types = [m.type for m in service.outbox_messages()]
    assert MessageType.TASK_SKIPPED not in types


def test_two_answers_racing_on_one_version_one_wins(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    """Both press at once, each naming the version they saw: exactly one is
    recorded; the other is refused as stale (never both, never a silent
    overrule)."""
    alice, bob, service = desks
    for round_ in range(5):
        task_id = f"race-{round_}"
        escalate(service, task_id)
        tag = alice.get(task_id).headers["ETag"]
        before = written(service)
        pressed = at_once(
            lambda t=task_id, g=tag: alice.post(t, "skip", {"reason": "alice"}, g),
            lambda t=task_id, g=tag: bob.post(t, "resume", {"reason": "bob"}, g),
        )
        answers = {"alice": pressed[0], "bob": pressed[1]}
        statuses = sorted(answer.status_code for answer in answers.values())
        assert statuses == [200, 412], {k: v.text for k, v in answers.items()}
        winner = next(k for k, v in answers.items() if v.status_code == 200)
        state = alice.get(task_id).json()["state"]
        assert state == ("SKIPPED" if winner == "alice" else "RUNNING")
        # The winner's one event, and the run's none (no run): nothing else.
        assert written(service) == before + 1


def at_once(*presses: Any) -> list[Any]:
    """Each press in its own thread, let go together; their answers."""
    start = threading.Barrier(len(presses))
    answers: list[Any] = [None] * len(presses)

    def press(index: int) -> None:
        start.wait()
        answers[index] = presses[index]()

    threads = [threading.Thread(target=press, args=(i,)) for i in range(len(presses))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_a_claim_holds_the_stop_until_taken_over_or_released(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    alice, bob, service = desks
    hand_off(service)
    assert alice.post("fix-login-500", "claim", {}).status_code == 200
    before = written(service)
    detail = refused(
        bob.post("fix-login-500", "resolve", {"resolution": "skip", "reason": "mine"}),
        409,
        "claimed",
    )
    assert "claimed by 'alice'" in detail
    assert "take it over" in detail
    refused(bob.post("fix-login-500", "claim", {}), 409, "claimed")
    refused(bob.post("fix-login-500", "release", {}), 409, "claimed")
    assert written(service) == before
    taken = bob.post("fix-login-500", "take-over", {"reason": "alice is off"})
    assert taken.status_code == 200, taken.text
    assert taken.json()["previous"] == "alice"
    assert taken.json()["claimed_by"] == "bob"
    last = service.history("fix-login-500")[-1]
    assert last.event == "ClaimTakenOver"
    assert (last.changes["actor"], last.changes["previous"]) == ("bob", "alice")
    detail = refused(
        alice.post("fix-login-500", "resolve", {"resolution": "return", "reason": "r"}),
        409,
        "claimed",
    )
    assert "claimed by 'bob'" in detail
    assert bob.post("fix-login-500", "release", {}).status_code == 200
    done = alice.post(
        "fix-login-500", "resolve", {"resolution": "complete", "reason": "by hand"}
    )
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "COMPLETED"
    kinds = [m.type for m in service.outbox_messages()]
    for kind in (
        MessageType.HANDOFF_CLAIMED,
        MessageType.CLAIM_TAKEN_OVER,
        MessageType.CLAIM_RELEASED,
        MessageType.HANDOFF_RESOLVED,
    ):
        assert kind in kinds


def test_escalations_and_pauses_are_claimed_too(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    alice, bob, service = desks
    escalate(service)
    service.start_task("wobbly", agent="coder")
    service.report_entropy("wobbly", 0.95)
    for task_id in ("fix-login-500", "wobbly"):
        assert alice.post(task_id, "claim", {}).status_code == 200
        for action in ("resume", "skip", "rewind"):
            refused(bob.post(task_id, action, {"reason": "r"}), 409, "claimed")
        [session] = [s for s in service.pending_sessions() if s.task_id == task_id]
        assert session.claimed_by == "alice"
        assert bob.get(task_id).json()["claimed_by"] == "alice"
        assert alice.post(task_id, "resume", {"reason": "go"}).status_code == 200
        assert alice.get(task_id).json()["claimed_by"] is None


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ('W/"3"', "strong entity tag"),
        ("0", "strong entity tag"),
        ('"3", "4"', "strong entity tag"),
        ('"0"', "strong entity tag"),
        ('"abc"', "strong entity tag"),
    ],
)
def test_a_malformed_if_match_is_refused_naming_the_header(
    desks: tuple[Desk, Desk, RecoveryService], header: str, why: str
) -> None:
    alice, _, service = desks
    escalate(service)
    before = written(service)
    detail = refused(
        alice.post("fix-login-500", "resume", {"reason": "r"}, header),
        422,
        "invalid_input",
    )
    assert why in detail
    assert written(service) == before


def test_if_match_takes_the_version_unquoted_too(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    """``If-Match: 3`` is read as ``"3"``: what a person types with curl (and
    what a client that cannot send quotes in a header can send)."""
    alice, _, service = desks
    escalate(service)
    version = alice.get("fix-login-500").json()["version"]
    stale = alice.post("fix-login-500", "resume", {"reason": "r"}, str(version - 1))
    refused(stale, 412, "stale_answer")
    answered = alice.post("fix-login-500", "resume", {"reason": "r"}, str(version))
    assert answered.status_code == 200, answered.text


def test_if_match_star_answers_whatever_the_task_is(
    desks: tuple[Desk, Desk, RecoveryService],
) -> None:
    alice, _, service = desks
    escalate(service)
    answered = alice.post("fix-login-500", "resume", {"reason": "r"}, "*")
    assert answered.status_code == 200, answered.text
