"""What the outbox sends, derived from recorded events.

Each event a person (or a receiving service) should hear of becomes one
:class:`OutboxMessage`: a ``type`` (:class:`~devs.domain.names.MessageType`),
the event's time, and ``data`` — the task, the reason, the state after the
event, the failure count, the session, who answered. Its ``id`` is derived
from the event alone (the SHA-256 of its aggregate and version), so every
reading of the log, every rebuild, every server of one database gives the
same id: the receiver's idempotency key.

Pure code, like :mod:`devs.domain.journal`: an event in, a message (or
nothing) out. Texts in events were redacted before they were recorded, so no
message carries a secret; none carries a token.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import singledispatch
from typing import Any

from devs.domain.chart import MACHINE_SPEC, TaskState, Trigger
from devs.domain.model import Immutable
from devs.domain.names import HAND_OFF_REQUIRED, MessageType
from devs.domain.task import (
    RESOLUTION_TRIGGERS,
    HumanSession,
    Task,
    TaskEvent,
    task_id_of,
)


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


def message_id(originator_id: str, originator_version: int) -> str:
    """The stable id of the message an event gives: ``msg_`` and 32 hex
    characters of the SHA-256 of the event's aggregate and version."""
    digest = hashlib.sha256(f"{originator_id}\0{originator_version}".encode())
    return "msg_" + digest.hexdigest()[:32]


def _message(
    e: TaskEvent, position: int, kind: MessageType, **fields: Any
) -> OutboxMessage:
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


@singledispatch
def message_of(domain_event: Any, position: int) -> OutboxMessage | None:
    """The message ``domain_event`` (recorded at ``position``) sends, if any."""
    return None


@message_of.register
def _(e: Task.Escalated, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        MessageType.SESSION_OPENED,
        reason=e.session.reason.value,
        session_id=e.session.session_id,
        failure_count=e.report.failure_count,
        last_error=e.report.last_error,
        deadline_at=_deadline(e.session),
    )


@message_of.register
def _(e: Task.Paused, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        MessageType.SESSION_OPENED,
        reason=e.session.reason.value,
        session_id=e.session.session_id,
        entropy_score=e.session.entropy_score,
        deadline_at=_deadline(e.session),
    )


@message_of.register
def _(e: Task.HandedOff, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        MessageType.HANDOFF_OPENED,
        reason=HAND_OFF_REQUIRED,
        failure_count=e.payload.failure_count,
        last_error=e.payload.last_error_excerpt,
        agent=e.payload.originating_agent,
    )


def _answered(
    e: Task.Resumed | Task.Rewound | Task.Skipped, position: int, action: str
) -> OutboxMessage | None:
    if e.session_id is None:  # not an answer to a session (a skip while running)
        return None
    return _message(
        e,
        position,
        MessageType.SESSION_ANSWERED,
        action=action,
        session_id=e.session_id,
        actor=e.actor,
        reason=e.reason,
    )


@message_of.register
def _(e: Task.Resumed, position: int) -> OutboxMessage | None:
    return _answered(e, position, "resume")


@message_of.register
def _(e: Task.Rewound, position: int) -> OutboxMessage | None:
    return _answered(e, position, "rewind")


@message_of.register
def _(e: Task.Skipped, position: int) -> OutboxMessage | None:
    return _answered(e, position, "skip")


@message_of.register
def _(e: Task.HandoffClaimed, position: int) -> OutboxMessage:
    return _message(e, position, MessageType.HANDOFF_CLAIMED, actor=e.actor)


@message_of.register
def _(e: Task.HandoffResolved, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        MessageType.HANDOFF_RESOLVED,
        actor=e.actor,
        reason=e.reason,
        resolution=e.resolution.value,
    )


@message_of.register
def _(e: Task.DeadlineExpired, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        MessageType.DEADLINE_EXPIRED,
        reason=e.reason,
        session_id=e.session_id,
        deadline_at=e.deadline_at.isoformat(),
        actor=e.actor,
        failure_count=e.payload.failure_count,
        last_error=e.payload.last_error_excerpt,
    )


@message_of.register
def _(e: Task.DeadlineReminded, position: int) -> OutboxMessage:
    return _message(
        e,
        position,
        MessageType.DEADLINE_REMINDER,
        session_id=e.session_id,
        deadline_at=e.deadline_at.isoformat(),
    )


@message_of.register
def _(e: Task.GatePassed, position: int) -> OutboxMessage:
    return _message(e, position, MessageType.TASK_COMPLETED, gate=e.gate)


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
    reminder leaves the task where it waits, which it records."""
    if isinstance(e, Task.DeadlineReminded):
        return e.waiting_in
    return e.state_after(sources(_trigger_of(e))[0])


MESSAGING_EVENTS: tuple[type[Any], ...] = tuple(
    cls for cls in message_of.registry if cls is not object
)
"""The event classes :func:`message_of` turns into messages."""
