"""The signal that suspends an orchestration graph while a human decides."""

from __future__ import annotations

from devs.domain.decisions import (
    AttemptDecision,
    EntropyDecision,
    GateDecision,
    Outcome,
    UsageDecision,
)
from devs.domain.names import HAND_OFF_REQUIRED, SessionReason

STOP_REASONS: dict[Outcome, str] = {
    Outcome.PAUSE: SessionReason.BLACKLISTED_STRATEGY,
    Outcome.ESCALATE: SessionReason.MAX_RETRIES,
    Outcome.HAND_OFF: HAND_OFF_REQUIRED,
}


class GraphSuspended(BaseException):
    """Raised by orchestration code to stop a graph until a human acts.

    A ``BaseException``, not an ``Exception``: generic ``except Exception``
    handlers in agent code must not swallow it and retry. It is not a crash;
    catch it where the graph is driven, and resume after the human session.
    """

    def __init__(self, task_id: str, session_id: str | None, reason: str) -> None:
        super().__init__(f"task {task_id!r} suspended ({reason}), session {session_id}")
        self.task_id = task_id
        self.session_id = session_id
        self.reason = reason


def suspend_if_stopped(
    decision: AttemptDecision | GateDecision | EntropyDecision | UsageDecision,
) -> None:
    """Raise :class:`GraphSuspended` when ``decision`` stops the agent (a
    usage that spent the task's budget too)."""
    if isinstance(decision, UsageDecision):
        if decision.triggered:
            raise GraphSuspended(
                decision.task_id, decision.session_id, SessionReason.BUDGET_EXHAUSTED
            )
        return
    if isinstance(decision, EntropyDecision):
        if decision.triggered:
            raise GraphSuspended(
                decision.task_id, decision.session_id, SessionReason.ENTROPY_LIMIT
            )
        return
    reason = STOP_REASONS.get(decision.outcome) if decision.outcome else None
    if reason is not None:
        raise GraphSuspended(decision.task_id, decision.session_id, reason)
