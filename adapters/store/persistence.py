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

import contextlib
import os
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import orjson
from eventsourcing import sqlite as es_sqlite
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    ConnectionUnavailableError,
    DatabaseError,
    InterfaceError,
    Mapper,
    OperationalError,
    PersistenceError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel, ValidationError

from devs.adapters.store import errors, internals
from devs.domain.commands import NO_WAIT, WouldWait, locked
from devs.domain.errors import UnreadableEvent
from devs.domain.redaction import redact


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
        model: BaseModel = domain_event  # type: ignore[assignment]
        if type(self.transcoder) is OrjsonTranscoder:
            # pydantic writes the very bytes orjson writes of its JSON-mode dump
            # (tests/integration/test_persistence.py), without the dict between.
            stored_state = model.__pydantic_serializer__.to_json(model)
        else:
            stored_state = self.transcoder.encode(model.model_dump(mode="json"))
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
        """The domain event; :class:`UnreadableEvent` if it cannot be decoded
        (an unknown topic, damaged bytes, a state its class refuses)."""
        stored_state = stored_event.state
        try:
            if self.cipher:
                stored_state = self.cipher.decrypt(stored_state)
            if self.compressor:
                stored_state = self.compressor.decompress(stored_state)
            event_state: dict[str, Any] = self.transcoder.decode(stored_state)
            cls = resolve_topic(stored_event.topic)
            return cast(DomainEventProtocol[str], cls(**event_state))
        except Exception as error:
            raise unreadable(stored_event, error) from error


def unreadable(stored_event: StoredEvent, error: Exception) -> UnreadableEvent:
    """Say which stored event cannot be decoded, and why, in one line.

    pydantic's refusals are described without the values they quote, and the
    text is redacted before it is cut short (a secret cut in two would no
    longer be recognised).
    """
    if isinstance(error, ValidationError):
        text = "; ".join(
            f"{'.'.join(map(str, detail['loc']))}: {detail['msg']}"
            for detail in error.errors(include_input=False, include_url=False)
        )
    else:
        text = str(error)
    reason = redact(" ".join(text.split()))[:200] or type(error).__name__
    originator_id = str(stored_event.originator_id)
    msg = (
        f"stored event {stored_event.originator_version} of {originator_id!r} "
        f"(topic {stored_event.topic[:120]!r}) cannot be decoded: "
        f"{type(error).__name__}: {reason}"
    )
    return UnreadableEvent(
        msg,
        originator_id=originator_id,
        originator_version=stored_event.originator_version,
        topic=stored_event.topic,
    )


NOTHING_RETURNED = "Timed out waiting for return of connection"
"""eventsourcing's pool says this when it ran out of connections after taking
the writer lock (or counting a reader); its other time-outs took nothing."""
DEFAULT_LOCK_TIMEOUT = es_sqlite.SQLITE3_DEFAULT_LOCK_TIMEOUT
CACHED_STATEMENTS = 64
"""Statements each connection keeps compiled (sqlite3's default is 128;
eventsourcing asks for one)."""


NO_BUSY_WAIT: ContextVar[bool] = ContextVar("devs_no_busy_wait", default=False)
"""Set by a background thread (the outbox's sender and sweeper): it waits
for a connection of this process's pool at most :data:`BACKGROUND_TURN`
(whoever waits there holds up every other request: the pool lets one wait at
a time) and never in SQLite's busy handler for another process's lock
(holding the process's one writer connection meanwhile would stall its
commands and queries). Either is ``WouldWait`` or an ``OperationalError``
(locked) at once, for the caller to try again at its next look."""
BACKGROUND_TURN = 0.02
"""Seconds a background thread waits for a connection of the pool."""
_JITTER = random.Random()
"""The lock retries' own generator, apart from the ``random`` module's shared one."""
os.register_at_fork(after_in_child=_JITTER.seed)  # as `random` does its own


class SQLiteConnectionPool(es_sqlite.SQLiteConnectionPool):
    """eventsourcing's pool; opening a connection fails as a PersistenceError.

    A read-only pool never asks for WAL mode (switching needs a write).
    """

    def __init__(self, *, read_only: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._not_waiting: set[int] = set()
        """Connections handed out under ``NO_WAIT`` (their busy wait is off)."""
        if read_only:
            internals.keep_journal_mode(self)  # never switched here

    def get_connection(
        self, timeout: float | None = None, is_writer: bool | None = None
    ) -> es_sqlite.SQLiteConnection:
        """eventsourcing's, giving back the writer lock (or the reader count)
        it took when the connection then cannot be made: its own version keeps
        it, and every later write in the process would wait for it in vain.

        Under ``NO_WAIT`` a connection is had at once or not at all
        (``WouldWait``), and SQLite's busy wait is off on the connection:
        a lock held by another process is ``WouldWait`` too (the recorder and
        ``store_errors`` say so). Outside it, the busy wait is on."""
        no_wait = NO_WAIT.get()
        background = NO_BUSY_WAIT.get() and not no_wait
        busy_off = no_wait or background
        if no_wait:
            timeout = 0
        elif background:  # a short turn: waiting here holds up every request
            timeout = (
                BACKGROUND_TURN if timeout is None else min(timeout, BACKGROUND_TURN)
            )
        try:
            connection = super().get_connection(timeout=timeout, is_writer=is_writer)
        except ConnectionUnavailableError as error:
            if str(error) == NOTHING_RETURNED:  # the lock or count was taken
                self._give_back(is_writer)
            if no_wait or background:
                raise WouldWait(str(error)) from None
            raise
        except PersistenceError:  # opening the connection failed: give back
            self._give_back(is_writer)
            raise
        if (id(connection) in self._not_waiting) is not busy_off:
            try:
                self._busy_wait(connection, busy_off)
            except BaseException:
                self.put_connection(connection)
                raise
        return connection

    def _busy_wait(self, connection: es_sqlite.SQLiteConnection, off: bool) -> None:
        """Turn SQLite's wait for another process's lock off, or back on (for
        the lock timeout), on ``connection``: only when it changes, which
        costs a statement."""
        wait = 0 if off else int((self.lock_timeout or DEFAULT_LOCK_TIMEOUT) * 1000)
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {wait}")
        if off:
            self._not_waiting.add(id(connection))
        else:
            self._not_waiting.discard(id(connection))

    def _connect(self) -> es_sqlite.SQLiteConnection:
        """The library's ``_create_connection`` step for step, with a
        statement cache of :data:`CACHED_STATEMENTS` where the library keeps
        one statement: a decision runs its ``INSERT`` and the fold of the
        read models, a dozen statements, and each would be compiled again."""
        try:
            connection = sqlite3.connect(
                database=self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,  # autocommit: transactions are explicit
                cached_statements=CACHED_STATEMENTS,
                timeout=self.lock_timeout or DEFAULT_LOCK_TIMEOUT,
            )
        except (sqlite3.Error, TypeError) as error:
            raise InterfaceError(error) from error
        try:
            if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
                cursor = connection.cursor()
                cursor.execute("PRAGMA journal_mode;")
                if cursor.fetchone()[0].lower() != "wal":
                    cursor.execute("PRAGMA journal_mode=WAL;")
                    self.journal_mode_was_changed_to_wal = True
                self.is_journal_mode_wal = True
        except BaseException:
            connection.close()
            raise
        connection.row_factory = sqlite3.Row
        return es_sqlite.SQLiteConnection(sqlite_conn=connection, max_age=self.max_age)

    def _give_back(self, is_writer: bool | None) -> None:
        if is_writer is True:
            internals.give_back_writer(self)
        elif is_writer is False:
            internals.give_back_reader(self)

    # eventsourcing's private method: declared in internals.OVERRIDES
    def _create_connection(self) -> es_sqlite.SQLiteConnection:
        """A new connection; a lock met while switching a new file to WAL is
        waited out (up to the lock timeout).

        The switch holds a shared lock while it asks for an exclusive one, so
        SQLite reports "database is locked" at once, without its busy wait,
        when processes open a new file together.
        """
        deadline = time.monotonic() + (self.lock_timeout or 5)
        while True:
            try:
                connection = self._connect()
                self._not_waiting.discard(id(connection))  # an id used before
                return connection
            except sqlite3.OperationalError as error:
                if not locked(error) or time.monotonic() > deadline:
                    raise DatabaseError(error) from error
                time.sleep(_JITTER.uniform(0.005, 0.05))
            except sqlite3.Error as error:  # e.g. "file is not a database"
                raise DatabaseError(error) from error


def read_only_uri(path: str) -> str | None:
    """A URI that opens the existing file ``path`` read-only, if it cannot be
    written (the file or its directory: WAL needs both); else ``None``.

    ``mode=ro`` where SQLite can still share the WAL index, else
    ``immutable=1`` (no -wal or -shm file, and none can be made: the file is
    read as it is, without locks).
    """
    if path == ":memory:" or path.startswith("file:"):
        return None  # the caller's own choice
    file = Path(path)
    if not file.is_file():
        return None
    file = file.resolve()  # a symbolic link: the target's directory counts
    if os.access(file, os.W_OK) and os.access(file.parent, os.W_OK):
        return None
    uri = f"file:{quote(os.fsencode(file))}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as probe:
            probe.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        return f"{uri}&immutable=1"
    return uri


class SnapshotRecorder(es_sqlite.SQLiteAggregateRecorder):
    """eventsourcing's snapshot recorder, keeping the latest two per aggregate.

    A snapshot only saves replay time, and only the latest is read; the one
    before it is kept in case the latest cannot be read. Older ones are deleted
    in the transaction that records a new one (an index range on the table's
    primary key), so a long-lived task holds two snapshots, not thousands.
    """

    KEEP = 2

    # eventsourcing's private method: declared in internals.OVERRIDES
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


class OneStatement(es_sqlite.SQLiteTransaction):
    """eventsourcing's ``SQLiteTransaction`` for a block that runs a single
    statement: no ``BEGIN``, so SQLite runs the statement as a transaction of
    its own (the pool's connections are in autocommit mode), committed when
    it ends, or rolled back, whole, when it fails. The end of the block is the
    library's: ``commit()`` and ``rollback()`` find no transaction open, and a
    failure is raised as the library's error, as from a transaction.

    One statement where there were three (``BEGIN``, ``INSERT``, ``COMMIT``),
    and the one left finds its prepared form in the connection's statement
    cache, which eventsourcing makes one entry long (``cached_statements=True``):
    with ``BEGIN`` before it, each of the two evicted the other, and each
    decision parsed and compiled its ``INSERT`` again.
    """

    def __enter__(self) -> es_sqlite.SQLiteCursor:
        return self.connection.cursor()


Fold = Callable[[es_sqlite.SQLiteCursor, Sequence[tuple[Any, int]]], None]
"""What folds recorded events into read models kept in the same file: called
with the cursor of the transaction that recorded them (not yet committed) and
each event, decoded, with its log position."""


class ApplicationRecorder(es_sqlite.SQLiteApplicationRecorder):
    """eventsourcing's application recorder; ``insert_events`` takes the same
    steps without the two generator-based context managers around them, and
    folds the events it records into the read models registered with
    :meth:`fold_on_write`, in the same transaction.

    Every decision goes through here: a connection from eventsourcing's pool,
    for writing, and eventsourcing's ``SQLiteTransaction`` on it (``BEGIN``,
    then commit, or roll back and raise eventsourcing's error), its cursor
    closed after. The library's ``datastore.transaction`` wraps the same in two
    ``contextmanager`` generators, which cost a few microseconds per commit.

    Whoever records events folds them: a query then only reads, and never
    waits for another process's write lock (docs/architecture.md). One event
    recorded with no read model to fold (most decisions record one) is one
    ``INSERT`` (:class:`OneStatement`): SQLite makes a statement a
    transaction of its own, as atomic and as durable as ``BEGIN``,
    ``INSERT``, ``COMMIT``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.folds: list[Fold] = []
        """The folds run in every transaction that records events."""

    def fold_on_write(self, fold: Fold) -> Callable[[], None]:
        """Run ``fold`` in the transaction of every recording, after the
        events; returns what stops it. A fold that fails fails the recording
        (nothing is written): the read models never miss an event that a
        command returned."""
        self.folds.append(fold)
        return lambda: self.folds.remove(fold)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        domain_events: Sequence[Any] | None = kwargs.pop("decoded", None)
        folds = self.folds
        pool = self.datastore.pool
        connection = pool.get_connection(is_writer=True)
        try:
            # One event is one statement (the library's ``_insert_events``:
            # one INSERT per event, its rowid read back).
            transaction = (
                OneStatement(connection, commit=True)
                if len(stored_events) == 1 and not folds
                else es_sqlite.SQLiteTransaction(connection, commit=True)
            )
            with transaction as cursor, cursor:
                ids = internals.insert_events(self, cursor, stored_events, **kwargs)
                if folds and ids:
                    written = list(
                        zip(
                            self._decoded(stored_events, domain_events),
                            ids,
                            strict=True,
                        )
                    )
                    for fold in folds:
                        fold(cursor, written)
                return ids
        except OperationalError as error:
            if NO_WAIT.get() and locked(error):
                raise WouldWait(str(error)) from error  # rolled back: nothing written
            raise
        finally:
            pool.put_connection(connection)

    def _decoded(
        self, stored_events: Sequence[StoredEvent], domain_events: Sequence[Any] | None
    ) -> Sequence[Any]:
        """The domain events recorded: as given by the caller (the commands
        pass the events they stored), else decoded from the stored ones."""
        if domain_events is not None and len(domain_events) == len(stored_events):
            return domain_events
        mapper = self.mapper
        if mapper is None:
            msg = "a recorder that folds read models needs the application's mapper"
            raise DatabaseError(msg)
        return [mapper.to_domain_event(stored) for stored in stored_events]

    mapper: Mapper[Any] | None = None
    """The application's mapper, set by whoever registers a fold (to decode
    events recorded without theirs)."""


class SQLiteFactory(es_sqlite.SQLiteFactory):
    """eventsourcing's SQLite persistence, with :class:`SQLiteConnectionPool`,
    :class:`ApplicationRecorder` and, for snapshots, :class:`SnapshotRecorder`.

    A database file that cannot be written (a read-only file, directory or
    mount) is opened read-only (:func:`read_only_uri`): it can be queried,
    and a command fails with a ``StoreError`` that says so. ``read_only``
    tells the read models to keep their views in a private file.
    """

    aggregate_recorder_class = SnapshotRecorder
    application_recorder_class = ApplicationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        errors.install()
        pool = self.datastore.pool  # not opened yet: connections are lazy
        uri = read_only_uri(pool.db_name)
        self.read_only = uri is not None
        self.datastore.pool = SQLiteConnectionPool(
            db_name=uri or pool.db_name,
            lock_timeout=pool.lock_timeout,
            read_only=self.read_only,
        )
        pool.close()

    def env_create_table(self) -> bool:
        return not self.read_only and super().env_create_table()
