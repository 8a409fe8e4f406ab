"""One vocabulary for what is recorded: for each recorded event class, its
log name, notification kind, outbox messages and headline, so one event is
not named four times in four modules.

:mod:`devs.domain.journal`, :mod:`devs.domain.outbox` and the notify edge read
their names here. They are a public contract (docs/architecture.md,
docs/http.md, docs/notifications.md): tests/unit/test_vocabulary.py pins them.
A headline's ``{task}``, ``{actor}``, ``{why}``, ``{previous}`` and
``{deadline}`` are filled in, made safe to show, by the edge that tells people.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from devs.domain.model import Value
from devs.domain.names import LogEvent, MessageType, NotificationKind
from devs.domain.operators import Operators
from devs.domain.receipt import Receipt
from devs.domain.run import Run
from devs.domain.task import Task


class Said(Value):
    """One message an event may send, and its headline."""

    type: MessageType
    headline: str
    """What a person reads first (a template, see the module's docstring)."""
    answer: str | None = None
    """The ``action`` or ``resolution`` its data names, when the type alone
    does not choose the headline (``session.answered``, ``handoff.resolved``)."""
    otherwise: str | None = None
    """The headline when ``{why}`` or ``{deadline}`` has nothing to say."""


class Words(Value):
    """What one recorded event class is called where it is told."""

    log: tuple[LogEvent, ...]
    """Its decision-log ``event``: the first, or one of the others the
    event's content chooses (a pause for entropy: ``ENTROPY_LIMIT``)."""
    kind: NotificationKind | None = None
    """The kind of notification it makes (``None``: none)."""
    outbox: tuple[Said, ...] = ()
    """The messages it may send, one at a time, chosen by its content (in
    the order :mod:`devs.domain.outbox` reads them); ``()``: none."""

    @property
    def types(self) -> tuple[MessageType, ...]:
        """The outbox types it may send, each once, in order."""
        return tuple(dict.fromkeys(said.type for said in self.outbox))


_NEEDS = "{task} needs a human: {why}"
_TAKE_OVER = "{task} needs a human to take it over: {why}"
_REWOUND = "{actor} sent {task} back to an earlier commit"
_SKIPPED = "{actor} skipped {task}"

VOCABULARY: MappingProxyType[type[Any], Words] = MappingProxyType(
    {
        Task.Started: Words(log=(LogEvent.TASK_STARTED,)),
        Task.AttemptBegan: Words(log=(LogEvent.ATTEMPT_BEGAN,)),
        Task.BlacklistedStrategyAttempted: Words(
            log=(LogEvent.BLACKLISTED_STRATEGY_ATTEMPTED,),
            kind=NotificationKind.BLACKLISTED_STRATEGY_ATTEMPTED,
        ),
        Task.GatePassed: Words(
            log=(LogEvent.GATE_PASSED,),
            outbox=(
                Said(
                    type=MessageType.TASK_COMPLETED, headline="{task} passed its gate"
                ),
            ),
        ),
        Task.GateFailed: Words(log=(LogEvent.GATE_FAILED,)),
        Task.Escalated: Words(
            log=(LogEvent.ESCALATION_TRIGGERED,),
            kind=NotificationKind.USER_ESCALATION,
            outbox=(
                Said(
                    type=MessageType.SESSION_OPENED,
                    headline=_NEEDS,
                    otherwise="{task} needs a human: it stopped",
                ),
            ),
        ),
        Task.HandedOff: Words(
            log=(LogEvent.HAND_OFF_REQUIRED,),
            kind=NotificationKind.HAND_OFF_REQUIRED,
            outbox=(
                Said(
                    type=MessageType.HANDOFF_OPENED,
                    headline=_TAKE_OVER,
                    otherwise="{task} needs a human to take it over: handed off",
                ),
            ),
        ),
        Task.Paused: Words(
            log=(
                LogEvent.TASK_PAUSED,
                LogEvent.ENTROPY_LIMIT,
                LogEvent.BUDGET_EXHAUSTED,
            ),
            kind=NotificationKind.TASK_PAUSED,
            outbox=(
                Said(
                    type=MessageType.SESSION_OPENED,
                    headline=_NEEDS,
                    otherwise="{task} needs a human: it stopped",
                ),
            ),
        ),
        Task.EntropyMeasured: Words(log=(LogEvent.ENTROPY_MEASURED,)),
        Task.LessonLogged: Words(log=(LogEvent.LESSON_LOGGED,)),
        Task.Resumed: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.SESSION_ANSWERED,
                    headline="{actor} let {task} go on",
                    answer="resume",
                ),
            ),
        ),
        Task.Rewound: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.SESSION_ANSWERED,
                    headline=_REWOUND,
                    answer="rewind",
                ),
                Said(type=MessageType.TASK_REWOUND, headline=_REWOUND, answer="rewind"),
            ),
        ),
        Task.Skipped: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.SESSION_ANSWERED, headline=_SKIPPED, answer="skip"
                ),
                Said(type=MessageType.TASK_SKIPPED, headline=_SKIPPED, answer="skip"),
            ),
        ),
        Task.DeadlineExpired: Words(
            log=(LogEvent.DEADLINE_EXPIRED,),
            kind=NotificationKind.HAND_OFF_REQUIRED,
            outbox=(
                Said(
                    type=MessageType.DEADLINE_EXPIRED,
                    headline=(
                        "{task} was handed off: nobody answered before the deadline"
                    ),
                ),
            ),
        ),
        Task.DeadlineReminded: Words(
            log=(LogEvent.DEADLINE_REMINDED,),
            outbox=(
                Said(
                    type=MessageType.DEADLINE_REMINDER,
                    headline="{task} still needs a human: the deadline is {deadline}",
                    otherwise="{task} still needs a human: its deadline is near",
                ),
            ),
        ),
        Task.HandoffClaimed: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.SESSION_CLAIMED,
                    headline="{actor} is on {task}: others' answers wait for them",
                ),
                Said(
                    type=MessageType.HANDOFF_CLAIMED,
                    headline="{actor} took {task} from the hand-off queue",
                ),
            ),
        ),
        Task.ClaimReleased: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.CLAIM_RELEASED,
                    headline="{actor} let go of {task}: anyone may answer it",
                ),
            ),
        ),
        Task.ClaimTakenOver: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.CLAIM_TAKEN_OVER,
                    headline="{actor} took {task} over from {previous}",
                ),
            ),
        ),
        Task.HandoffResolved: Words(
            log=(LogEvent.HUMAN_ACTION,),
            outbox=(
                Said(
                    type=MessageType.HANDOFF_RESOLVED,
                    headline="{actor} gave {task} back to the agent",
                    answer="return",
                ),
                Said(
                    type=MessageType.HANDOFF_RESOLVED,
                    headline="{actor} marked {task} done",
                    answer="complete",
                ),
                Said(
                    type=MessageType.HANDOFF_RESOLVED, headline=_SKIPPED, answer="skip"
                ),
            ),
        ),
        Task.UsageRecorded: Words(log=(LogEvent.USAGE_RECORDED,)),
        Task.BudgetWarned: Words(
            log=(LogEvent.BUDGET_WARNED,),
            kind=NotificationKind.BUDGET_WARNED,
            outbox=(
                Said(
                    type=MessageType.BUDGET_WARNED,
                    headline="{task} has spent {why}",
                    otherwise="{task} has spent most of its budget",
                ),
            ),
        ),
        Task.BudgetRaised: Words(log=(LogEvent.BUDGET_RAISED,)),
        Run.Started: Words(log=(LogEvent.RUN_STARTED,)),
        Run.NodeStarted: Words(log=(LogEvent.RUN_NODE_STARTED,)),
        Run.NodeSettled: Words(log=(LogEvent.RUN_NODE_SETTLED,)),
        Run.Paused: Words(log=(LogEvent.RUN_PAUSED,)),
        Run.Resumed: Words(log=(LogEvent.RUN_RESUMED,)),
        Run.Completed: Words(log=(LogEvent.RUN_COMPLETED,)),
        Run.Spent: Words(log=(LogEvent.RUN_SPENT,)),
        Run.BudgetExhausted: Words(log=(LogEvent.RUN_BUDGET_EXHAUSTED,)),
        Run.BudgetRaised: Words(log=(LogEvent.RUN_BUDGET_RAISED,)),
        Receipt.Issued: Words(log=(LogEvent.RECEIPT_ISSUED,)),
        Operators.Opened: Words(log=(LogEvent.OPERATORS_OPENED,)),
        Operators.Added: Words(log=(LogEvent.OPERATOR_ADDED,)),
        Operators.Rotated: Words(log=(LogEvent.OPERATOR_ROTATED,)),
        Operators.Removed: Words(log=(LogEvent.OPERATOR_REMOVED,)),
    }
)
"""Every recorded event class and its words."""


def words(event_class: type[Any]) -> Words:
    """The words of ``event_class``; ``KeyError`` naming it when it has none
    (tests/unit/test_vocabulary.py keeps every recorded class here)."""
    try:
        return VOCABULARY[event_class]
    except KeyError:
        msg = f"{event_class.__qualname__} has no entry in domain/vocabulary.py"
        raise KeyError(msg) from None


def log_event(event_class: type[Any], variant: int = 0) -> LogEvent:
    """The decision-log ``event`` of ``event_class`` (``variant``: which of
    its names the content chose)."""
    return words(event_class).log[variant]


def kind_of(event_class: type[Any]) -> NotificationKind | None:
    """The kind of notification ``event_class`` makes (``None``: none)."""
    return words(event_class).kind


_TYPES: dict[type[Any], tuple[MessageType, ...]] = {
    cls: entry.types for cls, entry in VOCABULARY.items()
}


def message_types(event_class: type[Any]) -> tuple[MessageType, ...]:
    """The outbox types ``event_class`` may send, in :attr:`Words.types`'
    order (``()``: none)."""
    try:
        return _TYPES[event_class]
    except KeyError:
        return words(event_class).types  # raises, naming the class


def message_type(event_class: type[Any], choice: int = 0) -> MessageType:
    """The outbox type ``event_class`` sends (``choice``: which of its
    types its content chose)."""
    return message_types(event_class)[choice]


def _headlines() -> dict[tuple[MessageType, str | None], Said]:
    found: dict[tuple[MessageType, str | None], Said] = {}
    for entry in VOCABULARY.values():
        for said in entry.outbox:
            key = (said.type, said.answer)
            if found.setdefault(key, said) != said:
                msg = f"two headlines for {said.type} ({said.answer})"
                raise ValueError(msg)
    return found


HEADLINES: MappingProxyType[tuple[MessageType, str | None], Said] = MappingProxyType(
    _headlines()
)
"""Each message type's headline, by the answer its data names (``None``: the
type alone chooses it)."""
