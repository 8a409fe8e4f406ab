"""``hitl_failure_gates``: the open human gate of each task (seed 000).

A row appears when a task stops for a human (entropy limit, a blacklisted
strategy, max retries) and goes when the human answers (or nobody does by the
session's deadline: the task is handed off); ``task_id`` is ``UNIQUE``, so a
task has at most one open gate, and a second high entropy score while it is
open returns the same session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.task import Task, TaskEvent, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds


class FailureGatesView(TrackingRecorder, ABC):
    @abstractmethod
    def open_gate(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Record the task's open gate (replacing an older one)."""

    @abstractmethod
    def close_gate(self, task_id: str, tracking: Tracking) -> None:
        """The human answered: the task has no open gate."""

    @abstractmethod
    def open_gate_of(self, task_id: str) -> dict[str, Any] | None:
        """The task's open gate, if any."""


class FailureGatesProjection(ReadModelProjection[FailureGatesView]):
    process_event = folds()

    @process_event.register(Task.Escalated)
    @process_event.register(Task.Paused)
    def _(self, e: Task.Escalated | Task.Paused, tracking: Tracking) -> None:
        session = e.session
        self.view.open_gate(
            {
                "id": session.session_id,
                "task_id": task_id_of(e.originator_id),
                "entropy_score": session.entropy_score,
                "triggered_at": int(session.opened_at.timestamp() * 1000),
                "opened_at": session.opened_at.isoformat(),
                "session_id": session.session_id,
                "reason": session.reason,
            },
            tracking,
        )

    @process_event.register(Task.Resumed)
    @process_event.register(Task.Rewound)
    @process_event.register(Task.Skipped)
    @process_event.register(Task.DeadlineExpired)
    def _(self, e: TaskEvent, tracking: Tracking) -> None:
        self.view.close_gate(task_id_of(e.originator_id), tracking)


class FailureGatesTables(FailureGatesView, SQLTables):
    """The ``hitl_failure_gates`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "hitl_failure_gates"
    schema_version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ("hitl_failure_gates",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS hitl_failure_gates ("
        "id TEXT PRIMARY KEY, "
        "task_id TEXT NOT NULL UNIQUE, "
        "entropy_score REAL, "
        "triggered_at INTEGER NOT NULL, "
        "opened_at TEXT NOT NULL, "
        "session_id TEXT NOT NULL REFERENCES hitl_sessions (id), "
        "reason TEXT NOT NULL DEFAULT 'entropy_limit')",
    )

    def open_gate(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "INSERT INTO hitl_failure_gates (id, task_id, entropy_score, "
                "triggered_at, opened_at, session_id, reason) VALUES (:id, "
                ":task_id, :entropy_score, :triggered_at, :opened_at, :session_id, "
                ":reason) ON CONFLICT (task_id) DO UPDATE SET id = excluded.id, "
                "entropy_score = excluded.entropy_score, "
                "triggered_at = excluded.triggered_at, "
                "opened_at = excluded.opened_at, "
                "session_id = excluded.session_id, reason = excluded.reason",
                row,
            )

    def close_gate(self, task_id: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "DELETE FROM hitl_failure_gates WHERE task_id = ?", (task_id,)
            )

    def open_gate_of(self, task_id: str) -> dict[str, Any] | None:
        rows = self._select(
            "SELECT * FROM hitl_failure_gates WHERE task_id = ?", (task_id,)
        )
        return dict(rows[0]) if rows else None


class SQLiteFailureGatesView(FailureGatesTables, SQLiteView):
    """The ``hitl_failure_gates`` read model in the application's SQLite file."""
