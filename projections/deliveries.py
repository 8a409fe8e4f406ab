"""What became of each message the outbox sends, on each channel.

Beside the ``outbox`` read model, in the same database, the tables the senders
write: the channels, one delivery per message and channel (with the lease a
sender holds while it tries), named leases, and each task's thread on a
channel. None of this is a fold of the log: a rebuild of the read models
leaves it as it is, and a message's id, derived from its event, names the
same message after one. docs/notifications.md, docs/read-models.md.
"""

from __future__ import annotations

import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from eventsourcing.persistence import OperationalError
from eventsourcing.sqlite import SQLiteDatastore

from devs.domain.commands import locked
from devs.domain.names import DeliveryState
from devs.domain.outbox import OutboxMessage
from devs.domain.ports import (
    ChannelEntry,
    Claimed,
    DeliveryEntry,
    Settled,
)
from devs.projections.base import persistence_error

DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS outbox_channels ("
    "channel TEXT PRIMARY KEY, "
    "kind TEXT NOT NULL, "
    "shown TEXT NOT NULL, "
    "since_position INTEGER NOT NULL, "
    "position INTEGER NOT NULL, "
    "disabled_reason TEXT, "
    "created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS outbox_deliveries ("
    "channel TEXT NOT NULL, "
    "message_id TEXT NOT NULL, "
    "position INTEGER NOT NULL, "
    "type TEXT NOT NULL, "
    "task_id TEXT NOT NULL, "
    "state TEXT NOT NULL, "
    "tries INTEGER NOT NULL, "
    "next_at REAL, "
    "lease_owner TEXT, "
    "lease_until REAL, "
    "last_status INTEGER, "
    "last_error TEXT, "
    "updated_at REAL NOT NULL, "
    "PRIMARY KEY (channel, message_id))",
    "CREATE INDEX IF NOT EXISTS outbox_deliveries_due "
    "ON outbox_deliveries (state, next_at)",
    "CREATE INDEX IF NOT EXISTS outbox_deliveries_message "
    "ON outbox_deliveries (message_id)",
    "CREATE INDEX IF NOT EXISTS outbox_deliveries_position "
    "ON outbox_deliveries (position)",
    "CREATE TABLE IF NOT EXISTS outbox_leases ("
    "name TEXT PRIMARY KEY, "
    "owner TEXT NOT NULL, "
    "until REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS outbox_threads ("
    "channel TEXT NOT NULL, "
    "task_id TEXT NOT NULL, "
    "thread TEXT NOT NULL, "
    "message_id TEXT NOT NULL, "
    "created_at REAL NOT NULL, "
    "PRIMARY KEY (channel, task_id))",
)
TABLES = ("outbox_channels", "outbox_deliveries", "outbox_leases", "outbox_threads")
ENQUEUE_LIMIT = 1000
"""Messages added per channel by one exchange."""
LOCK_WAIT = 5.0
"""How long a write waits for another connection's lock on SQLite."""
ERROR_KEPT = 500
UNDECODABLE = "the message cannot be read by this release (an unknown type)"
"""The longest error text kept for a delivery."""

_PENDING = DeliveryState.PENDING.value
_DEAD = DeliveryState.DEAD.value


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


class DeliveryTables(ABC):
    """The deliveries' SQL, the same on SQLite and PostgreSQL (``?`` and
    ``:name`` placeholders; PostgreSQL's cursor translates them)."""

    claim_lock: ClassVar[str]
    """What the claim's ``SELECT`` ends with: PostgreSQL skips the rows
    another sender is claiming; SQLite's write transaction is exclusive."""
    row_lock: ClassVar[str]

    @abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """A cursor in a write transaction, committed at the end."""

    @abstractmethod
    def _read(self) -> AbstractContextManager[Any]:
        """A cursor in a read-only transaction."""

    def _rows(self, statement: str, params: Any = ()) -> list[Any]:
        """The rows one read-only statement gives."""
        with self._read() as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall())

    # ----------------------------------------------------------- channels

    def open_channels(
        self, channels: Sequence[tuple[str, str, str]], log_end: int
    ) -> None:
        now = time.time()
        with self._write() as cursor:
            for channel, kind, shown in channels:
                cursor.execute(
                    "INSERT INTO outbox_channels (channel, kind, shown, "
                    "since_position, position, disabled_reason, created_at) "
                    "VALUES (?, ?, ?, ?, ?, NULL, ?) "
                    "ON CONFLICT (channel) DO UPDATE SET shown = excluded.shown",
                    (channel, kind, shown, log_end, log_end, now),
                )

    def enqueue(self, channels: Mapping[str, frozenset[str] | None], limit: int) -> int:
        if not channels or not self._news(list(channels)):
            return 0  # read first: an idle sender takes no write lock
        with self._write() as cursor:
            return self._enqueue(cursor, channels, limit, time.time())

    def _enqueue(
        self,
        cursor: Any,
        channels: Mapping[str, frozenset[str] | None],
        limit: int,
        now: float,
    ) -> int:
        added = 0
        for channel, types in channels.items():
            cursor.execute(
                "SELECT position FROM outbox_channels WHERE channel = ?"
                + self.row_lock,
                (channel,),
            )
            found = cursor.fetchone()
            if found is None:
                continue
            cursor.execute(
                "SELECT message_id, position, type, task_id FROM outbox_messages "
                "WHERE position > ? ORDER BY position LIMIT ?",
                (found["position"], limit),
            )
            messages = cursor.fetchall()
            if not messages:
                continue
            rows = [
                {
                    "channel": channel,
                    "message_id": row["message_id"],
                    "position": row["position"],
                    "type": row["type"],
                    "task_id": row["task_id"],
                    "state": _PENDING,
                    "next_at": now,
                    "updated_at": now,
                }
                for row in messages
                if types is None or row["type"] in types
            ]
            if rows:
                cursor.executemany(
                    "INSERT INTO outbox_deliveries (channel, message_id, "
                    "position, type, task_id, state, tries, next_at, "
                    "updated_at) VALUES (:channel, :message_id, :position, "
                    ":type, :task_id, :state, 0, :next_at, :updated_at) "
                    "ON CONFLICT (channel, message_id) DO NOTHING",
                    rows,
                )
                added += len(rows)
            cursor.execute(
                "UPDATE outbox_channels SET position = ? WHERE channel = ?",
                (messages[-1]["position"], channel),
            )
        return added

    def _news(self, channels: Sequence[str]) -> bool:
        """Whether the outbox holds a message past some channel's position."""
        marks = ", ".join("?" for _ in channels)
        rows = self._rows(
            "SELECT (SELECT MAX(position) FROM outbox_messages) AS last, "
            "(SELECT MIN(position) FROM outbox_channels "
            f"WHERE channel IN ({marks})) AS first",
            tuple(channels),
        )
        found = rows[0] if rows else None
        if found is None or found["last"] is None or found["first"] is None:
            return False
        return int(found["last"]) > int(found["first"])

    def _due(self, channels: Sequence[str], now: float) -> bool:
        """Whether some delivery of ``channels`` could be claimed now (the
        claim's own conditions: due, not leased, its endpoint enabled, its
        message in the outbox)."""
        marks = ", ".join("?" for _ in channels)
        rows = self._rows(
            "SELECT 1 AS due FROM outbox_deliveries d "
            "JOIN outbox_channels c ON c.channel = d.channel "
            "WHERE d.state = ? AND d.next_at <= ? "
            "AND (d.lease_until IS NULL OR d.lease_until < ?) "
            f"AND c.disabled_reason IS NULL AND d.channel IN ({marks}) "
            "AND EXISTS (SELECT 1 FROM outbox_messages m "
            "WHERE m.message_id = d.message_id) LIMIT 1",
            (_PENDING, now, now, *channels),
        )
        return bool(rows)

    # ------------------------------------------------------------ sending

    def claim(
        self, owner: str, channels: Sequence[str], now: float, lease: float, limit: int
    ) -> list[Claimed]:
        if not channels or limit < 1 or not self._due(channels, now):
            return []  # read first: an idle sender takes no write lock
        with self._write() as cursor:
            wants = dict.fromkeys(channels, limit)
            return self._claim(cursor, owner, wants, now, lease)[:limit]

    def _claim(
        self,
        cursor: Any,
        owner: str,
        wants: Mapping[str, int],
        now: float,
        lease: float,
    ) -> list[Claimed]:
        """Lease up to ``wants[channel]`` due deliveries of each channel (a
        slow endpoint takes no more than its share of the sender)."""
        due: list[Any] = []
        for channel, count in wants.items():
            if count < 1:
                continue
            cursor.execute(
                "SELECT d.channel, d.message_id, d.tries FROM outbox_deliveries d "
                "JOIN outbox_channels c ON c.channel = d.channel "
                "WHERE d.state = ? AND d.next_at <= ? "
                "AND (d.lease_until IS NULL OR d.lease_until < ?) "
                "AND c.disabled_reason IS NULL AND d.channel = ? "
                "AND EXISTS (SELECT 1 FROM outbox_messages m "
                "WHERE m.message_id = d.message_id) "
                "ORDER BY d.next_at, d.position LIMIT ?" + self.claim_lock,
                (_PENDING, now, now, channel, count),
            )
            due += cursor.fetchall()
        if not due:
            return []
        cursor.executemany(
            "UPDATE outbox_deliveries SET lease_owner = ?, lease_until = ? "
            "WHERE channel = ? AND message_id = ?",
            [(owner, now + lease, row["channel"], row["message_id"]) for row in due],
        )
        ids = sorted({row["message_id"] for row in due})
        cursor.execute(
            "SELECT * FROM outbox_messages WHERE message_id IN "
            f"({', '.join('?' for _ in ids)})",
            ids,
        )
        messages: dict[str, OutboxMessage] = {}
        for row in cursor.fetchall():
            try:
                messages[row["message_id"]] = _message(row)
            except ValueError:  # a type this release does not know: not sent
                continue
        undecodable = [row for row in due if row["message_id"] not in messages]
        if undecodable:
            cursor.executemany(
                "UPDATE outbox_deliveries SET state = ?, next_at = NULL, "
                "lease_owner = NULL, lease_until = NULL, last_error = ?, "
                "updated_at = ? WHERE channel = ? AND message_id = ?",
                [
                    (_DEAD, UNDECODABLE, now, row["channel"], row["message_id"])
                    for row in undecodable
                ],
            )
        return [
            Claimed(
                channel=row["channel"],
                message=messages[row["message_id"]],
                tries=row["tries"],
            )
            for row in due
            if row["message_id"] in messages
        ]

    def settle(self, owner: str, results: Sequence[Settled], now: float) -> None:
        with self._write() as cursor:
            self._settle(cursor, owner, results, now)

    def exchange(
        self,
        owner: str,
        results: Sequence[Settled],
        channels: Mapping[str, frozenset[str] | None],
        now: float,
        lease: float,
        wants: Mapping[str, int],
    ) -> list[Claimed]:
        names = list(channels)
        news = bool(names) and self._news(names)
        wanted = [channel for channel, count in wants.items() if count > 0]
        due = bool(wanted) and (news or self._due(wanted, now))
        if not results and not news and not due:
            return []  # read first: an idle sender takes no write lock
        with self._write() as cursor:
            self._settle(cursor, owner, results, now)
            if news:
                self._enqueue(cursor, channels, ENQUEUE_LIMIT, now)
            if not due:
                return []
            return self._claim(cursor, owner, wants, now, lease)

    def _settle(
        self, cursor: Any, owner: str, results: Sequence[Settled], now: float
    ) -> None:
        for result in results:
            cursor.execute(
                "UPDATE outbox_deliveries SET state = ?, tries = tries + 1, "
                "next_at = ?, lease_owner = NULL, lease_until = NULL, "
                "last_status = ?, last_error = ?, updated_at = ? "
                "WHERE channel = ? AND message_id = ? AND lease_owner = ?",
                (
                    result.state.value,
                    result.next_at,
                    result.status,
                    None if result.error is None else result.error[:ERROR_KEPT],
                    now,
                    result.channel,
                    result.message_id,
                    owner,
                ),
            )
            if result.disable:
                cursor.execute(
                    "UPDATE outbox_channels SET disabled_reason = ? WHERE channel = ?",
                    ((result.error or "disabled")[:ERROR_KEPT], result.channel),
                )

    def redeliver(self, message_id: str | None, now: float) -> int:
        # The deliveries' rows first, the channels' after: the order a
        # sender's exchange locks them in (no deadlock on PostgreSQL).
        with self._write() as cursor:
            if message_id is None:
                where, params = "state = ?", (_DEAD,)
            else:
                where, params = "message_id = ?", (message_id,)
            cursor.execute(
                f"SELECT channel FROM outbox_deliveries WHERE {where}{self.row_lock}",
                params,
            )
            channels = sorted({row["channel"] for row in cursor.fetchall()})
            if not channels:
                return 0
            cursor.execute(
                "SELECT COUNT(*) AS n FROM outbox_deliveries WHERE " + where, params
            )
            count = int(cursor.fetchone()["n"])
            cursor.execute(
                "UPDATE outbox_deliveries SET state = ?, tries = 0, next_at = ?, "
                "lease_owner = NULL, lease_until = NULL, updated_at = ? WHERE " + where,
                (_PENDING, now, now, *params),
            )
            cursor.executemany(
                "UPDATE outbox_channels SET disabled_reason = NULL WHERE channel = ?",
                [(channel,) for channel in channels],
            )
        return count

    def hold_lease(self, name: str, owner: str, now: float, seconds: float) -> bool:
        with self._write() as cursor:
            cursor.execute(
                "INSERT INTO outbox_leases (name, owner, until) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                "until = excluded.until "
                "WHERE outbox_leases.owner = excluded.owner "
                "OR outbox_leases.until < ?",
                (name, owner, now + seconds, now),
            )
            cursor.execute("SELECT owner FROM outbox_leases WHERE name = ?", (name,))
            found = cursor.fetchone()
        return found is not None and found["owner"] == owner

    def release_lease(self, name: str, owner: str) -> None:
        with self._write() as cursor:
            cursor.execute(
                "DELETE FROM outbox_leases WHERE name = ? AND owner = ?", (name, owner)
            )

    # ------------------------------------------------------------ threads

    def thread_of(self, channel: str, task_id: str) -> str | None:
        """The thread of ``task_id`` on ``channel`` (``None``: none yet)."""
        rows = self._rows(
            "SELECT thread FROM outbox_threads WHERE channel = ? AND task_id = ?",
            (channel, task_id),
        )
        return str(rows[0]["thread"]) if rows else None

    def start_thread(
        self, channel: str, task_id: str, thread: str, message_id: str
    ) -> str:
        """Record ``thread`` as the thread of ``task_id`` on ``channel``,
        started by ``message_id``, unless one is recorded already (the first
        one stays); the id of the message that started the one recorded."""
        with self._write() as cursor:
            cursor.execute(
                "INSERT INTO outbox_threads (channel, task_id, thread, "
                "message_id, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (channel, task_id) DO NOTHING",
                (channel, task_id, thread, message_id, time.time()),
            )
            cursor.execute(
                "SELECT message_id FROM outbox_threads "
                "WHERE channel = ? AND task_id = ?",
                (channel, task_id),
            )
            found = cursor.fetchone()
        return str(found["message_id"])

    # ------------------------------------------------------------ reading

    def channels(self) -> list[ChannelEntry]:
        rows = self._rows(
            "SELECT c.*, "
            "(SELECT COUNT(*) FROM outbox_deliveries d WHERE d.channel = "
            "c.channel AND d.state = 'pending') AS pending, "
            "(SELECT COUNT(*) FROM outbox_deliveries d WHERE d.channel = "
            "c.channel AND d.state = 'delivered') AS delivered, "
            "(SELECT COUNT(*) FROM outbox_deliveries d WHERE d.channel = "
            "c.channel AND d.state = 'dead') AS dead, "
            "(SELECT d.last_error FROM outbox_deliveries d WHERE d.channel = "
            "c.channel AND d.last_error IS NOT NULL "
            "ORDER BY d.updated_at DESC LIMIT 1) AS last_error "
            "FROM outbox_channels c ORDER BY c.created_at, c.channel"
        )
        return [
            ChannelEntry(
                channel=row["channel"],
                kind=row["kind"],
                shown=row["shown"],
                since_position=row["since_position"],
                enabled=row["disabled_reason"] is None,
                disabled_reason=row["disabled_reason"],
                pending=row["pending"],
                delivered=row["delivered"],
                dead=row["dead"],
                last_error=row["last_error"],
            )
            for row in rows
        ]

    def delivery_entries(
        self, state: DeliveryState | None, limit: int
    ) -> list[DeliveryEntry]:
        where, params = ("WHERE state = ?", (state.value,)) if state else ("", ())
        rows = self._rows(
            f"SELECT * FROM outbox_deliveries {where} "
            "ORDER BY position DESC, channel LIMIT ?",
            (*params, limit),
        )
        return [
            DeliveryEntry(
                message_id=row["message_id"],
                channel=row["channel"],
                type=row["type"],
                task_id=row["task_id"],
                position=row["position"],
                state=DeliveryState(row["state"]),
                tries=row["tries"],
                next_at=_moment(row["next_at"]) if row["state"] == _PENDING else None,
                last_status=row["last_status"],
                last_error=row["last_error"],
                updated_at=_moment(row["updated_at"]),
            )
            for row in rows
        ]


def _message(row: Any) -> OutboxMessage:
    return OutboxMessage(
        id=row["message_id"],
        type=row["type"],
        timestamp=row["occurred_at"],
        task_id=row["task_id"],
        position=row["position"],
        data=orjson.loads(row["data"]),
    )


class SQLiteDeliveries(DeliveryTables):
    """The deliveries in the application's SQLite file (or in memory)."""

    claim_lock: ClassVar[str] = ""
    row_lock: ClassVar[str] = ""

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self.datastore = datastore

    def setup(self) -> None:
        with self._write() as cursor:
            for statement in DDL:
                cursor.execute(statement)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            with self.datastore.get_connection(commit=True) as connection:
                cursor = connection.cursor()
                try:
                    cursor.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as error:
                    cursor.sqlite_cursor.close()
                    # Another connection holds the lock (another process, or
                    # another service of one in-memory database): give the
                    # connection back, wait a little, try again.
                    if not locked(error) or time.monotonic() > deadline:
                        raise OperationalError(error) from error
                else:
                    try:
                        yield cursor
                    except sqlite3.Error as error:
                        connection.rollback()
                        raise persistence_error(error) from error
                    except BaseException:
                        connection.rollback()
                        raise
                    else:
                        try:
                            connection.commit()
                        except sqlite3.Error as error:
                            raise persistence_error(error) from error
                    finally:
                        cursor.sqlite_cursor.close()
                    return
            time.sleep(0.005)

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=False) as cursor:
            yield cursor

    def _rows(self, statement: str, params: Any = ()) -> list[Any]:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                return super()._rows(statement, params)
            except OperationalError as error:
                # An in-memory database shared between services locks whole
                # tables while another connection writes them: read again.
                if not locked(error) or time.monotonic() > deadline:
                    raise
            time.sleep(0.005)
