"""Human deadlines (pure domain): a session opened under a policy with a
``human_deadline`` carries its deadline; unanswered by then it expires and
the task is handed off (fails closed), never resumed; a reminder goes out
once before it; an answer that comes first cancels both. Every refusal
records nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devs.domain import journal, outbox, reactions
from devs.domain.chart import TaskState
from devs.domain.errors import DevsError, IllegalTransition, InvalidInput
from devs.domain.gate import evaluate
from devs.domain.names import (
    DEADLINE_ACTOR,
    HUMAN_DEADLINE,
    LogEvent,
    MessageType,
    NotificationKind,
    Resolution,
    SessionReason,
)
from devs.domain.policy import Policy
from devs.domain.run import Run
from devs.domain.task import HandoffPayload, HumanSession, Task

MINUTE = 60.0


def new_task(**policy: Any) -> Task:
    return Task(
        task_id="t1",
        run_id=None,
        agent="coder",
        last_commit="c0",
        policy=Policy(**{"human_deadline": MINUTE, **policy}),
    )


def fail(task: Task) -> None:
    task.record_gate(evaluate(1), gate="tests", strategy=None, error="E", output=None)


def escalated(**policy: Any) -> Task:
    task = new_task(**policy)
    for _ in range(task.policy.escalation_threshold):
        fail(task)
    assert task.state == TaskState.ESCALATION
    return task


def session_of(task: Task) -> HumanSession:
    session = task.pending_session
    assert session is not None
    return session


def deadline_of(task: Task) -> datetime:
    deadline = session_of(task).deadline_at
    assert deadline is not None
    return deadline


def replay(events: list[Any]) -> Task:
    rebuilt: Any = None
    for domain_event in events:
        rebuilt = domain_event.mutate(rebuilt)
    assert isinstance(rebuilt, Task)
    return rebuilt


def restored(task: Task) -> Task:
    """The task from a snapshot of it, through JSON."""
    snapshot = Task.Snapshot.take(task)
    found = Task.Snapshot.model_validate_json(snapshot.model_dump_json()).mutate(None)
    assert isinstance(found, Task)
    return found


def clock_commands(task: Task) -> list[Callable[[], str]]:
    """The two commands of the clock, as recorded (no time given)."""
    return [
        lambda: task.expire_deadline(now=None),
        lambda: task.remind_deadline(now=None, before=0),
    ]


# ------------------------------------------------------------- sessions


@pytest.mark.parametrize("seconds", [1, 0.5, MINUTE, 2_592_000])
def test_a_session_opened_under_a_deadline_carries_it(seconds: float) -> None:
    session = session_of(escalated(human_deadline=seconds))
    assert session.deadline_at == session.opened_at + timedelta(seconds=seconds)


def test_every_kind_of_stop_carries_the_deadline() -> None:
    paused = new_task()
    paused.report_entropy(0.9)
    assert session_of(paused).reason is SessionReason.ENTROPY_LIMIT
    blocked = new_task()
    blocked.log_lesson("regex", "no")
    blocked.begin_attempt("regex")
    assert session_of(blocked).reason is SessionReason.BLACKLISTED_STRATEGY
    for task in (paused, blocked, escalated()):
        assert deadline_of(task) > session_of(task).opened_at


def test_without_a_deadline_a_session_waits_forever() -> None:
    task = escalated(human_deadline=None)
    assert session_of(task).deadline_at is None
    task.collect_events()
    for refused in clock_commands(task):
        with pytest.raises(IllegalTransition, match="has no deadline") as error:
            refused()
        assert "'t1'" in str(error.value)
        assert "ESCALATION" in str(error.value)
    assert task.pending_events == []


def test_an_old_session_without_the_field_still_loads() -> None:
    stored = {
        "session_id": "s",
        "reason": "max_retries",
        "opened_at": "2025-01-01T00:00:00+00:00",
    }
    assert HumanSession.model_validate(stored).deadline_at is None
    payload = escalated(human_deadline=None)._handoff_payload()
    old = payload.model_dump(mode="json", exclude={"reason"})
    assert HandoffPayload.model_validate(old).reason is None


# --------------------------------------------------------------- expiry


def test_an_expiry_hands_the_task_off_and_never_resumes_it() -> None:
    task = escalated()
    session = session_of(task)
    task.collect_events()
    answered = task.expire_deadline(now=deadline_of(task))
    assert answered == session.session_id
    assert task.state == TaskState.HAND_OFF
    assert task.pending_session is None
    assert task.claimed_by is None
    handoff = task.handoff
    assert handoff is not None
    assert handoff.reason == HUMAN_DEADLINE
    assert handoff.failure_count == 3
    [expired] = task.collect_events()
    assert isinstance(expired, Task.DeadlineExpired)
    assert (expired.session_id, expired.deadline_at) == (
        session.session_id,
        session.deadline_at,
    )
    assert (expired.actor, expired.reason) == (DEADLINE_ACTOR, HUMAN_DEADLINE)
    assert expired.payload == handoff
    with pytest.raises(IllegalTransition):
        task.resume(actor="ann", reason="too late")


def test_the_hand_off_goes_on_as_any_other() -> None:
    task = escalated()
    task.expire_deadline(now=None)
    task.claim_handoff(actor="bob")
    task.resolve_handoff(actor="bob", resolution=Resolution.RETURN, reason="r")
    assert task.state == TaskState.RUNNING
    assert task.handoff is None


def test_an_expiry_before_the_deadline_is_refused() -> None:
    task = escalated()
    task.collect_events()
    early = deadline_of(task) - timedelta(microseconds=1)
    with pytest.raises(IllegalTransition, match="still ahead") as error:
        task.expire_deadline(now=early)
    assert "'t1'" in str(error.value)
    assert "ESCALATION" in str(error.value)
    assert error.value.state == TaskState.ESCALATION
    assert task.pending_events == []
    assert task.state == TaskState.ESCALATION


@pytest.mark.parametrize("state", [TaskState.RUNNING, TaskState.GATE_FAILED])
def test_a_task_at_work_has_no_deadline_to_expire(state: TaskState) -> None:
    task = new_task()
    if state is TaskState.GATE_FAILED:
        fail(task)
    task.collect_events()
    for refused in clock_commands(task):
        with pytest.raises(IllegalTransition, match="waits on no human session") as e:
            refused()
        assert f"'t1' in state {state}" in str(e.value)
    assert task.pending_events == []


def test_a_finished_or_handed_off_task_has_no_deadline_either() -> None:
    task = escalated()
    task.expire_deadline(now=None)
    with pytest.raises(IllegalTransition, match="in state HAND_OFF waits on no"):
        task.expire_deadline(now=None)
    skipped = escalated()
    skipped.skip(actor="ann", reason="r")
    with pytest.raises(IllegalTransition, match="in state SKIPPED waits on no"):
        skipped.expire_deadline(now=None)


def test_a_clock_without_a_timezone_is_refused() -> None:
    task = escalated()
    task.collect_events()
    naive = datetime(2030, 1, 1)  # no timezone: the point of the test
    with pytest.raises(InvalidInput, match="timezone") as error:
        task.expire_deadline(now=naive)
    assert error.value.field == "now"
    with pytest.raises(InvalidInput, match="timezone"):
        task.remind_deadline(now=naive, before=0)
    assert task.pending_events == []


# ------------------------------------------------------------- reminders


def test_a_reminder_goes_out_once_and_changes_nothing_else() -> None:
    task = escalated()
    session = session_of(task)
    task.collect_events()
    due = deadline_of(task) - timedelta(seconds=10)
    assert task.remind_deadline(now=due, before=10) == session.session_id
    assert task.state == TaskState.ESCALATION
    assert task.pending_session == session
    assert task.reminded_session_id == session.session_id
    [reminded] = task.collect_events()
    assert isinstance(reminded, Task.DeadlineReminded)
    assert (reminded.session_id, reminded.deadline_at, reminded.waiting_in) == (
        session.session_id,
        session.deadline_at,
        TaskState.ESCALATION,
    )
    with pytest.raises(IllegalTransition, match="reminded already") as error:
        task.remind_deadline(now=deadline_of(task), before=10)
    assert "'t1' in state ESCALATION" in str(error.value)
    assert task.pending_events == []


def test_a_reminder_before_it_is_due_is_refused() -> None:
    task = escalated()
    task.collect_events()
    early = deadline_of(task) - timedelta(seconds=11)
    with pytest.raises(IllegalTransition, match="is due at") as error:
        task.remind_deadline(now=early, before=10)
    assert "'t1' in state ESCALATION" in str(error.value)
    assert task.pending_events == []


@pytest.mark.parametrize("before", [-1.0, float("nan"), float("inf"), 2_592_001.0])
def test_a_reminder_lead_out_of_range_is_refused(before: float) -> None:
    task = escalated()
    task.collect_events()
    with pytest.raises(InvalidInput, match="before must be seconds") as error:
        task.remind_deadline(now=None, before=before)
    assert error.value.field == "before"
    assert task.pending_events == []


def test_the_next_session_is_reminded_again() -> None:
    task = escalated(handoff_threshold=9)
    task.remind_deadline(now=None, before=0)
    task.resume(actor="ann", reason="go on")
    fail(task)  # the fourth failure asks again: a new session
    assert task.remind_deadline(now=None, before=0) == session_of(task).session_id


def test_a_paused_task_is_reminded_and_expires_too() -> None:
    task = new_task()
    task.report_entropy(0.9)
    task.collect_events()
    task.remind_deadline(now=None, before=0)
    [reminded] = task.collect_events()
    assert isinstance(reminded, Task.DeadlineReminded)
    assert reminded.waiting_in == TaskState.PAUSED
    task.expire_deadline(now=None)
    assert task.state == TaskState.HAND_OFF


# ---------------------------------------------------- replay, snapshots


def test_replay_and_a_snapshot_reach_the_same_task() -> None:
    task = escalated()
    task.remind_deadline(now=None, before=0)
    events = list(task.collect_events())
    assert replay(events) == task
    again = restored(task)
    assert again == task
    assert again.reminded_session_id == session_of(task).session_id
    with pytest.raises(IllegalTransition, match="reminded already"):
        again.remind_deadline(now=None, before=0)
    task.expire_deadline(now=None)
    events += task.collect_events()
    assert replay(events) == task
    assert restored(task) == task


def test_a_snapshot_from_before_deadlines_still_loads() -> None:
    task = escalated(human_deadline=None)
    task.collect_events()
    body = Task.Snapshot.take(task).model_dump(mode="json")
    del body["state"]["reminded_session_id"]
    old = Task.Snapshot.model_validate(body).mutate(None)
    assert old.reminded_session_id is None
    assert old == task


# ------------------------------------------- what the expiry is told as


def test_an_expiry_is_logged_told_and_sent_as_a_hand_off() -> None:
    task = escalated()
    task.collect_events()
    task.remind_deadline(now=None, before=0)
    task.expire_deadline(now=None)
    reminded, expired = task.collect_events()
    assert isinstance(expired, Task.DeadlineExpired)
    assert journal.describe(expired)[0] is LogEvent.DEADLINE_EXPIRED
    assert journal.describe(reminded)[0] is LogEvent.DEADLINE_REMINDED
    assert issubclass(Task.DeadlineExpired, journal.STOP_EVENTS)
    told = journal.notification(expired, 9)
    assert told is not None
    assert (told.kind, told.reason) == (
        NotificationKind.HAND_OFF_REQUIRED,
        HUMAN_DEADLINE,
    )
    assert journal.notification(reminded, 8) is None
    sent = outbox.message_of(expired, 9)
    assert sent is not None
    assert sent.type is MessageType.DEADLINE_EXPIRED
    assert sent.data["state"] == TaskState.HAND_OFF
    assert sent.data["reason"] == HUMAN_DEADLINE
    assert sent.data["actor"] == DEADLINE_ACTOR
    assert sent.data["session_id"] == expired.session_id
    assert sent.data["deadline_at"] == expired.deadline_at.isoformat()
    assert (sent.data["failure_count"], sent.data["last_error"]) == (3, "E")
    reminder = outbox.message_of(reminded, 8)
    assert reminder is not None
    assert reminder.type is MessageType.DEADLINE_REMINDER
    assert reminder.data["state"] == TaskState.ESCALATION
    assert set(reminder.data) == {
        "task_id",
        "state",
        "version",
        "position",
        "session_id",
        "deadline_at",
    }
    assert {Task.DeadlineExpired, Task.DeadlineReminded} <= set(outbox.MESSAGING_EVENTS)


def test_an_expiry_keeps_the_run_paused_as_a_hand_off() -> None:
    run = Run.start("r", {"t1": []})
    task = Task(
        task_id="t1",
        run_id="r",
        agent=None,
        last_commit=None,
        policy=Policy(human_deadline=MINUTE),
    )
    reactions.react(run, task.collect_events())
    for _ in range(3):
        fail(task)
    reactions.react(run, task.collect_events())
    assert run.paused_by == ("t1",)
    run.collect_events()
    task.remind_deadline(now=None, before=0)
    assert not reactions.react(run, task.collect_events())
    task.expire_deadline(now=None)
    assert reactions.react(run, task.collect_events())
    assert run.paused_by == ("t1",)
    assert run.collect_events() == []  # already paused by the task


# ----------------------------------------------------------- properties

ANSWERS = ["resume", "rewind", "skip"]


def _answer(task: Task, answer: str) -> None:
    match answer:
        case "resume":
            task.resume(actor="ann", reason="r")
        case "rewind":
            task.rewind(actor="ann", reason="r", to_commit=None)
        case _:
            task.skip(actor="ann", reason="r")


@settings(max_examples=100, deadline=None)
@given(
    st.floats(1.0, 2_592_000.0),
    st.sampled_from(ANSWERS),
    st.floats(0.0, 10.0),
)
def test_an_answer_before_the_deadline_always_cancels_it(
    seconds: float, answer: str, late: float
) -> None:
    task = escalated(human_deadline=seconds)
    deadline = deadline_of(task)
    _answer(task, answer)
    task.collect_events()
    for now in (None, deadline, deadline + timedelta(seconds=late)):
        with pytest.raises(IllegalTransition):
            task.expire_deadline(now=now)
        with pytest.raises(IllegalTransition):
            task.remind_deadline(now=now, before=0)
    assert task.pending_events == []
    assert task.state != TaskState.HAND_OFF


CLOCK = st.sampled_from(["expire", "remind", *ANSWERS, "fail", "entropy", "claim"])


@settings(max_examples=150, deadline=None)
@given(st.lists(CLOCK, max_size=30), st.integers(1, 4), st.integers(1, 6))
def test_an_expiry_never_leads_anywhere_but_hand_off(
    script: list[str], escalate_at: int, hand_off_at: int
) -> None:
    task = new_task(escalation_threshold=escalate_at, handoff_threshold=hand_off_at)
    task.collect_events()
    reminded: set[str] = set()
    for step in script:
        before = TaskState(task.state)
        session = task.pending_session
        try:
            match step:
                case "expire":
                    task.expire_deadline(now=datetime.now(UTC) + timedelta(days=31))
                case "remind":
                    task.remind_deadline(now=None, before=0)
                case "fail":
                    fail(task)
                case "entropy":
                    task.report_entropy(0.9)
                case "claim":
                    task.claim_handoff(actor="bob")
                case _:
                    _answer(task, step)
        except DevsError:
            assert task.pending_events == []
            if step == "remind" and session is not None:
                assert session.session_id in reminded  # once per session
            continue
        produced = task.collect_events()
        if step == "expire":
            assert before in (TaskState.ESCALATION, TaskState.PAUSED)
            [expired] = produced
            assert isinstance(expired, Task.DeadlineExpired)
            assert task.state == TaskState.HAND_OFF
            assert task.pending_session is None
            assert task.handoff is not None
            assert task.handoff.reason == HUMAN_DEADLINE
        if step == "remind":
            assert session is not None
            assert session.session_id not in reminded
            reminded.add(session.session_id)
            assert task.state == before
        for domain_event in produced:
            if isinstance(domain_event, Task.DeadlineExpired):
                assert domain_event.state_after(before) == TaskState.HAND_OFF
