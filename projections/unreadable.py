"""``unreadable_events``: stored events the read models could not decode.

A catch-up that meets an event it cannot decode (an unknown topic, damaged
bytes) records it here by log position and folds the rest of the log without
it. Queries about its own task (or run) then fail with
:class:`~devs.domain.errors.UnreadableEvent` instead of answering from a fold
that lacks it; every other task is served as before. ``verify()`` finds the
same events again from the log itself, so this table is only a shared memo for
the processes that query the file.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.sqlite import SQLiteDatastore

from devs.domain.model import Immutable

TABLE = "unreadable_events"
DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "position INTEGER PRIMARY KEY, "
    "originator_id TEXT NOT NULL, "
    "originator_version INTEGER NOT NULL, "
    "topic TEXT NOT NULL, "
    "problem TEXT NOT NULL)",
)


class Unreadable(Immutable):
    """One event that cannot be decoded, and why."""

    position: int
    originator_id: str
    originator_version: int
    topic: str
    problem: str

    def describe(self) -> str:
        return (
            f"event at log position {self.position} "
            f"({self.originator_id!r}, version {self.originator_version}) "
            f"cannot be read: {self.problem}"
        )


class UnreadableEvents:
    """The ``unreadable_events`` table of a read-model datastore."""

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self.datastore = datastore

    def setup(self) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for statement in DDL:
                cursor.execute(statement)

    def record(self, found: list[Unreadable]) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            cursor.executemany(
                f"INSERT OR IGNORE INTO {TABLE} (position, originator_id, "
                "originator_version, topic, problem) VALUES (:position, "
                ":originator_id, :originator_version, :topic, :problem)",
                [event.model_dump() for event in found],
            )

    def replace_up_to(self, last: int, found: list[Unreadable], cursor: Any) -> None:
        """Within ``cursor``'s transaction: exactly ``found`` up to ``last``."""
        cursor.execute(f"DELETE FROM {TABLE} WHERE position <= ?", (last,))
        self.add(found, cursor)

    def add(self, found: list[Unreadable], cursor: Any) -> None:
        """Within ``cursor``'s transaction: ``found`` too."""
        cursor.executemany(
            f"INSERT OR IGNORE INTO {TABLE} (position, originator_id, "
            "originator_version, topic, problem) VALUES (:position, "
            ":originator_id, :originator_version, :topic, :problem)",
            [event.model_dump() for event in found],
        )

    def all(self) -> list[Unreadable]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(f"SELECT * FROM {TABLE} ORDER BY position")
            return [Unreadable.model_validate(dict(row)) for row in cursor.fetchall()]
