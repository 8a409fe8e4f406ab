"""Ports: what the application asks of its read models, and what they answer.

The domain declares these; ``devs.projections`` implements them (SQLite views
in-process today), and the application is handed an implementation by topic
from its ``env`` (``READ_MODELS_TOPIC``), the way eventsourcing picks its
persistence module. Nothing here knows about SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from devs.domain.chart import TaskState
from devs.domain.gate import GateFailureReason
from devs.domain.model import Immutable
from devs.domain.names import SessionReason
from devs.domain.run import RunStatus
from devs.domain.task import FailureAnalysisReport, HandoffPayload


class TaskIndexEntry(Immutable):
    task_id: str
    run_id: str | None
    state: TaskState
    consecutive_failures: int
    updated_at: datetime


class GateStatus(Immutable):
    """The human-in-the-loop gate of a task, and its last binary gate result."""

    task_id: str
    state: TaskState
    consecutive_failures: int
    triggered: bool
    session_id: str | None
    reason: SessionReason | None
    entropy_score: float | None
    triggered_at: datetime | None
    last_gate: str | None
    last_passed: bool | None
    last_reason: GateFailureReason | None
    last_exit_code: int | None
    last_error_hash: str | None
    updated_at: datetime


class Lesson(Immutable):
    """A lesson learned: a strategy that failed and why (``BlacklistEntry``)."""

    task_id: str
    failed_strategy: str
    rca_summary: str
    logged_at: datetime


class PendingSession(Immutable):
    session_id: str
    task_id: str
    reason: SessionReason
    opened_at: datetime
    entropy_score: float | None
    failure_count: int


class HandoffEntry(Immutable):
    payload: HandoffPayload
    position: int
    claimed_by: str | None
    claimed_at: datetime | None


class FailureReport(Immutable):
    """Failures since the last pass (``task_failures``), and the last escalation."""

    task_id: str
    failure_count: int
    failed_strategies: tuple[str, ...]
    last_error: str | None
    last_error_hash: str | None
    escalations: int
    last_escalation: FailureAnalysisReport | None
    updated_at: datetime


class RunState(Immutable):
    run_id: str
    status: RunStatus
    dag: dict[str, tuple[str, ...]]
    order: tuple[str, ...]
    started: tuple[str, ...]
    completed: tuple[str, ...]
    skipped: tuple[str, ...]
    ready: tuple[str, ...]
    paused_by: tuple[str, ...]
    updated_at: datetime


class Verification(Immutable):
    """What ``RecoveryService.verify()`` found: ``ok`` when ``problems`` is empty.

    Each problem is one line: a read model whose rows differ from a fold of the
    log, a missing table, a position past the end of the log, or an event that
    cannot be decoded, named by its log position.
    """

    ok: bool
    problems: list[str]
    position: int
    """The end of the log when the check began."""
    read_models: tuple[str, ...]
    """The read models compared."""
    positions: dict[str, int]
    """How far each stored read model had read the log: each is compared with a
    fold of the log up to its own position (the next query reads the rest)."""


# ---------------------------------------------------------------- the ports


class TaskIndex(Protocol):
    def task_entry(self, task_id: str) -> TaskIndexEntry | None:
        """The task's row, if the task was started."""

    def task_entries(
        self, *, state: str | None = None, run_id: str | None = None
    ) -> list[TaskIndexEntry]:
        """Tasks of one state and/or one run, in the order they were started."""


class GateStatuses(Protocol):
    def gate_status(self, task_id: str) -> GateStatus | None:
        """The task's human gate and its last binary gate result."""


class LessonsLearned(Protocol):
    def lessons(self, task_id: str) -> list[Lesson]:
        """The task's lessons, the most recently logged last."""

    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """Just the failed strategies (what the blacklist compares against)."""


class HumanSessions(Protocol):
    def pending_sessions(self) -> list[PendingSession]:
        """Sessions that wait for a human, oldest first."""


class HandoffQueue(Protocol):
    def handoff_queue(self) -> list[HandoffEntry]:
        """Handed-off tasks, oldest first."""


class FailureReports(Protocol):
    def failure_report(self, task_id: str) -> FailureReport | None:
        """Failures since the last pass (``task_failures``)."""


class RunStates(Protocol):
    def run_state(self, run_id: str) -> RunState | None:
        """The run's status and its nodes."""


class ReadModels(
    TaskIndex,
    GateStatuses,
    LessonsLearned,
    HumanSessions,
    HandoffQueue,
    FailureReports,
    RunStates,
    Protocol,
):
    """Every read model of the application, and how they are kept current."""

    names: tuple[str, ...]

    def catch_up(self) -> int:
        """Bring every read model up to the end of the log; return the position."""

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Replay the named read models (default: all) from 0 beside the stored
        ones, then swap them in, in one transaction."""

    def positions(self) -> dict[str, int]:
        """Each read model's tracking position."""

    def verify(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Verification:
        """Refold every read model from the log and compare it with the stored
        one; report undecodable events by log position. Writes nothing."""

    def close(self) -> None:
        """Release connections the read models hold of their own."""


ReadModelsFactory = Callable[[Any], ReadModels]
"""What ``READ_MODELS_TOPIC`` names: called with the application."""
