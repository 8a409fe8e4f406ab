"""Commands under ``NO_WAIT`` (how ``devs serve`` runs a command on its event
loop) never wait: not for another process's SQLite write lock, not for the
process's one writer connection, not in a lost race's back-off. They raise
``WouldWait`` having written nothing, and the same command outside it then
waits and succeeds."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from eventsourcing.persistence import ConnectionUnavailableError

from devs.adapters.config import Settings, open_service
from devs.adapters.store.persistence import NOTHING_RETURNED, SQLiteConnectionPool
from devs.domain import NotCaughtUp
from devs.domain.commands import NO_WAIT, WouldWait
from tests.helpers import event_count

LOCKER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
connection.execute("COMMIT")
"""


@contextmanager
def no_wait() -> Iterator[None]:
    token = NO_WAIT.set(True)
    try:
        yield
    finally:
        NO_WAIT.reset(token)


@contextmanager
def write_locked(db: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds the file's write lock until the block ends."""
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout is not None
    assert locker.stdin is not None
    assert locker.stdout.readline().strip() == "locked"
    try:
        yield locker
    finally:
        locker.stdin.write("\n")
        locker.stdin.flush()
        assert locker.wait(timeout=30) == 0


def test_a_command_would_wait_for_another_process_s_lock(db_path: Path) -> None:
    service = open_service(Settings(db=str(db_path)))
    service.start_task("t")
    before = event_count(db_path)
    with write_locked(db_path):
        started = time.monotonic()
        with no_wait(), pytest.raises(WouldWait):
            service.begin_attempt("t", "use a regex")
        assert time.monotonic() - started < 5  # the lock timeout is 30 s
    assert event_count(db_path) == before  # nothing was written
    assert service.begin_attempt("t", "use a regex").proceed
    assert service.task("t").version == 2
    service.close()


def test_a_command_outside_waits_for_the_lock_and_succeeds(db_path: Path) -> None:
    service = open_service(Settings(db=str(db_path)))
    service.start_task("t")
    answers: list[bool] = []
    with write_locked(db_path):
        waiting = threading.Thread(
            target=lambda: answers.append(
                service.begin_attempt("t", "use a regex").proceed
            )
        )
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive()
        assert not answers
    waiting.join(timeout=30)
    assert answers == [True]
    service.close()


def test_a_lost_race_would_wait_for_its_back_off(db_path: Path) -> None:
    first = open_service(Settings(db=str(db_path)))
    second = open_service(Settings(db=str(db_path)))
    first.start_task("t")
    first.begin_attempt("t", "cached here")  # the task is in first's cache
    second.begin_attempt("t", "written by another process")
    before = event_count(db_path)
    with no_wait(), pytest.raises(WouldWait):
        first.begin_attempt("t", "decided on a stale cache")
    assert event_count(db_path) == before
    assert first.begin_attempt("t", "decided on a stale cache").proceed
    assert first.task("t").version == 4
    first.close()
    second.close()


def test_the_process_s_writer_connection_is_had_at_once_or_not_at_all(
    db_path: Path,
) -> None:
    service = open_service(Settings(db=str(db_path)))
    service.start_task("t")
    pool = service.factory.datastore.pool  # type: ignore[attr-defined]
    assert isinstance(pool, SQLiteConnectionPool)
    held = pool.get_connection(is_writer=True)  # another thread's write
    with no_wait(), pytest.raises(WouldWait):
        service.begin_attempt("t", "use a regex")
    pool.put_connection(held)
    # The failed try gave back nothing it did not take: writes go on.
    assert service.begin_attempt("t", "use a regex").proceed
    writer = pool.get_connection(is_writer=True, timeout=1)
    pool.put_connection(writer)
    service.close()


def test_the_busy_wait_is_off_under_no_wait_and_back_on_after(db_path: Path) -> None:
    service = open_service(Settings(db=str(db_path)))
    service.start_task("t")
    pool = service.factory.datastore.pool  # type: ignore[attr-defined]
    assert isinstance(pool, SQLiteConnectionPool)

    def busy_timeout(connection: object) -> int:
        with connection.cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute("PRAGMA busy_timeout")
            value: int = cursor.fetchone()[0]
        return value

    with no_wait():
        connection = pool.get_connection(is_writer=True)
        assert busy_timeout(connection) == 0
        pool.put_connection(connection)
    connection = pool.get_connection(is_writer=True)
    assert busy_timeout(connection) == 30_000  # SQLITE_LOCK_TIMEOUT, in ms
    pool.put_connection(connection)
    service.close()


def test_eventsourcing_s_pool_says_when_it_took_the_writer_lock_in_vain(
    db_path: Path,
) -> None:
    """Pins the message the pool relies on (adapters/store/persistence.py): a pool
    out of connections after taking the writer lock says NOTHING_RETURNED,
    and the lock is given back; its other time-outs took nothing."""
    pool = SQLiteConnectionPool(
        db_name=str(db_path), pool_size=1, max_overflow=0, lock_timeout=1
    )
    reader = pool.get_connection(is_writer=False)  # the only connection
    with pytest.raises(ConnectionUnavailableError) as raised:
        pool.get_connection(is_writer=True, timeout=0.1)
    assert str(raised.value) == NOTHING_RETURNED
    pool.put_connection(reader)
    writer = pool.get_connection(is_writer=True, timeout=1)  # given back
    with pytest.raises(ConnectionUnavailableError) as raised:
        pool.get_connection(is_writer=True, timeout=0.1)
    assert str(raised.value) != NOTHING_RETURNED  # the writer lock: not taken
    pool.put_connection(writer)
    again = pool.get_connection(is_writer=True, timeout=1)  # still one writer
    pool.put_connection(again)
    pool.close()


def test_a_task_another_thread_decides_on_would_wait(db_path: Path) -> None:
    service = open_service(Settings(db=str(db_path)))
    service.start_task("t")
    lock = service._locks.task("t")
    lock.acquire()  # another thread is deciding on it
    try:
        started = time.monotonic()
        with no_wait(), pytest.raises(WouldWait):
            service.begin_attempt("t", "use a regex")
        assert time.monotonic() - started < 1
    finally:
        lock.release()
    assert service.begin_attempt("t", "use a regex").proceed
    service.close()


def test_a_query_never_waits_a_read_after_a_lagging_position_waits_the_read_wait(
    db_path: Path,
) -> None:
    """The writer folded what it recorded: while another process holds the
    write lock, a query answers at once. A read after a position the views
    lack (recorded by a process that folds nothing) must fold it, which needs
    the write lock: it tries again for at most DEVS_READ_WAIT, then says so
    (504 over HTTP) — not the lock timeout (30 s) of each of many tries."""
    reader = open_service(Settings(db=str(db_path), read_wait=1))
    writer = open_service(Settings(db=str(db_path)))
    writer.start_task("t")
    with write_locked(db_path):
        started = time.monotonic()
        assert [entry.task_id for entry in reader.tasks()] == ["t"]
        assert time.monotonic() - started < 1
    writer.read_models.close()  # records, folds no more
    with writer.written() as written:
        writer.start_task("u")
    assert written.position is not None
    with write_locked(db_path):
        started = time.monotonic()
        assert [entry.task_id for entry in reader.tasks()] == ["t"]  # as folded
        with (
            reader.reading_after(written.position),
            pytest.raises(NotCaughtUp, match="within 1 s: another writer holds"),
        ):
            reader.tasks()
        assert time.monotonic() - started < 10
        assert writer.task("u").state == "RUNNING"  # reading the log still works
    with reader.reading_after(written.position):
        assert [entry.task_id for entry in reader.tasks()] == ["t", "u"]
    reader.close()
    writer.close()
