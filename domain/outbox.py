"""What the outbox sends, derived from recorded events.

Pure code, like :mod:`devs.domain.journal`: an event in, an
:class:`OutboxMessage` (or nothing) out, its ``type`` named by
:mod:`devs.domain.vocabulary`. Its ``id`` is derived from the event alone, so
every reading of the log, every rebuild and every server gives the same id:
the receiver's idempotency key. Texts were redacted before they were recorded,
so no message carries a secret (docs/read-models.md).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import singledispatch
from typing import Any

from devs.domain.chart import MACHINE_SPEC, TaskState, Trigger
from devs.domain.model import Immutable, Value
from devs.domain.names import HAND_OFF_REQUIRED, MessageType, SessionReason
from devs.domain.output import error_line
from devs.domain.task import (
    RESOLUTION_TRIGGERS,
    HumanSession,
    Task,
    TaskEvent,
    task_id_of,
)
from devs.domain.vocabulary import message_type, message_types


class OutboxMessage(Immutable):
    """One message to send, as Standard Webhooks' payload has it: ``type``,
    ``timestamp``, ``data``; ``id`` is its ``webhook-id``."""

    id: str
    type: MessageType
    timestamp: datetime
    task_id: str
    position: int
    """The log position of the event it comes from."""
    data: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        """The JSON body: ``{"type", "timestamp", "data"}``."""
        return {
            "type": self.type.value,
            "timestamp": self.timestamp.isoformat(),
            "data": self.data,
        }


STRATEGIES_SAID = 10
"""How many of a task's latest strategies a message names."""
STRATEGY_SAID = 200
"""How much of each strategy a message says."""


class TaskContext(Value):
    """What a task's messages say besides their event: its run and agent,
    and its failures since the last pass (the gate, its exit code, the one
    last-error line, the strategies tried, the strategy a blacklist
    blocked). Folded from the log by :func:`context_after`, so a rebuild
    says the same."""

    run_id: str | None = None
    agent: str | None = None
    gate: str | None = None
    exit_code: int | None = None
    last_error: str | None = None
    strategies_tried: tuple[str, ...] = ()
    blocked_strategy: str | None = None
    failure_count: int = 0
    last_commit: str | None = None

    def said(self) -> dict[str, Any]:
        """The fields a message carries (``None`` and empty left out)."""
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in self.model_dump().items()
            if value not in (None, (), 0)
        }


def context_after(context: TaskContext | None, domain_event: Any) -> TaskContext | None:
    """The context after ``domain_event`` (``None``: the event changes none,
    or names a task whose start was not seen)."""
    if isinstance(domain_event, Task.Started):
        return TaskContext(
            run_id=domain_event.run_id,
            agent=domain_event.agent,
            last_commit=domain_event.last_commit,
        )
    if context is None:
        return None
    if isinstance(domain_event, Task.GateFailed | Task.BlacklistedStrategyAttempted):
        failure = domain_event.failure
        tried = context.strategies_tried
        strategy = failure.strategy
        if strategy:
            strategy = strategy[:STRATEGY_SAID]
            tried = (*(s for s in tried if s != strategy), strategy)[-STRATEGIES_SAID:]
        blocked = (
            domain_event.matched_strategy[:STRATEGY_SAID]
            if isinstance(domain_event, Task.BlacklistedStrategyAttempted)
            else None
        )
        return context.model_copy(
            update={
                "gate": failure.gate,
                "exit_code": failure.exit_code,
                "last_error": failure.last_error,
                "strategies_tried": tried,
                "blocked_strategy": blocked,
                "failure_count": domain_event.consecutive_failures,
            }
        )
    if isinstance(domain_event, Task.GatePassed):
        return context.model_copy(
            update={
                "gate": domain_event.gate,
                "exit_code": 0,
                "last_error": None,
                "strategies_tried": (),
                "blocked_strategy": None,
                "failure_count": 0,
            }
        )
    if isinstance(domain_event, Task.Rewound):
        return context.model_copy(update={"last_commit": domain_event.to_commit})
    return None


def message_id(originator_id: str, originator_version: int) -> str:
    """The stable id of the message an event gives: ``msg_`` and 32 hex
    characters of the SHA-256 of the event's aggregate and version."""
    digest = hashlib.sha256(f"{originator_id}\0{originator_version}".encode())
    return "msg_" + digest.hexdigest()[:32]


def _message(
    e: TaskEvent, position: int, choice: int = 0, **fields: Any
) -> OutboxMessage:
    """The message of ``e``, of the type the vocabulary gives it
    (``choice``: which of its types the event's content chose)."""
    kind = message_type(type(e), choice)
    task_id = task_id_of(e.originator_id)
    data = {
        "task_id": task_id,
        "state": _state_after(e).value,
        "version": e.originator_version,
        "position": position,
        **{key: value for key, value in fields.items() if value is not None},
    }
    return OutboxMessage(
        id=message_id(e.originator_id, e.originator_version),
        type=kind,
        timestamp=e.timestamp,
        task_id=task_id,
        position=position,
        data=data,
    )


def _deadline(session: HumanSession) -> str | None:
    """When the session fails closed, if its task's policy has a deadline."""
    return None if session.deadline_at is None else session.deadline_at.isoformat()


def message_of(
    domain_event: Any, position: int, context: TaskContext | None = None
) -> OutboxMessage | None:
    """The message ``domain_event`` (recorded at ``position``) sends, if any,
    with what ``context`` (its task's, before the event) says besides: the
    run, the agent, the gate and its exit code, the strategies tried, the
    last-error line, and a blacklist's blocked strategy."""
    message = _message_of(domain_event, position)
    if message is None or context is None:
        return message
    said = context.said()
    if not isinstance(domain_event, Task.Paused) or (
        domain_event.session.reason is not SessionReason.BLACKLISTED_STRATEGY
    ):
        said.pop("blocked_strategy", None)
    data = {"task_id": message.task_id, **said, **message.data}
    if not data.get("last_error"):
        data.pop("last_error", None)
        if context.last_error:
            data["last_error"] = context.last_error
    return message.model_copy(update={"data": data})


@singledispatch
def _message_of(domain_event: Any, position: int) -> OutboxMessage | None:
    """The message of ``domain_event`` alone."""
    return None


@_message_of.register
def _(e: Task.Escalated, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        reason=e.session.reason.value,
        session_id=e.session.session_id,
        failure_count=e.report.failure_count,
        last_error=error_line(e.report.last_error),
        strategies_tried=list(e.report.failed_strategies) or None,
        deadline_at=_deadline(e.session),
    )


@_message_of.register
def _(e: Task.Paused, position: int) -> OutboxMessage:
    spend = e.session.spend
    return _message(
        e,
        position,
        reason=e.session.reason.value,
        session_id=e.session.session_id,
        entropy_score=e.session.entropy_score,
        deadline_at=_deadline(e.session),
        spend=spend.model_dump() if spend is not None else None,
    )


@_message_of.register
def _(e: Task.BudgetWarned, position: int) -> OutboxMessage:
    return _message(
        e, position, reason="budget_warned", warn=e.warn, spend=e.spend.model_dump()
    )


@_message_of.register
def _(e: Task.HandedOff, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        reason=HAND_OFF_REQUIRED,
        failure_count=e.payload.failure_count,
        last_error=e.payload.last_error,
        agent=e.payload.originating_agent,
    )


def _answered(
    e: Task.Resumed | Task.Rewound | Task.Skipped, position: int, action: str
) -> OutboxMessage | None:
    if e.session_id is None:
        # Not an answer to a session: a rewind or skip of a running task, or
        # of a hand-off. It changes the task's state all the same, so it is
        # said (a hand-off's is said as the hand-off's end): its second type.
        if len(message_types(type(e))) < 2:
            return None
        return _message(e, position, 1, action=action, actor=e.actor, reason=e.reason)
    return _message(
        e,
        position,
        action=action,
        session_id=e.session_id,
        actor=e.actor,
        reason=e.reason,
    )


@_message_of.register
def _(e: Task.Resumed, position: int) -> OutboxMessage | None:
    return _answered(e, position, "resume")


@_message_of.register
def _(e: Task.Rewound, position: int) -> OutboxMessage | None:
    return _answered(e, position, "rewind")


@_message_of.register
def _(e: Task.Skipped, position: int) -> OutboxMessage | None:
    return _answered(e, position, "skip")


@_message_of.register
def _(e: Task.HandoffClaimed, position: int) -> OutboxMessage:
    choice = 1 if e.waiting_in is TaskState.HAND_OFF else 0
    return _message(e, position, choice, actor=e.actor)


@_message_of.register
def _(e: Task.ClaimReleased, position: int) -> OutboxMessage:
    return _message(e, position, actor=e.actor)


@_message_of.register
def _(e: Task.ClaimTakenOver, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        actor=e.actor,
        previous=e.previous,
        reason=e.reason,
    )


@_message_of.register
def _(e: Task.HandoffResolved, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        actor=e.actor,
        reason=e.reason,
        resolution=e.resolution.value,
    )


@_message_of.register
def _(e: Task.DeadlineExpired, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        reason=e.reason,
        session_id=e.session_id,
        deadline_at=e.deadline_at.isoformat(),
        actor=e.actor,
        failure_count=e.payload.failure_count,
        last_error=e.payload.last_error,
        claimed_by=e.claimed_by,
    )


@_message_of.register
def _(e: Task.DeadlineReminded, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        session_id=e.session_id,
        deadline_at=e.deadline_at.isoformat(),
    )


@_message_of.register
def _(e: Task.GatePassed, position: int) -> OutboxMessage:
    return _message(e, position, gate=e.gate)


def _trigger_of(e: TaskEvent) -> Trigger:
    if isinstance(e, Task.HandoffResolved):
        return RESOLUTION_TRIGGERS[e.resolution]
    return e.trigger


def sources(trigger: Trigger) -> list[str]:
    """The states the chart lets ``trigger`` fire from."""
    found: list[str] = []
    for transition in MACHINE_SPEC["transitions"]:
        if transition["trigger"] == trigger.value:
            given = transition["source"]
            found += [given] if isinstance(given, str) else given
    return found


def _state_after(e: TaskEvent) -> TaskState:
    """The state after ``e``, from any state its trigger fires from: each
    event that sends a message leads to one state from all of them (the
    chart says so; the tests check it), so no fold of the task is needed. A
    reminder or a claim leaves the task where it waits, which it records."""
    if isinstance(
        e,
        Task.DeadlineReminded
        | Task.HandoffClaimed
        | Task.ClaimReleased
        | Task.ClaimTakenOver
        | Task.BudgetWarned,
    ):
        return TaskState(e.waiting_in)
    return e.state_after(sources(_trigger_of(e))[0])


MESSAGING_EVENTS: tuple[type[Any], ...] = tuple(
    cls for cls in _message_of.registry if cls is not object
)
"""The event classes :func:`message_of` turns into messages."""

CONTEXT_EVENTS: tuple[type[Any], ...] = (
    Task.Started,
    Task.GateFailed,
    Task.BlacklistedStrategyAttempted,
    Task.GatePassed,
    Task.Rewound,
)
"""The event classes :func:`context_after` folds."""
