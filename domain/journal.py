"""What the log says and what humans are told, derived from recorded events.

One mechanism for both: after a command's events are recorded, each one is
described once (:func:`describe`) as a decision-log line on the
``devs.decisions`` logger, and the ones a human must see become
:class:`~devs.domain.decisions.Notification` objects (:func:`notification`),
whether they come from a save just now or from reading the log later. The
names (the line's ``event``, the notification's ``kind``) are the
vocabulary's (:mod:`devs.domain.vocabulary`); this module adds the fields. Texts in
events were redacted before they were recorded, so no line carries a secret.
"""

from __future__ import annotations

import logging
from functools import singledispatch
from typing import Any

import orjson

from devs.domain.decisions import Notification
from devs.domain.names import (
    HAND_OFF_REQUIRED,
    HUMAN_DEADLINE,
    HumanAction,
    LogEvent,
    SessionReason,
)
from devs.domain.operators import Operators
from devs.domain.receipt import Receipt
from devs.domain.redaction import excerpt
from devs.domain.run import Run
from devs.domain.spend import Spend
from devs.domain.task import Task, TaskEvent, task_id_of
from devs.domain.vocabulary import kind_of, log_event

logger = logging.getLogger("devs.decisions")
# A library does not decide where logs go: without a handler configured by the
# application, decision lines are dropped instead of reaching stderr.
logging.getLogger("devs").addHandler(logging.NullHandler())

Line = tuple[LogEvent, dict[str, Any]]

STOP_EVENTS = (Task.Escalated, Task.HandedOff, Task.Paused, Task.DeadlineExpired)
"""Events that stop an agent or take it off its task (an expiry hands the task
off): their lines are written at WARNING, others at INFO."""


_LEVELS: dict[type, int] = {}
"""The level of each class of event met so far (an ``isinstance`` check
against pydantic's classes costs a few checks per event)."""


def record(domain_event: Any, position: int | None) -> None:
    """Write the decision-log line of one recorded event."""
    kind = type(domain_event)
    level = _LEVELS.get(kind)
    if level is None:
        level = logging.WARNING if issubclass(kind, STOP_EVENTS) else logging.INFO
        _LEVELS[kind] = level
    if logger.isEnabledFor(level):  # lines a disabled level drops are not built
        event, fields = describe(domain_event)
        line = {"event": event, **fields, "position": position}
        logger.log(level, orjson.dumps(line, default=str).decode())


# ------------------------------------------------------------------- log lines


@singledispatch
def describe(domain_event: Any) -> Line:
    """The log event and fields of one domain event."""
    msg = f"no log line for {type(domain_event).__name__}"
    raise TypeError(msg)


def _task(domain_event: TaskEvent | Task.Started, **fields: Any) -> dict[str, Any]:
    return {"task_id": task_id_of(domain_event.originator_id), **fields}


def _run(domain_event: Run.Event | Run.Started, **fields: Any) -> dict[str, Any]:
    return {"run_id": domain_event.originator_id.removeprefix("run:"), **fields}


@describe.register
def _(e: Task.Started) -> Line:
    return log_event(Task.Started), _task(e, run_id=e.run_id, agent=e.agent)


@describe.register
def _(e: Task.AttemptBegan) -> Line:
    return log_event(Task.AttemptBegan), _task(e)


@describe.register
def _(e: Task.BlacklistedStrategyAttempted) -> Line:
    return log_event(Task.BlacklistedStrategyAttempted), _task(
        e,
        consecutive_failures=e.consecutive_failures,
        error_hash=e.failure.error_hash,
        matched_strategy=excerpt(e.matched_strategy, 200),
    )


@describe.register
def _(e: Task.GatePassed) -> Line:
    return log_event(Task.GatePassed), _task(e, gate=e.gate)


@describe.register
def _(e: Task.GateFailed) -> Line:
    failure = e.failure
    return log_event(Task.GateFailed), _task(
        e,
        gate=failure.gate,
        reason=failure.reason,
        exit_code=failure.exit_code,
        consecutive_failures=e.consecutive_failures,
        error_hash=failure.error_hash,
    )


@describe.register
def _(e: Task.Escalated) -> Line:
    return log_event(Task.Escalated), _task(
        e,
        consecutive_failures=e.report.failure_count,
        error_hash=e.report.last_error_hash,
        session_id=e.session.session_id,
    )


@describe.register
def _(e: Task.HandedOff) -> Line:
    return log_event(Task.HandedOff), _task(
        e,
        consecutive_failures=e.payload.failure_count,
        error_hash=e.payload.last_error_hash,
        agent=e.payload.originating_agent,
        last_commit=e.payload.last_commit,
    )


@describe.register
def _(e: Task.Paused) -> Line:
    session = e.session
    if session.reason is SessionReason.ENTROPY_LIMIT:
        return log_event(Task.Paused, 1), _task(
            e, session_id=session.session_id, entropy_score=session.entropy_score
        )
    if session.reason is SessionReason.BUDGET_EXHAUSTED and session.spend:
        return log_event(Task.Paused, 2), _task(
            e, session_id=session.session_id, **_spend(session.spend)
        )
    return log_event(Task.Paused), _task(
        e, session_id=session.session_id, reason=session.reason
    )


@describe.register
def _(e: Task.EntropyMeasured) -> Line:
    return log_event(Task.EntropyMeasured), _task(
        e, score=e.score, threshold=e.threshold
    )


def _spend(spend: Spend) -> dict[str, Any]:
    """A spend's figures for a log line (a budget not set left out)."""
    figures = spend.model_dump()
    return {name: value for name, value in figures.items() if value is not None}


@describe.register
def _(e: Task.UsageRecorded) -> Line:
    return log_event(Task.UsageRecorded), _task(
        e,
        model=e.model,
        input_tokens=e.input_tokens,
        output_tokens=e.output_tokens,
        cache_read_tokens=e.cache_read_tokens,
        cache_creation_tokens=e.cache_creation_tokens,
        cost_usd=e.cost_usd,
    )


@describe.register
def _(e: Task.BudgetWarned) -> Line:
    return log_event(Task.BudgetWarned), _task(e, warn=e.warn, **_spend(e.spend))


@describe.register
def _(e: Task.BudgetRaised) -> Line:
    return log_event(Task.BudgetRaised), _task(
        e,
        actor=e.actor,
        reason=excerpt(e.reason, 200),
        budget_usd=e.budget_usd,
        budget_tokens=e.budget_tokens,
    )


@describe.register
def _(e: Task.LessonLogged) -> Line:
    return log_event(Task.LessonLogged), _task(e)


@describe.register
def _(e: Task.Resumed) -> Line:
    return _human(e, HumanAction.RESUME, session_id=e.session_id)


@describe.register
def _(e: Task.Rewound) -> Line:
    return _human(e, HumanAction.REWIND, session_id=e.session_id, to_commit=e.to_commit)


@describe.register
def _(e: Task.Skipped) -> Line:
    return _human(e, HumanAction.SKIP, session_id=e.session_id)


@describe.register
def _(e: Task.HandoffClaimed) -> Line:
    return _human(e, HumanAction.CLAIM, waiting_in=e.waiting_in)


@describe.register
def _(e: Task.ClaimReleased) -> Line:
    return _human(e, HumanAction.RELEASE, waiting_in=e.waiting_in)


@describe.register
def _(e: Task.ClaimTakenOver) -> Line:
    return _human(e, HumanAction.TAKE_OVER, previous=e.previous, reason=e.reason)


@describe.register
def _(e: Task.HandoffResolved) -> Line:
    return _human(e, HumanAction.RESOLVE, resolution=e.resolution)


@describe.register
def _(e: Task.DeadlineExpired) -> Line:
    return log_event(Task.DeadlineExpired), _task(
        e,
        session_id=e.session_id,
        deadline_at=e.deadline_at,
        actor=e.actor,
        reason=e.reason,
        consecutive_failures=e.payload.failure_count,
        error_hash=e.payload.last_error_hash,
    )


@describe.register
def _(e: Task.DeadlineReminded) -> Line:
    return log_event(Task.DeadlineReminded), _task(
        e, session_id=e.session_id, deadline_at=e.deadline_at
    )


def _human(e: Any, action: HumanAction, **fields: Any) -> Line:
    return log_event(type(e)), _task(e, action=action, actor=e.actor, **fields)


@describe.register
def _(e: Run.Started) -> Line:
    return log_event(Run.Started), _run(e, nodes=len(e.dag))


@describe.register
def _(e: Run.NodeStarted) -> Line:
    return log_event(Run.NodeStarted), _run(e, node=e.node)


@describe.register
def _(e: Run.NodeSettled) -> Line:
    return log_event(Run.NodeSettled), _run(e, node=e.node, outcome=e.outcome)


@describe.register
def _(e: Run.Paused) -> Line:
    return log_event(Run.Paused), _run(e, task_id=e.task_id, reason=e.reason)


@describe.register
def _(e: Run.Resumed) -> Line:
    return log_event(Run.Resumed), _run(e, task_id=e.task_id)


@describe.register
def _(e: Run.Completed) -> Line:
    return log_event(Run.Completed), _run(e)


@describe.register
def _(e: Run.Spent) -> Line:
    return log_event(Run.Spent), _run(
        e, task_id=e.task_id, cost_usd=e.usage.spent_usd, tokens=e.usage.tokens
    )


@describe.register
def _(e: Run.BudgetExhausted) -> Line:
    return log_event(Run.BudgetExhausted), _run(
        e, spent_usd=e.spend.spent_usd, budget_usd=e.spend.budget_usd
    )


@describe.register
def _(e: Run.BudgetRaised) -> Line:
    return log_event(Run.BudgetRaised), _run(
        e, budget_usd=e.budget_usd, actor=e.actor, reason=e.reason
    )


@describe.register
def _(e: Receipt.Issued) -> Line:
    return log_event(Receipt.Issued), {
        "receipt": e.originator_id.removeprefix("receipt:")
    }


@describe.register
def _(e: Operators.Added) -> Line:
    return log_event(Operators.Added), {"operator": e.name, "actor": e.actor}


@describe.register
def _(e: Operators.Rotated) -> Line:
    return log_event(Operators.Rotated), {"operator": e.name, "actor": e.actor}


@describe.register
def _(e: Operators.Removed) -> Line:
    return log_event(Operators.Removed), {"operator": e.name, "actor": e.actor}


@describe.register
def _(e: Operators.Opened) -> Line:
    return log_event(Operators.Opened), {}


# --------------------------------------------------------------- notifications


@singledispatch
def notification(domain_event: Any, position: int) -> Notification | None:
    """What a human should be told about ``domain_event``, if anything."""
    return None


def _notice(e: TaskEvent, position: int, **fields: Any) -> Notification:
    """The notification of ``e``, of the kind the vocabulary gives it."""
    kind = kind_of(type(e))
    assert kind is not None, type(e)  # tests/unit/test_vocabulary.py
    return Notification(
        position=position,
        kind=kind,
        task_id=task_id_of(e.originator_id),
        at=e.timestamp,
        **fields,
    )


@notification.register
def _(e: Task.Escalated, position: int) -> Notification:
    return _notice(
        e,
        position,
        session_id=e.session.session_id,
        reason=e.session.reason,
        failure_count=e.report.failure_count,
    )


@notification.register
def _(e: Task.Paused, position: int) -> Notification:
    return _notice(
        e,
        position,
        session_id=e.session.session_id,
        reason=e.session.reason,
        spend=e.session.spend,
    )


@notification.register
def _(e: Task.HandedOff, position: int) -> Notification:
    return _notice(
        e,
        position,
        reason=HAND_OFF_REQUIRED,
        failure_count=e.payload.failure_count,
    )


@notification.register
def _(e: Task.DeadlineExpired, position: int) -> Notification:
    """Nobody answered in time: the task is handed off, as a hand-off is
    told (reason ``human_deadline``, not ``hand_off_required``)."""
    return _notice(
        e,
        position,
        session_id=e.session_id,
        reason=HUMAN_DEADLINE,
        failure_count=e.payload.failure_count,
    )


@notification.register
def _(e: Task.BudgetWarned, position: int) -> Notification:
    return _notice(e, position, reason="budget_warned", spend=e.spend)


@notification.register
def _(e: Task.BlacklistedStrategyAttempted, position: int) -> Notification:
    return _notice(
        e,
        position,
        reason=e.failure.reason,
        failure_count=e.consecutive_failures,
    )


NOTIFYING_EVENTS: tuple[type[Any], ...] = tuple(
    cls for cls in notification.registry if cls is not object
)
"""The event classes :func:`notification` turns into notifications."""
