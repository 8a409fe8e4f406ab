"""SQLite document views.

Several views share one database file, and eventsourcing's SQLite tracking table
holds one row per application name; so each view records its position under its
own name, ``"<application>/<view>"``. Writes open with ``BEGIN IMMEDIATE`` so a
read-modify-write never fails to upgrade its lock when another process writes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Generic

import orjson
from eventsourcing.persistence import OperationalError, Tracking
from eventsourcing.sqlite import SQLiteCursor, SQLiteDatastore, SQLiteTrackingRecorder

from devs.projections.base import DocumentChanges, DocumentView, TDoc


class SQLiteDocumentChanges(DocumentChanges[TDoc]):
    def __init__(self, view: SQLiteDocumentView[TDoc], cursor: SQLiteCursor) -> None:
        self._view = view
        self._cursor = cursor

    def get(self, key: str) -> TDoc | None:
        self._cursor.execute(self._view.select_one_statement, (key,))
        row = self._cursor.fetchone()
        return None if row is None else self._view.load(row["doc"])

    def put(
        self,
        key: str,
        doc: TDoc,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        seq: int | None = None,
    ) -> None:
        self._cursor.execute(
            self._view.upsert_statement,
            (
                key,
                task_id,
                run_id,
                state,
                seq,
                orjson.dumps(doc.model_dump(mode="json")),
            ),
        )

    def delete(self, key: str) -> None:
        self._cursor.execute(self._view.delete_statement, (key,))


class SQLiteDocumentView(SQLiteTrackingRecorder, DocumentView[TDoc], Generic[TDoc]):
    """A document table in the application's SQLite file, with tracking."""

    name: ClassVar[str]

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        self.table = f"view_{self.name}"
        super().__init__(datastore, **kwargs)
        self._local = threading.local()
        self.select_one_statement = f"SELECT doc FROM {self.table} WHERE key = ?"
        self.upsert_statement = (
            f"INSERT INTO {self.table} (key, task_id, run_id, state, seq, doc) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
            "task_id = excluded.task_id, run_id = excluded.run_id, "
            "state = excluded.state, seq = excluded.seq, doc = excluded.doc"
        )
        self.delete_statement = f"DELETE FROM {self.table} WHERE key = ?"

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            "key TEXT PRIMARY KEY, task_id TEXT, run_id TEXT, state TEXT, "
            "seq INTEGER, doc BLOB NOT NULL)"
        )
        for column in ("task_id", "run_id", "state"):
            statements.append(
                f"CREATE INDEX IF NOT EXISTS {self.table}_{column} "
                f"ON {self.table} ({column})"
            )
        return statements

    # ------------------------------------------------------------ tracking

    def view_tracking_name(self, application_name: str) -> str:
        return f"{application_name}/{self.name}"

    def _insert_tracking(self, c: SQLiteCursor, tracking: Tracking) -> None:
        if tracking.application_name != self.table_migration_identifier:
            tracking = Tracking(
                self.view_tracking_name(tracking.application_name),
                tracking.notification_id,
            )
        super()._insert_tracking(c, tracking)

    def _max_tracking_id(self, application_name: str, c: SQLiteCursor) -> int | None:
        if application_name != self.table_migration_identifier:
            application_name = self.view_tracking_name(application_name)
        return super()._max_tracking_id(application_name, c)

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
            except BaseException:
                connection.rollback()
                raise
            else:
                connection.commit()
            finally:
                cursor.sqlite_cursor.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        if getattr(self._local, "cursor", None) is not None:
            yield
            return
        with self._write() as cursor:
            self._local.cursor = cursor
            try:
                yield
            finally:
                self._local.cursor = None

    @contextmanager
    def changes(self, tracking: Tracking) -> Iterator[DocumentChanges[TDoc]]:
        open_cursor: SQLiteCursor | None = getattr(self._local, "cursor", None)
        if open_cursor is not None:
            yield SQLiteDocumentChanges(self, open_cursor)
            self._insert_tracking(open_cursor, tracking)
            return
        with self._write() as cursor:
            yield SQLiteDocumentChanges(self, cursor)
            self._insert_tracking(cursor, tracking)

    def clear(self, application_name: str) -> None:
        with self._write() as cursor:
            cursor.execute(f"DELETE FROM {self.table}")
            cursor.execute(
                "DELETE FROM tracking WHERE application_name = ?",
                (self.view_tracking_name(application_name),),
            )

    # ---------------------------------------------------------------- reads

    def load(self, doc: bytes) -> TDoc:
        return self.model.model_validate(orjson.loads(doc))  # type: ignore[return-value]

    def one(self, key: str) -> TDoc | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(self.select_one_statement, (key,))
            row = c.fetchone()
        return None if row is None else self.load(row["doc"])

    def many(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
    ) -> list[TDoc]:
        filters = {"task_id": task_id, "run_id": run_id, "state": state}
        where = [
            (column, value) for column, value in filters.items() if value is not None
        ]
        statement = f"SELECT doc FROM {self.table}"
        if where:
            statement += " WHERE " + " AND ".join(
                f"{column} = ?" for column, _ in where
            )
        statement += " ORDER BY seq, key"
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, [value for _, value in where])
            rows = c.fetchall()
        return [self.load(row["doc"]) for row in rows]
