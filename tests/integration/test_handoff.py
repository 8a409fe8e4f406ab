"""Seed 003: automated hand-off to a human after five failures."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import orjson
import pytest

from devs.domain import (
    Claimed,
    IllegalTransition,
    InvalidInput,
    Outcome,
    RecoveryService,
)
from devs.domain.chart import TaskState
from devs.domain.names import NotificationKind
from tests.helpers import decision_lines, event_count

TASK = "task-09-1-handoff"


def always_fail(service: RecoveryService, times: int) -> None:
    for i in range(times):
        decision = service.record_gate(
            TASK,
            1,
            gate="tests",
            strategy=f"strategy {i}",
            error="simulated failure",
            output="trace",
        )
        if decision.outcome is Outcome.ESCALATE:
            service.resume(TASK, actor="operator", reason="keep going")


def test_handoff_after_five_failures(
    service: RecoveryService, decisions: pytest.LogCaptureFixture
) -> None:
    service.start_task(TASK, agent="DeveloperAgent", last_commit="a1b2c3")
    always_fail(service, 5)
    queue = service.handoff_queue()
    assert len(queue) == 1  # enqueued exactly once
    payload = queue[0].payload
    assert payload.task_id == TASK
    assert payload.failure_count == 5
    assert len(payload.failure_history) == 5
    assert payload.last_error_hash == hashlib.sha256(b"trace").hexdigest()
    assert payload.last_error_excerpt == "trace"
    assert payload.originating_agent == "DeveloperAgent"
    assert payload.last_commit == "a1b2c3"
    assert payload.enqueued_at is not None
    for failure in payload.failure_history:
        assert failure.error_message == "simulated failure"
        assert failure.output_excerpt == "trace"
        assert len(failure.error_hash) == 64
    summary = service.task(TASK)
    assert summary.state is TaskState.HAND_OFF
    assert summary.status == "hand_off_required"
    [line] = [d for d in decision_lines(decisions) if d["event"] == "HAND_OFF_REQUIRED"]
    assert line["task_id"] == TASK
    assert line["consecutive_failures"] == 5
    assert line["error_hash"] == payload.last_error_hash


def test_handoff_record_is_in_the_state_store(
    service: RecoveryService, db_path: Path
) -> None:
    service.start_task(TASK)
    always_fail(service, 5)
    with sqlite3.connect(db_path) as connection:
        (state,) = connection.execute(
            "SELECT state FROM stored_events WHERE topic = 'devs:Task.HandedOff'"
        ).fetchone()
    payload = orjson.loads(state)["payload"]
    assert payload["failure_count"] == 5
    assert len(payload["last_error_hash"]) == 64


def test_handoff_is_not_enqueued_twice(service: RecoveryService) -> None:
    service.start_task(TASK)
    always_fail(service, 5)
    with pytest.raises(IllegalTransition, match="HAND_OFF"):
        service.record_gate(TASK, 1)
    assert len(service.handoff_queue()) == 1
    kinds = [n.kind for n in service.notifications()]
    assert kinds.count(NotificationKind.HAND_OFF_REQUIRED) == 1


def test_payload_contains_no_secrets(service: RecoveryService, db_path: Path) -> None:
    service.start_task(TASK)
    for _ in range(5):
        service.record_gate(
            TASK,
            1,
            error="auth failed for postgresql://app:S3cretPw@db/prod",
            output=(
                "Authorization: Bearer tok_4f9a8b7c6d5e4f3a2b1c\n"
                "AWS AKIAIOSFODNN7EXAMPLE"
            ),
            strategy="use api_key=sk-live-abcdefghijklmnop1234",
        )
        if service.task(TASK).state is TaskState.ESCALATION:
            service.resume(TASK, actor="op", reason="go")
    dumped = service.handoff_queue()[0].model_dump_json()
    raw = db_path.read_bytes()
    for secret in (
        "S3cretPw",
        "tok_4f9a8b7c6d5e4f3a2b1c",
        "AKIAIOSFODNN7EXAMPLE",
        "sk-live-abcdefghijklmnop1234",
    ):
        assert secret not in dumped
        assert secret.encode() not in raw


def test_claim_and_resolve_the_handoff(service: RecoveryService) -> None:
    service.start_task(TASK)
    always_fail(service, 5)
    claimed = service.claim_handoff(TASK, actor="carol")
    assert claimed.state is TaskState.HAND_OFF
    [entry] = service.handoff_queue()
    assert entry.claimed_by == "carol"
    assert entry.claimed_at is not None
    result = service.resolve_handoff(
        TASK, actor="carol", resolution="return", reason="fixed the flaky fixture"
    )
    assert result.state is TaskState.RUNNING
    assert service.handoff_queue() == []
    # The count is reset only by a passed gate: the next failure hands off again.
    decision = service.record_gate(TASK, 1)
    assert decision.outcome is Outcome.HAND_OFF
    assert decision.consecutive_failures == 6


def test_a_claimed_hand_off_is_resolved_by_its_claimer_with_a_known_resolution(
    service: RecoveryService,
) -> None:
    service.start_task(TASK)
    always_fail(service, 5)
    service.claim_handoff(TASK, actor="carol")
    events = event_count(service)
    with pytest.raises(InvalidInput, match="resolution must be one of"):
        service.resolve_handoff(
            TASK,
            actor="carol",
            resolution="later",  # type: ignore[arg-type]
            reason="r",
        )
    with pytest.raises(Claimed, match="claimed by 'carol'"):
        service.claim_handoff(TASK, actor="dave")
    with pytest.raises(Claimed, match="claimed by 'carol'"):
        service.resolve_handoff(TASK, actor="dave", resolution="skip", reason="r")
    assert event_count(service) == events


def test_complete_by_human_settles_the_run(service: RecoveryService) -> None:
    service.start_run("r1", {TASK: [], "next": [TASK]})
    service.start_task(TASK, run_id="r1")
    always_fail(service, 5)
    assert service.run_state("r1").status == "PAUSED"
    service.claim_handoff(TASK, actor="carol")
    result = service.resolve_handoff(
        TASK, actor="carol", resolution="complete", reason="done by hand"
    )
    assert result.state is TaskState.COMPLETED
    assert result.next_node == "next"
    state = service.run_state("r1")
    assert state.status == "RUNNING"
    assert state.completed == (TASK,)
