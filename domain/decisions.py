"""What the service's commands answer, and what it reads off an aggregate."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from devs.domain.chart import TaskState
from devs.domain.gate import GateFailureReason
from devs.domain.model import Immutable
from devs.domain.names import HumanAction, NotificationKind, Resolution
from devs.domain.policy import Policy
from devs.domain.run import RunStatus
from devs.domain.task import (
    FailureAnalysisReport,
    FailureRecord,
    HandoffPayload,
    HumanSession,
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


class EntropyDecision(Immutable):
    task_id: str
    score: float
    threshold: float
    triggered: bool
    session_id: str | None
    state: TaskState


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
