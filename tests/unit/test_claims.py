"""Two people at once, in the aggregate: an answer that names a version the
task has moved past is refused, and a claim holds every kind of stop for its
claimer until released or taken over (recorded). A refusal writes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from devs.domain.chart import TaskState
from devs.domain.errors import Claimed, IllegalTransition, StaleAnswer
from devs.domain.gate import evaluate
from devs.domain.names import MessageType, Resolution
from devs.domain.outbox import message_of
from devs.domain.policy import Policy
from devs.domain.task import Task


def new_task(**policy: Any) -> Task:
    return Task(
        task_id="t1",
        run_id=None,
        agent="coder",
        last_commit="c0",
        policy=Policy(**policy),
    )


def fail(task: Task, times: int = 1) -> None:
    for _ in range(times):
        task.record_gate(
            evaluate(1), gate="tests", strategy="s", error=None, output="E boom"
        )


def escalated() -> Task:
    task = new_task()
    fail(task, 3)
    assert task.state == TaskState.ESCALATION
    return task


def paused() -> Task:
    task = new_task()
    task.report_entropy(0.9)
    assert task.state == TaskState.PAUSED
    return task


def handed_off() -> Task:
    task = new_task(handoff_threshold=1)
    fail(task)
    assert task.state == TaskState.HAND_OFF
    return task


STOPS = [escalated, paused, handed_off]


def answers(task: Task, actor: str) -> list[Any]:
    """Each answer the task's state allows, as a thunk."""
    found: list[Any] = [
        lambda: task.skip(actor=actor, reason="r"),
        lambda: task.rewind(actor=actor, reason="r", to_commit=None),
    ]
    if task.state == TaskState.HAND_OFF:
        found += [
            lambda chosen=resolution: task.resolve_handoff(
                actor=actor, resolution=chosen, reason="r"
            )
            for resolution in Resolution
        ]
    else:
        found.append(lambda: task.resume(actor=actor, reason="r"))
    return found


@pytest.mark.parametrize("stop", STOPS)
def test_a_claim_holds_every_stop_for_its_claimer(stop: Any) -> None:
    task = stop()
    task.claim(actor="alice")
    version = task.version
    for answer in answers(task, "bob"):
        with pytest.raises(Claimed, match="claimed by 'alice'") as refused:
            answer()
        assert refused.value.claimed_by == "alice"
        assert task.version == version  # nothing written
    with pytest.raises(Claimed, match="claimed by 'alice'"):
        task.claim(actor="bob")
    with pytest.raises(Claimed):
        task.release(actor="bob")
    # The claimer answers.
    answers(task, "alice")[0]()
    assert task.claimed_by is None


@pytest.mark.parametrize("stop", STOPS)
def test_a_take_over_is_recorded_and_moves_the_lock(stop: Any) -> None:
    task = stop()
    state = task.state
    task.claim(actor="alice")
    previous = task.take_over(actor="bob", reason="alice is off sick")
    assert previous == "alice"
    taken = task.pending_events[-1]
    assert isinstance(taken, Task.ClaimTakenOver)
    assert (taken.actor, taken.previous, taken.reason) == (
        "bob",
        "alice",
        "alice is off sick",
    )
    assert task.state == state
    with pytest.raises(Claimed, match="claimed by 'bob'"):
        answers(task, "alice")[0]()
    answers(task, "bob")[0]()


def test_take_over_needs_a_claim_by_someone_else() -> None:
    task = escalated()
    with pytest.raises(IllegalTransition, match="not claimed"):
        task.take_over(actor="bob", reason="r")
    task.claim(actor="bob")
    with pytest.raises(IllegalTransition, match="already claimed by you"):
        task.take_over(actor="bob", reason="r")
    with pytest.raises(IllegalTransition, match="already claimed by you"):
        task.claim(actor="bob")


def test_release_lets_anyone_answer() -> None:
    task = paused()
    with pytest.raises(IllegalTransition, match="nothing to release"):
        task.release(actor="alice")
    task.claim(actor="alice")
    task.release(actor="alice")
    assert task.claimed_by is None
    released = task.pending_events[-1]
    assert isinstance(released, Task.ClaimReleased)
    task.resume(actor="bob", reason="go on")
    assert task.state == TaskState.RUNNING


def test_an_unclaimed_hand_off_can_be_resolved_by_anyone() -> None:
    task = handed_off()
    task.resolve_handoff(actor="bob", resolution=Resolution.COMPLETE, reason="done")
    assert task.state == TaskState.COMPLETED


def test_nothing_to_claim_while_the_agent_works() -> None:
    task = new_task()
    with pytest.raises(IllegalTransition, match="cannot claim a task in state RUNNING"):
        task.claim(actor="alice")


@pytest.mark.parametrize("stop", STOPS)
def test_a_stale_answer_is_refused_and_writes_nothing(stop: Any) -> None:
    task = stop()
    seen = task.version
    task.claim(actor="bob", if_version=seen)  # answers what bob saw
    task.release(actor="bob", if_version=seen + 1)
    with pytest.raises(StaleAnswer, match=f"at version {seen + 2}") as refused:
        task.skip(actor="alice", reason="stale page", if_version=seen)
    assert refused.value.version == seen + 2
    assert refused.value.answered == seen
    assert task.version == seen + 2
    assert task.state != TaskState.SKIPPED
    with pytest.raises(StaleAnswer):
        task.claim(actor="alice", if_version=seen)
    with pytest.raises(StaleAnswer):
        task.rewind(actor="a", reason="r", to_commit=None, if_version=seen)
    assert task.version == seen + 2


def test_the_stale_skip_of_the_issue_is_refused() -> None:
    """Bob resumed; Alice's page still showed the escalation: her skip names
    the version she saw, and is refused instead of skipping a running task."""
    task = escalated()
    alice_saw = task.version
    task.resume(actor="bob", reason="env fixed")
    with pytest.raises(StaleAnswer, match="RUNNING"):
        task.skip(actor="alice", reason="give up", if_version=alice_saw)
    assert task.state == TaskState.RUNNING


def test_a_claim_carries_over_when_the_deadline_hands_off() -> None:
    task = new_task(human_deadline=60)
    fail(task, 3)
    task.claim(actor="alice")
    session = task.pending_session
    assert session is not None
    assert session.deadline_at is not None
    task.expire_deadline(now=session.deadline_at + timedelta(seconds=1))
    assert task.state == TaskState.HAND_OFF
    assert task.claimed_by == "alice"
    expired = task.pending_events[-1]
    assert isinstance(expired, Task.DeadlineExpired)
    assert expired.claimed_by == "alice"
    with pytest.raises(Claimed):
        task.resolve_handoff(actor="bob", resolution=Resolution.SKIP, reason="r")


def test_every_answer_that_moves_a_task_sends_a_message() -> None:
    """A skip or rewind of a running task is no answer to a session, and is
    said all the same; claims, releases and take-overs are said too."""
    task = new_task()
    task.skip(actor="alice", reason="not needed")
    skipped = message_of(task.pending_events[-1], 5)
    assert skipped is not None
    assert skipped.type is MessageType.TASK_SKIPPED
    assert skipped.data["state"] == "SKIPPED"
    assert skipped.data["actor"] == "alice"

    task = new_task()
    task.rewind(actor="alice", reason="wrong base", to_commit=None)
    rewound = message_of(task.pending_events[-1], 5)
    assert rewound is not None
    assert rewound.type is MessageType.TASK_REWOUND

    task = escalated()
    task.claim(actor="alice")
    claimed = message_of(task.pending_events[-1], 9)
    assert claimed is not None
    assert claimed.type is MessageType.SESSION_CLAIMED
    assert claimed.data["state"] == "ESCALATION"
    task.take_over(actor="bob", reason="mine now")
    taken = message_of(task.pending_events[-1], 10)
    assert taken is not None
    assert taken.type is MessageType.CLAIM_TAKEN_OVER
    assert (taken.data["actor"], taken.data["previous"]) == ("bob", "alice")
    task.release(actor="bob")
    released = message_of(task.pending_events[-1], 11)
    assert released is not None
    assert released.type is MessageType.CLAIM_RELEASED

    task = handed_off()
    task.claim(actor="carol")
    handoff = message_of(task.pending_events[-1], 3)
    assert handoff is not None
    assert handoff.type is MessageType.HANDOFF_CLAIMED
    assert handoff.data["state"] == "HAND_OFF"


def test_a_replay_decides_as_recorded_whoever_held_the_claim() -> None:
    """An old log where a claimed hand-off was resolved by someone else (the
    rule did not exist then) replays without refusal."""
    task = handed_off()
    task.claim(actor="alice")
    task.resolve_handoff(
        actor="bob", resolution=Resolution.SKIP, reason="r", as_recorded=True
    )
    assert task.state == TaskState.SKIPPED
