"""``outbox``: every message the log asks to send, in log order
(:mod:`devs.domain.outbox`; docs/notifications.md).

A tracked fold like every read model: each message is written in the same
transaction as the view's position, so a crash between a decision and its
message loses nothing, and a rebuild gives the same rows (a message's id is
derived from its event). What became of each delivery is kept beside it by
the sender, never here: this table is the log's, and only the log's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import orjson
from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.outbox import MESSAGING_EVENTS, OutboxMessage, message_of
from devs.domain.task import Task
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds


class OutboxView(TrackingRecorder, ABC):
    @abstractmethod
    def add_task(self, task_id: str, run_id: str | None, tracking: Tracking) -> None:
        """Remember the run a task belongs to (its messages name it)."""

    @abstractmethod
    def add_message(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Record a message to send, with the run of its task in its data."""

    @abstractmethod
    def passed(self, tracking: Tracking) -> None:
        """Record only the position (an event that sends nothing this time)."""

    @abstractmethod
    def outbox_messages(self, after: int, limit: int) -> list[OutboxMessage]:
        """The messages of the events after log position ``after``, in log
        order, at most ``limit``."""


def _fold(self: Any, domain_event: Any, tracking: Tracking) -> None:
    message = message_of(domain_event, tracking.notification_id)
    if message is None:  # an event of a class that sends only sometimes
        self.view.passed(tracking)
        return
    self.view.add_message(
        {
            "message_id": message.id,
            "position": message.position,
            "type": message.type.value,
            "task_id": message.task_id,
            "occurred_at": message.timestamp.isoformat(),
            "data": orjson.dumps(message.data).decode(),
        },
        tracking,
    )


def _started(self: Any, domain_event: Task.Started, tracking: Tracking) -> None:
    self.view.add_task(domain_event.task_id, domain_event.run_id, tracking)


class OutboxProjection(ReadModelProjection[OutboxView]):
    """One handler for every event class that may send a message, and one
    for a task's start (the run its messages name)."""

    process_event = folds()
    process_event.register(Task.Started, _started)
    for _event_class in MESSAGING_EVENTS:
        process_event.register(_event_class, _fold)
    del _event_class


class OutboxTables(OutboxView, SQLTables):
    """The ``outbox_messages`` table and its SQL (SQLite and PostgreSQL)."""

    name: ClassVar[str] = "outbox"
    schema_version: ClassVar[int] = 2
    tables: ClassVar[tuple[str, ...]] = ("outbox_messages", "outbox_task_runs")
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS outbox_messages ("
        "message_id TEXT PRIMARY KEY, "
        "position INTEGER NOT NULL, "
        "type TEXT NOT NULL, "
        "task_id TEXT NOT NULL, "
        "occurred_at TEXT NOT NULL, "
        "data TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS outbox_messages_position "
        "ON outbox_messages (position)",
        "CREATE TABLE IF NOT EXISTS outbox_task_runs ("
        "task_id TEXT PRIMARY KEY, "
        "run_id TEXT NOT NULL)",
    )

    def add_task(self, task_id: str, run_id: str | None, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            if run_id is not None:  # most tasks belong to no run: no row
                row = {"task_id": task_id, "run_id": run_id}
                self._insert(
                    cursor, "outbox_task_runs", row, "ON CONFLICT (task_id) DO NOTHING"
                )

    def add_message(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "SELECT run_id FROM outbox_task_runs WHERE task_id = ?",
                (row["task_id"],),
            )
            found = cursor.fetchone()
            if found is not None:
                data = orjson.loads(row["data"])
                named = {"task_id": data["task_id"], "run_id": found["run_id"], **data}
                row = {**row, "data": orjson.dumps(named).decode()}
            self._insert(
                cursor, "outbox_messages", row, "ON CONFLICT (message_id) DO NOTHING"
            )

    def passed(self, tracking: Tracking) -> None:
        # The position alone, as every other write: with the view's own
        # tracking on SQLite, in the fold's transaction on PostgreSQL.
        with self.changes(tracking):
            pass

    def outbox_messages(self, after: int, limit: int) -> list[OutboxMessage]:
        rows = self._select(
            "SELECT * FROM outbox_messages WHERE position > ? "
            "ORDER BY position LIMIT ?",
            (after, limit),
        )
        return [
            OutboxMessage(
                id=row["message_id"],
                type=row["type"],
                timestamp=row["occurred_at"],
                task_id=row["task_id"],
                position=row["position"],
                data=orjson.loads(row["data"]),
            )
            for row in rows
        ]


class SQLiteOutboxView(OutboxTables, SQLiteView):
    """The ``outbox`` read model in the application's SQLite file."""
