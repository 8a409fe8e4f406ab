"""``handoff_queue``: tasks taken off their agent, in the order handed off (seed 003).

Each row holds the payload's fields as columns and the whole payload (with the
failure history, and ``reason`` ``human_deadline`` when nobody answered the
task's human in time) as JSON; the ladder's hand-off and a deadline's expiry
add one alike; claiming sets ``claimed_by``/``claimed_at``; resolving,
rewinding or skipping the task removes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.ports import HandoffEntry
from devs.domain.task import HandoffPayload, Task, TaskEvent, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds


class HandoffQueueView(TrackingRecorder, ABC):
    @abstractmethod
    def enqueue(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Add a handed-off task."""

    @abstractmethod
    def claim(
        self, task_id: str, actor: str | None, at: str | None, tracking: Tracking
    ) -> None:
        """A human took it (``None``: the claim was released)."""

    @abstractmethod
    def dequeue(self, task_id: str, tracking: Tracking) -> None:
        """The hand-off is over."""

    @abstractmethod
    def handoff_queue(self) -> list[HandoffEntry]:
        """Handed-off tasks, oldest first."""


class HandoffQueueProjection(ReadModelProjection[HandoffQueueView]):
    process_event = folds()

    @process_event.register(Task.HandedOff)
    @process_event.register(Task.DeadlineExpired)
    def _(self, e: Task.HandedOff | Task.DeadlineExpired, tracking: Tracking) -> None:
        payload = e.payload
        claimed = e.claimed_by if isinstance(e, Task.DeadlineExpired) else None
        self.view.enqueue(
            {
                "task_id": task_id_of(e.originator_id),
                "failure_count": payload.failure_count,
                "last_error_hash": payload.last_error_hash,
                "last_error_excerpt": payload.last_error_excerpt,
                "originating_agent": payload.originating_agent,
                "last_commit": payload.last_commit,
                "enqueued_at": payload.enqueued_at.isoformat(),
                # A ladder's hand-off has no reason: its JSON is as before.
                "payload": payload.model_dump_json(
                    exclude={"reason"} if payload.reason is None else None
                ),
                "position": tracking.notification_id,
                # A claim on the session an expiry ended carries over.
                "claimed_by": claimed,
                "claimed_at": e.timestamp.isoformat() if claimed else None,
            },
            tracking,
        )

    @process_event.register(Task.HandoffClaimed)
    @process_event.register(Task.ClaimTakenOver)
    def _(
        self, e: Task.HandoffClaimed | Task.ClaimTakenOver, tracking: Tracking
    ) -> None:
        self.view.claim(
            task_id_of(e.originator_id), e.actor, e.timestamp.isoformat(), tracking
        )

    @process_event.register
    def _(self, e: Task.ClaimReleased, tracking: Tracking) -> None:
        self.view.claim(task_id_of(e.originator_id), None, None, tracking)

    @process_event.register(Task.HandoffResolved)
    @process_event.register(Task.Rewound)
    @process_event.register(Task.Skipped)
    def _(self, e: TaskEvent, tracking: Tracking) -> None:
        self.view.dequeue(task_id_of(e.originator_id), tracking)


class HandoffQueueTables(HandoffQueueView, SQLTables):
    """The ``handoff_queue`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "handoff_queue"
    schema_version: ClassVar[int] = 2  # v2: the payload JSON holds the stuck score
    tables: ClassVar[tuple[str, ...]] = ("handoff_queue",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS handoff_queue ("
        "task_id TEXT PRIMARY KEY, "
        "failure_count INTEGER NOT NULL, "
        "last_error_hash TEXT, "
        "last_error_excerpt TEXT NOT NULL, "
        "originating_agent TEXT, "
        "last_commit TEXT, "
        "enqueued_at TEXT NOT NULL, "
        "payload TEXT NOT NULL, "
        "position INTEGER NOT NULL, "
        "claimed_by TEXT, "
        "claimed_at TEXT)",
        "CREATE INDEX IF NOT EXISTS handoff_queue_position ON handoff_queue (position)",
    )

    def enqueue(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            self._insert(
                cursor,
                "handoff_queue",
                row,
                "ON CONFLICT (task_id) DO UPDATE SET "
                + ", ".join(f"{name} = excluded.{name}" for name in row),
            )

    def claim(
        self, task_id: str, actor: str | None, at: str | None, tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE handoff_queue SET claimed_by = ?, claimed_at = ? "
                "WHERE task_id = ?",
                (actor, at, task_id),
            )

    def dequeue(self, task_id: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute("DELETE FROM handoff_queue WHERE task_id = ?", (task_id,))

    def handoff_queue(self) -> list[HandoffEntry]:
        rows = self._select("SELECT * FROM handoff_queue ORDER BY position")
        return [
            HandoffEntry(
                payload=HandoffPayload.model_validate_json(row["payload"]),
                position=row["position"],
                claimed_by=row["claimed_by"],
                claimed_at=row["claimed_at"],
            )
            for row in rows
        ]


class SQLiteHandoffQueueView(HandoffQueueTables, SQLiteView):
    """The ``handoff_queue`` read model in the application's SQLite file."""
