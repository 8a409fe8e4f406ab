"""Persistence wiring: pydantic events to orjson bytes and back, and SQLite.

The mapper and transcoder follow eventsourcing 9.5's ``examples/aggregate7``
(``orjsonpydantic.py``) and are selected through the application's ``env``
(``MAPPER_TOPIC``, ``TRANSCODER_TOPIC``). :class:`SQLiteFactory` is
eventsourcing's own, selected by ``PERSISTENCE_MODULE``, with one change: a
connection that cannot be opened (a damaged file, one that is not a database)
raises eventsourcing's ``DatabaseError`` instead of a raw ``sqlite3`` error, so
that the service can report it as a ``StoreError``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, cast

import orjson
from eventsourcing import sqlite as es_sqlite
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    DatabaseError,
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel


class OrjsonTranscoder(Transcoder):
    """Encodes JSON-safe Python objects with orjson."""

    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


class PydanticMapper(Mapper[str]):
    """Maps pydantic domain events to stored events and back."""

    def to_stored_event(self, domain_event: DomainEventProtocol[str]) -> StoredEvent:
        topic = get_topic(domain_event.__class__)
        event_state = cast(BaseModel, domain_event).model_dump(mode="json")
        stored_state = self.transcoder.encode(event_state)
        if self.compressor:
            stored_state = self.compressor.compress(stored_state)
        if self.cipher:
            stored_state = self.cipher.encrypt(stored_state)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=stored_state,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[str]:
        stored_state = stored_event.state
        try:
            if self.cipher:
                stored_state = self.cipher.decrypt(stored_state)
            if self.compressor:
                stored_state = self.compressor.decompress(stored_state)
            event_state: dict[str, Any] = self.transcoder.decode(stored_state)
        except Exception as e:
            msg = (
                f"Failed to deserialise stored event with topic "
                f"'{stored_event.topic}', originator_id "
                f"'{stored_event.originator_id}' and originator_version "
                f"{stored_event.originator_version}: {e}"
            )
            raise MapperDeserialisationError(msg) from e
        cls = resolve_topic(stored_event.topic)
        return cast(DomainEventProtocol[str], cls(**event_state))


class SQLiteConnectionPool(es_sqlite.SQLiteConnectionPool):
    """eventsourcing's pool; opening a connection fails as a PersistenceError."""

    def _create_connection(self) -> es_sqlite.SQLiteConnection:
        try:
            return super()._create_connection()
        except sqlite3.Error as error:  # e.g. "file is not a database"
            raise DatabaseError(error) from error


class SnapshotRecorder(es_sqlite.SQLiteAggregateRecorder):
    """eventsourcing's snapshot recorder, keeping the latest two per aggregate.

    A snapshot only saves replay time, and only the latest is read; the one
    before it is kept in case the latest cannot be read. Older ones are deleted
    in the transaction that records a new one (an index range on the table's
    primary key), so a long-lived task holds two snapshots, not thousands.
    """

    KEEP = 2

    def _insert_events(
        self,
        c: es_sqlite.SQLiteCursor,
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> Sequence[int] | None:
        result = super()._insert_events(c, stored_events, **kwargs)
        table = self.events_table_name
        for originator_id in {str(event.originator_id) for event in stored_events}:
            c.execute(
                f"DELETE FROM {table} "
                "WHERE originator_id = ? AND originator_version < ("
                f"SELECT originator_version FROM {table} WHERE originator_id = ? "
                f"ORDER BY originator_version DESC LIMIT 1 OFFSET {self.KEEP - 1})",
                (originator_id, originator_id),
            )
        return result


class SQLiteFactory(es_sqlite.SQLiteFactory):
    """eventsourcing's SQLite persistence, with :class:`SQLiteConnectionPool`
    and, for snapshots, :class:`SnapshotRecorder`."""

    aggregate_recorder_class = SnapshotRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool = self.datastore.pool  # not opened yet: connections are lazy
        self.datastore.pool = SQLiteConnectionPool(
            db_name=pool.db_name, lock_timeout=pool.lock_timeout
        )
        pool.close()
