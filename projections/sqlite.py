"""The SQLite read models, folded by whoever records the events.

SQLite cannot be subscribed to, so the recorder folds the events into the
read models in the transaction that records them: the views and the log
commit together, and a query only reads, never waiting for another process's
write lock. Where the recorder cannot or need not fold (another recorder, a
read-only database, memory), a query catches the views up from the log first.
:class:`SQLiteReadModels` implements the domain's ``ReadModels`` port, chosen
by topic (``READ_MODELS_TOPIC``); docs/architecture.md tells the whole of it.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, ParamSpec, Protocol, TypeVar, runtime_checkable

from eventsourcing.application import Application
from eventsourcing.persistence import (
    IntegrityError,
    Mapper,
    Notification,
    OperationalError,
    PersistenceError,
    Tracking,
)
from eventsourcing.sqlite import SQLiteCursor, SQLiteDatastore, SQLiteFactory

from devs.domain.commands import NO_WAIT, locked
from devs.domain.errors import (
    DevsError,
    NotCaughtUp,
    PositionNotRecorded,
    UnreadableEvent,
)
from devs.domain.ports import Verification, read_wait_of
from devs.domain.redaction import redact
from devs.domain.task import Task
from devs.projections.base import (
    Handler,
    ReadModelProjection,
    SQLiteView,
    advance,
    differences,
    persistence_error,
)
from devs.projections.deliveries import SQLiteDeliveries
from devs.projections.lessons_learned import SQLiteLessonsView
from devs.projections.queries import ViewQueries, unknown_read_models
from devs.projections.registry import SQLITE
from devs.projections.tasks import SQLiteTasksView
from devs.projections.unreadable import TABLE as UNREADABLE_TABLE
from devs.projections.unreadable import Unreadable, UnreadableEvents

PAGE_SIZE = 500
MAX_CONFLICTS = 20
LEGACY_TABLES = (
    "view_task_index",
    "view_gate_status",
    "view_lessons",
    "view_pending_sessions",
    "view_handoff_queue",
    "view_failure_reports",
    "view_run_state",
)
"""Document tables of databases written before the typed read models."""

logger = logging.getLogger("devs.read_models")
P = ParamSpec("P")
R = TypeVar("R")


def _missing_table(error: BaseException) -> bool:
    return "no such table" in str(error)


class _Stored(NamedTuple):
    """What ``_stored_rows`` read in one transaction."""

    last: int
    views: dict[str, tuple[int, dict[str, Counter[tuple[Any, ...]] | None]]]
    unreadable: set[int]


Written = Sequence[tuple[Any, int]]
"""Recorded events, decoded, each with its log position, in log order."""


@runtime_checkable
class FoldsOnWrite(Protocol):
    """A recorder that folds what it records into read models kept in its own
    file, in the transaction that records it (``devs.adapters``' SQLite
    application recorder)."""

    mapper: Mapper[Any] | None

    def fold_on_write(
        self, fold: Callable[[SQLiteCursor, Written], None]
    ) -> Callable[[], None]: ...


def private_datastore(path: Path) -> SQLiteDatastore:
    """A datastore of this process's own, for views built beside the stored ones."""
    return SQLiteDatastore(str(path), pool_size=1, max_overflow=2)


class SQLiteReadModels(ViewQueries):
    """The application's read models in its own SQLite file.

    ``datastore`` (default: the application's own) is where the views live;
    when the application's database is read-only, the views are folded into a
    private file of this process instead, so the database can still be
    queried.
    """

    def __init__(
        self, app: Application[Any], *, datastore: SQLiteDatastore | None = None
    ) -> None:
        if not isinstance(app.factory, SQLiteFactory):
            msg = (
                "the SQLite read models need eventsourcing.sqlite persistence; "
                f"PERSISTENCE_MODULE is {app.env.get('PERSISTENCE_MODULE')!r}"
            )
            raise DevsError(msg)
        self.app = app
        self.wait = read_wait_of(app.env)
        """How long a catch-up waits for another writer's lock (DEVS_READ_WAIT)."""
        self._file_datastore = app.factory.datastore
        self._events_table = str(getattr(app.recorder, "events_table_name", ""))
        self._private: tempfile.TemporaryDirectory[str] | None = None
        if datastore is None:
            if getattr(app.factory, "read_only", False):
                self._private = tempfile.TemporaryDirectory(prefix="devs-views-")
                datastore = private_datastore(Path(self._private.name) / "views.db")
            else:
                datastore = app.factory.datastore
        self.datastore = datastore
        self.projections: dict[str, ReadModelProjection[Any]] = {}
        self.views: dict[str, SQLiteView] = {}
        for projection_class, view_class in SQLITE:
            view = view_class(
                datastore, tracking_name=view_class.tracking_name_for(app.name)
            )
            self.views[view.name] = view
            self.projections[view.name] = projection_class(view=view)
        self.names = tuple(self.views)
        self._drop_legacy_tables(self.views[SQLiteTasksView.name])
        for view in self.views.values():
            view.setup()
        self.unreadable = UnreadableEvents(datastore)
        self.unreadable.setup()
        self.deliveries = SQLiteDeliveries(datastore)
        self.deliveries.setup()
        self._handlers: dict[tuple[str, type[Any]], Handler | None] = {}
        self._seen: dict[str, int] = {}
        self._skipped: dict[int, Unreadable] = {}
        self._blocked: dict[str, Unreadable] = {}
        self._load_unreadable()
        self._stop_folding: Callable[[], None] | None = None
        recorder = app.recorder
        if (
            datastore is self._file_datastore
            and isinstance(recorder, FoldsOnWrite)
            and not datastore.pool.is_sqlite_memory_mode
        ):
            recorder.mapper = app.mapper
            self._stop_folding = recorder.fold_on_write(self.fold_written)
            self._fold_what_is_left()

    @property
    def folded_on_write(self) -> bool:
        """Whether whoever records events folds them (a query only reads)."""
        return self._stop_folding is not None

    def _fold_what_is_left(self) -> None:
        """On open, fold what the log holds past the views (written by a
        process that folded nothing, or by a release that folded on read), if
        the write lock is free now: else the next writer does, in its own
        transaction (:meth:`catch_up`, which never waits)."""
        self.catch_up()

    def _drop_legacy_tables(self, tasks: SQLiteView) -> None:
        """The first open by this version drops the old document views (and
        their positions, so a 0.1.0 process still open would rebuild its own);
        the typed tables rebuild from the log."""
        tasks.create_table()  # eventsourcing's tracking table
        if tasks.max_tracking_id(tasks.tracking_name) is not None:
            return
        with tasks._write() as cursor:
            for table in LEGACY_TABLES:
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
                cursor.execute(
                    "DELETE FROM tracking WHERE application_name = ?",
                    (f"{self.app.name}/{table.removeprefix('view_')}",),
                )

    # ------------------------------------------------------------- catching up

    def positions(self) -> dict[str, int]:
        """Each view's position, read in one statement."""
        return self._marks(with_log_end=False)[1]

    def _marks(self, *, with_log_end: bool) -> tuple[int, dict[str, int]]:
        """The end of the log (when asked, else 0) and each view's position,
        read in one statement (so at one moment) when the views live in the
        log's own file."""
        last, positions, _ = self._marks_and(with_log_end=with_log_end)
        return last, positions

    def _marks_and(
        self, *, with_log_end: bool, extra: tuple[str, ...] = ()
    ) -> tuple[int, dict[str, int], dict[str, int]]:
        """:meth:`_marks`, and the ``extra`` rows of the tracking table (0 when
        missing), read by the same statement."""
        names = {view.tracking_name: name for name, view in self.views.items()}
        asked = (*names, *extra)
        statement = (
            "SELECT application_name, notification_id FROM tracking "
            f"WHERE application_name IN ({', '.join('?' for _ in asked)})"
        )
        together = with_log_end and self.datastore is self._file_datastore
        if together:
            statement += f" UNION ALL SELECT NULL, MAX(rowid) FROM {self._events_table}"
        with self.datastore.get_connection(commit=False) as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(statement, asked)
                rows = cursor.fetchall()
            except sqlite3.Error as error:  # as eventsourcing's own reads say it
                raise OperationalError(str(error)) from error
            finally:
                cursor.sqlite_cursor.close()
        last = 0
        found: dict[str, int] = {}
        others = dict.fromkeys(extra, 0)
        for application_name, notification_id in rows:
            if application_name is None:
                last = notification_id or 0
            elif application_name in names:
                found[names[application_name]] = notification_id
            else:
                others[application_name] = notification_id
        if with_log_end and not together:
            last = self.app.recorder.max_notification_id() or 0
        return last, {name: found.get(name, 0) for name in self.views}, others

    def catch_up(self) -> int:
        """The read models as current as a query needs them; the position
        every one has reached.

        Where the recorder folds (:attr:`folded_on_write`), they already hold
        every event a command returned: the positions and the end of the log
        are read, and nothing is written or waited for. Only what no writer
        folded (events of a process that died or folds nothing, a view another
        process remade empty) is folded here, and only if the write lock is
        free at that moment and the fold can be written (a full disk): else
        the answer is what is folded, and the next writer folds the rest.
        Where the recorder does not fold, everything recorded so far is
        folded here (:meth:`_catch_up`)."""
        if not self.folded_on_write:
            if self._file_datastore.pool.is_sqlite_memory_mode:
                # No other process can hold the lock, and the pool makes
                # readers and writers take turns: waiting for it is short,
                # where trying without waiting loses to commands that hold
                # it back to back.
                return self.keep_up(self.names)
            return self._catch_up()
        last, positions = self._marks(with_log_end=True)
        if positions != self._seen:  # others folded: maybe a poison event
            self._load_unreadable()
            self._seen = positions
        if min(positions.values(), default=0) >= last:
            return last
        token = NO_WAIT.set(True)  # never wait: not for the pool, nor SQLite
        try:
            return self.catch_up_to(last, positions=positions)
        except OperationalError as error:
            # A query only reads: a fold it could not do (the lock taken, a
            # full disk) is left to the next writer, which says why if it
            # cannot either.
            if not locked(error):
                logger.warning("read models left behind the log: %s", error)
            return min(self.positions().values(), default=0)
        finally:
            NO_WAIT.reset(token)

    def current_lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """:meth:`catch_up`, then :meth:`lesson_strategies`, in one statement
        when nothing is left to fold and the task's strategies are held in
        memory (the blacklist asks for the same task again and again).

        That statement reads every view's position, the end of the log and
        the lessons view's generation at one moment, after the call began (so
        past every command any process had returned): when every view has
        folded the log's end there, and the lessons view's position and
        generation are those its rows in memory were read at, those rows are
        the task's strategies at that moment. Anything else (a fold to do,
        positions moved since the last look, rows not in memory, views in
        another file than the log) takes the two steps."""
        lessons = self.views[SQLiteLessonsView.name]
        if (
            isinstance(lessons, SQLiteLessonsView)
            and self.folded_on_write
            and self.datastore is self._file_datastore
        ):
            generation = lessons.generation_name
            last, positions, others = self._marks_and(
                with_log_end=True, extra=(generation,)
            )
            if positions == self._seen and min(positions.values()) >= last:
                key = (positions[lessons.name], others[generation])
                held = lessons.held_strategies(task_id, key)
                if held is not None:
                    self._readable(Task.create_id(task_id))
                    return held
        self.catch_up()
        return self.lesson_strategies(task_id)

    def _catch_up(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Fold everything recorded so far into the (named) read models.

        The views live in the log's file, so folding needs its write lock:
        while another process holds it, the fold is tried again, for at most
        ``DEVS_READ_WAIT`` seconds, then ``NotCaughtUp`` — never the lock
        timeout of each try, over and over."""

        def fold() -> int:
            last, positions = self._marks(with_log_end=True)
            return self.catch_up_to(last, names, progress, positions=positions)

        return self._patiently(fold, time.monotonic() + self.wait, self.wait)

    def keep_up(self, names: Sequence[str]) -> int:
        """Fold the log as it ends now into the named read models, waiting
        for the write lock (the connection pool's turn, then SQLite's lock
        timeout) instead of trying it without waiting: commands that hold it
        back to back leave no gap for a fold that never waits. Where the
        recorder folds, they are current already: only their positions and
        the end of the log are read."""
        last, positions = self._marks(with_log_end=True)
        return self.catch_up_to(last, names, positions=positions)

    # ---------------------------------------------------------- folding on write

    def fold_written(self, cursor: SQLiteCursor, written: Written) -> None:
        """Fold ``written`` (just recorded with ``cursor``, not yet
        committed) into every view, in the same transaction, after whatever
        the log holds between the views' positions and those events.

        A view whose table is missing (dropped by hand) is left behind, the
        others folded: the next query of it remakes and refills it
        (:meth:`_ask`). Any other failure fails the recording."""
        if not written:
            return
        first, last = written[0][1], written[-1][1]
        positions = self._positions_in(cursor)
        start = min(positions.values(), default=0)
        if start >= last:
            return
        page: list[tuple[Any, int]] = []
        while start < first - 1:  # a gap: fold it first
            notifications = self._notifications_in(cursor, start, first - 1)
            if not notifications:
                break
            page += self._decode(notifications, cursor)
            start = notifications[-1].id
        page += written
        cursor.execute("SAVEPOINT devs_fold")
        try:
            advanced = self._fold_in(cursor, page, positions, last, self.names)
        except (sqlite3.Error, PersistenceError) as error:
            cursor.execute("ROLLBACK TO devs_fold")
            if not _missing_table(error):
                raise
            advanced = {}
            for name in self.names:  # each on its own: the whole ones go on
                cursor.execute("SAVEPOINT devs_fold_one")
                try:
                    advanced |= self._fold_in(cursor, page, positions, last, [name])
                except (sqlite3.Error, PersistenceError) as each:
                    cursor.execute("ROLLBACK TO devs_fold_one")
                    if not _missing_table(each):
                        raise
                    logger.warning("read model %r left behind: %s", name, each)
                cursor.execute("RELEASE devs_fold_one")
        advance(cursor, advanced)
        cursor.execute("RELEASE devs_fold")

    def _fold_in(
        self,
        cursor: SQLiteCursor,
        page: Written,
        positions: dict[str, int],
        last: int,
        names: Sequence[str],
    ) -> dict[str, int]:
        """Fold ``page`` into the named views with ``cursor``; the tracking
        name and new position of each view that moved."""
        advanced: dict[str, int] = {}
        for name in names:
            current = positions[name]
            if current >= last:
                continue
            view = self.views[name]
            folds = [
                (handler, domain_event, notification_id)
                for domain_event, notification_id in page
                if notification_id > current
                and (handler := self._handler(name, type(domain_event))) is not None
            ]
            if folds:  # else the view only moves its position (advance)
                projection = self.projections[name]
                with view.folding_in(cursor):
                    for handler, domain_event, notification_id in folds:
                        tracking = Tracking(view.tracking_name, notification_id)
                        handler(projection, domain_event, tracking)
            advanced[view.tracking_name] = last
        return advanced

    def _positions_in(self, cursor: SQLiteCursor) -> dict[str, int]:
        """Each view's position as ``cursor``'s transaction sees it."""
        names = {view.tracking_name: name for name, view in self.views.items()}
        cursor.execute(
            "SELECT application_name, notification_id FROM tracking "
            f"WHERE application_name IN ({', '.join('?' for _ in names)})",
            tuple(names),
        )
        found = {names[row[0]]: row[1] for row in cursor.fetchall()}
        return {name: found.get(name, 0) for name in self.views}

    def _notifications_in(
        self, cursor: SQLiteCursor, after: int, stop: int
    ) -> list[Notification]:
        """A page of the log after position ``after`` up to ``stop``, read
        with ``cursor`` (the recorder's own statement, in its transaction)."""
        cursor.execute(
            "SELECT rowid, originator_id, originator_version, topic, state "
            f"FROM {self._events_table} WHERE rowid > ? AND rowid <= ? "
            "ORDER BY rowid LIMIT ?",
            (after, stop, PAGE_SIZE),
        )
        return [
            Notification(
                id=row[0],
                originator_id=row[1],
                originator_version=row[2],
                topic=row[3],
                state=row[4],
            )
            for row in cursor.fetchall()
        ]

    def wait_for(self, position: int, timeout: float) -> int:
        """Fold the log up to ``position`` into every read model; the position
        reached. The write lock the fold needs is waited for, at most
        ``timeout`` seconds. A position past the end of the log is
        ``PositionNotRecorded`` at once: every process's writes are in the
        file once committed, so nobody is still writing a position a command
        answered."""
        if self._file_datastore.pool.is_sqlite_memory_mode:
            # As catch_up: no other process, so the pool's turn is short,
            # and trying without waiting loses to back-to-back commands.
            last, _ = self._marks(with_log_end=True)
            if last < position:
                raise PositionNotRecorded.past_the_end(position, last)
            self.catch_up_to(position)
            return position
        deadline = time.monotonic() + timeout
        last, _ = self._patiently(
            lambda: self._marks(with_log_end=True), deadline, timeout
        )
        if last < position:
            raise PositionNotRecorded.past_the_end(position, last)
        self._patiently(lambda: self.catch_up_to(position), deadline, timeout)
        return position

    def _patiently(self, fold: Callable[[], R], deadline: float, timeout: float) -> R:
        """``fold()`` without waiting for a lock (``NO_WAIT``: no busy wait on
        the connection), tried again after a growing pause while another
        writer holds one, until ``deadline``; then ``NotCaughtUp``."""
        pause = 0.002
        while True:
            token = NO_WAIT.set(True)
            try:
                return fold()
            except OperationalError as error:
                if not locked(error):
                    raise
                failure = error
            finally:
                NO_WAIT.reset(token)
            if time.monotonic() >= deadline:
                # Read where they are as any read does, no longer without
                # waiting (that would fail as the fold did).
                try:
                    reached = min(self.positions().values(), default=0)
                except OperationalError:
                    reached = min(self._seen.values(), default=0)
                msg = (
                    f"the read models could not be brought up to date within "
                    f"{timeout:g} s: another writer holds the database's "
                    f"write lock ({redact(str(failure))[:120]}); they are at "
                    f"{reached}"
                )
                raise NotCaughtUp(msg, reached=reached) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def catch_up_to(
        self,
        last: int,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
        *,
        positions: dict[str, int] | None = None,
    ) -> int:
        """Fold the log up to position ``last`` into the (named) read models.

        ``positions``: the views' positions, if just read.
        """
        selected = list(names) if names is not None else list(self.views)
        repaired = False
        for _ in range(MAX_CONFLICTS):
            try:
                # Read every time, never remembered: another process may have
                # moved a view back (a rebuild swapped in, a view remade).
                if positions is None:
                    positions = self.positions()
                if positions != self._seen:  # others folded: maybe a poison event
                    self._load_unreadable()
                    self._seen = positions
                if all(positions[name] >= last for name in selected):
                    return last
                self._catch_up_to(last, selected, positions, progress)
            except (IntegrityError, OperationalError) as error:
                if locked(error):
                    raise  # waited for (catch_up, wait_for) or a StoreError
                if isinstance(error, OperationalError) and not _missing_table(error):
                    # Not a race: a full disk, a disk I/O error, a file that
                    # cannot be written. Trying again would only hide it (as
                    # "too many concurrent updates"): said as it is.
                    raise
                positions = None
                # A lost race, a view moved back under this catch-up: re-read
                # and go on. A view table dropped by hand: remake the view
                # (once) and refill it.
                if _missing_table(error) and not repaired:
                    self.repair()
                    repaired = True
                continue
            return last
        msg = "read models could not catch up: too many concurrent updates"
        raise OperationalError(msg)

    def _catch_up_to(
        self,
        last: int,
        names: Sequence[str],
        positions: dict[str, int],
        progress: Callable[[int, int], None] | None,
    ) -> None:
        start = min(positions[name] for name in names)
        while start < last:
            notifications = self.app.recorder.select_notifications(
                start=start + 1, limit=PAGE_SIZE, stop=last
            )
            if not notifications:
                break
            page = self._decode(notifications)
            for name in names:
                view, projection = self.views[name], self.projections[name]
                if positions[name] >= notifications[-1].id:
                    continue
                end = Tracking(view.tracking_name, notifications[-1].id)
                with view.batch(end) as current:
                    if current < positions[name]:
                        msg = f"read model {name!r} moved back under a catch-up"
                        raise IntegrityError(msg)  # re-read and start again
                    for domain_event, notification_id in page:
                        if notification_id <= current:
                            continue  # folded before, maybe by another catch-up
                        handler = self._handler(name, type(domain_event))
                        if handler is not None:
                            tracking = Tracking(view.tracking_name, notification_id)
                            handler(projection, domain_event, tracking)
                positions[name] = max(end.notification_id, current)
            start = notifications[-1].id
            if progress is not None:
                progress(start, last)
        self._load_unreadable()

    def _decode(
        self,
        notifications: Sequence[Notification],
        cursor: SQLiteCursor | None = None,
    ) -> list[tuple[Any, int]]:
        """The page's domain events; undecodable ones are recorded (with
        ``cursor``, in its transaction, if given) and left out."""
        page: list[tuple[Any, int]] = []
        found: list[Unreadable] = []
        for notification in notifications:
            if notification.id in self._skipped:
                continue
            try:
                page.append(
                    (self.app.mapper.to_domain_event(notification), notification.id)
                )
            except Exception as error:  # whatever a foreign mapper raises
                problem = redact(
                    str(error) if isinstance(error, UnreadableEvent) else repr(error)
                )
                found.append(
                    Unreadable(
                        position=notification.id,
                        originator_id=str(notification.originator_id),
                        originator_version=notification.originator_version,
                        topic=notification.topic[:200],
                        problem=" ".join(problem.split())[:300],
                    )
                )
        if found:
            for event in found:
                logger.error("read models skip it: %s", event.describe())
                self._skipped[event.position] = event
                self._blocked.setdefault(event.originator_id, event)
            if cursor is None:
                self.unreadable.record(found)
            else:
                self.unreadable.add(found, cursor)
        return page

    def _load_unreadable(self) -> None:
        events = self.unreadable.all()
        self._skipped = {event.position: event for event in events}
        self._blocked = {}
        for event in events:
            self._blocked.setdefault(event.originator_id, event)

    def _handler(self, name: str, event_class: type[Any]) -> Handler | None:
        key = (name, event_class)
        try:
            return self._handlers[key]
        except KeyError:
            handler = type(self.projections[name]).handler_for(event_class)
            self._handlers[key] = handler
            return handler

    def repair(self) -> bool:
        """Remake every view missing a table (it refills on the next catch-up).

        Returns whether any was remade.
        """
        remade = [name for name, view in self.views.items() if view.ensure_tables()]
        for name in remade:
            logger.warning(
                "read model %r had lost a table: remade empty, refilled from the log",
                name,
            )
        return bool(remade)

    # ------------------------------------------------------ rebuild and verify

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Fold the named read models from position 0 beside the stored ones,
        then swap them in, in one transaction: until then queries (and other
        writers) go on as before, and a rebuild that fails leaves them as they
        were."""
        selected = list(names) if names is not None else list(self.views)
        unknown_read_models(selected, self.names)
        last = self.app.recorder.max_notification_id() or 0
        with tempfile.TemporaryDirectory(prefix="devs-rebuild-") as directory:
            path = Path(directory) / "views.db"
            beside = self._beside(path)
            try:
                beside.catch_up_to(last, selected, progress)
                found = beside.unreadable.all()
            finally:
                beside.close()
            self.repair()
            every = set(selected) == set(self.views)
            self._swap_in(path, selected, last, found, every=every)
        self._load_unreadable()
        return self._catch_up(selected)

    def _beside(self, path: Path) -> SQLiteReadModels:
        """Fresh read models of the same log in another file."""
        return SQLiteReadModels(self.app, datastore=private_datastore(path))

    def _swap_in(
        self,
        path: Path,
        names: Sequence[str],
        last: int,
        found: list[Unreadable],
        *,
        every: bool,
    ) -> None:
        """Replace the named views' rows and positions with those in ``path``.

        The events found undecodable are recorded; those recorded before are
        forgotten only when every view was rebuilt (an event that decodes now
        is still missing from the views that were not).
        """
        with self.datastore.get_connection(commit=True) as connection:
            swap = connection.cursor()
            try:
                swap.execute("ATTACH DATABASE ? AS beside", (str(path),))
                swap.execute("BEGIN IMMEDIATE")
                try:
                    for name in names:
                        self._copy_view(swap, self.views[name])
                    if every:
                        self.unreadable.replace_up_to(last, found, swap)
                    else:
                        self.unreadable.add(found, swap)
                except BaseException:
                    connection.rollback()
                    raise
                connection.commit()
            except sqlite3.Error as error:
                raise persistence_error(error) from error
            finally:
                with contextlib.suppress(sqlite3.Error):
                    swap.execute("DETACH DATABASE beside")
                swap.sqlite_cursor.close()
        for name in names:
            self.views[name].forget()

    @staticmethod
    def _copy_view(swap: SQLiteCursor, view: SQLiteView) -> None:
        for table in view.tables:
            swap.execute(f"DELETE FROM main.{table}")
            swap.execute(f"INSERT INTO main.{table} SELECT * FROM beside.{table}")
        swap.execute(
            "DELETE FROM main.tracking WHERE application_name = ?",
            (view.tracking_name,),
        )
        swap.execute(
            "INSERT INTO main.tracking SELECT * FROM beside.tracking "
            "WHERE application_name = ?",
            (view.tracking_name,),
        )
        view.bump_generation(swap)

    def verify(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Verification:
        """Compare every stored view with a fold of the log to its position.

        The stored views and the end of the log are read in one transaction
        (the views are not caught up first: nothing is written); each view is
        compared with the same read model folded from position 0 in a private
        file up to the stored position. The rest of the log is then read too,
        so that every event that cannot be decoded is reported by its log
        position, and every event recorded as undecodable that decodes now.
        """
        problems: list[str] = []
        snapshot = self._stored_rows()
        last, stored = snapshot.last, snapshot.views
        with tempfile.TemporaryDirectory(prefix="devs-verify-") as directory:
            beside = self._beside(Path(directory) / "views.db")
            try:
                compared: list[str] = []
                ordered = sorted(self.views, key=lambda name: stored[name][0])
                for name in ordered:
                    position, rows = stored[name]
                    if position > last:
                        problems.append(
                            f"read model {name!r} is at position {position}, past "
                            f"the end of the log ({last}): what is recorded next "
                            "would not be folded into it; rebuild it"
                        )
                        continue
                    pending = [n for n in ordered if n not in compared]
                    beside.catch_up_to(position, pending, progress)
                    compared.append(name)
                    expected = beside._stored_rows([name], own=True).views[name][1]
                    problems.extend(differences(name, position, rows, expected))
                beside.catch_up_to(last, list(self.views), progress)
                found = beside.unreadable.all()
            finally:
                beside.close()
        problems.extend(event.describe() for event in found)
        undecodable = {event.position for event in found}
        problems.extend(
            f"event at log position {position} is recorded as undecodable but "
            "decodes now: its task's queries are refused and the read models "
            "lack it; rebuild them"
            for position in sorted(snapshot.unreadable - undecodable)
            if position <= last
        )
        return Verification(
            ok=not problems,
            problems=[redact(problem) for problem in problems],
            position=last,
            read_models=self.names,
            positions={name: stored[name][0] for name in self.names},
        )

    def _stored_rows(
        self, names: Sequence[str] | None = None, *, own: bool = False
    ) -> _Stored:
        """Each view's position and rows (``None`` for a missing table), the
        end of the log and the events recorded as undecodable, all read in one
        transaction: those of the application's database file, or (``own``)
        of this object's datastore, which differs when the file is read-only
        (and holds no log)."""
        datastore = self.datastore if own else self._file_datastore
        views: dict[str, tuple[int, dict[str, Counter[tuple[Any, ...]] | None]]] = {}
        with datastore.transaction(commit=False) as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            existing = {row[0] for row in cursor.fetchall()}
            last = 0
            events_table = getattr(self.app.recorder, "events_table_name", "")
            if not own and events_table in existing:
                cursor.execute(f"SELECT MAX(rowid) FROM {events_table}")
                last = cursor.fetchone()[0] or 0
            unreadable: set[int] = set()
            if UNREADABLE_TABLE in existing:
                cursor.execute(f"SELECT position FROM {UNREADABLE_TABLE}")
                unreadable = {row[0] for row in cursor.fetchall()}
            for name in names if names is not None else self.views:
                view = self.views[name]
                position = 0
                if "tracking" in existing:
                    cursor.execute(
                        "SELECT notification_id FROM tracking "
                        "WHERE application_name = ?",
                        (view.tracking_name,),
                    )
                    row = cursor.fetchone()
                    position = row[0] if row else 0
                tables: dict[str, Counter[tuple[Any, ...]] | None] = {}
                for table in view.tables:
                    if table not in existing:
                        tables[table] = None
                        continue
                    cursor.execute(f"SELECT * FROM {table}")
                    tables[table] = Counter(tuple(r) for r in cursor.fetchall())
                views[name] = (position, tables)
        return _Stored(last, views, unreadable)

    def close(self) -> None:
        """Close the connections of a datastore of its own (a private one),
        and stop folding what the recorder records."""
        if self._stop_folding is not None:
            self._stop_folding()
            self._stop_folding = None
        if self.datastore is not self._file_datastore:
            self.datastore.pool.close()
        if self._private is not None:
            self._private.cleanup()
            self._private = None

    # --------------------------------------------------------- unreadable events

    def _readable(self, originator_id: str) -> None:
        """Refuse to answer for a task (or run) one of whose events was skipped."""
        event = self._blocked.get(originator_id)
        if event is not None:
            msg = (
                f"{originator_id!r} cannot be shown: its "
                f"{event.describe()}; other tasks are unaffected "
                "(devs verify lists every such event)"
            )
            raise UnreadableEvent(
                msg,
                originator_id=event.originator_id,
                originator_version=event.originator_version,
                topic=event.topic,
                position=event.position,
            )

    def _ask(self, question: Callable[[], R]) -> R:
        """A query that finds a view table dropped recreates the view, refills
        it from the log and asks again, instead of failing or answering wrongly."""
        try:
            return question()
        except OperationalError as error:
            if not _missing_table(error):
                raise
            self.repair()  # or another process just did
            self._catch_up()
            return question()
