"""A database written by devs-recovery 0.1.0 keeps working.

``tests/fixtures/v0.1.0.sqlite`` was written by release 0.1.0 (commit 8b1d691:
document read models, old snapshots of a task and of a run) and
``v0.1.0.json`` holds the answers that version gave. Opened today, the read
models are rebuilt from the log into typed tables, every answer is the same, and
the tasks and the run go on from where they were.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.adapters.config import Settings, open_service, sqlite_path
from devs.domain import RecoveryService
from devs.domain.chart import TaskState
from devs.domain.names import NotificationKind
from devs.domain.run import RunStatus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def old(tmp_path: Path) -> Any:
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "v0.1.0.sqlite", db)
    with open_service(Settings(db=str(db))) as app:
        yield app


@pytest.fixture
def answers() -> Any:
    return orjson.loads((FIXTURES / "v0.1.0.json").read_bytes())


def test_queries_give_the_answers_0_1_0_gave(
    old: RecoveryService, answers: Any
) -> None:
    tasks = {t.task_id: [t.state, t.consecutive_failures] for t in old.tasks()}
    assert tasks == answers["tasks"]
    assert [[s.task_id, s.reason] for s in old.pending_sessions()] == answers["pending"]
    queue = [
        [h.payload.task_id, h.payload.failure_count, h.claimed_by]
        for h in old.handoff_queue()
    ]
    assert queue == answers["handoffs"]
    assert [le.failed_strategy for le in old.lessons("build")] == answers["lessons"]
    run = old.run_state("r1").model_dump(mode="json", exclude={"updated_at"})
    # A run 0.1.0 started stops as a whole for any stop, as it did then.
    assert run.pop("stop_scope") == "run"
    # 0.1.0 did not say when a run started; its log does.
    assert run.pop("started_at") is not None
    assert run.pop("over_budget") is False  # 0.1.0 had no budgets
    assert run == answers["run"]
    assert old.task("build").version == answers["build_version"]
    # 0.1.0 named a blocked attempt's kind task:blacklisted_strategy_attempted:
    # read as today's BLACKLISTED_STRATEGY_ATTEMPTED, the same notifications.
    kinds = [NotificationKind(kind) for kind in answers["notifications"]]
    assert "task:blacklisted_strategy_attempted" in answers["notifications"]
    assert [n.kind for n in old.notifications()] == kinds


def test_old_document_tables_give_way_to_typed_ones(old: RecoveryService) -> None:
    old.catch_up()
    with sqlite3.connect(sqlite_path(old)) as connection:
        tables = {
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            )
        }
        status, meta = connection.execute(
            "SELECT status, handoff_meta FROM tasks WHERE id = 'build'"
        ).fetchone()
    assert not {t for t in tables if t.startswith("view_")}
    assert {"tasks", "hitl_sessions", "lessons_learned", "run_nodes"} <= tables
    assert status == "hand_off_required"
    assert orjson.loads(meta)["failure_count"] == 5


def test_work_goes_on_from_old_snapshots(old: RecoveryService) -> None:
    """Both aggregates load from snapshots 0.1.0 took, then decide as before."""
    old.resolve_handoff("build", actor="bob", resolution="return", reason="fixed")
    decision = old.record_gate("build", 0)
    assert decision.next_node == "ship"
    old.start_task("ship", run_id="r1")
    old.record_gate("ship", 0)
    assert old.run_state("r1").status is RunStatus.COMPLETED
    resumed = old.resume("solo", actor="ann", reason="calm again")
    assert resumed.state is TaskState.RUNNING
    assert old.history("build")[-1].state is TaskState.COMPLETED
