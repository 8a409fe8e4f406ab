"""``lessons_learned``: what root-cause analyses learned, per task (seed 004).

``UNIQUE(task_id, failed_strategy)``: logging a strategy again keeps one row
with the newer summary (and moves it to the end). The blacklist reads only the
strategies; they are kept in memory per task and re-read when the view's
position has moved.
"""

from __future__ import annotations

import hashlib
import sqlite3
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.ports import Lesson
from devs.domain.task import Task, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds

CACHED_TASKS = 1_000


class LessonsView(TrackingRecorder, ABC):
    @abstractmethod
    def upsert_lesson(self, row: dict[str, Any], tracking: Tracking) -> None:
        """Insert the lesson, or replace the summary of the same strategy."""

    @abstractmethod
    def lessons(self, task_id: str) -> list[Lesson]:
        """The task's lessons, the most recently logged last."""

    @abstractmethod
    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """The task's failed strategies, in the same order."""


def lesson_id(task_id: str, strategy: str) -> str:
    """A stable id, so a rebuilt table has the same rows."""
    key = f"{task_id}\x1f{strategy}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(key).hexdigest()[:16]


class LessonsProjection(ReadModelProjection[LessonsView]):
    process_event = folds()

    @process_event.register
    def _(self, e: Task.LessonLogged, tracking: Tracking) -> None:
        task_id = task_id_of(e.originator_id)
        self.view.upsert_lesson(
            {
                "id": lesson_id(task_id, e.strategy),
                "task_id": task_id,
                "failed_strategy": e.strategy,
                "rca_summary": e.rca_summary,
                "logged_at": e.timestamp.isoformat(),
                "position": tracking.notification_id,
            },
            tracking,
        )


class LessonsTables(LessonsView, SQLTables):
    """The ``lessons_learned`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "lessons_learned"
    schema_version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ("lessons_learned",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS lessons_learned ("
        "id TEXT PRIMARY KEY, "
        "task_id TEXT NOT NULL, "
        "failed_strategy TEXT NOT NULL, "
        "rca_summary TEXT NOT NULL, "
        "logged_at TEXT NOT NULL, "
        "position INTEGER NOT NULL, "
        "UNIQUE (task_id, failed_strategy))",
        "CREATE INDEX IF NOT EXISTS idx_lessons_task_id "
        "ON lessons_learned (task_id, position)",
    )

    def upsert_lesson(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "INSERT INTO lessons_learned (id, task_id, failed_strategy, "
                "rca_summary, logged_at, position) VALUES (:id, :task_id, "
                ":failed_strategy, :rca_summary, :logged_at, :position) "
                "ON CONFLICT (task_id, failed_strategy) DO UPDATE SET "
                "rca_summary = excluded.rca_summary, "
                "logged_at = excluded.logged_at, position = excluded.position",
                row,
            )

    def lessons(self, task_id: str) -> list[Lesson]:
        rows = self._select(
            "SELECT task_id, failed_strategy, rca_summary, logged_at "
            "FROM lessons_learned WHERE task_id = ? ORDER BY position",
            (task_id,),
        )
        return [Lesson.model_validate(dict(row)) for row in rows]


class SQLiteLessonsView(LessonsTables, SQLiteView):
    """The ``lessons_learned`` read model in the application's SQLite file; the
    strategies of recent tasks are kept in memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._strategies: dict[str, tuple[tuple[int, int], tuple[str, ...]]] = {}

    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        # A task asked about again, the view not moved: the position and the
        # generation, read by one statement (a snapshot of its own, with no
        # BEGIN and ROLLBACK around it), are those its rows were read at.
        cached = self._strategies.get(task_id)
        if cached is not None and self._key_now() == cached[0]:
            return cached[1]
        # The position, the generation and the rows are read in one
        # transaction, so a cached entry is never the rows of another moment:
        # another process may be rebuilding the table (passing through older
        # positions) or swapping repaired rows in at the same position (a new
        # generation).
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(self._MARKS, (self.tracking_name, self.generation_name))
            key = self._key(cursor.fetchall())
            held = self.held_strategies(task_id, key)
            if held is not None:
                return held
            cursor.execute(
                "SELECT failed_strategy FROM lessons_learned WHERE task_id = ? "
                "ORDER BY position",
                (task_id,),
            )
            strategies = tuple(row["failed_strategy"] for row in cursor.fetchall())
        if len(self._strategies) >= CACHED_TASKS:
            self._strategies.clear()
        self._strategies[task_id] = (key, strategies)
        return strategies

    def held_strategies(
        self, task_id: str, key: tuple[int, int]
    ) -> tuple[str, ...] | None:
        """The task's strategies held in memory, if they were read at ``key``
        (the view's position and generation, just read by the caller)."""
        cached = self._strategies.get(task_id)
        return cached[1] if cached is not None and cached[0] == key else None

    _MARKS = (
        "SELECT application_name, notification_id FROM tracking "
        "WHERE application_name IN (?, ?)"
    )

    def _key(self, rows: Any) -> tuple[int, int]:
        """The view's position and generation, from its tracking rows."""
        marks = {row[0]: row[1] for row in rows}
        return (marks.get(self.tracking_name, 0), marks.get(self.generation_name, 0))

    def _key_now(self) -> tuple[int, int] | None:
        """The view's position and generation now, or ``None`` when they could
        not be read so (then the transaction's read says why)."""
        with self.datastore.get_connection(commit=False) as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(self._MARKS, (self.tracking_name, self.generation_name))
                return self._key(cursor.fetchall())
            except sqlite3.Error:
                return None
            finally:
                cursor.sqlite_cursor.close()

    def forget(self) -> None:
        self._strategies.clear()
