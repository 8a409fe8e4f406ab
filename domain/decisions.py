"""What the service's commands answer, what it reads off an aggregate, and how
those answers are built from the aggregates a command just saved."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from devs.domain import blacklist
from devs.domain.chart import STATUS, TaskState
from devs.domain.gate import GateFailureReason, GateResult
from devs.domain.model import Immutable
from devs.domain.names import (
    DEADLINE_ACTOR,
    HumanAction,
    NotificationKind,
    Resolution,
)
from devs.domain.policy import Policy
from devs.domain.ports import RunState
from devs.domain.run import NodeOutcome, Run, RunStatus
from devs.domain.spend import Spend
from devs.domain.stuck import StuckAssessment
from devs.domain.task import (
    FailureAnalysisReport,
    FailureRecord,
    HandoffPayload,
    HumanSession,
    Task,
)


class Outcome(StrEnum):
    """What the orchestrator should do next."""

    ADVANCE = "advance"  # passed; the run has a next ready node
    COMPLETE = "complete"  # passed; no run, or its last node
    STAY = "stay"  # failed below the thresholds: retry
    PAUSE = "pause"  # stopped for a human (blacklisted strategy, entropy)
    ESCALATE = "escalate"  # stopped for a human (max retries)
    HAND_OFF = "hand_off"  # taken off the agent: the human queue has it


class TaskSummary(Immutable):
    task_id: str
    run_id: str | None
    agent: str | None
    state: TaskState
    status: str
    consecutive_failures: int
    policy: Policy
    starting_commit: str | None
    last_commit: str | None
    current_strategy: str | None
    failure_history: tuple[FailureRecord, ...]
    lessons: tuple[str, ...]
    pending_session: HumanSession | None
    handoff: HandoffPayload | None
    claimed_by: str | None
    version: int
    created_on: datetime
    modified_on: datetime
    stuck: StuckAssessment | None = None
    """The stuck score of the last failure since the last pass."""
    links: dict[str, str] | None = None
    """What the agent's side knows of the task (``transcript``, ``branch``,
    ``pr``…), as given when it started."""
    spend: Spend | None = None
    """What its model calls spent, and its budgets (``None``: no usage
    recorded and no budget set)."""


class AttemptDecision(Immutable):
    task_id: str
    proceed: bool
    blacklisted: bool
    matched_strategy: str | None
    directive: str
    state: TaskState
    consecutive_failures: int
    outcome: Outcome | None = None
    session_id: str | None = None
    report: FailureAnalysisReport | None = None
    stuck: StuckAssessment | None = None
    """A blocked attempt's stuck score."""


class GateDecision(Immutable):
    task_id: str
    gate: str | None
    passed: bool
    reason: GateFailureReason | None
    exit_code: int | None
    outcome: Outcome
    state: TaskState
    consecutive_failures: int
    next_node: str | None = None
    session_id: str | None = None
    report: FailureAnalysisReport | None = None
    error_hash: str | None = None
    stuck: StuckAssessment | None = None
    """A failed gate's stuck score."""


class EntropyDecision(Immutable):
    task_id: str
    score: float
    threshold: float
    triggered: bool
    session_id: str | None
    state: TaskState


class UsageDecision(Immutable):
    """What recording a model call's usage decided."""

    task_id: str
    recorded: bool
    """``False``: a usage with this ``usage_id`` was recorded before, and
    nothing was (a hook that reads a transcript again)."""
    model: str
    cost_usd: float | None
    """This usage's cost (``None``: the model has no price)."""
    spend: Spend
    """What the task has spent now, and its budgets."""
    state: TaskState
    triggered: bool
    """Whether this usage paused the task for its budget."""
    warned: bool
    """Whether it recorded the budget's warning."""
    session_id: str | None
    """The human session the task waits on, if any."""


class BudgetAnswer(Immutable):
    """A person's raise of a task's budget."""

    task_id: str
    action: Literal["raise_budget"] = "raise_budget"
    """What the person did (a human answer, as :class:`ActionResult`'s)."""
    actor: str
    reason: str
    spend: Spend
    """What the task has spent, and its budgets now."""
    state: TaskState
    version: int
    """The task's version after the raise (the ``If-Match`` of the next
    answer: resume it)."""


class ActionResult(Immutable):
    """The result of a human action on a task."""

    task_id: str
    action: HumanAction
    actor: str
    reason: str | None
    state: TaskState
    resolved_session_id: str | None = None
    resolution: Resolution | None = None
    to_commit: str | None = None
    next_node: str | None = None
    run_status: RunStatus | None = None
    version: int | None = None
    """The task's version after the answer (the ``If-Match`` of the next)."""
    claimed_by: str | None = None
    """Who holds the stop's claim after the answer."""
    previous: str | None = None
    """A take-over's: who held the claim before."""


class DeadlineResult(Immutable):
    """What the clock did to a task's human session: its deadline expired (the
    task handed off) or a reminder of it went out."""

    task_id: str
    expired: bool
    """``True``: handed off (``expire_deadline``); ``False``: reminded."""
    session_id: str
    deadline_at: datetime
    actor: str
    state: TaskState
    run_status: RunStatus | None = None


class HistoryEntry(Immutable):
    """One event of a task's history, replayed, with the state after it."""

    version: int
    event: str
    timestamp: datetime
    changes: dict[str, Any]
    state: TaskState
    consecutive_failures: int


class Notification(Immutable):
    """Something a human should see, in log order."""

    position: int
    kind: NotificationKind
    task_id: str
    at: datetime
    session_id: str | None = None
    reason: str | None = None
    failure_count: int | None = None
    spend: Spend | None = None
    """A budget's warning or stop: what the task spent, and its budgets."""


# --------------------------------------------------------------- building them

STATE_OUTCOMES = {
    TaskState.GATE_FAILED: Outcome.STAY,
    TaskState.RUNNING: Outcome.STAY,
    TaskState.PAUSED: Outcome.PAUSE,
    TaskState.ESCALATION: Outcome.ESCALATE,
    TaskState.HAND_OFF: Outcome.HAND_OFF,
}


def attempt_decision(task: Task, matched: str | None) -> AttemptDecision:
    stopped = matched is not None
    return AttemptDecision(
        task_id=task.task_id,
        proceed=not stopped,
        blacklisted=stopped,
        matched_strategy=matched,
        directive=blacklist.directive(task.lessons),
        state=task.state,
        consecutive_failures=task.consecutive_failures,
        outcome=STATE_OUTCOMES[task.state] if stopped else None,
        session_id=task.pending_session_id,
        report=task.report() if task.state is TaskState.ESCALATION else None,
        stuck=task.stuck if stopped else None,
    )


def gate_decision(
    task: Task, run: Run | None, result: GateResult, gate: str | None
) -> GateDecision:
    next_node = run.next_node() if run is not None else None
    if result.passed:
        outcome = Outcome.ADVANCE if next_node is not None else Outcome.COMPLETE
    else:
        outcome = STATE_OUTCOMES[task.state]
    last_failure = task.failures[-1] if not result.passed else None
    return GateDecision.of(
        {
            "task_id": task.task_id,
            "gate": gate,
            "passed": result.passed,
            "reason": result.reason,
            "exit_code": result.exit_code,
            "outcome": outcome,
            "state": task.state,
            "consecutive_failures": task.consecutive_failures,
            "next_node": next_node if result.passed else None,
            "session_id": task.pending_session_id,
            "report": task.report() if outcome is Outcome.ESCALATE else None,
            "error_hash": last_failure.error_hash if last_failure else None,
            "stuck": task.stuck if last_failure else None,
        }
    )


def action_result(
    task: Task,
    run: Run | None,
    action: HumanAction,
    actor: str,
    reason: str | None,
    session_id: str | None,
    *,
    to_commit: str | None = None,
    resolution: Resolution | None = None,
    previous: str | None = None,
) -> ActionResult:
    return ActionResult(
        task_id=task.task_id,
        action=action,
        actor=actor,
        reason=reason,
        state=task.state,
        resolved_session_id=session_id,
        resolution=resolution,
        to_commit=to_commit,
        next_node=run.next_node() if run is not None else None,
        run_status=run.status if run is not None else None,
        version=task.version,
        claimed_by=task.claimed_by,
        previous=previous,
    )


def deadline_result(
    task: Task, run: Run | None, session: HumanSession, *, expired: bool
) -> DeadlineResult:
    """The answer of ``expire_deadline`` or ``remind_deadline`` on ``session``
    (the task's pending session before the command)."""
    assert session.deadline_at is not None  # the command refused otherwise
    return DeadlineResult(
        task_id=task.task_id,
        expired=expired,
        session_id=session.session_id,
        deadline_at=session.deadline_at,
        actor=DEADLINE_ACTOR,
        state=task.state,
        run_status=run.status if run is not None else None,
    )


def task_summary(task: Task) -> TaskSummary:
    spend = task.spend()
    used_or_budgeted = task.usage is not None or (
        spend.budget_usd is not None or spend.budget_tokens is not None
    )
    return TaskSummary(
        task_id=task.task_id,
        run_id=task.run_id,
        agent=task.agent,
        state=task.state,
        status=STATUS[TaskState(task.state)],
        consecutive_failures=task.consecutive_failures,
        policy=task.policy,
        starting_commit=task.starting_commit,
        last_commit=task.last_commit,
        current_strategy=task.current_strategy,
        failure_history=tuple(task.failures),
        lessons=tuple(task.lessons),
        pending_session=task.pending_session,
        handoff=task.handoff,
        claimed_by=task.claimed_by,
        version=task.version,
        created_on=task.created_on,
        modified_on=task.modified_on,
        stuck=task.stuck,
        links=task.links,
        spend=spend if used_or_budgeted else None,
    )


def run_state_of(run: Run) -> RunState:
    return RunState(
        run_id=run.run_id,
        status=run.status,
        dag=dict(run.dag),
        order=run.order,
        started=tuple(run.started),
        completed=tuple(
            n for n, o in run.settled.items() if o == NodeOutcome.COMPLETED
        ),
        skipped=tuple(n for n, o in run.settled.items() if o == NodeOutcome.SKIPPED),
        ready=run.ready_nodes(),
        paused_by=tuple(run.paused_by),
        updated_at=run.modified_on,
        stop_scope=run.stop_scope,
        started_at=run.created_on,
        over_budget=run.over_budget,
    )


_NOT_CHANGES = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic"}
)


def history_entry(event: Any, task: Task) -> HistoryEntry:
    """One replayed event of a task's history, with the state it left the
    task in (``task``, right after it)."""
    return HistoryEntry(
        version=event.originator_version,
        event=type(event).__name__,
        timestamp=event.timestamp,
        changes=event.model_dump(mode="json", exclude=_NOT_CHANGES),
        state=task.state,
        consecutive_failures=task.consecutive_failures,
    )
