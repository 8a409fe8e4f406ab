"""The read models' PostgreSQL views: the same tables and SQL as on SQLite.

A view's statements are written once (:class:`~devs.projections.base.SQLTables`)
with ``?`` and ``:name`` placeholders; here they become psycopg's ``%s`` and
``%(name)s``, and ``INTEGER`` columns ``BIGINT``. A view writes only inside
the transaction in which :class:`~devs.projections.postgres.PostgresViews`
folds one event into every read model and records its position, so its
``changes`` hands out that transaction's cursor.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from eventsourcing.persistence import IntegrityError, ProgrammingError, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.rows import DictRow, tuple_row
from psycopg.sql import SQL, Composed

from devs.domain import eventsourcing_internals
from devs.projections.base import ReadModelProjection, SQLTables
from devs.projections.handoff_queue import HandoffQueueTables
from devs.projections.hitl_failure_gates import FailureGatesTables
from devs.projections.hitl_sessions import HumanSessionsTables
from devs.projections.lessons_learned import LessonsTables
from devs.projections.metrics import MetricsTables, Select
from devs.projections.outbox import OutboxTables
from devs.projections.registry import SQLITE
from devs.projections.runs import RunsTables
from devs.projections.task_failures import TaskFailuresTables
from devs.projections.tasks import TasksTables

_PLACEHOLDER = re.compile(r"\?|:([A-Za-z_][A-Za-z0-9_]*)")
_TYPES = {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION"}
_TYPE = re.compile(r"\b(INTEGER|REAL)\b")
_REFERENCE = re.compile(r"(REFERENCES \w+ \(\w+\))")
_WITHOUT_ROWID = re.compile(r"\s+WITHOUT ROWID\b")


@lru_cache(maxsize=1024)
def pg_sql(statement: str) -> str:
    """``statement`` with psycopg's placeholders (its own ``%`` escaped)."""
    escaped = statement.replace("%", "%%")
    return _PLACEHOLDER.sub(
        lambda found: "%s" if found.group(1) is None else f"%({found.group(1)})s",
        escaped,
    )


def pg_ddl(statement: str) -> str:
    """A table's DDL with SQLite's 64-bit integers and floats, references
    checked when the transaction commits (a rebuild empties and refills tables
    in one transaction, in any order), and without SQLite's ``WITHOUT ROWID``
    (PostgreSQL's tables have no rowid)."""
    typed = _TYPE.sub(lambda found: _TYPES[found.group(1)], statement)
    plain = _WITHOUT_ROWID.sub("", typed)
    return _REFERENCE.sub(r"\1 DEFERRABLE INITIALLY DEFERRED", plain)


class PgCursor:
    """A psycopg cursor that takes the views' statements as they are written."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Cursor[DictRow]) -> None:
        self.cursor = cursor

    def execute(self, statement: str, params: Any = ()) -> None:
        self.cursor.execute(pg_sql(statement), params or None)

    def executemany(self, statement: str, rows: Sequence[Any]) -> None:
        if rows:
            self.cursor.executemany(pg_sql(statement), rows)

    def fetchone(self) -> DictRow | None:
        return self.cursor.fetchone()

    def fetchall(self) -> list[DictRow]:
        return self.cursor.fetchall()


_FOLDING = threading.local()
"""The cursor of the transaction folding one event, in the thread folding it."""


@contextmanager
def folding(cursor: Cursor[DictRow]) -> Iterator[None]:
    """Let every view's ``changes`` write through ``cursor`` meanwhile."""
    _FOLDING.cursor = PgCursor(cursor)
    try:
        yield
    finally:
        _FOLDING.cursor = None


class PostgresView(PostgresTrackingRecorder, SQLTables):
    """A read model's tables in PostgreSQL, written by the views' runner."""

    def __init__(
        self,
        datastore: PostgresDatastore,
        *,
        tracking_table_name: str = "devs_views_tracking",
        **kwargs: Any,
    ) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.pg_ddl = tuple(
            pg_ddl(statement) for statement in (*self.ddl, *self.pg_migrations)
        )

    @contextmanager
    def changes(self, tracking: Tracking) -> Iterator[PgCursor]:
        cursor: PgCursor | None = getattr(_FOLDING, "cursor", None)
        if cursor is None:
            msg = (
                f"the {self.name} view is written only by the read models' runner, "
                "inside its fold of an event"
            )
            raise ProgrammingError(msg)
        yield cursor

    def _select(self, statement: str, params: Any = ()) -> list[Any]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(pg_sql(statement), params or None)
            return cursor.fetchall()

    def _select_together(
        self, *queries: tuple[str, Any]
    ) -> list[list[tuple[Any, ...]]]:
        with (
            self.datastore.transaction(commit=False) as cursor,
            cursor.connection.cursor(row_factory=tuple_row) as plain,
        ):
            # One snapshot for all (READ COMMITTED takes one a statement).
            plain.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            found = []
            for statement, params in queries:
                plain.execute(pg_sql(statement), params or None)
                found.append(plain.fetchall())
            return found

    def create_statements(self) -> list[Composed]:
        return [SQL(statement).format() for statement in self.pg_ddl]


# ------------------------------------------------- every read model's view


class PostgresHandoffQueueView(HandoffQueueTables, PostgresView):
    """The ``handoff_queue`` read model."""


class PostgresFailureGatesView(FailureGatesTables, PostgresView):
    """The ``hitl_failure_gates`` read model."""


class PostgresHumanSessionsView(HumanSessionsTables, PostgresView):
    """The ``hitl_sessions`` read model."""


class PostgresLessonsView(LessonsTables, PostgresView):
    """The ``lessons_learned`` read model."""

    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """Read each time (PostgreSQL answers from its own buffers)."""
        rows = self._select(
            "SELECT failed_strategy FROM lessons_learned WHERE task_id = ? "
            "ORDER BY position",
            (task_id,),
        )
        return tuple(row["failed_strategy"] for row in rows)


class PostgresMetricsView(MetricsTables, PostgresView):
    """The ``metrics`` read model."""

    text_order = ' COLLATE "C"'

    @contextmanager
    def _snapshot(self) -> Iterator[Select]:
        """One REPEATABLE READ transaction: every statement reads the
        snapshot of its first."""
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

            def select(statement: str, params: Any = ()) -> list[Any]:
                cursor.execute(pg_sql(statement), params or None)
                return cursor.fetchall()

            yield select


class PostgresOutboxView(OutboxTables, PostgresView):
    """The ``outbox`` read model."""


class PostgresRunsView(RunsTables, PostgresView):
    """The ``runs`` read model."""


class PostgresTaskFailuresView(TaskFailuresTables, PostgresView):
    """The ``task_failures`` read model."""


class PostgresTasksView(TasksTables, PostgresView):
    """The ``tasks`` read model."""

    text_order = ' COLLATE "C"'


_VIEWS: dict[str, type[PostgresView]] = {
    view.name: view
    for view in (
        PostgresTasksView,
        PostgresHumanSessionsView,
        PostgresFailureGatesView,
        PostgresLessonsView,
        PostgresTaskFailuresView,
        PostgresHandoffQueueView,
        PostgresRunsView,
        PostgresMetricsView,
        PostgresOutboxView,
    )
}
POSTGRES: tuple[tuple[type[ReadModelProjection[Any]], type[PostgresView]], ...] = tuple(
    (projection, _VIEWS[view.name]) for projection, view in SQLITE
)
"""Every read model with its PostgreSQL view, in the registry's order."""


_TYPE_NAME = re.compile(r"CREATE TYPE (\S+) AS")
DDL_LOCK = 0x64657673_64646C00  # "devsddl": one process creates tables at a time


class SerializedDDL:
    """A PostgreSQL recorder whose tables are created under a transaction-scoped
    advisory lock: processes that open a new database together (workers, a
    fleet of agents) would otherwise race in PostgreSQL's catalog ("tuple
    concurrently updated") although every statement says IF NOT EXISTS."""

    def create_table(self) -> None:
        """eventsourcing's, in one transaction under the DDL lock, its
        composite types made only when missing: eventsourcing runs each
        ``CREATE TYPE`` in a transaction of its own and lets the error pass
        when the type exists, which PostgreSQL logs as an error every time a
        service opens ("type ... already exists")."""
        try:
            self._create_tables()
        except (IntegrityError, ProgrammingError) as error:
            # A process that takes no lock (an older release, eventsourcing's
            # own factory: the projection runner's application) made a type
            # meanwhile: PostgreSQL reports a unique violation of its catalog
            # while that transaction is open, "type ... already exists" once
            # it committed. The type exists now: look again.
            if isinstance(error, ProgrammingError) and "already exists" not in str(
                error
            ):
                raise
            self._create_tables()

    def _create_tables(self) -> None:
        types = [
            statement
            for statement in self.sql_create_statements  # type: ignore[attr-defined]
            if "CREATE TYPE" in statement.as_string()
        ]
        datastore: PostgresDatastore = self.datastore  # type: ignore[attr-defined]
        with datastore.transaction(commit=True) as curs:
            for key in self.ddl_locks:
                curs.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            for statement in types:
                found = _TYPE_NAME.search(statement.as_string())
                assert found is not None, "eventsourcing's CREATE TYPE names its type"
                curs.execute("SELECT to_regtype(%s) AS oid", (found.group(1),))
                row = curs.fetchone()
                if row is None or row["oid"] is None:
                    curs.execute(statement, prepare=False)
            self._create_table(curs)
        datastore.register_type_adapters()

    ddl_locks: tuple[int, ...] = (DDL_LOCK,)
    """The advisory locks the DDL's transaction takes first, in this order."""

    def _made(self, curs: Cursor[DictRow]) -> bool:
        """Whether, seen under the locks, a process has made these tables
        meanwhile and nothing is left to do (never, unless a recorder knows)."""
        return False

    # eventsourcing's private method, declared in adapters/store/internals.py
    def _create_table(self, curs: Cursor[DictRow]) -> None:
        for key in self.ddl_locks:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        if self._made(curs):
            return
        if isinstance(self, PostgresTrackingRecorder):
            _look_again(self, curs)
        super()._create_table(curs)  # type: ignore[misc]


def _look_again(recorder: PostgresTrackingRecorder, curs: Cursor[DictRow]) -> None:
    """Under the lock, see again whether the tracking table and its
    ``__migration__`` row exist: eventsourcing looked before the lock, and a
    process that raced this one may have made both meanwhile (inserting the
    row again would fail)."""
    curs.execute(
        "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s",
        (recorder.datastore.schema or "public", recorder.tracking_table_name),
    )
    if curs.fetchone() is None:
        return
    eventsourcing_internals.note_tracking_table(recorder, curs)
