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

from devs.domain.outbox import (
    CONTEXT_EVENTS,
    MESSAGING_EVENTS,
    OutboxMessage,
    TaskContext,
    context_after,
    message_of,
)
from devs.domain.task import task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds


class OutboxView(TrackingRecorder, ABC):
    @abstractmethod
    def add_message(self, domain_event: Any, task_id: str, tracking: Tracking) -> None:
        """Record the message ``domain_event`` sends (if any), with what its
        task's context says, and the task's context after it; and the
        position."""

    @abstractmethod
    def outbox_messages(self, after: int, limit: int) -> list[OutboxMessage]:
        """The messages of the events after log position ``after``, in log
        order, at most ``limit``."""


def _fold(self: Any, domain_event: Any, tracking: Tracking) -> None:
    self.view.add_message(
        domain_event, task_id_of(domain_event.originator_id), tracking
    )


class OutboxProjection(ReadModelProjection[OutboxView]):
    """One handler for every event class that may send a message or changes
    what a task's messages say."""

    process_event = folds()
    for _event_class in {*MESSAGING_EVENTS, *CONTEXT_EVENTS}:
        process_event.register(_event_class, _fold)
    del _event_class


class OutboxTables(OutboxView, SQLTables):
    """The ``outbox_messages`` table and its SQL (SQLite and PostgreSQL)."""

    name: ClassVar[str] = "outbox"
    schema_version: ClassVar[int] = 3  # v3: every task's context
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
        "run_id TEXT, "
        "context TEXT)",
    )
    pg_migrations: ClassVar[tuple[str, ...]] = (
        "ALTER TABLE outbox_task_runs ALTER COLUMN run_id DROP NOT NULL",
        "ALTER TABLE outbox_task_runs ADD COLUMN IF NOT EXISTS context TEXT",
    )

    def add_message(self, domain_event: Any, task_id: str, tracking: Tracking) -> None:
        # Read and written with one cursor: in a catch-up's batch the task's
        # start may be in the same uncommitted transaction. The position is
        # written with the rows, as every other write: with the view's own
        # tracking on SQLite, in the fold's transaction on PostgreSQL.
        with self.changes(tracking) as cursor:
            cursor.execute(
                "SELECT run_id, context FROM outbox_task_runs WHERE task_id = ?",
                (task_id,),
            )
            found = cursor.fetchone()
            before: TaskContext | None = None
            if found is not None:
                before = (
                    TaskContext(run_id=found["run_id"])  # an older release's row
                    if found["context"] is None
                    else TaskContext.model_validate_json(found["context"])
                )
            message = message_of(domain_event, tracking.notification_id, before)
            if message is not None:
                row = {
                    "message_id": message.id,
                    "position": message.position,
                    "type": message.type.value,
                    "task_id": message.task_id,
                    "occurred_at": message.timestamp.isoformat(),
                    "data": orjson.dumps(message.data).decode(),
                }
                self._insert(
                    cursor,
                    "outbox_messages",
                    row,
                    "ON CONFLICT (message_id) DO NOTHING",
                )
            after = context_after(before, domain_event)
            if after is not None:
                self._insert(
                    cursor,
                    "outbox_task_runs",
                    {
                        "task_id": task_id,
                        "run_id": after.run_id,
                        "context": after.model_dump_json(),
                    },
                    "ON CONFLICT (task_id) DO UPDATE SET "
                    "run_id = excluded.run_id, context = excluded.context",
                )

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
