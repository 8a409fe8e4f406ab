"""The deadline sweeper on every backend: a wait nobody answers fails closed
(a hand-off by devs:deadline, a deadline.expired message), an answer first
cancels it, a reminder goes out once, and of two sweepers on one store one
looks at a time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from devs.adapters.notify.sweeper import Sweeper
from devs.domain import RecoveryService
from devs.domain.chart import TaskState
from devs.domain.names import DEADLINE_ACTOR, HUMAN_DEADLINE, MessageType
from devs.domain.policy import Policy

DEADLINE = 0.5
"""Seconds: the tests wait for it to pass (the service reads the clock)."""


def stopped(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id)
    for i in range(3):
        service.record_gate(task_id, 1, strategy=f"s{i}", error=f"E {i}")


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_a_wait_past_its_deadline_is_handed_off_and_says_so(
    make_service: Any,
) -> None:
    service: RecoveryService = make_service()
    service.policy = Policy(human_deadline=DEADLINE)
    stopped(service, "late")
    stopped(service, "answered")
    service.resume("answered", actor="ann", reason="go on")
    stopped(service, "early")
    sweeper = Sweeper(service, None)
    time.sleep(DEADLINE + 0.1)
    expired, reminded = sweeper.sweep()
    assert sorted(expired) == ["early", "late"]
    assert reminded == []
    task = service.task("late")
    assert task.state is TaskState.HAND_OFF
    (entry,) = [e for e in service.handoff_queue() if e.payload.task_id == "late"]
    assert entry.payload.reason == HUMAN_DEADLINE
    history = service.history("late")
    assert history[-1].changes["actor"] == DEADLINE_ACTOR
    assert service.task("answered").state is TaskState.RUNNING
    kinds = [m.type for m in service.outbox_messages() if m.task_id == "late"]
    assert kinds[-1] is MessageType.DEADLINE_EXPIRED
    expired_message = next(
        m for m in service.outbox_messages() if m.type is MessageType.DEADLINE_EXPIRED
    )
    assert expired_message.data["reason"] == HUMAN_DEADLINE
    assert expired_message.data["state"] == TaskState.HAND_OFF.value
    # Looked at again, nothing more happens.
    assert sweeper.sweep() == ([], [])


def test_a_task_without_a_deadline_waits_forever(make_service: Any) -> None:
    service: RecoveryService = make_service()
    stopped(service, "t1")
    assert service.pending_sessions()[0].deadline_at is None
    assert Sweeper(service, 60).sweep(now=later(10 * 365 * 86_400)) == ([], [])
    assert service.task("t1").state is TaskState.ESCALATION


def test_a_reminder_goes_out_once_before_the_deadline(make_service: Any) -> None:
    service: RecoveryService = make_service()
    service.policy = Policy(human_deadline=60)
    stopped(service, "t1")
    sweeper = Sweeper(service, 30)
    assert sweeper.sweep() == ([], [])  # 60 s ahead: not yet
    sweeper.reminder = 59.8
    time.sleep(0.3)
    assert sweeper.sweep() == ([], ["t1"])
    assert sweeper.sweep() == ([], [])
    (session,) = service.pending_sessions()
    assert session.reminded
    reminders = [
        m for m in service.outbox_messages() if m.type is MessageType.DEADLINE_REMINDER
    ]
    assert len(reminders) == 1
    assert service.task("t1").state is TaskState.ESCALATION  # still waiting


def test_of_two_sweepers_on_one_store_one_looks_at_a_time(
    make_service: Any,
) -> None:
    first: RecoveryService = make_service()
    first.policy = Policy(human_deadline=DEADLINE)
    second: RecoveryService = make_service()
    stopped(first, "t1")
    one, other = Sweeper(first, None), Sweeper(second, None)
    time.sleep(DEADLINE + 0.1)
    assert one.sweep() == (["t1"], [])
    stopped(first, "t2")
    time.sleep(DEADLINE + 0.1)
    assert other.sweep() == ([], [])  # the lease is the first's
    # Once the first stops renewing it (for longer than it lasts), the
    # other takes over.
    assert other.sweep(now=later(30)) == (["t2"], [])
