"""``tasks``: one row per task — its state, status, counts and hand-off metadata.

Seed 003 reads it with ``select status, handoff_meta from tasks where id=…``;
the task index (``tasks(state=, run_id=)``) and the binary-gate half of the gate
status are served from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import orjson
from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.chain import event_hash
from devs.domain.chart import STATUS, TaskState
from devs.domain.ports import TaskIndexEntry
from devs.domain.task import Task, TaskEvent, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds

Step = Callable[[str], TaskState]


class TasksView(TrackingRecorder, ABC):
    @abstractmethod
    def insert_task(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Add a task's first row."""

    @abstractmethod
    def advance(
        self, task_id: str, step: Step, changes: dict[str, Any], tracking: Tracking
    ) -> None:
        """Move the task to ``step(state)`` and set ``changes``."""

    @abstractmethod
    def task_row(self, task_id: str) -> dict[str, Any] | None:
        """Every column of the task's row."""

    @abstractmethod
    def task_entries(
        self,
        *,
        state: str | None = None,
        run_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[TaskIndexEntry]:
        """Tasks of one state and/or run, by id, after ``after``, at most
        ``limit`` (``TaskIndex.task_entries``)."""

    @abstractmethod
    def chain_heads(
        self, task_id: str | None = None
    ) -> list[tuple[str, int, str | None]]:
        """(task id, version, chain head) of one task or all."""

    def task_entry(self, task_id: str) -> TaskIndexEntry | None:
        row = self.task_row(task_id)
        return None if row is None else _entry(row)


def _entry(row: dict[str, Any]) -> TaskIndexEntry:
    return TaskIndexEntry(
        task_id=row["id"],
        run_id=row["run_id"],
        state=row["state"],
        consecutive_failures=row["failure_count"],
        updated_at=row["updated_at"],
        stuck_score=row["stuck_score"],
    )


class TasksProjection(ReadModelProjection[TasksView]):
    process_event = folds()

    @process_event.register
    def _(self, e: Task.Started, tracking: Tracking) -> None:
        self.view.insert_task(
            {
                "id": e.task_id,
                "run_id": e.run_id,
                "agent": e.agent,
                "state": TaskState.RUNNING,
                "status": STATUS[TaskState.RUNNING],
                "failure_count": 0,
                "starting_commit": e.last_commit,
                "last_commit": e.last_commit,
                "created_at": e.timestamp.isoformat(),
                "updated_at": e.timestamp.isoformat(),
                "position": tracking.notification_id,
                "version": e.originator_version,
                "chain_head": _head(e),
            },
            tracking,
        )

    @process_event.register
    def _(self, e: TaskEvent, tracking: Tracking) -> None:
        self._advance(e, tracking)

    @process_event.register
    def _(self, e: Task.AttemptBegan, tracking: Tracking) -> None:
        self._advance(e, tracking, current_strategy=e.strategy)

    @process_event.register
    def _(self, e: Task.GatePassed, tracking: Tracking) -> None:
        self._advance(
            e,
            tracking,
            failure_count=0,
            current_strategy=None,
            last_gate=e.gate,
            last_gate_passed=1,
            last_gate_reason=None,
            last_exit_code=0,
            last_error_hash=None,
            stuck_score=None,
        )

    @process_event.register
    def _(self, e: Task.GateFailed, tracking: Tracking) -> None:
        failure = e.failure
        self._advance(
            e,
            tracking,
            failure_count=e.consecutive_failures,
            last_gate=failure.gate,
            last_gate_passed=0,
            last_gate_reason=failure.reason,
            last_exit_code=failure.exit_code,
            last_error_hash=failure.error_hash,
            stuck_score=e.stuck.score if e.stuck is not None else None,
        )

    @process_event.register
    def _(self, e: Task.BlacklistedStrategyAttempted, tracking: Tracking) -> None:
        self._advance(
            e,
            tracking,
            failure_count=e.consecutive_failures,
            stuck_score=e.stuck.score if e.stuck is not None else None,
        )

    @process_event.register(Task.HandedOff)
    @process_event.register(Task.DeadlineExpired)
    def _(self, e: Task.HandedOff | Task.DeadlineExpired, tracking: Tracking) -> None:
        payload = e.payload
        meta: dict[str, Any] = {
            "failure_count": payload.failure_count,
            "last_error_hash": payload.last_error_hash,
            "enqueued_at": payload.enqueued_at.isoformat(),
            "originating_agent": payload.originating_agent,
            "last_commit": payload.last_commit,
        }
        if payload.reason is not None:  # nobody answered in time
            meta["reason"] = payload.reason
        claimed = e.claimed_by if isinstance(e, Task.DeadlineExpired) else None
        self._advance(
            e, tracking, handoff_meta=orjson.dumps(meta).decode(), claimed_by=claimed
        )

    @process_event.register(Task.HandoffClaimed)
    @process_event.register(Task.ClaimTakenOver)
    def _(
        self, e: Task.HandoffClaimed | Task.ClaimTakenOver, tracking: Tracking
    ) -> None:
        self._advance(e, tracking, claimed_by=e.actor)

    @process_event.register(Task.ClaimReleased)
    @process_event.register(Task.Resumed)
    def _(self, e: TaskEvent, tracking: Tracking) -> None:
        self._advance(e, tracking, claimed_by=None)

    @process_event.register(Task.HandoffResolved)
    @process_event.register(Task.Skipped)
    def _(self, e: TaskEvent, tracking: Tracking) -> None:
        self._advance(e, tracking, handoff_meta=None, claimed_by=None)

    @process_event.register
    def _(self, e: Task.Rewound, tracking: Tracking) -> None:
        changes: dict[str, Any] = {
            "handoff_meta": None,
            "claimed_by": None,
            "current_strategy": None,
        }
        if e.to_commit is not None:
            changes["last_commit"] = e.to_commit
        self._advance(e, tracking, **changes)

    def _advance(self, e: TaskEvent, tracking: Tracking, **changes: Any) -> None:
        changes["updated_at"] = e.timestamp.isoformat()
        changes["position"] = tracking.notification_id
        changes["version"] = e.originator_version
        changes["chain_head"] = _head(e)
        self.view.advance(task_id_of(e.originator_id), e.state_after, changes, tracking)


def _head(e: TaskEvent | Task.Started) -> str | None:
    """The event's hash: the head of its task's chain (none if unchained)."""
    return event_hash(e) if e.chain_prev is not None else None


class TasksTables(TasksView, SQLTables):
    """The ``tasks`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "tasks"
    schema_version: ClassVar[int] = 3  # v2: chain head, version, stuck score;
    # v3: no index on what every event changes
    tables: ClassVar[tuple[str, ...]] = ("tasks",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS tasks ("
        "id TEXT PRIMARY KEY, "
        "run_id TEXT, "
        "agent TEXT, "
        "state TEXT NOT NULL, "
        "status TEXT NOT NULL, "
        "failure_count INTEGER NOT NULL DEFAULT 0, "
        "starting_commit TEXT, "
        "last_commit TEXT, "
        "current_strategy TEXT, "
        "claimed_by TEXT, "
        "handoff_meta TEXT, "
        "last_gate TEXT, "
        "last_gate_passed INTEGER, "
        "last_gate_reason TEXT, "
        "last_exit_code INTEGER, "
        "last_error_hash TEXT, "
        "created_at TEXT NOT NULL, "
        "updated_at TEXT NOT NULL, "
        "position INTEGER NOT NULL, "
        "version INTEGER NOT NULL DEFAULT 1, "
        "chain_head TEXT, "
        "stuck_score REAL)",
        # What the task list filters by, in its order (id). No index holds
        # ``position`` or anything else every event changes: each one would
        # be rewritten, a page more in every commit.
        "CREATE INDEX IF NOT EXISTS tasks_state_id ON tasks (state, id)",
        "CREATE INDEX IF NOT EXISTS tasks_run_id_id ON tasks (run_id, id)",
    )
    pg_migrations: ClassVar[tuple[str, ...]] = (
        "ALTER TABLE tasks ADD COLUMN IF NOT EXISTS version INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE tasks ADD COLUMN IF NOT EXISTS chain_head TEXT",
        "ALTER TABLE tasks ADD COLUMN IF NOT EXISTS stuck_score REAL",
        # The task list's order (text_order): the primary key's index keeps
        # the database's collation, which may not be code point order.
        'CREATE INDEX IF NOT EXISTS tasks_id_c ON tasks (id COLLATE "C")',
        # v3 dropped the indexes that held what every event changes.
        "DROP INDEX IF EXISTS tasks_state",
        "DROP INDEX IF EXISTS tasks_run_id",
        "DROP INDEX IF EXISTS tasks_status",
        "DROP INDEX IF EXISTS tasks_position",
    )

    text_order: ClassVar[str] = ""
    """What makes ``id`` compare in code point order: SQLite's own (BINARY
    on UTF-8); PostgreSQL's default collation may not (``COLLATE "C"``)."""

    def insert_task(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            self._insert(cursor, "tasks", row, "ON CONFLICT (id) DO NOTHING")

    def advance(
        self, task_id: str, step: Step, changes: dict[str, Any], tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute("SELECT state FROM tasks WHERE id = ?", (task_id,))
            found = cursor.fetchone()
            if found is None:
                return
            state = step(found["state"])
            assignments = {"state": state, "status": STATUS[state], **changes}
            self._update(cursor, "tasks", ("id", task_id), assignments)

    def task_row(self, task_id: str) -> dict[str, Any] | None:
        rows = self._select("SELECT * FROM tasks WHERE id = ?", (task_id,))
        return dict(rows[0]) if rows else None

    def task_entries(
        self,
        *,
        state: str | None = None,
        run_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[TaskIndexEntry]:
        by_id = f"id{self.text_order}"
        filters = {"state = ?": state, "run_id = ?": run_id, f"{by_id} > ?": after}
        where = [(test, value) for test, value in filters.items() if value is not None]
        params: list[Any] = [value for _, value in where]
        statement = "SELECT * FROM tasks"
        if where:
            statement += " WHERE " + " AND ".join(test for test, _ in where)
        statement += f" ORDER BY {by_id}"
        if limit is not None:
            statement += " LIMIT ?"
            params.append(limit)
        rows = self._select(statement, params)
        return [_entry(dict(row)) for row in rows]

    def chain_heads(
        self, task_id: str | None = None
    ) -> list[tuple[str, int, str | None]]:
        statement = "SELECT id, version, chain_head FROM tasks"
        params: tuple[str, ...] = ()
        if task_id is not None:
            statement += " WHERE id = ?"
            params = (task_id,)
        rows = self._select(statement + " ORDER BY id", params)
        return [(row["id"], row["version"], row["chain_head"]) for row in rows]


class SQLiteTasksView(TasksTables, SQLiteView):
    """The ``tasks`` read model in the application's SQLite file."""
