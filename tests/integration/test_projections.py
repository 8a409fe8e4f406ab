"""Read models: tracked views, rebuilt from position 0 to the same rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import Tracking
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests import persistence as contract

from devs.domain import InvalidInput, RecoveryService
from devs.domain.decisions import TaskIndexEntry
from devs.projections.views import PROJECTIONS, SQLITE_VIEWS, SQLiteTaskIndexView


def drive(service: RecoveryService) -> None:
    service.start_run("r1", {"t1": [], "t2": ["t1"], "t3": []})
    service.start_task("t1", run_id="r1", agent="a", last_commit="c1")
    service.start_task("t3", run_id="r1")
    service.log_lesson("t1", "regex", "cannot nest")
    service.begin_attempt("t1", "regex")
    service.resume("t1", actor="h", reason="ok")
    for _ in range(4):
        service.record_gate("t1", 1, gate="tests", error="e")
        if service.task("t1").state == "ESCALATION":
            service.resume("t1", actor="h", reason="again")
    service.claim_handoff("t1", actor="h")
    service.report_entropy("t3", 0.95)
    service.skip("t3", actor="h", reason="dup")


def snapshot_views(service: RecoveryService) -> dict[str, list[Any]]:
    service.catch_up()
    return {
        name: projection.view.many()
        for name, projection in service.read_models.projections.items()
    }


def test_every_projection_has_a_sqlite_view() -> None:
    assert {p.name for p in PROJECTIONS} == set(SQLITE_VIEWS)


def test_rebuild_from_zero_gives_the_same_rows(service: RecoveryService) -> None:
    drive(service)
    live = snapshot_views(service)
    assert all(live[name] for name in ("task_index", "lessons", "handoff_queue"))
    service.rebuild_projections()
    assert snapshot_views(service) == live


def test_rebuild_one_projection(service: RecoveryService) -> None:
    drive(service)
    before = snapshot_views(service)
    service.rebuild_projections(["lessons"])
    assert snapshot_views(service) == before
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
    assert {f"RecoveryService/{name}" for name in SQLITE_VIEWS} <= names


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
    with RecoveryService(env={"SQLITE_DBNAME": str(db_path)}) as other:
        other.record_gate("t1", 1, error="from elsewhere")
        other.catch_up()
    report = service.failure_report("t1")
    assert report.failure_count == 1
    assert report.last_error == "from elsewhere"


def test_rows_and_position_commit_together(db_path: Path) -> None:
    datastore = SQLiteDatastore(str(db_path))
    view = SQLiteTaskIndexView(datastore)
    view.create_table()
    entry = TaskIndexEntry(
        task_id="t",
        run_id=None,
        state="RUNNING",
        consecutive_failures=0,
        updated_at="2026-01-01T00:00:00Z",
    )
    with view.changes(Tracking("app", 1)) as tx:
        tx.put("t", entry, task_id="t")
    assert view.max_tracking_id("app") == 1

    def crash_mid_change() -> None:
        with view.changes(Tracking("app", 2)) as tx:
            tx.delete("t")
            raise RuntimeError("crash mid-change")

    with pytest.raises(RuntimeError):
        crash_mid_change()
    assert view.one("t") == entry  # the delete rolled back
    assert view.max_tracking_id("app") == 1  # and so did the position
    with view.batch():
        with view.changes(Tracking("app", 2)) as tx:
            tx.delete("t")
        with view.changes(Tracking("app", 3)):
            pass
    assert view.one("t") is None
    assert view.max_tracking_id("app") == 3
    view.clear("app")
    assert view.max_tracking_id("app") is None
    datastore.close()


class TestSQLiteDocumentViewTracking(contract.TrackingRecorderTestCase):
    """eventsourcing's own tracking-recorder contract, run against our view."""

    def setUp(self) -> None:
        self.datastore = SQLiteDatastore(":memory:")

    def tearDown(self) -> None:
        self.datastore.close()

    def create_recorder(self) -> SQLiteTaskIndexView:
        view = SQLiteTaskIndexView(self.datastore)
        view.create_table()
        return view
