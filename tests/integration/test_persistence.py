"""Persistence wiring: orjson transcoding, stable topics, snapshots, restarts."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from unittest import skip
from uuid import uuid4

import orjson
import pytest
from eventsourcing import sqlite as es_sqlite
from eventsourcing.persistence import DatabaseError
from eventsourcing.tests import persistence as contract
from pydantic import BaseModel

from devs.adapters.config import Settings, open_service, sqlite_path
from devs.adapters.store.persistence import (
    ApplicationRecorder,
    OrjsonTranscoder,
    SnapshotRecorder,
    SQLiteConnectionPool,
)
from devs.domain import Policy, RecoveryService, StoreError
from devs.domain.task import Task


class TestOrjsonTranscoder(contract.TranscoderTestCase):
    """eventsourcing's transcoder contract for the JSON types our mapper emits.

    The pydantic mapper dumps every event to JSON-safe values before the
    transcoder sees it, so the custom-type registry cases do not apply.
    """

    def construct_transcoder(self) -> OrjsonTranscoder:
        return OrjsonTranscoder()

    _NO_REGISTRY = "pydantic dumps to JSON types first; no custom transcodings"

    test_dict_subclass = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_dict_subclass
    )
    test_list_subclass = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_list_subclass
    )
    test_str_subclass = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_str_subclass
    )
    test_int_subclass = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_int_subclass
    )
    test_tuple = skip(_NO_REGISTRY)(contract.TranscoderTestCase.test_tuple)
    test_mixed = skip(_NO_REGISTRY)(contract.TranscoderTestCase.test_mixed)
    test_custom_type_in_dict = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_custom_type_in_dict
    )
    test_nested_custom_type = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_nested_custom_type
    )
    test_custom_type_error = skip(_NO_REGISTRY)(
        contract.TranscoderTestCase.test_custom_type_error
    )


class TestApplicationRecorder(
    contract.ApplicationRecorderTestCase[ApplicationRecorder]
):
    """eventsourcing's application recorder contract for ours, whose
    ``insert_events`` takes the library's steps without its context managers:
    the same rows, notification ids and ``IntegrityError``s, from many threads.
    """

    def setUp(self) -> None:
        self.directory = tempfile.TemporaryDirectory()
        self.datastores: list[es_sqlite.SQLiteDatastore] = []
        self.threads = set(threading.enumerate())

    def tearDown(self) -> None:
        # The concurrency case stops its reader threads without joining them:
        # a connection closed under a reader would crash the interpreter.
        for thread in set(threading.enumerate()) - self.threads:
            thread.join(timeout=10)
        for datastore in self.datastores:
            datastore.close()
        self.directory.cleanup()

    def new_originator_id(self) -> str:
        return str(uuid4())

    def create_recorder(self) -> ApplicationRecorder:
        datastore = es_sqlite.SQLiteDatastore(
            str(Path(self.directory.name) / "events.sqlite"),
            originator_id_type="text",
        )
        self.datastores.append(datastore)
        recorder = ApplicationRecorder(datastore)
        recorder.create_table()
        return recorder

    _TIMING = "a timing, not a contract"

    test_performance = skip(_TIMING)(
        contract.ApplicationRecorderTestCase.test_performance
    )
    test_concurrent_throughput = skip(_TIMING)(
        contract.ApplicationRecorderTestCase.test_concurrent_throughput
    )


def test_events_are_stored_as_orjson_under_stable_topics(
    service: RecoveryService, db_path: Path
) -> None:
    service.start_task("t1")
    service.record_gate("t1", 1, error="x")
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute(
            "SELECT originator_id, originator_version, topic FROM stored_events"
        ).fetchall()
    assert rows == [
        ("task:t1", 1, "devs:Task.Started"),
        ("task:t1", 2, "devs:Task.GateFailed"),
    ]


def test_events_are_written_as_orjson_writes_their_json_dump(db_path: Path) -> None:
    """The mapper has pydantic write each event's JSON: the same bytes as
    orjson makes of its JSON-mode dump, for every kind of event and snapshot."""
    interval = RecoveryService.snapshotting_intervals[Task]
    policy = Policy(escalation_threshold=2, handoff_threshold=3)
    with open_service(Settings(db=str(db_path)), policy=policy) as app:
        app.start_run("r", {"a": [], "b": ["a"]})
        app.start_task("a", run_id="r", agent="coder", last_commit="c0ffee")
        app.log_lesson("a", "regex", 'no: é \u2028 \x01 \t \\ " 🙂')
        app.begin_attempt("a", "regex")  # blocked: paused
        app.resume("a", actor="human", reason="go on")
        app.begin_attempt("a", "parser")
        app.report_entropy("a", 1 / 3)
        app.record_gate("a", 1, gate="tests", error="assert 1 == 2", output="é")
        app.rewind("a", actor="human", reason="back")  # after the escalation
        app.record_gate("a", None)  # handed off
        app.claim_handoff("a", actor="human")
        app.resolve_handoff("a", actor="human", resolution="complete", reason="ok")
        app.start_task("b", run_id="r")
        app.report_entropy("b", 0.99)  # paused
        app.skip("b", actor="human", reason="later")
        app.start_task("c")
        for i in range(interval):
            app.report_entropy("c", 1e-7 * i)
        app.record_gate("c", 0)
        records = [
            *app.recorder.select_notifications(start=None, limit=10_000),
            *app.snapshots.recorder.select_events("task:c"),  # type: ignore[union-attr]
        ]
        topics = {record.topic for record in records}
        assert len(topics) == 22  # every kind of event, and a task snapshot
        for record in records:
            domain_event = app.mapper.to_domain_event(record)
            assert isinstance(domain_event, BaseModel)
            assert record.state == orjson.dumps(domain_event.model_dump(mode="json"))


def test_snapshots_are_taken_and_used(service: RecoveryService, db_path: Path) -> None:
    interval = RecoveryService.snapshotting_intervals[Task]
    service.start_task("t1")
    for i in range(2 * interval + 20):
        service.report_entropy("t1", 0.1 + (i % 5) / 100)
    with sqlite3.connect(db_path) as connection:
        versions = [
            v
            for (v,) in connection.execute(
                "SELECT originator_version FROM stored_snapshots ORDER BY 1"
            )
        ]
    assert versions == [interval, 2 * interval]
    fresh = open_service(Settings(db=str(db_path)), env={"AGGREGATE_CACHE_MAXSIZE": ""})
    try:
        task: Task = fresh.repository.get("task:t1")
        assert task.version == 2 * interval + 21
        assert task == service.repository.get("task:t1")
    finally:
        fresh.close()


def test_only_the_latest_two_snapshots_are_kept(
    service: RecoveryService, db_path: Path
) -> None:
    interval = RecoveryService.snapshotting_intervals[Task]
    service.start_task("t1")
    service.start_task("t2")
    for i in range(5 * interval):
        service.report_entropy("t1", 0.1 + (i % 5) / 100)
    for _ in range(interval):
        service.report_entropy("t2", 0.1)
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute(
            "SELECT originator_id, originator_version FROM stored_snapshots"
            " ORDER BY 1, 2"
        ).fetchall()
    assert rows == [
        ("task:t1", 4 * interval),
        ("task:t1", 5 * interval),
        ("task:t2", interval),
    ]
    fresh = open_service(Settings(db=str(db_path)), env={"AGGREGATE_CACHE_MAXSIZE": ""})
    try:
        assert fresh.task("t1").version == 5 * interval + 1
        assert fresh.task("t1") == service.task("t1")
    finally:
        fresh.close()


def test_default_database_is_devs_state_sqlite_in_the_working_directory(
    tmp_path: Path, monkeypatch: object
) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEVS_DB", raising=False)
    with RecoveryService() as app:
        app.start_task("t1")
        assert sqlite_path(app) == "devs_state.sqlite"
    assert (tmp_path / "devs_state.sqlite").exists()
    monkeypatch.setenv("DEVS_DB", str(tmp_path / "other.sqlite"))
    with RecoveryService() as app:
        app.start_task("t1")
    assert (tmp_path / "other.sqlite").exists()


def test_a_second_process_sees_the_first_process_counts(db_path: Path) -> None:
    writer = textwrap.dedent(
        f"""
        from devs.domain import RecoveryService
        app = RecoveryService(env={{"SQLITE_DBNAME": {str(db_path)!r}}})
        app.start_task("t1")
        app.record_gate("t1", 1, error="first")
        app.record_gate("t1", 1, error="second")
        app.close()
        """
    )
    reader = textwrap.dedent(
        f"""
        from devs.domain import RecoveryService
        app = RecoveryService(env={{"SQLITE_DBNAME": {str(db_path)!r}}})
        task, report = app.task("t1"), app.failure_report("t1")
        print(task.consecutive_failures, report.failure_count)
        print(app.record_gate("t1", 1).outcome)
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", reader],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert out == ["2", "2", "escalate"]


def test_save_takes_events_as_well_as_aggregates(service: RecoveryService) -> None:
    """RecoveryService.save collects its own aggregates directly; anything else
    (here: bare events) still goes through eventsourcing's own save."""
    task = Task(task_id="t9", run_id=None, agent=None, last_commit="c", policy=Policy())
    recordings = service.save(*task.collect_events())
    assert [r.domain_event.originator_id for r in recordings] == ["task:t9"]
    assert service.task("t9").starting_commit == "c"
    assert service.save(None) == []


def test_a_snapshot_that_cannot_be_written_does_not_undo_the_command(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events are committed before the snapshot: a caller told "failed"
    would retry and count the failure twice."""
    from eventsourcing.persistence import OperationalError

    interval = RecoveryService.snapshotting_intervals[Task]
    service.start_task("t1")
    for _ in range(interval - 2):
        service.report_entropy("t1", 0.1)

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OperationalError("database or disk is full")

    assert service.snapshots is not None
    monkeypatch.setattr(service.snapshots, "put", full_disk)
    decision = service.record_gate("t1", 1)  # the event that is due a snapshot
    assert decision.consecutive_failures == 1
    assert service.task("t1").version == interval


def test_snapshots_equal_a_replay_of_the_log(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each snapshot holds the state the log gives at its version.

    The service snapshots a just-saved aggregate as held in memory. With an
    interval of 3, commands that record several events cross it mid-batch:
    the snapshot is then taken at the batch's last version, and must still
    equal a replay of the events alone up to that version.
    """
    from eventsourcing.application import Repository

    from devs.domain.model import Aggregate, AggregateSnapshot
    from devs.domain.run import Run

    monkeypatch.setattr(RecoveryService, "snapshotting_intervals", {Task: 3, Run: 3})
    monkeypatch.setattr(SnapshotRecorder, "KEEP", 1000)  # keep every one to check
    app = open_service(Settings(db=str(db_path)))
    try:
        app.start_run("r1", {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
        app.start_task("a", run_id="r1")
        for _ in range(3):
            app.begin_attempt("a", "same idea")
            app.record_gate("a", 1, error="boom")  # escalates at 3
        app.resume("a", actor="ann", reason="try again")
        app.log_lesson("a", "same idea", "it never worked")
        app.report_entropy("a", 0.95)  # pauses
        app.resume("a", actor="ann", reason="calmer now")
        app.record_gate("a", 0)
        for node in ("b", "c"):
            app.start_task(node, run_id="r1")
            app.record_gate(node, 0)
        app.start_task("d", run_id="r1")
        for _ in range(3):
            app.record_gate("d", 1, error="still red")  # escalates at 3
        for reason in ("one more go", "last go"):
            app.resume("d", actor="ann", reason=reason)
            app.record_gate("d", 1, error="still red")  # escalates, hands off at 5
        app.claim_handoff("d", actor="bob")
        app.resolve_handoff(
            "d", actor="bob", resolution="complete", reason="fixed by hand"
        )

        assert app.snapshots is not None
        log_only = Repository(app.events)
        versions: list[int] = []
        for aggregate_id in ("task:a", "task:b", "task:d", "run:r1"):
            for snapshot in app.snapshots.get(aggregate_id):
                assert isinstance(snapshot, AggregateSnapshot)
                replayed: Aggregate = log_only.get(
                    aggregate_id, version=snapshot.originator_version
                )
                expected = type(replayed).Snapshot.take(replayed)
                assert snapshot.state == expected.state, aggregate_id
                versions.append(snapshot.originator_version)
        assert len(versions) >= 10
        assert any(version % 3 for version in versions)  # past a due version
    finally:
        app.close()


def test_a_lock_met_while_opening_is_waited_out(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Switching a new file to WAL reports "database is locked" at once (no
    busy wait) when another process holds a lock; opening tries again."""
    original = SQLiteConnectionPool._connect  # the library's steps
    refusals = [sqlite3.OperationalError("database is locked")] * 2

    def contended(pool: SQLiteConnectionPool) -> es_sqlite.SQLiteConnection:
        if refusals:
            raise refusals.pop()
        return original(pool)

    monkeypatch.setattr(SQLiteConnectionPool, "_connect", contended)
    with open_service(Settings(db=str(db_path))) as app:
        app.start_task("t1")
    assert refusals == []


def test_a_lock_held_past_the_timeout_is_a_store_error(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def locked(pool: SQLiteConnectionPool) -> es_sqlite.SQLiteConnection:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(SQLiteConnectionPool, "_connect", locked)
    with pytest.raises(StoreError, match="stayed locked by another process"):
        open_service(Settings(db=str(db_path)), env={"SQLITE_LOCK_TIMEOUT": "1"})


def test_a_connection_that_cannot_be_made_gives_back_the_writer_lock(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = open_service(Settings(db=str(db_path)), env={"SQLITE_LOCK_TIMEOUT": "1"})
    app.start_task("a")
    pool = app.factory.datastore.pool  # type: ignore[attr-defined]
    for connection in list(pool._pool):  # the next write needs a new connection
        connection.close()
    pool._pool.clear()

    def locked(pool: SQLiteConnectionPool) -> es_sqlite.SQLiteConnection:
        raise sqlite3.OperationalError("database is locked")

    with monkeypatch.context() as patch:
        patch.setattr(SQLiteConnectionPool, "_connect", locked)
        with pytest.raises(DatabaseError, match="locked"):
            pool.get_connection(is_writer=True)  # what a command's insert asks
    app.start_task("c")  # the writer lock was given back
    assert app.task("c").task_id == "c"
    app.close()
