"""One event with nothing to fold is recorded by one ``INSERT``
(``devs.adapters.store.persistence.OneStatement``): no ``BEGIN``, no
``COMMIT`` statement, SQLite's own transaction around the statement. (The
service's read models fold on write: its decisions are one transaction with
their fold.) Several events still go in one
``BEGIN`` ... ``COMMIT``. Either way the store holds the same rows, a refused
event leaves nothing behind and no transaction open, and the connection's
one-entry statement cache keeps the ``INSERT`` prepared from one decision to
the next."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from eventsourcing import sqlite as es_sqlite
from eventsourcing.persistence import IntegrityError, StoredEvent

from devs.adapters.store.persistence import ApplicationRecorder, OneStatement
from devs.domain import Policy, RecoveryService


@pytest.fixture
def recorder() -> Iterator[ApplicationRecorder]:
    with tempfile.TemporaryDirectory() as directory:
        datastore = es_sqlite.SQLiteDatastore(
            str(Path(directory) / "events.sqlite"), originator_id_type="text"
        )
        recorder = ApplicationRecorder(datastore)
        recorder.create_table()
        yield recorder
        datastore.close()


def raw(connection: es_sqlite.SQLiteConnection) -> sqlite3.Connection:
    """The sqlite3 connection inside one of eventsourcing's."""
    cursor = connection.cursor()
    with cursor as sqlite_cursor:
        return sqlite_cursor.connection


class Traced:
    """The statements SQLite runs on every connection the pool hands out."""

    def __init__(self, pool: es_sqlite.SQLiteConnectionPool) -> None:
        self.statements: list[str] = []
        # Open one connection and keep it in the pool: the recorder gets it.
        connection = pool.get_connection(is_writer=True)
        raw(connection).set_trace_callback(self.statements.append)
        pool.put_connection(connection)

    def take(self) -> list[str]:
        """The statements run since the last take, by their first words."""
        taken = [shown(statement) for statement in self.statements]
        self.statements.clear()
        return taken


def shown(statement: str) -> str:
    return " ".join(statement.split()[:3])


def stored(originator_id: str, version: int) -> StoredEvent:
    return StoredEvent(
        originator_id=originator_id,
        originator_version=version,
        topic="devs:Test.Event",
        state=b'{"n":1}',
    )


def rows(recorder: ApplicationRecorder) -> list[tuple[object, ...]]:
    return [
        (n.id, n.originator_id, n.originator_version, n.state)
        for n in recorder.select_notifications(start=1, limit=100)
    ]


def test_one_event_is_one_insert_and_several_are_one_transaction(
    recorder: ApplicationRecorder,
) -> None:
    traced = Traced(recorder.datastore.pool)
    assert recorder.insert_events([stored("a", 1)]) == [1]
    assert traced.take() == ["INSERT INTO stored_events"]
    assert recorder.insert_events([stored("a", 2), stored("b", 1)]) == [2, 3]
    assert traced.take() == [
        "BEGIN",
        "INSERT INTO stored_events",
        "INSERT INTO stored_events",
        "COMMIT",
    ]
    assert rows(recorder) == [
        (1, "a", 1, b'{"n":1}'),
        (2, "a", 2, b'{"n":1}'),
        (3, "b", 1, b'{"n":1}'),
    ]


def test_a_refused_event_leaves_nothing_and_no_transaction_open(
    recorder: ApplicationRecorder,
) -> None:
    recorder.insert_events([stored("a", 1)])
    with pytest.raises(IntegrityError):  # eventsourcing's, as from a transaction
        recorder.insert_events([stored("a", 1)])
    with pytest.raises(IntegrityError):  # one of two: neither is recorded
        recorder.insert_events([stored("b", 1), stored("a", 1)])
    pool = recorder.datastore.pool
    connection = pool.get_connection(is_writer=True)
    try:
        assert not raw(connection).in_transaction
    finally:
        pool.put_connection(connection)
    assert recorder.insert_events([stored("b", 1)]) == [2]
    assert [row[1:3] for row in rows(recorder)] == [("a", 1), ("b", 1)]


def test_one_statement_ends_as_the_library_s_transaction_does() -> None:
    """A failure inside the block is raised as eventsourcing's error; a block
    that ends normally leaves no transaction open."""
    pool = es_sqlite.SQLiteConnectionPool(db_name=":memory:")
    connection = pool.get_connection()
    try:
        with OneStatement(connection, commit=True) as cursor, cursor:
            cursor.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        with OneStatement(connection, commit=True) as cursor, cursor:
            cursor.execute("INSERT INTO t VALUES (1)")
        assert not raw(connection).in_transaction
        with (
            pytest.raises(IntegrityError),
            OneStatement(connection, commit=True) as cursor,
            cursor,
        ):
            cursor.execute("INSERT INTO t VALUES (1)")
        assert not raw(connection).in_transaction
    finally:
        pool.put_connection(connection)
        pool.close()


def test_decisions_fold_in_their_transaction_and_alone_are_one_insert(
    tmp_path: Path,
) -> None:
    """A failed gate is one transaction with its fold of the read models:
    ``BEGIN``, its ``INSERT``, the views' positions, the fold (in a
    savepoint), every view's
    position in one statement, ``COMMIT``. With nothing to fold, it runs
    nothing but its INSERT on its connection, so the statement stays in the
    connection's statement cache (eventsourcing's connections cache one
    statement: a ``BEGIN`` before it evicted it each time)."""
    app = RecoveryService(
        env={"SQLITE_DBNAME": str(tmp_path / "devs.sqlite")},
        policy=Policy(escalation_threshold=100, handoff_threshold=100),
    )
    try:
        app.start_task("t")
        app.record_gate("t", 1, gate="tests", error="assert 1 == 2")
        pool = app.factory.datastore.pool  # type: ignore[attr-defined]
        connection = pool.get_connection(is_writer=True)
        ran: list[str] = []
        raw(connection).set_trace_callback(ran.append)
        pool.put_connection(connection)
        app.record_gate("t", 1, gate="tests", error="assert 1 == 2")
        said = [shown(statement) for statement in ran]
        assert said[:4] == [
            "BEGIN",
            "INSERT INTO stored_events",
            "SELECT application_name, notification_id",
            "SAVEPOINT devs_fold",
        ]
        assert said[-3:] == ["INSERT INTO tracking", "RELEASE devs_fold", "COMMIT"]
        assert (said.count("BEGIN"), said.count("COMMIT")) == (1, 1)

        app.read_models.close()  # nothing folds on write any more
        ran.clear()
        for _ in range(5):
            app.record_gate("t", 1, gate="tests", error="assert 1 == 2")
        assert [shown(statement) for statement in ran] == [
            "INSERT INTO stored_events"
        ] * 5
        assert app.task("t").consecutive_failures == 7
        assert app.verify().ok
    finally:
        app.close()
