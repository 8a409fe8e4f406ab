"""``hitl_sessions``: every human session, pending, answered or expired.

A session opens when a task stops for a human and is answered by the resume,
rewind or skip that sends it on, with who answered, how, why and when. A
session with a deadline (the policy's ``human_deadline``) carries it, and
whether its reminder went out; unanswered by then, it expires (the task is
handed off) and is no longer pending.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.names import HumanAction
from devs.domain.ports import PendingSession
from devs.domain.task import Task, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds

PENDING = "pending"
ANSWERED = "answered"
EXPIRED = "expired"


class HumanSessionsView(TrackingRecorder, ABC):
    @abstractmethod
    def open_session(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Record a session that waits for a human."""

    @abstractmethod
    def answer(
        self, session_id: str, answer: dict[str, Any], tracking: Tracking
    ) -> None:
        """Record the human's answer to a session."""

    @abstractmethod
    def remind(self, session_id: str, tracking: Tracking) -> None:
        """Record that the session's reminder went out."""

    @abstractmethod
    def claim(self, task_id: str, actor: str | None, tracking: Tracking) -> None:
        """Record who claimed the task's pending session (``None``: released)."""

    @abstractmethod
    def pending_sessions(self) -> list[PendingSession]:
        """Sessions that wait for a human, oldest first."""


class HumanSessionsProjection(ReadModelProjection[HumanSessionsView]):
    process_event = folds()

    @process_event.register(Task.Escalated)
    @process_event.register(Task.Paused)
    def _(self, e: Task.Escalated | Task.Paused, tracking: Tracking) -> None:
        session = e.session
        failure_count = e.report.failure_count if isinstance(e, Task.Escalated) else 0
        self.view.open_session(
            {
                "id": session.session_id,
                "task_id": task_id_of(e.originator_id),
                "reason": session.reason,
                "status": PENDING,
                "entropy_score": session.entropy_score,
                "failure_count": failure_count,
                "opened_at": session.opened_at.isoformat(),
                "position": tracking.notification_id,
                "deadline_at": session.deadline_at.isoformat()
                if session.deadline_at is not None
                else None,
                "reminded": 0,
            },
            tracking,
        )

    @process_event.register
    def _(self, e: Task.DeadlineExpired, tracking: Tracking) -> None:
        expiry = {
            "status": EXPIRED,
            "answered_at": e.timestamp.isoformat(),
            "answered_by": e.actor,
            "answer": None,
            "answer_reason": e.reason,
        }
        self.view.answer(e.session_id, expiry, tracking)

    @process_event.register(Task.HandoffClaimed)
    @process_event.register(Task.ClaimTakenOver)
    def _(
        self, e: Task.HandoffClaimed | Task.ClaimTakenOver, tracking: Tracking
    ) -> None:
        self.view.claim(task_id_of(e.originator_id), e.actor, tracking)

    @process_event.register
    def _(self, e: Task.ClaimReleased, tracking: Tracking) -> None:
        self.view.claim(task_id_of(e.originator_id), None, tracking)

    @process_event.register
    def _(self, e: Task.DeadlineReminded, tracking: Tracking) -> None:
        self.view.remind(e.session_id, tracking)

    @process_event.register
    def _(self, e: Task.Resumed, tracking: Tracking) -> None:
        self._answer(e, HumanAction.RESUME, tracking)

    @process_event.register
    def _(self, e: Task.Rewound, tracking: Tracking) -> None:
        self._answer(e, HumanAction.REWIND, tracking)

    @process_event.register
    def _(self, e: Task.Skipped, tracking: Tracking) -> None:
        self._answer(e, HumanAction.SKIP, tracking)

    def _answer(
        self,
        e: Task.Resumed | Task.Rewound | Task.Skipped,
        action: HumanAction,
        tracking: Tracking,
    ) -> None:
        if e.session_id is None:
            # Nothing to answer. The position is the fold's to record (a
            # catch-up's batch, the PostgreSQL runner's transaction): writing
            # it here would, on PostgreSQL, commit it apart from the rows.
            return
        answer = {
            "status": ANSWERED,
            "answered_at": e.timestamp.isoformat(),
            "answered_by": e.actor,
            "answer": action,
            "answer_reason": e.reason,
        }
        self.view.answer(e.session_id, answer, tracking)


class HumanSessionsTables(HumanSessionsView, SQLTables):
    """The ``hitl_sessions`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "hitl_sessions"
    schema_version: ClassVar[int] = 3  # v2: deadlines, reminders; v3: claims
    tables: ClassVar[tuple[str, ...]] = ("hitl_sessions",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS hitl_sessions ("
        "id TEXT PRIMARY KEY, "
        "task_id TEXT NOT NULL, "
        "reason TEXT NOT NULL, "
        "status TEXT NOT NULL, "
        "entropy_score REAL, "
        "failure_count INTEGER NOT NULL, "
        "opened_at TEXT NOT NULL, "
        "position INTEGER NOT NULL, "
        "answered_at TEXT, "
        "answered_by TEXT, "
        "answer TEXT, "
        "answer_reason TEXT, "
        "deadline_at TEXT, "
        "reminded INTEGER NOT NULL DEFAULT 0, "
        "claimed_by TEXT)",
        "CREATE INDEX IF NOT EXISTS hitl_sessions_status "
        "ON hitl_sessions (status, position)",
        "CREATE INDEX IF NOT EXISTS hitl_sessions_task_id ON hitl_sessions (task_id)",
    )
    pg_migrations: ClassVar[tuple[str, ...]] = (
        "ALTER TABLE hitl_sessions ADD COLUMN IF NOT EXISTS deadline_at TEXT",
        "ALTER TABLE hitl_sessions ADD COLUMN IF NOT EXISTS "
        "reminded INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE hitl_sessions ADD COLUMN IF NOT EXISTS claimed_by TEXT",
    )

    def open_session(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            self._insert(cursor, "hitl_sessions", row, "ON CONFLICT (id) DO NOTHING")

    def answer(
        self, session_id: str, answer: dict[str, Any], tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            self._update(cursor, "hitl_sessions", ("id", session_id), answer)

    def remind(self, session_id: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            self._update(cursor, "hitl_sessions", ("id", session_id), {"reminded": 1})

    def claim(self, task_id: str, actor: str | None, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE hitl_sessions SET claimed_by = ? "
                "WHERE task_id = ? AND status = ?",
                (actor, task_id, PENDING),
            )

    def pending_sessions(self) -> list[PendingSession]:
        rows = self._select(
            "SELECT * FROM hitl_sessions WHERE status = ? ORDER BY position",
            (PENDING,),
        )
        return [
            PendingSession(
                session_id=row["id"],
                task_id=row["task_id"],
                reason=row["reason"],
                opened_at=row["opened_at"],
                entropy_score=row["entropy_score"],
                failure_count=row["failure_count"],
                deadline_at=row["deadline_at"],
                reminded=bool(row["reminded"]),
                claimed_by=row["claimed_by"],
            )
            for row in rows
        ]


class SQLiteHumanSessionsView(HumanSessionsTables, SQLiteView):
    """The ``hitl_sessions`` read model in the application's SQLite file."""
