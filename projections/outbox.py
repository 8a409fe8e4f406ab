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
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds


class OutboxView(TrackingRecorder, ABC):
    @abstractmethod
    def add_message(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Record a message to send."""

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


class OutboxProjection(ReadModelProjection[OutboxView]):
    """One handler for every event class that may send a message."""

    process_event = folds()
    for _event_class in MESSAGING_EVENTS:
        process_event.register(_event_class, _fold)
    del _event_class


class OutboxTables(OutboxView, SQLTables):
    """The ``outbox_messages`` table and its SQL (SQLite and PostgreSQL)."""

    name: ClassVar[str] = "outbox"
    schema_version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ("outbox_messages",)
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
    )

    def add_message(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
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
