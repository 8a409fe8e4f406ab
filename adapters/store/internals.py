"""The private parts of eventsourcing 9.5 that the stores' classes rely on.

As ``devs.domain.eventsourcing_internals`` does for the domain, but for what
names a database: the SQLite and PostgreSQL recorders and pool, and the read
models' overrides (declared here as data: ``devs.projections`` cannot import
this package). ``tests/integration/test_eventsourcing_internals.py`` pins each
entry. Nothing is imported at run time, since ``eventsourcing.postgres`` needs
the ``postgres`` extra: every object is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from devs.domain.eventsourcing_internals import Override

if TYPE_CHECKING:
    from eventsourcing.persistence import ConnectionPool, StoredEvent
    from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteConnectionPool


# --------------------------------------------------------- the SQLite store


def insert_events(
    recorder: SQLiteAggregateRecorder,
    cursor: Any,
    stored_events: Sequence[StoredEvent],
    **kwargs: Any,
) -> Sequence[int] | None:
    """``SQLiteAggregateRecorder._insert_events(c, stored_events, **kwargs)``:
    inserts the events with the cursor of a transaction the caller holds and
    returns their notification ids, in order (``None`` for a recorder without
    a log). ``devs.adapters.store.persistence.ApplicationRecorder`` holds that
    transaction itself, without the two generator-based context managers of
    the public ``insert_events``: every decision goes through it."""
    return recorder._insert_events(cursor, stored_events, **kwargs)


def give_back_writer(pool: ConnectionPool[Any]) -> None:
    """``ConnectionPool._writer_lock`` and ``_num_writers``:
    ``get_connection(is_writer=True)`` takes the lock and counts the writer
    before it looks for a connection, and only ``put_connection`` undoes that.
    When no connection can then be made, the pool's error says so
    (``NOTHING_RETURNED`` in ``devs.adapters.store.persistence``) and the lock would
    stay taken: this undoes it as ``put_connection`` does."""
    pool._num_writers -= 1
    pool._writer_lock.release()


def give_back_reader(pool: ConnectionPool[Any]) -> None:
    """``ConnectionPool._no_readers``, ``_num_readers`` and
    ``_mutually_exclusive_read_write``: as :func:`give_back_writer`, for the
    reader ``get_connection(is_writer=False)`` counted, as ``put_connection``
    uncounts it (waking a writer that waits for no readers)."""
    with pool._no_readers:
        pool._num_readers -= 1
        if pool._num_readers == 0 and pool._mutually_exclusive_read_write:
            pool._no_readers.notify()


def keep_journal_mode(pool: SQLiteConnectionPool) -> None:
    """``SQLiteConnectionPool.is_journal_mode_wal`` (a field the pool keeps to
    itself): set, ``_create_connection`` never asks for WAL mode. A read-only
    pool must not (switching is a write), so it says the file is as it is."""
    pool.is_journal_mode_wal = True


# ---------------------------------------------------------------- overrides

OVERRIDES: tuple[Override, ...] = (
    Override(
        "eventsourcing.sqlite:SQLiteConnectionPool",
        "_create_connection",
        "method",
        "(self)",
        ("devs.adapters.store.persistence:SQLiteConnectionPool",),
        "the pool makes every connection with it; ours takes the library's "
        "steps with a statement cache that holds a decision's fold, waits out "
        "a lock met while switching a new file to WAL, and raises the "
        "library's errors.",
    ),
    Override(
        "eventsourcing.sqlite:SQLiteAggregateRecorder",
        "_insert_events",
        "method",
        "(self, c, stored_events, **)",
        ("devs.adapters.store.persistence:SnapshotRecorder",),
        "``insert_events`` calls it in its transaction; ours deletes the "
        "snapshots older than the latest two in the same transaction.",
    ),
    Override(
        "eventsourcing.postgres:PostgresRecorder",
        "_create_table",
        "method",
        "(self, curs)",
        (
            "devs.projections.pg:SerializedDDL",
            "devs.projections.postgres:PostgresViews",
        ),
        "``create_table`` runs the DDL with it in one transaction; ours takes "
        "the advisory locks first, and records the views' schema fingerprint.",
    ),
    Override(
        "eventsourcing.projection:BaseProjectionRunner",
        "_process_events_loop",
        "staticmethod",
        "(subscription, projection, is_stopping, runner)",
        ("devs.projections.postgres:ReadModelsRunner",),
        "the runner's thread runs it with these keywords; ours folds the "
        "events already fetched in one transaction instead of one per event.",
    ),
)
"""Every private method of eventsourcing that a class of the stores or of the
read models overrides."""
