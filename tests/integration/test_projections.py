"""Read models: typed tables, tracked, rebuilt from position 0 to the same rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import Tracking
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests import persistence as contract

from devs.adapters.config import Settings, open_service
from devs.domain import InvalidInput, Policy, RecoveryService
from devs.domain.chart import TaskState
from devs.projections.registry import SQLITE
from devs.projections.sqlite import SQLiteReadModels
from devs.projections.tasks import SQLiteTasksView
from tests.helpers import READ_MODEL_TABLES as TABLES
from tests.helpers import table_rows


def sqlite_models(service: RecoveryService) -> SQLiteReadModels:
    assert isinstance(service.read_models, SQLiteReadModels)
    return service.read_models


def drive(service: RecoveryService) -> None:
    service.start_run("r1", {"t1": [], "t2": ["t1"], "t3": []})
    service.start_task("t1", run_id="r1", agent="a", last_commit="c1")
    service.start_task("t3", run_id="r1")
    service.log_lesson("t1", "regex", "cannot nest")
    service.record_usage("t1", model="gpt-5", input_tokens=9, output_tokens=1)
    service.record_usage("t3", model="m", input_tokens=1, output_tokens=1)
    service.begin_attempt("t1", "regex")
    service.resume("t1", actor="h", reason="ok")
    for _ in range(4):
        service.record_gate("t1", 1, gate="tests", error="e")
        if service.task("t1").state == "ESCALATION":
            service.resume("t1", actor="h", reason="again")
    service.claim_handoff("t1", actor="h")
    service.report_entropy("t3", 0.95)
    service.skip("t3", actor="h", reason="dup")


def test_every_read_model_owns_its_tables() -> None:
    owned = [table for _, view in SQLITE for table in view.tables]
    assert sorted(owned) == sorted(TABLES)
    assert len({view.name for _, view in SQLITE}) == len(SQLITE)


def test_rebuild_from_zero_gives_the_same_rows(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    service.catch_up()
    live = table_rows(db_path)
    for table in ("tasks", "lessons_learned", "handoff_queue", "hitl_sessions"):
        assert live[table], table
    service.rebuild_projections()
    assert table_rows(db_path) == live


def test_rebuild_one_projection(service: RecoveryService, db_path: Path) -> None:
    drive(service)
    service.catch_up()
    before = table_rows(db_path)
    service.rebuild_projections(["lessons_learned"])
    assert table_rows(db_path) == before
    with pytest.raises(InvalidInput, match="unknown projection 'nope'"):
        service.rebuild_projections(["nope"])


def test_rebuild_reports_progress(service: RecoveryService) -> None:
    drive(service)
    seen: list[tuple[int, int]] = []
    last = service.rebuild_projections(
        progress=lambda done, total: seen.append((done, total))
    )
    assert seen[-1] == (last, last)


def test_views_track_their_own_positions(
    service: RecoveryService, db_path: Path
) -> None:
    drive(service)
    position = service.catch_up()
    assert set(service.read_models.positions().values()) == {position}
    with sqlite3.connect(db_path) as connection:
        names = {
            row[0]
            for row in connection.execute("SELECT application_name FROM tracking")
        }
    assert {
        f"RecoveryService/{view.name}.v{view.schema_version}" for _, view in SQLITE
    } <= names


def test_a_query_sees_every_command_that_returned(service: RecoveryService) -> None:
    service.start_task("t1")
    assert [t.state for t in service.tasks()] == ["RUNNING"]
    service.record_gate("t1", 1)
    assert service.gate_status("t1").consecutive_failures == 1
    service.record_gate("t1", 0)
    assert service.tasks()[0].state == "COMPLETED"


def test_another_process_writes_are_seen(
    service: RecoveryService, db_path: Path
) -> None:
    service.start_task("t1")
    assert service.failure_report("t1").failure_count == 0
    with open_service(Settings(db=str(db_path))) as other:
        other.record_gate("t1", 1, error="from elsewhere")
        other.catch_up()
    report = service.failure_report("t1")
    assert report.failure_count == 1
    assert report.last_error == "from elsewhere"


def _tasks_view(db_path: Path) -> tuple[SQLiteDatastore, SQLiteTasksView]:
    datastore = SQLiteDatastore(str(db_path))
    view = SQLiteTasksView(datastore, tracking_name="app/tasks.v1")
    view.setup()
    return datastore, view


def _row(task_id: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "state": "RUNNING",
        "status": "running",
        "failure_count": 0,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "position": 1,
    }


def test_rows_and_position_commit_together(db_path: Path) -> None:
    datastore, view = _tasks_view(db_path)
    view.insert_task(_row("t"), Tracking("app/tasks.v1", 1))
    assert view.position() == 1

    def crash_mid_change() -> None:
        with view.changes(Tracking("app/tasks.v1", 2)) as cursor:
            cursor.execute("DELETE FROM tasks WHERE id = 't'")
            raise RuntimeError("crash mid-change")

    with pytest.raises(RuntimeError):
        crash_mid_change()
    assert view.task_entry("t") is not None  # the delete rolled back
    assert view.position() == 1  # and so did the position
    with view.batch():
        view.advance(
            "t",
            lambda state: TaskState.GATE_FAILED,
            {"failure_count": 1},
            Tracking("app/tasks.v1", 2),
        )
        view.insert_tracking(Tracking("app/tasks.v1", 3))
        assert view.position() == 1  # a batch writes its position once, at its end
    entry = view.task_entry("t")
    assert entry is not None
    assert (entry.state, entry.consecutive_failures) == ("GATE_FAILED", 1)
    assert view.position() == 3
    view.clear()
    assert view.task_entry("t") is None
    assert view.position() == 0
    datastore.close()


def test_a_schema_never_tracked_is_rebuilt_from_the_log(
    service: RecoveryService, db_path: Path
) -> None:
    """An older database: document views and no typed tables. First open
    drops the old tables and builds the typed ones from the log."""
    drive(service)
    service.close()
    with sqlite3.connect(db_path) as connection:
        connection.execute("CREATE TABLE view_task_index (key TEXT PRIMARY KEY)")
        connection.execute("DROP TABLE tasks")
        connection.execute("CREATE TABLE tasks (key TEXT PRIMARY KEY, doc BLOB)")
        connection.execute(
            "DELETE FROM tracking WHERE application_name = ?",
            (SQLiteTasksView.tracking_name_for("RecoveryService"),),
        )
    with open_service(Settings(db=str(db_path))) as reopened:
        states = {t.task_id: t.state for t in reopened.tasks()}
    assert states == {"t1": "HAND_OFF", "t3": "SKIPPED"}
    with sqlite3.connect(db_path) as connection:
        tables = {
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            )
        }
    assert "view_task_index" not in tables


class TestSQLiteViewTracking(contract.TrackingRecorderTestCase):
    """eventsourcing's own tracking-recorder contract, run against a view."""

    def setUp(self) -> None:
        self.datastore = SQLiteDatastore(":memory:")

    def tearDown(self) -> None:
        self.datastore.close()

    def create_recorder(self) -> SQLiteTasksView:
        view = SQLiteTasksView(self.datastore, tracking_name="app/tasks.v1")
        view.setup()
        return view


def test_two_catch_ups_of_one_view_fold_each_event_once(db_path: Path) -> None:
    """One process reads its position, another catches the view up part of the
    way meanwhile; the first must not fold those events a second time."""
    policy = Policy(escalation_threshold=1, handoff_threshold=10)
    env = {"SQLITE_DBNAME": str(db_path)}
    with (
        open_service(env=env, policy=policy) as a,
        open_service(env=env, policy=policy) as b,
    ):
        a.catch_up()
        b.catch_up()
        a.start_task("t1")
        a.record_gate("t1", 1)  # escalates once
        part = a.recorder.max_notification_id() or 0
        a.resume("t1", actor="h", reason="r")
        models_a, models_b = sqlite_models(a), sqlite_models(b)
        read_positions = models_a.positions

        def positions_then_b_catches_up() -> dict[str, int]:
            found = read_positions()
            models_b.catch_up_to(part)
            return found

        models_a.positions = positions_then_b_catches_up  # type: ignore[method-assign]
        a.catch_up()
        models_a.positions = read_positions  # type: ignore[method-assign]
        assert a.failure_report("t1").escalations == 1
        assert [s.task_id for s in a.pending_sessions()] == []
        live = table_rows(db_path)
        a.rebuild_projections()
        assert table_rows(db_path) == live


def test_lessons_read_during_another_process_rebuild_are_not_kept(
    db_path: Path,
) -> None:
    env = {"SQLITE_DBNAME": str(db_path)}
    strategy = "patch the tokenizer with a regex"
    with open_service(env=env) as x, open_service(env=env) as y:
        x.start_task("t")
        x.log_lesson("t", strategy, "broke unicode")
        x.catch_up()
        lessons = sqlite_models(y).views["lessons_learned"]
        lessons.clear()  # y's rebuild has cleared the table ...
        x.is_strategy_blacklisted("t", strategy)  # ... when x reads it
        y.rebuild_projections(["lessons_learned"])  # back to the same position
        assert x.is_strategy_blacklisted("t", strategy)


def test_in_memory_the_read_models_fold_on_read_and_on_a_file_on_write(
    db_path: Path,
) -> None:
    """A database in this process's memory cannot be reached by another
    process (and eventsourcing's pool makes its readers and writers take
    turns): the recorder leaves the fold to the next query. On a file, the
    writer folds in its own transaction."""
    with open_service(Settings(db=":memory:")) as memory:
        memory.start_task("t1")
        models = memory.read_models
        assert isinstance(models, SQLiteReadModels)
        assert not models.folded_on_write
        assert models.positions()["tasks"] == 0  # not folded by the command
        assert [t.task_id for t in memory.tasks()] == ["t1"]  # the query folds
        assert models.positions()["tasks"] > 0
    with open_service(Settings(db=str(db_path))) as on_file:
        on_file.start_task("t1")
        models = on_file.read_models
        assert isinstance(models, SQLiteReadModels)
        assert models.folded_on_write
        assert models.positions()["tasks"] > 0  # folded with the command


INDEXED_AT_MOST = {
    # The task list filters by state or run, in id order; every event
    # rewrites position, updated_at, version, chain_head and more.
    "tasks": {"id", "state", "run_id"},
    # A run's nodes are read in DAG order (position, fixed at the start);
    # progress and the sequence numbers move.
    "run_nodes": {"run_id", "node_id", "position"},
}


@pytest.mark.parametrize("table", sorted(INDEXED_AT_MOST))
def test_no_index_holds_what_events_rewrite(table: str, db_path: Path) -> None:
    """An index on a column that folds rewrite is one more page written in
    every commit that folds (the tasks view had three, on ``position``, and
    runs one on ``progress``, which no query read)."""
    datastore = SQLiteDatastore(str(db_path))
    for _, view_class in SQLITE:
        if table in view_class.tables:
            view_class(
                datastore, tracking_name=view_class.tracking_name_for("T")
            ).setup()
    with sqlite3.connect(db_path) as connection:
        indexes = [row[1] for row in connection.execute(f"PRAGMA index_list({table})")]
        assert indexes  # the table was made
        indexed = {
            row[2]
            for index in indexes
            for row in connection.execute(f"PRAGMA index_info({index})")
        }
    assert indexed <= INDEXED_AT_MOST[table]


def test_a_run_s_state_is_read_whole_after_its_dag_is_kept(
    service: RecoveryService,
) -> None:
    """The first query of a run reads its DAG and keeps it (a run's DAG
    never changes); later ones read only its nodes' progress, and still see
    it move. A run asked about before it started is not kept as empty."""
    runs = service.read_models.views["runs"]  # type: ignore[attr-defined]
    assert runs.run_state("r1") is None
    service.start_run("r1", {"a": [], "b": ["a"], "c": ["a", "b"]})
    first = service.run_state("r1")
    assert first.dag == {"a": (), "b": ("a",), "c": ("a", "b")}
    assert first.order == ("a", "b", "c")
    assert first.ready == ("a",)
    service.start_task("a", run_id="r1")
    service.record_gate("a", 0, gate="tests")
    later = service.run_state("r1")
    assert later.dag == first.dag
    assert later.started == ("a",)
    assert later.completed == ("a",)
    assert later.ready == ("b",)
    runs.forget()
    assert service.run_state("r1") == later


def test_a_run_s_state_says_when_it_started(service: RecoveryService) -> None:
    """The answer of ``start_run`` and every later query say when the run
    began; its last change moves on, its start does not."""
    started = service.start_run("r1", {"a": []})
    assert started.started_at is not None
    service.start_task("a", run_id="r1")
    later = service.run_state("r1")
    assert later.started_at == started.started_at
    assert later.updated_at >= started.started_at
