"""The shape every read model has: a fold over events into a tracked view.

Follows eventsourcing 9.5's ``examples/ftsprojection``: one handler per event
type, and a view whose rows and tracking position are written in one
transaction, so it can be dropped and rebuilt from position 0 to the same rows.
Each view tracks under ``"<application>/<read model>.v<schema version>"``, so
views share a database file without sharing a position, and bumping a schema
version rebuilds that read model from the log.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar, Generic, TypeVar

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import (
    DatabaseError,
    IntegrityError,
    OperationalError,
    PersistenceError,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.projection import Projection
from eventsourcing.sqlite import SQLiteCursor, SQLiteDatastore, SQLiteTrackingRecorder

from devs.domain import eventsourcing_internals

TView = TypeVar("TView", bound=TrackingRecorder)


Handler = Callable[[Any, Any, Tracking], None]


def _track_only(
    self: ReadModelProjection[Any], domain_event: Any, tracking: Tracking
) -> None:
    self.view.insert_tracking(tracking)


class ReadModelProjection(Projection[TView], Generic[TView]):
    """A projection whose unhandled events only advance the view's position.

    Subclasses set ``process_event = folds()`` and register one handler per
    event type on it, so each read model has its own dispatch table.
    """

    @classmethod
    def handler_for(cls, event_class: type[Any]) -> Handler | None:
        """The fold for ``event_class``; ``None`` when it only records the position.

        Lets a catch-up resolve the dispatch once per event type (and skip the
        events a read model ignores) instead of once per event.
        """
        method: Any = cls.__dict__["process_event"]
        handler: Handler = method.dispatcher.dispatch(event_class)
        return None if handler is _track_only else handler


def persistence_error(error: sqlite3.Error) -> PersistenceError:
    """eventsourcing's error for a raw ``sqlite3`` one (as its own recorders do)."""
    if isinstance(error, sqlite3.IntegrityError):
        return IntegrityError(error)
    if isinstance(error, sqlite3.OperationalError):
        return OperationalError(error)
    return DatabaseError(error)


def folds() -> singledispatchmethod[None]:
    """A ``process_event`` whose default records the position and nothing else."""
    return singledispatchmethod(_track_only)


class SQLTables:
    """A read model's tables and the SQL that folds into them and reads them,
    the same on SQLite and PostgreSQL.

    Each read model's module writes its statements once, in a class that
    mixes this in; the SQLite base (:class:`SQLiteView`) and the PostgreSQL
    one (:class:`devs.projections.pg.PostgresView`) run them: ``?`` and
    ``:name`` placeholders, standard ``INSERT … ON CONFLICT`` upserts,
    ``INTEGER`` columns (64-bit on both: PostgreSQL's DDL says ``BIGINT``).
    """

    name: ClassVar[str]
    schema_version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    ddl: ClassVar[tuple[str, ...]]
    pg_migrations: ClassVar[tuple[str, ...]] = ()
    """PostgreSQL only: the columns added since the tables were first made
    (``ALTER TABLE … ADD COLUMN IF NOT EXISTS``), run after ``ddl`` so that a
    database written by an older release takes the new folds; its rows are
    then refolded by ``devs projections rebuild``. A table an older release
    had and this one replaced is moved into its replacement and dropped by
    an idempotent statement (``DO $$ … IF to_regclass(…) … $$``). SQLite
    remakes a view whose ``schema_version`` changed from the log instead."""
    former_tables: ClassVar[tuple[str, ...]] = ()
    """Tables an older ``schema_version`` had and this one has not: SQLite
    drops them when it remakes the view (PostgreSQL: ``pg_migrations``)."""

    def changes(self, tracking: Tracking) -> AbstractContextManager[Any]:
        """A cursor whose writes commit together with ``tracking``."""
        raise NotImplementedError

    def _select(self, statement: str, params: Any = ()) -> list[Any]:
        """The rows ``statement`` reads (each indexable by column name)."""
        raise NotImplementedError

    def _select_together(
        self, *queries: tuple[str, Any]
    ) -> list[list[tuple[Any, ...]]]:
        """The rows of each ``(statement, params)``, read in one transaction
        (so from one snapshot), each row a plain tuple in column order: for a
        query of many rows, where looking columns up by name would cost more
        than reading them."""
        raise NotImplementedError

    def forget(self) -> None:
        """Drop what the view holds in memory (its rows were replaced)."""

    @classmethod
    def tracking_name_for(cls, application_name: str) -> str:
        return f"{application_name}/{cls.name}.v{cls.schema_version}"

    @staticmethod
    def _insert(cursor: Any, table: str, row: dict[str, Any], tail: str = "") -> None:
        """``INSERT INTO table (columns) VALUES (…)`` from ``row`` (then ``tail``)."""
        columns = ", ".join(row)
        values = ", ".join(f":{name}" for name in row)
        cursor.execute(f"INSERT INTO {table} ({columns}) VALUES ({values}) {tail}", row)

    @staticmethod
    def _update(
        cursor: Any, table: str, key: tuple[str, str], changes: dict[str, Any]
    ) -> None:
        """``UPDATE table SET …`` from ``changes`` where ``key`` matches."""
        column, value = key
        assignments = ", ".join(f"{name} = :{name}" for name in changes)
        cursor.execute(
            f"UPDATE {table} SET {assignments} WHERE {column} = :_key",
            {**changes, "_key": value},
        )


class SQLiteView(SQLiteTrackingRecorder, SQLTables):
    """A read model's typed tables in the application's SQLite file.

    ``changes(tracking)`` opens one write transaction (``BEGIN IMMEDIATE``, so a
    read-then-write never fails to upgrade its lock) that also records the
    position; inside ``batch()`` (a catch-up page) the changes of many events
    share one transaction and the position is written once, at its end.
    """

    def __init__(self, datastore: SQLiteDatastore, *, tracking_name: str) -> None:
        super().__init__(datastore)
        self.tracking_name = tracking_name
        self._local = threading.local()

    @property
    def generation_name(self) -> str:
        """A second row in the tracking table, counting how often the view's
        rows were replaced (remade, cleared, swapped in by a rebuild): a
        process that keeps rows in memory by position also checks it, since a
        replacement can leave the position where it was."""
        return f"{self.tracking_name}#generation"

    def bump_generation(self, cursor: SQLiteCursor, schema: str = "main") -> None:
        cursor.execute(
            f"INSERT INTO {schema}.tracking (application_name, notification_id) "
            "VALUES (?, 1) ON CONFLICT (application_name) "
            "DO UPDATE SET notification_id = notification_id + 1",
            (self.generation_name,),
        )

    def create_table(self) -> None:
        """eventsourcing's tracking table, safe when processes race to make it.

        The library records a ``__migration__`` row when it creates the table;
        two processes opening a new database together both try, and the loser
        gets an IntegrityError although the table now exists as it should. It
        tries once more, and then finds the table made.
        """
        try:
            super().create_table()
        except IntegrityError:
            super().create_table()

    def setup(self) -> bool:
        """Create the tables; a schema never tracked here is dropped and remade.

        A missing tracking row means the tables are new, or of an older shape
        (an older database); a missing table means the view was damaged (a
        table dropped by hand). Either way the read model starts again from
        position 0 and the next catch-up refills it from the log. Returns
        whether it started again.
        """
        self.create_table()  # eventsourcing's tracking table
        return self.ensure_tables()

    def ensure_tables(self) -> bool:
        """Remake the view from position 0 unless it is tracked and whole.

        Checked inside the write transaction, so when processes race to repair
        a view only the first remakes it. Returns whether it was remade.
        """
        name = self.tracking_name
        with self._write() as cursor:
            position = eventsourcing_internals.max_tracking_id(self, name, cursor)
            tracked = position is not None
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                f"({', '.join('?' for _ in self.tables)})",
                self.tables,
            )
            whole = len(cursor.fetchall()) == len(self.tables)
            fresh = not (tracked and whole)
            if fresh:
                for table in (*self.tables, *self.former_tables):
                    cursor.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in self.ddl:
                cursor.execute(statement)
            if fresh:
                self._start_again(cursor)
        if fresh:
            self.forget()
        return fresh

    def position(self) -> int:
        return self.max_tracking_id(self.tracking_name) or 0

    # --------------------------------------------------------------- writes

    @contextmanager
    def _write(self) -> Iterator[SQLiteCursor]:
        with self.datastore.get_connection(commit=True) as connection:
            cursor = connection.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                cursor.sqlite_cursor.close()
                raise OperationalError(error) from error
            try:
                yield cursor
            except sqlite3.Error as error:
                connection.rollback()
                raise persistence_error(error) from error
            except BaseException:
                connection.rollback()
                raise
            else:
                try:
                    connection.commit()
                except sqlite3.Error as error:
                    raise persistence_error(error) from error
            finally:
                cursor.sqlite_cursor.close()

    @contextmanager
    def batch(self, end: Tracking | None = None) -> Iterator[int]:
        """Group the ``changes`` made inside into one transaction.

        Yields the view's position as this transaction sees it: another
        process may have folded some of the caller's events meanwhile, and
        those must be skipped. The position written at the end is ``end`` if
        given (every event up to it was folded, or had nothing to fold), else
        the last ``changes``'s, unless the view is already past it.
        """
        name = self.tracking_name
        with self._write() as cursor:
            current = eventsourcing_internals.max_tracking_id(self, name, cursor) or 0
            self._local.cursor = cursor
            self._local.tracking = None
            try:
                yield current
                tracking = end if end is not None else self._local.tracking
                if tracking is not None and tracking.notification_id > current:
                    eventsourcing_internals.insert_tracking(self, cursor, tracking)
            finally:
                self._local.cursor = None
                self._local.tracking = None

    @contextmanager
    def folding_in(self, cursor: SQLiteCursor) -> Iterator[None]:
        """Within the caller's open transaction (``cursor``), the ``changes``
        made inside write with it; the position is the caller's to record
        (:func:`advance`), once for every view."""
        self._local.cursor = cursor
        self._local.tracking = None
        try:
            yield
        finally:
            self._local.cursor = None
            self._local.tracking = None

    @contextmanager
    def changes(self, tracking: Tracking) -> Iterator[SQLiteCursor]:
        """A cursor whose writes commit together with ``tracking``."""
        open_cursor: SQLiteCursor | None = getattr(self._local, "cursor", None)
        if open_cursor is not None:
            yield open_cursor
            self._local.tracking = tracking
            return
        with self._write() as cursor:
            yield cursor
            eventsourcing_internals.insert_tracking(self, cursor, tracking)

    def insert_tracking(self, tracking: Tracking) -> None:
        with self.changes(tracking):
            pass

    def clear(self) -> None:
        """Drop every row and start again from position 0, in one transaction."""
        with self._write() as cursor:
            for table in self.tables:
                cursor.execute(f"DELETE FROM {table}")
            self._start_again(cursor)
        self.forget()

    def _start_again(self, cursor: SQLiteCursor) -> None:
        """Within ``cursor``'s transaction: position 0, a new generation (the
        single-row tracking upsert never moves a position back, so the row
        goes first)."""
        cursor.execute(
            "DELETE FROM tracking WHERE application_name = ?", (self.tracking_name,)
        )
        eventsourcing_internals.insert_tracking(
            self, cursor, Tracking(self.tracking_name, 0)
        )
        self.bump_generation(cursor)

    # ---------------------------------------------------------------- reads

    def _select(self, statement: str, params: Any = ()) -> list[Any]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall())

    def _select_together(
        self, *queries: tuple[str, Any]
    ) -> list[list[tuple[Any, ...]]]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.sqlite_cursor.row_factory = None  # plain tuples
            found = []
            for statement, params in queries:
                cursor.execute(statement, params)
                found.append(cursor.fetchall())
            return found


def advance(cursor: SQLiteCursor, positions: Mapping[str, int]) -> None:
    """Within ``cursor``'s transaction, move each tracking name of
    ``positions`` forward to its position (never back), in one statement:
    what a view's ``insert_tracking`` does for one name."""
    if not positions:
        return
    cursor.execute(
        "INSERT INTO tracking (application_name, notification_id) VALUES "
        + ", ".join("(?, ?)" for _ in positions)
        + " ON CONFLICT (application_name) DO UPDATE "
        "SET notification_id = excluded.notification_id "
        "WHERE tracking.notification_id < excluded.notification_id",
        [value for item in positions.items() for value in item],
    )


# ------------------------------------------------------------- verifying

MAX_EXAMPLES = 3


def differences(
    name: str,
    position: int,
    stored: Mapping[str, Counter[tuple[Any, ...]] | None],
    expected: Mapping[str, Counter[tuple[Any, ...]] | None],
) -> list[str]:
    """One line per table of read model ``name`` that differs from the fold
    (``None``: a table missing), for ``verify`` on either backend."""
    problems: list[str] = []
    for table, rows in stored.items():
        if rows is None:
            problems.append(
                f"read model {name!r}: table {table} is missing (the next query "
                "remakes it and refills it from the log)"
            )
            continue
        want = expected[table] or Counter()
        missing, extra = want - rows, rows - want
        if not missing and not extra:
            continue
        examples = [
            f"{'missing' if row in missing else 'unexpected'} {_brief(row)}"
            for row in [*missing, *extra][:MAX_EXAMPLES]
        ]
        problems.append(
            f"read model {name!r}, table {table}: {missing.total()} row(s) of "
            f"the log missing, {extra.total()} row(s) not from the log, at "
            f"position {position} (e.g. {'; '.join(examples)}); rebuild it"
        )
    return problems


def _brief(row: tuple[Any, ...]) -> str:
    text = ", ".join(repr(value) for value in row[:3])
    return f"({text[:100]}{', …' if len(row) > 3 or len(text) > 100 else ''})"
