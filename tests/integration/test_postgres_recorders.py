"""eventsourcing's own recorder test cases against devs-recovery's PostgreSQL
recorders: the log's one-round-trip recorder and the read models' tracking
recorder (the views' tables and their one position)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.persistence import (
    IntegrityError,
    PersistenceError,
    StoredEvent,
    Tracking,
)
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.tests.persistence import (
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
    TrackingRecorderTestCase,
)
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from devs.adapters.config import postgres_env
from devs.adapters.store.postgres import PostgresApplicationRecorder, PostgresFactory
from devs.projections.postgres import PostgresViews
from tests.helpers import wait_until


def open_factory(url: str, **settings: str) -> PostgresFactory:
    env = {**postgres_env(url), "ORIGINATOR_ID_TYPE": "text", **settings}
    return PostgresFactory(Environment("RecorderTests", env))


class WithDatabase:
    """A fresh database per test (the ``pg_url`` fixture) and a factory on it."""

    url: str
    factories: list[PostgresFactory]

    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> Iterator[None]:
        self.url = pg_url
        self.factories = []
        yield
        for factory in self.factories:
            factory.close()

    def factory(self, **settings: str) -> PostgresFactory:
        factory = open_factory(self.url, POSTGRES_MAX_OVERFLOW="20", **settings)
        self.factories.append(factory)
        return factory

    def new_originator_id(self) -> str:
        return str(uuid4())


class TestApplicationRecorder(
    WithDatabase, ApplicationRecorderTestCase[PostgresApplicationRecorder]
):
    def create_recorder(self) -> PostgresApplicationRecorder:
        recorder = self.factory().application_recorder()
        assert isinstance(recorder, PostgresApplicationRecorder)
        return recorder


class TestNonInterleavingNotificationIds(
    WithDatabase, NonInterleavingNotificationIDsBaseCase
):
    def create_recorder(self) -> PostgresApplicationRecorder:
        recorder = self.factory().application_recorder()
        assert isinstance(recorder, PostgresApplicationRecorder)
        return recorder


class TestViewsTracking(WithDatabase, TrackingRecorderTestCase):
    def create_recorder(self) -> PostgresViews:
        views = PostgresViews(self.factory().datastore)
        views.create_table()
        return views


def stored(originator_id: str, version: int) -> StoredEvent:
    return StoredEvent(originator_id, version, "topic", b"{}")


def test_a_save_is_one_call_of_the_recorders_function(pg_url: str) -> None:
    """Ids in commit order; a duplicate version is an IntegrityError with
    nothing written; and the save goes through the function (without it, it
    fails)."""
    factory = open_factory(pg_url)
    try:
        recorder = factory.application_recorder()
        assert isinstance(recorder, PostgresApplicationRecorder)
        assert recorder.insert_events([stored("a", 1), stored("a", 2)]) == [1, 2]
        assert recorder.insert_events([stored("b", 1)]) == [3]
        with pytest.raises(IntegrityError):
            recorder.insert_events([stored("b", 2), stored("a", 2)])
        assert recorder.max_notification_id() == 3
        assert [n.originator_id for n in recorder.select_notifications(1, 10)] == [
            "a",
            "a",
            "b",
        ]
        datastore: PostgresDatastore = recorder.datastore
        with datastore.get_connection() as connection:
            connection.execute(
                SQL("DROP FUNCTION {}").format(
                    Identifier(recorder.insert_function_name)
                )
            )
        with pytest.raises(PersistenceError, match=recorder.insert_function_name):
            recorder.insert_events([stored("c", 1)])
    finally:
        factory.close()


def test_eventsourcings_db_functions_setting_still_takes_its_own_path(
    pg_url: str,
) -> None:
    factory = open_factory(pg_url, POSTGRES_ENABLE_DB_FUNCTIONS="y")
    try:
        recorder = factory.application_recorder()
        assert recorder.insert_events([stored("a", 1)]) == [1]
    finally:
        factory.close()


def test_processes_racing_to_create_the_views_tables_both_succeed(
    pg_url: str,
) -> None:
    """eventsourcing looks for the tracking table before the DDL lock; one
    that lost the race saw no table, then inserted the ``__migration__`` row
    again ("Failed to record tracking for __migration__ 1"). Under the lock it
    now looks again. (The winner here is of the last release, which recorded
    no fingerprint of its statements; this release's winner makes a late one
    do nothing under the lock.)"""
    from devs.projections.postgres import SCHEMA_TABLE

    first, second = open_factory(pg_url), open_factory(pg_url)
    try:
        late = PostgresViews(second.datastore)  # has looked: no table yet
        late.tracking_table_exists = False
        late.tracking_migration_previous = late.tracking_migration_current = None
        PostgresViews(first.datastore).create_table()  # the winner
        with first.datastore.transaction(commit=True) as cursor:
            cursor.execute(SQL("DROP TABLE {}").format(Identifier(SCHEMA_TABLE)))
        with second.datastore.transaction(commit=True) as cursor:
            late._create_table(cursor)
        assert late.tracking_table_exists
        late.insert_tracking(Tracking("app", 1))
        assert late.max_tracking_id("app") == 1

        later = PostgresViews(second.datastore)  # has looked: no fingerprint
        with second.datastore.transaction(commit=True) as cursor:
            assert later._made(cursor)  # late's, seen under the lock
            later._create_table(cursor)
        assert later.max_tracking_id("app") == 1
    finally:
        first.close()
        second.close()


def test_threads_opening_a_new_database_together_all_succeed(pg_url: str) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def open_views() -> None:
        factory = open_factory(pg_url)
        try:
            start.wait()
            PostgresViews(factory.datastore).create_table()
            factory.application_recorder()
        except BaseException as error:
            errors.append(error)
        finally:
            factory.close()

    threads = [threading.Thread(target=open_views) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_the_services_saves_take_the_one_call_path(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eventsourcing's application passes ``tracking=None`` with every save:
    that is still the fast path, never the library's pipelined one."""
    from eventsourcing import postgres as es_postgres

    from devs.domain import RecoveryService

    def library_path(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("eventsourcing's own insert_events was called")

    with RecoveryService(
        env={"DEVS_DATABASE_URL": pg_url, "DEVS_PROJECTIONS": "external"}
    ) as service:
        monkeypatch.setattr(
            es_postgres.PostgresApplicationRecorder, "insert_events", library_path
        )
        service.start_task("t1")
        decision = service.record_gate("t1", 1)
        assert decision.consecutive_failures == 1
        with service.exactly_once("k", "r"):
            service.report_entropy("t1", 0.1)


def test_a_type_another_process_creates_meanwhile_is_found_there(
    pg_url: str,
) -> None:
    """eventsourcing creates its composite type outside the DDL lock and lets
    only ``DuplicateObject`` pass; a racing process's uncommitted type makes
    PostgreSQL answer a unique violation once it commits. The recorder looks
    once more, and finds the type made."""
    import psycopg

    factory = open_factory(pg_url, CREATE_TABLE="n")
    try:
        recorder = factory.application_recorder()
        assert isinstance(recorder, PostgresApplicationRecorder)
        [create_type] = [
            statement
            for statement in recorder.sql_create_statements
            if "CREATE TYPE" in statement.as_string()
        ]
        errors: list[BaseException] = []

        def create() -> None:
            try:
                recorder.create_table()
            except BaseException as error:
                errors.append(error)

        with psycopg.connect(pg_url) as other, psycopg.connect(pg_url) as watcher:
            other.execute(create_type)  # uncommitted: the racing process
            racing = threading.Thread(target=create)
            racing.start()

            def recorder_waits() -> bool:
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock'"
                ).fetchone()
                watcher.rollback()
                return waiting is not None and waiting[0] >= 1

            # until the recorder waits on that type (a bound, not a speed)
            assert wait_until(recorder_waits, 30), "the recorder never waited"
            other.commit()
        racing.join(timeout=30)
        assert errors == []
        assert recorder.insert_events([stored("a", 1)]) == [1]
    finally:
        factory.close()


def test_views_opened_again_lock_no_table_a_fold_is_writing(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service opening beside a runner's fold deadlocked with it: ``ALTER
    TABLE … ADD COLUMN IF NOT EXISTS`` asks for an ACCESS EXCLUSIVE lock even
    when the column exists. Once this release's statements ran, the views
    read their fingerprint instead; a database without it runs them again."""
    import psycopg

    from devs.projections.postgres import SCHEMA_TABLE

    first = open_factory(pg_url)
    try:
        made = PostgresViews(first.datastore)
        made.create_table()
        with first.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                SQL("SELECT fingerprint FROM {}").format(Identifier(SCHEMA_TABLE))
            )
            assert [row["fingerprint"] for row in cursor.fetchall()] == [
                made.fingerprint
            ]
    finally:
        first.close()
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=2s")
    with psycopg.connect(pg_url) as fold:  # a fold's transaction, under way
        fold.execute("LOCK TABLE tasks, metrics_tasks IN ROW EXCLUSIVE MODE")
        again = open_factory(pg_url)
        try:
            PostgresViews(again.datastore).create_table()  # reads one row
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(SQL("DELETE FROM {}").format(Identifier(SCHEMA_TABLE)))
            with pytest.raises(PersistenceError, match="lock timeout"):
                PostgresViews(again.datastore).create_table()  # runs the DDL
        finally:
            again.close()
        fold.rollback()
    done = open_factory(pg_url)
    try:
        PostgresViews(done.datastore).create_table()
        with done.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                SQL("SELECT count(*) AS n FROM {}").format(Identifier(SCHEMA_TABLE))
            )
            assert cursor.fetchone() == {"n": 1}
    finally:
        done.close()


def test_a_type_another_process_committed_meanwhile_is_looked_for_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A type another process committed between the look and the ``CREATE
    TYPE`` (the projection runner's application takes no lock) is "already
    exists" (seen in CI: `devs project` died at its start beside a command);
    the recorder looks again. Another refusal is not passed over."""
    from eventsourcing.persistence import ProgrammingError

    factory = open_factory(pg_url, CREATE_TABLE="n")
    try:
        recorder = factory.application_recorder()
        assert isinstance(recorder, PostgresApplicationRecorder)
        real = recorder._create_tables
        tries: list[str] = []

        def racing() -> None:
            tries.append("try")
            if len(tries) == 1:
                real()  # made by "the other process", then our CREATE fails
                msg = 'type "stored_event_text" already exists'
                raise ProgrammingError(msg)
            real()

        monkeypatch.setattr(recorder, "_create_tables", racing)
        recorder.create_table()
        assert tries == ["try", "try"]
        assert recorder.insert_events([stored("a", 1)]) == [1]

        def broken() -> None:
            msg = "syntax error at or near ..."
            raise ProgrammingError(msg)

        monkeypatch.setattr(recorder, "_create_tables", broken)
        with pytest.raises(ProgrammingError, match="syntax error"):
            recorder.create_table()
    finally:
        factory.close()
