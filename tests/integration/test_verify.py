"""Damaged read models and poison events: found by ``verify()``, never a
silently wrong answer; rebuilds happen beside the stored views."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest
from eventsourcing.utils import register_topic

from devs.adapters.config import Settings, open_service
from devs.domain import RecoveryService, StoreError, UnreadableEvent
from devs.domain.chain import body_hash
from devs.domain.task import Task
from devs.projections.sqlite import SQLiteReadModels
from tests.helpers import table_rows
from tests.integration.test_projections import drive


def sql(db_path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    with sqlite3.connect(db_path) as connection:
        connection.execute(statement, params)


def poison(db_path: Path, originator_id: str, *, topic: str, state: bytes) -> int:
    """Append an event the service cannot decode; its log position."""
    with sqlite3.connect(db_path) as connection:
        (version,) = connection.execute(
            "SELECT MAX(originator_version) FROM stored_events WHERE originator_id = ?",
            (originator_id,),
        ).fetchone()
        cursor = connection.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, "
            "state) VALUES (?, ?, ?, ?)",
            (originator_id, version + 1, topic, state),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def sqlite_models(app: RecoveryService) -> SQLiteReadModels:
    assert isinstance(app.read_models, SQLiteReadModels)
    return app.read_models


def reopen(db_path: Path) -> RecoveryService:
    return open_service(Settings(db=str(db_path)))


def test_an_intact_store_verifies(service: RecoveryService) -> None:
    drive(service)
    report = service.verify()
    assert report.ok, report.problems
    assert report.problems == []
    assert report.position > 20
    assert set(report.read_models) == set(service.read_models.names)


def test_verify_writes_nothing(service: RecoveryService, db_path: Path) -> None:
    drive(service)
    service.catch_up()
    sql(db_path, "DELETE FROM lessons_learned")
    before = db_path.read_bytes(), table_rows(db_path)
    assert not service.verify().ok
    assert table_rows(db_path) == before[1]


def test_deleted_rows_are_reported_and_rebuild_repairs(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.catch_up()
    live = table_rows(db_path)
    sql(db_path, "DELETE FROM lessons_learned")
    sql(db_path, "UPDATE tasks SET failure_count = 99 WHERE id = 't1'")
    report = service.verify()
    assert not report.ok
    assert len(report.problems) == 2, report.problems
    lessons, tasks = sorted(report.problems)
    assert "'lessons_learned', table lessons_learned: 1 row(s) of the log missing" in (
        lessons
    )
    assert "'tasks', table tasks: 1 row(s) of the log missing, 1 row(s) not" in tasks
    assert "'t1'" in tasks
    service.rebuild_projections()
    assert table_rows(db_path) == live
    assert service.verify().ok


def test_moved_tracking_is_reported(service: RecoveryService, db_path: Path) -> None:
    drive(service)
    last = service.catch_up()
    sql(
        db_path,
        "UPDATE tracking SET notification_id = 3 WHERE application_name LIKE ?",
        ("%/task_failures.v%",),
    )
    sql(
        db_path,
        "UPDATE tracking SET notification_id = ? WHERE application_name LIKE ?",
        (last + 50, "%/hitl_sessions.v%"),
    )
    problems = service.verify().problems
    assert any("'task_failures'" in p and "at position 3" in p for p in problems)
    assert any(
        f"'hitl_sessions' is at position {last + 50}, past the end of the log ({last})"
        in p
        for p in problems
    ), problems
    service.rebuild_projections()
    assert service.verify().ok


def test_a_dropped_table_is_remade_and_refilled_by_the_next_query(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.start_task("t5")
    service.report_entropy("t5", 0.99)
    sessions = service.pending_sessions()
    queue = service.handoff_queue()
    assert sessions
    assert queue
    sql(db_path, "DROP TABLE hitl_sessions")
    problems = service.verify().problems
    assert problems == [
        "read model 'hitl_sessions': table hitl_sessions is missing "
        "(the next query remakes it and refills it from the log)"
    ]
    assert service.pending_sessions() == sessions
    # a dropped table met by a catch-up (new events to fold) is remade too
    sql(db_path, "DROP TABLE handoff_queue")
    service.start_task("t9")
    assert service.handoff_queue() == queue
    assert service.verify().ok


def test_a_table_dropped_while_closed_is_remade_on_open(db_path: Path) -> None:
    with reopen(db_path) as app:
        drive(app)
        lessons = app.lessons("t1")
    sql(db_path, "DROP TABLE lessons_learned")
    with reopen(db_path) as app:
        assert app.lessons("t1") == lessons
        assert app.verify().ok


def test_a_poison_event_stops_only_its_own_task(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.start_task("t2")
    service.record_gate("t2", 1, error="boom")
    bad_topic = poison(
        db_path, "task:t1", topic="devs.domain.task:Task.NoSuchEvent", state=b"{}"
    )
    bad_bytes = poison(
        db_path, "task:t2", topic="devs.domain.task:Task.GateFailed", state=b"\xff{"
    )
    with reopen(db_path) as other:
        other.start_task("t4")
        other.record_gate("t4", 1, error="still counted")
        # every other task is served, by this process and a new one
        for app in (service, other):
            assert app.gate_status("t4").consecutive_failures == 1
            assert app.failure_report("t3").failure_count == 0
            assert {e.task_id for e in app.tasks()} >= {"t1", "t2", "t3", "t4"}
            assert app.notifications()
            app.pending_sessions()
            app.handoff_queue()
            # the poisoned tasks' own queries and loads name the event
            for task_id, position in (("t1", bad_topic), ("t2", bad_bytes)):
                with pytest.raises(UnreadableEvent) as raised:
                    app.gate_status(task_id)
                assert f"log position {position}" in str(raised.value)
                assert raised.value.position == position
                with pytest.raises(StoreError, match="cannot be decoded"):
                    app.task(task_id)
                with pytest.raises(StoreError, match="cannot be decoded"):
                    app.record_gate(task_id, 1)
        report = other.verify()
    assert not report.ok
    # Each event written behind the service's back also breaks its task's chain.
    assert len(report.problems) == 4, report.problems
    assert report.problems[2].startswith("task 't1': version ")
    assert "does not match the hash recorded at version" in report.problems[2]
    assert report.problems[3].startswith("task 't2': version 3 is unreadable")
    assert (
        f"event at log position {bad_topic} ('task:t1', version" in (report.problems[0])
    )
    assert "NoSuchEvent" in report.problems[0]
    assert (
        f"event at log position {bad_bytes} ('task:t2', version" in (report.problems[1])
    )
    # a rebuild skips them too, and keeps them reported
    service.rebuild_projections()
    assert service.gate_status("t4").consecutive_failures == 1
    with pytest.raises(UnreadableEvent):
        service.lessons("t1")
    assert len(service.verify().problems) == 4


def test_a_failed_rebuild_leaves_the_views_as_they_were(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.catch_up()
    live = table_rows(db_path)

    def fail_halfway(done: int, total: int) -> None:
        raise RuntimeError("the rebuild dies here")

    with pytest.raises(RuntimeError, match="dies here"):
        service.rebuild_projections(progress=fail_halfway)
    assert table_rows(db_path) == live
    assert service.verify().ok
    assert [s.task_id for s in service.pending_sessions()] == []


def test_a_rebuild_does_not_block_writers(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    with reopen(db_path) as writer:
        writer.start_task("w")
        written: list[int] = []

        def write_meanwhile(done: int, total: int) -> None:
            # The rebuild holds no lock on the database while it folds.
            decision = writer.record_gate("w", 1, error="during the rebuild")
            written.append(decision.consecutive_failures)
            writer.catch_up()

        service.rebuild_projections(progress=write_meanwhile)
    assert written == [1]
    assert service.gate_status("w").consecutive_failures == 1
    assert service.verify().ok


def test_views_of_a_rebuild_are_built_beside_then_swapped(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.catch_up()
    seen: list[int] = []

    def count_lessons(done: int, total: int) -> None:
        # Mid-rebuild, the stored views still answer in full.
        with sqlite3.connect(db_path) as connection:
            (rows,) = connection.execute(
                "SELECT COUNT(*) FROM lessons_learned"
            ).fetchone()
        seen.append(rows)

    service.rebuild_projections("lessons_learned", progress=count_lessons)
    assert seen
    assert set(seen) == {1}


def test_read_models_report_a_poison_event_once_by_position(
    service: RecoveryService, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service.start_task("t1")
    position = poison(db_path, "task:t1", topic="nowhere:Nothing", state=b"{}")
    with caplog.at_level("ERROR", logger="devs.read_models"):
        service.catch_up()
        service.catch_up()
    assert [r.getMessage() for r in caplog.records] == [
        f"read models skip it: event at log position {position} ('task:t1', "
        "version 2) cannot be read: stored event 2 of 'task:t1' (topic "
        "'nowhere:Nothing') cannot be decoded: TopicError: Failed to resolve "
        "topic 'nowhere:Nothing': No module named 'nowhere'"
    ]
    models = service.read_models
    assert isinstance(models, SQLiteReadModels)
    assert [e.position for e in models.unreadable.all()] == [position]


# ----------------------------------------------- races with other processes


def test_a_catch_up_whose_view_moved_back_under_it_folds_everything(
    db_path: Path,
) -> None:
    """Another process swaps a rebuild in (or remakes a view) between this
    catch-up reading the positions and folding: nothing may be skipped."""
    with reopen(db_path) as a, reopen(db_path) as b:
        drive(a)
        a.catch_up()
        b.catch_up()
        b.start_task("w1")
        b.catch_up()
        b.start_task("w2")
        models = b.read_models
        assert isinstance(models, SQLiteReadModels)
        read = models.positions
        moved: list[bool] = []

        def positions_then_rebuild() -> dict[str, int]:
            found = read()
            if not moved:
                moved.append(True)
                sql(db_path, "DROP TABLE tasks")
                sqlite_models(a).repair()  # a remakes the view, empty, at position 0
            return found

        models.positions = positions_then_rebuild
        assert {e.task_id for e in b.tasks()} == {"t1", "t3", "w1", "w2"}
        assert a.verify().ok


def test_a_rebuild_elsewhere_refreshes_the_blacklist_cache(db_path: Path) -> None:
    with reopen(db_path) as a, reopen(db_path) as b:
        drive(a)
        a.catch_up()
        sql(db_path, "DELETE FROM lessons_learned")  # a damaged view ...
        assert not b.is_strategy_blacklisted("t1", "regex")  # ... read and kept
        a.rebuild_projections()  # repaired at the same position
        assert b.is_strategy_blacklisted("t1", "regex")


def test_a_table_remade_by_another_process_is_not_read_empty(db_path: Path) -> None:
    with reopen(db_path) as a, reopen(db_path) as b:
        drive(a)
        a.start_task("t5")
        a.report_entropy("t5", 0.99)
        assert [s.task_id for s in b.pending_sessions()] == ["t5"]
        sql(db_path, "DROP TABLE hitl_sessions")
        reopen(db_path).close()  # its open remakes the table, empty, at position 0
        assert [s.task_id for s in b.pending_sessions()] == ["t5"]


def test_two_processes_meeting_a_dropped_table_both_answer(db_path: Path) -> None:
    with reopen(db_path) as a, reopen(db_path) as b:
        drive(a)
        a.start_task("t5")
        a.report_entropy("t5", 0.99)
        b.pending_sessions()
        sql(db_path, "DROP TABLE hitl_sessions")
        models = b.read_models
        assert isinstance(models, SQLiteReadModels)
        own_repair = models.repair

        def repaired_first_by_a() -> bool:
            sqlite_models(a).repair()
            return own_repair()  # nothing left to remake

        models.repair = repaired_first_by_a
        assert [s.task_id for s in b.pending_sessions()] == ["t5"]


def test_a_partial_rebuild_keeps_events_other_views_still_lack(
    service: RecoveryService, db_path: Path
) -> None:
    """An event no catch-up could decode decodes after an upgrade; rebuilding
    one view must not unblock its task while the other views still lack it."""
    service.start_task("t1")
    service.record_gate("t1", 1, error="e")
    with sqlite3.connect(db_path) as connection:
        (stored_topic, state) = connection.execute(
            "SELECT topic, state FROM stored_events WHERE originator_id = 'task:t1' "
            "ORDER BY originator_version DESC LIMIT 1"
        ).fetchone()
    later = orjson.loads(state)
    later["originator_version"] += 1
    later["consecutive_failures"] = 2
    # Written by the later release, it links to the event before it.
    later["chain_prev"] = body_hash(stored_topic, orjson.loads(state))
    topic = "tests.upgrade:GateFailed"
    position = poison(db_path, "task:t1", topic=topic, state=orjson.dumps(later))
    with pytest.raises(UnreadableEvent):
        service.gate_status("t1")
    register_topic(topic, Task.GateFailed)  # the upgrade: it decodes now
    service.rebuild_projections("lessons_learned")
    with pytest.raises(UnreadableEvent):
        service.gate_status("t1")  # its failure count would be one short
    models = service.read_models
    assert isinstance(models, SQLiteReadModels)
    assert [e.position for e in models.unreadable.all()] == [position]
    service.rebuild_projections()
    assert service.gate_status("t1").consecutive_failures == 2
    assert service.verify().ok


def test_verify_reads_the_end_of_the_log_with_the_views(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    drive(service)
    service.catch_up()
    # an end of the log read apart from the views (and so, older) is not used
    monkeypatch.setattr(service.recorder, "max_notification_id", lambda: 1)
    assert service.verify().ok


def test_verify_finds_an_event_recorded_undecodable_that_decodes(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.catch_up()
    sql(
        db_path,
        "INSERT INTO unreadable_events VALUES (3, 'task:t1', 3, 'x', 'an older devs')",
    )
    report = service.verify()
    assert report.problems == [
        "event at log position 3 is recorded as undecodable but decodes now: its "
        "task's queries are refused and the read models lack it; rebuild them"
    ]
    service.rebuild_projections()
    assert service.verify().ok


def test_a_refused_event_state_is_described_without_its_values(
    service: RecoveryService, db_path: Path
) -> None:
    service.start_task("t1")
    secret = "AKIAIOSFODNN7EXAMPLE"
    state = b'{"originator_id": "task:t1", "originator_version": "xxxxxxxx%s%s"}' % (
        secret.encode(),
        b"y" * 40,
    )
    poison(db_path, "task:t1", topic="devs:Task.Started", state=state)
    with pytest.raises(UnreadableEvent) as raised:
        service.history("t1")
    assert "originator_version: Input should be a valid integer" in str(raised.value)
    assert "AKIA" not in str(raised.value)
    assert "xxxx" not in str(raised.value)
