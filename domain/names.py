"""Names shared by the domain, its read models and its adapters.

Kinds of notification, decision-log events and human-session reasons are
spelled once, here; every other module refers to these members.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class SessionReason(StrEnum):
    """Why a human was asked."""

    MAX_RETRIES = "max_retries"
    BLACKLISTED_STRATEGY = "blacklisted_strategy"
    ENTROPY_LIMIT = "entropy_limit"
    BUDGET_EXHAUSTED = "budget_exhausted"


class Resolution(StrEnum):
    """How a human resolves a hand-off."""

    RETURN = "return"
    COMPLETE = "complete"
    SKIP = "skip"


ResolutionValue = Literal["return", "complete", "skip"]
""":class:`Resolution`'s values as a type checker sees them, for signatures
that take a plain string (``resolution="return"``); checked against the enum
by tests/unit/test_names.py, and validated against the enum at run time."""


class MessageType(StrEnum):
    """The ``type`` of a message the outbox sends (a webhook's, as Standard
    Webhooks names them: ``resource.event``), derived from a recorded event
    (:mod:`devs.domain.outbox`)."""

    SESSION_OPENED = "session.opened"
    SESSION_ANSWERED = "session.answered"
    HANDOFF_OPENED = "handoff.opened"
    HANDOFF_CLAIMED = "handoff.claimed"
    SESSION_CLAIMED = "session.claimed"
    CLAIM_RELEASED = "claim.released"
    CLAIM_TAKEN_OVER = "claim.taken_over"
    TASK_REWOUND = "task.rewound"
    TASK_SKIPPED = "task.skipped"
    HANDOFF_RESOLVED = "handoff.resolved"
    DEADLINE_EXPIRED = "deadline.expired"
    DEADLINE_REMINDER = "deadline.reminder"
    TASK_COMPLETED = "task.completed"
    BUDGET_WARNED = "budget.warned"


class StopScope(StrEnum):
    """What a task's stop (an escalation, a pause, a hand-off) holds up in
    its run, recorded with the run's start."""

    RUN = "run"
    """The whole run pauses: no task starts until every stop is answered
    (seed 001's rule, the default)."""
    DESCENDANTS = "descendants"
    """Only the stopped task's descendants wait (as their prerequisite is not
    done); ready branches beside it go on starting."""


StopScopeValue = Literal["run", "descendants"]
""":class:`StopScope`'s values as a type checker sees them."""


class DeliveryState(StrEnum):
    """What became of one message on one channel (``devs webhooks list``)."""

    PENDING = "pending"  # waiting for its first or next try
    DELIVERED = "delivered"  # the endpoint answered 2xx
    DEAD = "dead"  # no try left, or the endpoint answered 410: a dead letter


DeliveryStateValue = Literal["pending", "delivered", "dead"]
""":class:`DeliveryState`'s values as a type checker sees them."""


class HumanAction(StrEnum):
    """What a human did to a task."""

    RESUME = "resume"
    REWIND = "rewind"
    SKIP = "skip"
    CLAIM = "claim"
    RESOLVE = "resolve"
    RELEASE = "release"
    TAKE_OVER = "take_over"


HumanActionValue = Literal[
    "resume", "rewind", "skip", "claim", "resolve", "release", "take_over"
]
""":class:`HumanAction`'s values as a type checker sees them."""


class NotificationKind(StrEnum):
    """Something a human should see (``notifications()``): the ``kind`` of a
    notification, in one style, UPPER_SNAKE_CASE (``KIND_STYLE``), as seed
    002 spells ``USER_ESCALATION``.

    Release 0.1.0 called a blocked attempt ``task:blacklisted_strategy_attempted``
    (seed 004's name for the event it emits): that name is still read as
    :attr:`BLACKLISTED_STRATEGY_ATTEMPTED` (``NotificationKind(old)``, and a
    ``Notification`` parsed from an older server's JSON), never written.
    """

    USER_ESCALATION = "USER_ESCALATION"
    TASK_PAUSED = "TASK_PAUSED"
    HAND_OFF_REQUIRED = "HAND_OFF_REQUIRED"
    BLACKLISTED_STRATEGY_ATTEMPTED = "BLACKLISTED_STRATEGY_ATTEMPTED"
    BUDGET_WARNED = "BUDGET_WARNED"

    @classmethod
    def _missing_(cls, value: object) -> NotificationKind | None:
        return OLD_NOTIFICATION_KINDS.get(value) if isinstance(value, str) else None


OLD_NOTIFICATION_KINDS: dict[str, NotificationKind] = {
    "task:blacklisted_strategy_attempted": (
        NotificationKind.BLACKLISTED_STRATEGY_ATTEMPTED
    ),
}
"""Notification kinds an older release sent, each with the kind it is now."""

KIND_STYLE = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*"
"""The one style of a notification kind: UPPER_SNAKE_CASE."""


class LogEvent(StrEnum):
    """The ``event`` of a line on the ``devs.decisions`` logger.

    A blocked attempt's line keeps seed 004's name,
    ``task:blacklisted_strategy_attempted`` (the event it says to emit, which
    log searches and alerts match), while its notification's kind is
    ``BLACKLISTED_STRATEGY_ATTEMPTED`` (:class:`NotificationKind`)."""

    TASK_STARTED = "TASK_STARTED"
    ATTEMPT_BEGAN = "ATTEMPT_BEGAN"
    BLACKLISTED_STRATEGY_ATTEMPTED = "task:blacklisted_strategy_attempted"
    GATE_PASSED = "GATE_PASSED"
    GATE_FAILED = "GATE_FAILED"
    ESCALATION_TRIGGERED = "ESCALATION_TRIGGERED"
    HAND_OFF_REQUIRED = "HAND_OFF_REQUIRED"
    TASK_PAUSED = "TASK_PAUSED"
    ENTROPY_LIMIT = "ENTROPY_LIMIT"
    ENTROPY_MEASURED = "ENTROPY_MEASURED"
    LESSON_LOGGED = "LESSON_LOGGED"
    HUMAN_ACTION = "HUMAN_ACTION"
    DEADLINE_EXPIRED = "DEADLINE_EXPIRED"
    DEADLINE_REMINDED = "DEADLINE_REMINDED"
    USAGE_RECORDED = "USAGE_RECORDED"
    BUDGET_WARNED = "BUDGET_WARNED"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    BUDGET_RAISED = "BUDGET_RAISED"
    RUN_STARTED = "RUN_STARTED"
    RUN_NODE_STARTED = "RUN_NODE_STARTED"
    RUN_NODE_SETTLED = "RUN_NODE_SETTLED"
    RUN_PAUSED = "RUN_PAUSED"
    RUN_RESUMED = "RUN_RESUMED"
    RUN_COMPLETED = "RUN_COMPLETED"
    RUN_SPENT = "RUN_SPENT"
    RUN_BUDGET_EXHAUSTED = "RUN_BUDGET_EXHAUSTED"
    RUN_BUDGET_RAISED = "RUN_BUDGET_RAISED"
    RECEIPT_ISSUED = "RECEIPT_ISSUED"
    OPERATORS_OPENED = "OPERATORS_OPENED"
    OPERATOR_ADDED = "OPERATOR_ADDED"
    OPERATOR_ROTATED = "OPERATOR_ROTATED"
    OPERATOR_REMOVED = "OPERATOR_REMOVED"


HAND_OFF_REQUIRED = "hand_off_required"
"""The status (and suspension reason) of a task in the human queue."""

HUMAN_DEADLINE = "human_deadline"
"""Why a task whose human session outlived the policy's ``human_deadline``
was handed off (``HandoffPayload.reason``)."""

DEADLINE_ACTOR = "devs:deadline"
"""The actor of an expiry: the referee's clock, not a person."""
