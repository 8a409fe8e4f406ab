"""``unreadable_events``: stored events the read models could not decode.

A fold that meets an event it cannot decode records it here by log position
and folds the rest without it; queries about its own task (or run) then raise
:class:`~devs.domain.errors.UnreadableEvent` instead of answering from a fold
that lacks it. The same table lives beside the PostgreSQL read models;
``verify()`` finds the events from the log itself, so this is only a shared
memo (docs/read-models.md).
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteDatastore

from devs.domain.errors import UnreadableEvent
from devs.domain.model import Immutable
from devs.domain.redaction import redact

TABLE = "unreadable_events"
DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "position INTEGER PRIMARY KEY, "
    "originator_id TEXT NOT NULL, "
    "originator_version INTEGER NOT NULL, "
    "topic TEXT NOT NULL, "
    "problem TEXT NOT NULL)",
)
INSERT = (
    f"INSERT INTO {TABLE} (position, originator_id, originator_version, topic, "
    "problem) VALUES (:position, :originator_id, :originator_version, :topic, "
    ":problem) ON CONFLICT (position) DO NOTHING"
)
"""Records one event (the first record of a position stays), on either backend."""


class Unreadable(Immutable):
    """One event that cannot be decoded, and why."""

    position: int
    originator_id: str
    originator_version: int
    topic: str
    problem: str

    @classmethod
    def from_error(
        cls, stored: StoredEvent, position: int, error: Exception
    ) -> Unreadable:
        """The event at log ``position`` that ``error`` kept from being decoded
        (the problem redacted, on one line, at most 300 characters)."""
        problem = redact(
            str(error) if isinstance(error, UnreadableEvent) else repr(error)
        )
        return cls(
            position=position,
            originator_id=str(stored.originator_id),
            originator_version=stored.originator_version,
            topic=stored.topic[:200],
            problem=" ".join(problem.split())[:300],
        )

    def describe(self) -> str:
        return (
            f"event at log position {self.position} "
            f"({self.originator_id!r}, version {self.originator_version}) "
            f"cannot be read: {self.problem}"
        )

    def refusal(self, originator_id: str) -> UnreadableEvent:
        """What a query about ``originator_id`` (whose event this is) raises."""
        msg = (
            f"{originator_id!r} cannot be shown: its "
            f"{self.describe()}; other tasks are unaffected "
            "(devs verify lists every such event)"
        )
        return UnreadableEvent(
            msg,
            originator_id=self.originator_id,
            originator_version=self.originator_version,
            topic=self.topic,
            position=self.position,
        )


def decodes_now(position: int) -> str:
    """``verify``'s problem for an event recorded as undecodable that decodes."""
    return (
        f"event at log position {position} is recorded as undecodable but "
        "decodes now: its task's queries are refused and the read models "
        "lack it; rebuild them"
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
