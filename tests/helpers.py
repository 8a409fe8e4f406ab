"""Helpers shared by the test layers."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from eventsourcing.sqlite import SQLiteFactory

from devs.adapters.sandbox import sandbox_unavailable
from devs.domain import Outcome, RecoveryService


def event_count(where: Path | RecoveryService) -> int:
    """How many events a SQLite file, or a service's SQLite store (a file or
    in memory), holds: to prove a failed command wrote nothing."""
    statement = "SELECT COUNT(*) FROM stored_events"
    if isinstance(where, Path):
        with sqlite3.connect(where) as connection:
            (count,) = connection.execute(statement).fetchone()
        return int(count)
    factory = where.factory
    assert isinstance(factory, SQLiteFactory), "a SQLite store (a file or in memory)"
    with factory.datastore.transaction(commit=False) as cursor:
        cursor.execute(statement)
        (count,) = cursor.fetchone()
    return int(count)


READ_MODEL_TABLES = (
    "tasks",
    "hitl_failure_gates",
    "hitl_sessions",
    "lessons_learned",
    "task_failures",
    "handoff_queue",
    "runs",
    "run_nodes",
    "run_links",
    "metrics_tasks",
    "metrics_waits",
    "metrics_strategy_failures",
    "metrics_stuck_signals",
    "metrics_spend",
    "outbox_messages",
    "outbox_task_runs",
)


def table_rows(db_path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every read-model table, in a stable order."""
    with sqlite3.connect(db_path) as connection:
        return {
            table: sorted(
                connection.execute(f"SELECT * FROM {table}").fetchall(), key=repr
            )
            for table in READ_MODEL_TABLES
        }


def decision_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        orjson.loads(record.getMessage())
        for record in caplog.records
        if record.name == "devs.decisions"
    ]


def levenshtein(a: str, b: str) -> int:
    """Independent reference: the textbook dynamic programme."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            )
        previous = current
    return previous[-1]


def require_bwrap() -> None:
    """Skip where bwrap cannot sandbox here; in CI (which installs it), fail."""
    why = sandbox_unavailable()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the sandboxed gate tests, but {why}")
    pytest.skip(why)


def wait_until(condition: Callable[[], object], seconds: float = 10.0) -> bool:
    """Whether ``condition`` holds within ``seconds`` (a bound, not a speed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def load_module(path: Path) -> ModuleType:
    """A script or benchmark (not a package module), loaded from its file."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OUTBOX_STORY = (
    "session.opened",
    "session.answered",
    "session.opened",
    "session.answered",
    "handoff.opened",
    "handoff.claimed",
    "handoff.resolved",
    "task.skipped",
    "task.completed",
)
"""The message types :func:`outbox_story` makes, in order."""


def outbox_story(service: RecoveryService) -> None:
    """A task through every kind of message: two escalations answered, a
    hand-off claimed and resolved (complete), a task skipped while running
    (task.skipped), and another that passes its gate (task.completed)."""
    service.start_task("t1", agent="coder")
    for i in range(3):
        service.record_gate("t1", 1, strategy=f"s{i}", error=f"E   boom {i}")
    service.resume("t1", actor="ann", reason="go on")
    for i in range(3, 5):
        decision = service.record_gate("t1", 1, strategy=f"s{i}", error=f"E {i}")
        if decision.outcome is Outcome.ESCALATE:
            service.resume("t1", actor="ann", reason="once more")
    assert decision.outcome is Outcome.HAND_OFF
    service.claim_handoff("t1", actor="bob")
    service.resolve_handoff("t1", actor="bob", resolution="complete", reason="done")
    service.start_task("t3")
    service.skip("t3", actor="ann", reason="not needed")
    service.start_task("t2")
    service.record_gate("t2", 0)
