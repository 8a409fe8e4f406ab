"""``task_failures``: failures since the last pass, per task (seed 001).

``failed_strategies`` is a JSON array (as the seed gives it), capped at the
most recent hundred distinct strategies; a pass resets the row. The number of
escalations and the last ``FailureAnalysisReport`` (JSON) sit beside them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import orjson
from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.ports import FailureReport
from devs.domain.task import Task, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds

FAILED_STRATEGIES_CAP = 100


class TaskFailuresView(TrackingRecorder, ABC):
    @abstractmethod
    def insert_row(self, task_id: str, updated_at: str, tracking: Tracking) -> None:
        """A started task: no failures yet."""

    @abstractmethod
    def record_failure(
        self,
        task_id: str,
        failure: dict[str, Any],
        strategy: str | None,
        tracking: Tracking,
    ) -> None:
        """Set the count and last error; add the strategy if it is new."""

    @abstractmethod
    def update_row(
        self, task_id: str, changes: dict[str, Any], tracking: Tracking
    ) -> None:
        """Set columns of the task's row."""

    @abstractmethod
    def count_escalation(
        self, task_id: str, report: str, at: str, tracking: Tracking
    ) -> None:
        """One more escalation, with its report (JSON)."""

    @abstractmethod
    def failure_report(self, task_id: str) -> FailureReport | None:
        """The task's row."""


class TaskFailuresProjection(ReadModelProjection[TaskFailuresView]):
    process_event = folds()

    @process_event.register
    def _(self, e: Task.Started, tracking: Tracking) -> None:
        self.view.insert_row(e.task_id, e.timestamp.isoformat(), tracking)

    @process_event.register(Task.GateFailed)
    @process_event.register(Task.BlacklistedStrategyAttempted)
    def _(
        self, e: Task.GateFailed | Task.BlacklistedStrategyAttempted, tracking: Tracking
    ) -> None:
        failure = e.failure
        self.view.record_failure(
            task_id_of(e.originator_id),
            {
                "failure_count": e.consecutive_failures,
                "last_error": failure.last_error,  # the one line every surface shows
                "last_error_hash": failure.error_hash,
                "updated_at": e.timestamp.isoformat(),
            },
            failure.strategy,
            tracking,
        )

    @process_event.register
    def _(self, e: Task.GatePassed, tracking: Tracking) -> None:
        self.view.update_row(
            task_id_of(e.originator_id),
            {
                "failure_count": 0,
                "failed_strategies": "[]",
                "last_error": None,
                "last_error_hash": None,
                "updated_at": e.timestamp.isoformat(),
            },
            tracking,
        )

    @process_event.register
    def _(self, e: Task.Escalated, tracking: Tracking) -> None:
        self.view.count_escalation(
            task_id_of(e.originator_id),
            e.report.model_dump_json(),
            e.timestamp.isoformat(),
            tracking,
        )


class TaskFailuresTables(TaskFailuresView, SQLTables):
    """The ``task_failures`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "task_failures"
    schema_version: ClassVar[int] = 3  # v2: the stuck score; v3: one error line
    tables: ClassVar[tuple[str, ...]] = ("task_failures",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS task_failures ("
        "task_id TEXT PRIMARY KEY, "
        "failure_count INTEGER NOT NULL DEFAULT 0, "
        "last_error TEXT, "
        "failed_strategies TEXT NOT NULL DEFAULT '[]', "
        "last_error_hash TEXT, "
        "escalations INTEGER NOT NULL DEFAULT 0, "
        "last_escalation TEXT, "
        "updated_at TEXT NOT NULL)",
    )

    def insert_row(self, task_id: str, updated_at: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "INSERT INTO task_failures (task_id, updated_at) VALUES (?, ?) "
                "ON CONFLICT (task_id) DO NOTHING",
                (task_id, updated_at),
            )

    def record_failure(
        self,
        task_id: str,
        failure: dict[str, Any],
        strategy: str | None,
        tracking: Tracking,
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "SELECT failed_strategies FROM task_failures WHERE task_id = ?",
                (task_id,),
            )
            found = cursor.fetchone()
            if found is None:
                return
            strategies: list[str] = orjson.loads(found["failed_strategies"])
            if strategy and strategy not in strategies:
                strategies = [*strategies, strategy][-FAILED_STRATEGIES_CAP:]
            changes = {
                **failure,
                "failed_strategies": orjson.dumps(strategies).decode(),
            }
            self._update(cursor, "task_failures", ("task_id", task_id), changes)

    def update_row(
        self, task_id: str, changes: dict[str, Any], tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            self._update(cursor, "task_failures", ("task_id", task_id), changes)

    def count_escalation(
        self, task_id: str, report: str, at: str, tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE task_failures SET escalations = escalations + 1, "
                "last_escalation = ?, updated_at = ? WHERE task_id = ?",
                (report, at, task_id),
            )

    def failure_report(self, task_id: str) -> FailureReport | None:
        rows = self._select("SELECT * FROM task_failures WHERE task_id = ?", (task_id,))
        if not rows:
            return None
        row = rows[0]
        return FailureReport(
            task_id=row["task_id"],
            failure_count=row["failure_count"],
            failed_strategies=tuple(orjson.loads(row["failed_strategies"])),
            last_error=row["last_error"],
            last_error_hash=row["last_error_hash"],
            escalations=row["escalations"],
            last_escalation=(
                orjson.loads(row["last_escalation"]) if row["last_escalation"] else None
            ),
            updated_at=row["updated_at"],
        )


class SQLiteTaskFailuresView(TaskFailuresTables, SQLiteView):
    """The ``task_failures`` read model in the application's SQLite file."""
