"""The PostgreSQL read models, kept by eventsourcing's ``ProjectionRunner``.

PostgreSQL can be followed (``LISTEN``/``NOTIFY``), so a runner folds the log
into every read model in one transaction per batch, beside the writers
instead of inside queries; any number of runners may follow one database (an
advisory lock folds each event once). A query waits, bounded by
``DEVS_READ_WAIT``, for the log as it was when it began, so the Python API
reads its own writes as on SQLite. Runners, waits and damage:
docs/architecture.md, docs/deploy.md, docs/security.md.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, PersistenceError, StoredEvent, Tracking
from eventsourcing.postgres import (
    PostgresDatastore,
    PostgresFactory,
    PostgresTrackingRecorder,
)
from eventsourcing.projection import (
    ApplicationSubscription,
    Projection,
    ProjectionRunner,
)
from psycopg import Cursor
from psycopg.errors import UndefinedTable
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from devs.domain import eventsourcing_internals
from devs.domain.errors import (
    DevsError,
    InvalidInput,
    NotCaughtUp,
    PositionNotRecorded,
)
from devs.domain.ports import PROJECTIONS_KEY, Verification, read_wait_of
from devs.domain.redaction import redact
from devs.projections.base import Handler, ReadModelProjection, differences
from devs.projections.deliveries import DDL as DELIVERY_DDL
from devs.projections.deliveries import DeliveryTables
from devs.projections.pg import (
    DDL_LOCK,
    POSTGRES,
    PgCursor,
    PostgresView,
    SerializedDDL,
    folding,
    pg_ddl,
    pg_sql,
)
from devs.projections.queries import ViewQueries, unknown_read_models
from devs.projections.unreadable import DDL as UNREADABLE_DDL
from devs.projections.unreadable import INSERT as UNREADABLE_INSERT
from devs.projections.unreadable import TABLE as UNREADABLE_TABLE
from devs.projections.unreadable import Unreadable, decodes_now

PROJECTION_NAME = "devs_views"
TRACKING_TABLE = f"{PROJECTION_NAME}_tracking"
SCHEMA_TABLE = f"{PROJECTION_NAME}_schema"
LOCK_KEY = 0x64657673_76696577  # "devsview": one fold at a time, per database
PAGE_SIZE = 500
MODE_ENV = PROJECTIONS_KEY
MODES = ("runner", "external")

logger = logging.getLogger("devs.read_models")
R = TypeVar("R")


class Undecodable:
    """An event the runner could not decode: folded into nothing, recorded in
    ``unreadable_events`` by the fold that moves the position past it."""

    def __init__(self, stored: StoredEvent, error: Exception) -> None:
        self.stored = stored
        self.error = error
        self.originator_id = stored.originator_id
        self.originator_version = stored.originator_version

    def unreadable(self, position: int) -> Unreadable:
        return Unreadable.from_error(self.stored, position, self.error)


def missing_table(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is PostgreSQL's "relation does
    not exist": a read model's table was dropped."""
    seen: BaseException | None = error
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, UndefinedTable):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class PostgresViews(SerializedDDL, PostgresTrackingRecorder):
    """Every read model's tables and their one position, in PostgreSQL."""

    def __init__(
        self,
        datastore: PostgresDatastore,
        *,
        tracking_table_name: str = TRACKING_TABLE,
        **kwargs: Any,
    ) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.views: dict[str, PostgresView] = {}
        self.projections: dict[str, ReadModelProjection[Any]] = {}
        for projection_class, view_class in POSTGRES:
            view = view_class(datastore, tracking_table_name=tracking_table_name)
            self.views[view.name] = view
            self.projections[view.name] = projection_class(view=view)
            self.sql_create_statements.extend(view.create_statements())
        self.sql_create_statements.extend(
            SQL(pg_ddl(statement)).format()
            for statement in (*UNREADABLE_DDL, *DELIVERY_DDL)
        )
        self.fingerprint = hashlib.sha256(
            "\n".join(s.as_string() for s in self.sql_create_statements).encode()
        ).hexdigest()
        self._handlers: dict[
            tuple[tuple[str, ...], type[Any]],
            list[tuple[ReadModelProjection[Any], Handler]],
        ] = {}

    ddl_locks = (DDL_LOCK, LOCK_KEY)
    """The DDL waits for no fold to be under way (a fold holds ``LOCK_KEY``)."""

    def create_table(self) -> None:
        """Make the views' tables, indexes and new columns, unless this
        release's statements already ran on this database.

        The statements say ``IF NOT EXISTS``, yet PostgreSQL still locks the
        tables they name: ``ALTER TABLE … ADD COLUMN IF NOT EXISTS`` takes an
        ``ACCESS EXCLUSIVE`` lock, ``CREATE INDEX IF NOT EXISTS`` a ``SHARE``
        lock. A service opening beside a runner folding into those tables
        then deadlocked with it. The fingerprint of the statements (recorded
        in ``devs_views_schema`` by the transaction that ran them) lets every
        later opening read one row instead; a release whose statements differ
        runs them once, under the DDL lock and the fold lock."""
        if not self._schema_is_current():
            super().create_table()

    def _schema_is_current(self) -> bool:
        with self.datastore.transaction(commit=False) as curs:
            return self._made(curs)

    def _made(self, curs: Cursor[DictRow]) -> bool:
        """Whether this release's statements ran on this database (seen
        before the locks, and again under them: a process opening the
        database at the same time may have run them meanwhile)."""
        schema = self.datastore.schema or "public"
        curs.execute(
            "SELECT 1 FROM pg_catalog.pg_tables "
            "WHERE schemaname = %s AND tablename = %s",
            (schema, SCHEMA_TABLE),
        )
        if curs.fetchone() is None:
            return False
        curs.execute(
            SQL("SELECT 1 FROM {}.{} WHERE fingerprint = %s").format(
                Identifier(schema), Identifier(SCHEMA_TABLE)
            ),
            (self.fingerprint,),
        )
        return curs.fetchone() is not None

    # eventsourcing's private method, declared in adapters/store/internals.py
    def _create_table(self, curs: Cursor[DictRow]) -> None:
        super()._create_table(curs)
        table = SQL("{}.{}").format(
            Identifier(self.datastore.schema or "public"), Identifier(SCHEMA_TABLE)
        )
        curs.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (fingerprint TEXT PRIMARY KEY, "
                "made_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            ).format(table)
        )
        curs.execute(
            SQL(
                "INSERT INTO {} (fingerprint) VALUES (%s) ON CONFLICT DO NOTHING"
            ).format(table),
            (self.fingerprint,),
        )

    def handlers(
        self, event_class: type[Any], names: Sequence[str] | None = None
    ) -> list[tuple[ReadModelProjection[Any], Handler]]:
        key = (tuple(names) if names is not None else (), event_class)
        found = self._handlers.get(key)
        if found is None:
            found = []
            for name, projection in self.projections.items():
                if names is not None and name not in names:
                    continue
                handler = type(projection).handler_for(event_class)
                if handler is not None:
                    found.append((projection, handler))
            self._handlers[key] = found
        return found

    def fold(self, events: Sequence[tuple[Any, Tracking]]) -> int:
        """Fold events (in log order) into every read model and record the
        last one's position, in one transaction; how many were folded (the
        others another runner folded already).

        The statements go in psycopg's pipeline mode (sent without waiting
        for each answer; a handler's ``fetchone`` waits for what it needs): a
        third less time per event than one round trip per statement.

        The transaction commits without waiting for its WAL flush
        (``synchronous_commit = off``): a server crash may lose the last
        folds, and their positions with them, so a runner folds those events
        again; the log itself keeps the server's setting.
        """
        if not events:
            return 0
        name = events[-1][1].application_name
        folded = 0
        skipped: list[Unreadable] = []
        with (
            self.datastore.get_connection() as connection,
            connection.pipeline(),
            connection.transaction(),
            connection.cursor() as cursor,
        ):
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            current = eventsourcing_internals.max_tracking_id(self, name, cursor) or 0
            with folding(cursor):
                for domain_event, tracking in events:
                    if tracking.notification_id <= current:
                        continue
                    if isinstance(domain_event, Undecodable):
                        skipped.append(
                            domain_event.unreadable(tracking.notification_id)
                        )
                        continue
                    for projection, handler in self.handlers(type(domain_event)):
                        handler(projection, domain_event, tracking)
                    folded += 1
            if skipped:
                cursor.executemany(
                    pg_sql(UNREADABLE_INSERT), [event.model_dump() for event in skipped]
                )
            last = events[-1][1]
            if last.notification_id > current:
                eventsourcing_internals.insert_tracking(self, cursor, last)
        for event in skipped:
            logger.error("read models skip it: %s", event.describe())
        return folded

    def existing_tables(self, cursor: Cursor[DictRow]) -> set[str]:
        """The tables of the views' schema, as ``cursor``'s transaction sees them."""
        cursor.execute(
            "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s",
            (self.datastore.schema or "public",),
        )
        return {row["tablename"] for row in cursor.fetchall()}

    def rows(
        self, cursor: Cursor[DictRow], name: str, existing: set[str]
    ) -> dict[str, Counter[Any] | None]:
        """Each table of read model ``name``, as a multiset of rows (``None``
        for a table not in ``existing``)."""
        found: dict[str, Counter[Any] | None] = {}
        for table in self.views[name].tables:
            if table not in existing:
                found[table] = None
                continue
            cursor.execute(
                SQL("SELECT * FROM {}.{}").format(
                    Identifier(self.datastore.schema or "public"), Identifier(table)
                )
            )
            found[table] = Counter(tuple(row.values()) for row in cursor.fetchall())
        return found


class ReadModelsProjection(Projection[PostgresViews]):
    """What the runner feeds the log to (no topics: each event moves the
    position, even one no read model folds)."""

    name = PROJECTION_NAME
    topics: tuple[str, ...] = ()

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.fold([(domain_event, tracking)])

    def process_events(self, events: Sequence[tuple[Any, Tracking]]) -> None:
        self.view.fold(events)


def _more_ready(subscription: ApplicationSubscription[Any]) -> bool:
    """Whether ``subscription`` holds more events already fetched (the rest
    of a page, or pages queued by its pulling thread)."""
    return eventsourcing_internals.fetched_ahead(subscription.subscription)


class ReadModelsRunner(ProjectionRunner[Application[Any], PostgresViews]):
    """eventsourcing's ``ProjectionRunner`` (its LISTEN/NOTIFY subscription,
    threads and error handling), folding in one transaction the events its
    subscription has already fetched, up to a page, instead of one
    transaction per event: under load the read models keep up with the log
    (docs/performance.md)."""

    # eventsourcing's private method, declared in adapters/store/internals.py
    @staticmethod
    def _process_events_loop(  # type: ignore[override]
        subscription: ApplicationSubscription[Any],
        projection: ReadModelsProjection,
        is_stopping: threading.Event,
        runner: weakref.ReferenceType[ReadModelsRunner],
    ) -> None:
        try:
            batch: list[tuple[Any, Tracking]] = []
            for domain_event, tracking in subscription:
                batch.append((domain_event, tracking))
                if len(batch) >= PAGE_SIZE or not _more_ready(subscription):
                    projection.process_events(batch)
                    batch = []
        except BaseException as error:
            found = runner()
            if found is not None:
                eventsourcing_internals.leave_thread_error(found, error)
            else:
                logger.error("read models' runner stopped: %s", error)
        finally:
            is_stopping.set()


def log_class(name: str) -> type[Application[str]]:
    """An application that only reads the log of application ``name``, for
    the runner to follow (the service itself would open read models again)."""

    class RecoveryLog(Application[str]):
        def construct_mapper(self) -> Mapper[str]:
            mapper = super().construct_mapper()
            decode = mapper.to_domain_event

            def tolerant(stored: StoredEvent) -> Any:
                try:
                    return decode(stored)
                except Exception as error:  # whatever a foreign mapper raises
                    return Undecodable(stored, error)

            mapper.to_domain_event = tolerant  # type: ignore[method-assign,assignment]
            return mapper

    RecoveryLog.name = name
    return RecoveryLog


KEEP_UP_WAIT = 1.0
"""The longest ``keep_up`` waits for the runner, in seconds."""


class PostgresReadModels(ViewQueries):
    """The application's read models in its PostgreSQL database."""

    def __init__(self, app: Application[Any]) -> None:
        if not isinstance(app.factory, PostgresFactory):
            msg = (
                "the PostgreSQL read models need eventsourcing.postgres persistence; "
                f"PERSISTENCE_MODULE is {app.env.get('PERSISTENCE_MODULE')!r}"
            )
            raise DevsError(msg)
        self.app = app
        self.mode = app.env.get(MODE_ENV) or "runner"
        if self.mode not in MODES:
            msg = f"{MODE_ENV} must be one of {', '.join(MODES)}, got {self.mode!r}"
            raise InvalidInput(msg, field=MODE_ENV)
        self.wait = read_wait_of(app.env)
        self.store = PostgresViews(app.factory.datastore)
        self.store.create_table()
        self.views: dict[str, Any] = dict(self.store.views)
        self.names = tuple(self.views)
        self.deliveries = PostgresDeliveries(self.store.datastore)
        schema = Identifier(self.store.datastore.schema or "public")
        self._marks_statement = SQL(
            "SELECT (SELECT MAX(notification_id) FROM {}.{} "
            "WHERE application_name = %s) AS position, "
            "COUNT(*) AS unreadable, COALESCE(SUM(position), 0) AS unreadable_sum "
            "FROM {}.{}"
        ).format(
            schema,
            Identifier(self.store.tracking_table_name),
            schema,
            Identifier(UNREADABLE_TABLE),
        )
        self._blocked: dict[str, Unreadable] = {}
        self._unreadable_mark: tuple[int, int] | None = None
        """How many events ``_blocked`` was loaded from, and the sum of their
        positions: read with the position, the rows are read again only
        when they differ (a fold or a rebuild changed the table)."""
        self.repair()  # a table dropped while no process had it open
        self.position()
        self._runner: ReadModelsRunner | None = None
        self._runner_lock = threading.Lock()
        self._away_since: float | None = None
        """Since when ``follow`` has failed to start a runner (the database
        is away): it says so once, and once when one runs again."""
        if self.mode == "runner":
            self._start_runner()

    # ----------------------------------------------------------- the runner

    def _start_runner(self) -> None:
        self._runner = ReadModelsRunner(
            application_class=log_class(self.app.name),
            projection_class=ReadModelsProjection,
            view_class=PostgresViews,
            env=dict(self.app.env),
        )

    def _check_runner(self) -> None:
        """Restart a runner that stopped on an error (the database went away,
        a view's table was dropped: then the view is remade first)."""
        runner = self._runner
        if runner is None or not runner.is_interrupted.is_set():
            return
        with self._runner_lock:
            if self._runner is not runner:
                return
            try:
                runner.run_forever(timeout=0)
            except Exception as error:
                if self._away_since is None:  # said once, not at every try
                    logger.warning(
                        "read models' runner stopped (%s); restarting", error
                    )
                if missing_table(error):
                    try:
                        self.repair()
                    except Exception as failed:  # the next check tries again
                        logger.warning("read models not repaired yet (%s)", failed)
            try:
                runner.stop()
                runner.app.close()
            finally:
                self._start_runner()

    def follow(self, stop: threading.Event, check_every: float = 1.0) -> None:
        """Fold the log as it grows until ``stop`` is set (``devs project``):
        start a runner if this process has none, restart it when it stops on
        an error (the database restarted), logging why."""
        with self._runner_lock:
            if self._runner is None:
                self._start_runner()
        while not stop.wait(check_every):
            try:
                self._check_runner()
            except Exception as error:  # the database is still away: try again
                if self._away_since is None:  # one line per outage
                    self._away_since = time.monotonic()
                    logger.warning(
                        "read models' runner cannot start yet (%s); trying again "
                        "every %g s",
                        error,
                        check_every,
                    )
                continue
            runner = self._runner
            if (
                self._away_since is not None
                and runner is not None
                and not runner.is_interrupted.is_set()
            ):
                logger.warning(
                    "read models' runner runs again, after %.0f s",
                    time.monotonic() - self._away_since,
                )
                self._away_since = None

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop()
            runner.app.close()
            runner.view.datastore.close()

    # ------------------------------------------------------------ positions

    def position(self) -> int:
        """The read models' position, read in one statement with a mark of
        the ``unreadable_events`` table (its rows are read again only when
        the mark moved: no other round trip while nothing is unreadable)."""
        try:
            row = self._marks()
        except PersistenceError as error:
            if not missing_table(error):
                raise
            self.repair()
            row = self._marks()
        if (row["unreadable"], int(row["unreadable_sum"])) != self._unreadable_mark:
            self._load_unreadable()
        position: int = row["position"] or 0
        return position

    def _marks(self) -> DictRow:
        """One prepared statement on an autocommit connection: one round trip,
        as eventsourcing's ``max_tracking_id``."""
        with (
            self.store.datastore.get_connection() as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute(self._marks_statement, (self.app.name,), prepare=True)
            row = cursor.fetchone()
        assert row is not None  # an aggregate without GROUP BY: one row
        return row

    def _load_unreadable(self) -> None:
        with self.store.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                SQL("SELECT * FROM {}.{} ORDER BY position").format(
                    Identifier(self.store.datastore.schema or "public"),
                    Identifier(UNREADABLE_TABLE),
                )
            )
            events = [Unreadable.model_validate(dict(row)) for row in cursor.fetchall()]
        blocked: dict[str, Unreadable] = {}
        for event in events:
            blocked.setdefault(event.originator_id, event)
        self._blocked = blocked
        self._unreadable_mark = (len(events), sum(event.position for event in events))

    def _unreadable(self, originator_id: str) -> Unreadable | None:
        return self._blocked.get(originator_id)

    def _ask(self, question: Callable[[], R]) -> R:
        """A query that finds a view table dropped remakes the view, refilled
        from the log (``repair``), and asks again."""
        try:
            return question()
        except PersistenceError as error:
            if not missing_table(error):
                raise
            self.repair()  # or another process just did
            return question()

    def repair(self) -> bool:
        """Remake every view missing a table, and refill it from the log up to
        the read models' position, in one transaction (under the DDL lock and
        the fold's: runners wait for it); ``unreadable_events`` too. Returns
        whether any was remade."""
        datastore = self.store.datastore
        with datastore.transaction(commit=False) as cursor:
            views, memo = self._missing(cursor)
        if not views and not memo:
            return False
        with datastore.transaction(commit=True) as cursor:
            for key in (DDL_LOCK, LOCK_KEY):
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            views, memo = self._missing(cursor)  # another process may have
            for name in views:
                for statement in self.views[name].create_statements():
                    cursor.execute(statement)
            if memo:
                for text in UNREADABLE_DDL:
                    cursor.execute(SQL(pg_ddl(text)).format())
            if views or memo:
                _, found = self._refold(cursor, views, None, locked=True)
                if memo:
                    self._record(cursor, found)
        for name in views:
            logger.warning(
                "read model %r had lost a table: remade empty, refilled from the log",
                name,
            )
        if memo:
            logger.warning("%s had been dropped: remade from the log", UNREADABLE_TABLE)
        self._unreadable_mark = None
        return bool(views or memo)

    def _missing(self, cursor: Cursor[DictRow]) -> tuple[tuple[str, ...], bool]:
        """The views missing a table, and whether ``unreadable_events`` is."""
        existing = self.store.existing_tables(cursor)
        views = tuple(
            name for name in self.names if not set(self.views[name].tables) <= existing
        )
        return views, UNREADABLE_TABLE not in existing

    def positions(self) -> dict[str, int]:
        position = self.position()
        return dict.fromkeys(self.names, position)

    def catch_up(self) -> int:
        """Wait until the runner folded the log as it ends now; the position."""
        last = self.app.recorder.max_notification_id() or 0
        return self._wait(last, self.wait, recorded=True)

    def current_lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """:meth:`catch_up`, then :meth:`lesson_strategies`."""
        self.catch_up()
        return self.lesson_strategies(task_id)

    def keep_up(self, names: Sequence[str]) -> int:
        """The runner folds them: wait a little (at most :data:`KEEP_UP_WAIT`)
        for it to reach the log's end as it is now, then the position it
        reached, behind or not (the next look takes the rest)."""
        last = self.app.recorder.max_notification_id() or 0
        try:
            return self._wait(last, min(self.wait, KEEP_UP_WAIT), recorded=True)
        except NotCaughtUp as error:
            return error.reached if error.reached is not None else self.position()

    def wait_for(self, position: int, timeout: float) -> int:
        """Wait until the runner folded ``position`` (only that: the log may
        grow meanwhile), at most ``timeout`` seconds; the position reached.

        A position the read models have not reached is first looked for in
        the log itself (the recorder's last position: every server's
        committed writes, not this process's read models): past its end it
        is ``PositionNotRecorded`` at once, since a position a command
        answered was committed before the answer."""
        return self._wait(position, timeout, recorded=False)

    def _wait(self, position: int, timeout: float, *, recorded: bool) -> int:
        """``wait_for``; ``recorded``: ``position`` is known to be in the log."""
        deadline = time.monotonic() + timeout
        pause = 0.0005
        while True:
            reached = self.position()
            if reached >= position:
                return reached
            if not recorded:
                last = self.app.recorder.max_notification_id() or 0
                if last < position:
                    raise PositionNotRecorded.past_the_end(position, last)
                recorded = True
            self._check_runner()
            if time.monotonic() >= deadline:
                raise self._not_caught_up(position, reached, timeout)
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _not_caught_up(self, position: int, reached: int, timeout: float) -> Exception:
        last = self.app.recorder.max_notification_id() or 0
        if position > last:
            why = f", the log ends at {last}"  # as on SQLite
        elif self._runner is not None:
            why = "; this process's runner is behind"
        else:
            why = "; is a `devs project` worker running?"
        msg = (
            f"the read models did not reach position {position} within "
            f"{timeout:g} s: they are at {reached}{why}"
        )
        return NotCaughtUp(msg, position=position, reached=reached)

    # ------------------------------------------------- rebuilding, verifying

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Refold the named read models from position 0 in one transaction:
        queries see the old rows until it commits; runners wait for it.

        The events found undecodable are recorded; those recorded before are
        forgotten only when every read model was rebuilt (an event that
        decodes now is still missing from the ones that were not)."""
        chosen = self._chosen(names)
        self.repair()
        with self.store.datastore.transaction(commit=True) as cursor:
            position, found = self._refold(cursor, chosen, progress)
            if set(chosen) == set(self.names):
                cursor.execute(
                    SQL("DELETE FROM {}.{} WHERE position <= %s").format(
                        Identifier(self.store.datastore.schema or "public"),
                        Identifier(UNREADABLE_TABLE),
                    ),
                    (position,),
                )
            self._record(cursor, found)
        self._unreadable_mark = None
        self.position()
        return position

    @staticmethod
    def _record(cursor: Cursor[DictRow], found: Sequence[Unreadable]) -> None:
        """Within ``cursor``'s transaction: record ``found`` as undecodable."""
        if found:
            cursor.executemany(
                pg_sql(UNREADABLE_INSERT), [event.model_dump() for event in found]
            )

    def verify(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Verification:
        """Refold every read model inside a transaction that is rolled back,
        and compare with the rows it held: writes nothing.

        A view missing a table is reported as such (the next query remakes
        it); the rest of the log past the read models' position is decoded
        too, so that every event that cannot be is reported by its log
        position, and every event recorded as undecodable that decodes now.
        """
        problems: list[str] = []
        last = self.app.recorder.max_notification_id() or 0
        with self.store.datastore.transaction(commit=False) as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            position = self._position_in(cursor)
            existing = self.store.existing_tables(cursor)
            recorded: set[int] = set()
            if UNREADABLE_TABLE in existing:
                cursor.execute(
                    SQL("SELECT position FROM {}.{}").format(
                        Identifier(self.store.datastore.schema or "public"),
                        Identifier(UNREADABLE_TABLE),
                    )
                )
                recorded = {row["position"] for row in cursor.fetchall()}
            stored = {
                name: self.store.rows(cursor, name, existing) for name in self.names
            }
            whole = tuple(
                name
                for name in self.names
                if all(rows is not None for rows in stored[name].values())
            )
            _, found = self._refold(cursor, whole, progress, locked=True)
            expected = {name: self.store.rows(cursor, name, existing) for name in whole}
        found.extend(self._undecodable(position, last, progress))
        if position > last:
            problems.append(
                f"the read models are at position {position}, past the end of "
                f"the log ({last}); rebuild them"
            )
        for name in self.names:
            if name in expected:
                problems.extend(
                    differences(name, position, stored[name], expected[name])
                )
            else:  # only its missing tables: its rows were not refolded
                missing = {t: r for t, r in stored[name].items() if r is None}
                problems.extend(differences(name, position, missing, missing))
        problems.extend(event.describe() for event in found)
        undecodable = {event.position for event in found}
        problems.extend(
            decodes_now(at) for at in sorted(recorded - undecodable) if at <= last
        )
        return Verification(
            ok=not problems,
            problems=[redact(problem) for problem in problems],
            position=last,
            read_models=self.names,
            positions=dict.fromkeys(self.names, position),
        )

    def _position_in(self, cursor: Cursor[DictRow]) -> int:
        """The read models' position as ``cursor``'s transaction sees it."""
        name = self.app.name
        return eventsourcing_internals.max_tracking_id(self.store, name, cursor) or 0

    def _chosen(self, names: Sequence[str] | None) -> tuple[str, ...]:
        if names is None:
            return self.names
        unknown_read_models(names, self.names)
        return tuple(dict.fromkeys(names))

    def _undecodable(
        self,
        after: int,
        last: int,
        progress: Callable[[int, int], None] | None,
    ) -> list[Unreadable]:
        """The events after position ``after``, up to ``last``, that cannot be
        decoded (the log the read models have not folded yet)."""
        found: list[Unreadable] = []
        mapper, recorder = self.app.mapper, self.app.recorder
        start = after + 1
        while start <= last:
            page = recorder.select_notifications(
                start=start, limit=PAGE_SIZE, stop=last
            )
            if not page:
                break
            for notification in page:
                try:
                    mapper.to_domain_event(notification)
                except Exception as error:  # whatever a foreign mapper raises
                    found.append(
                        Unreadable.from_error(notification, notification.id, error)
                    )
            start = page[-1].id + 1
            if progress is not None:
                progress(min(start - 1, last), last)
        return found

    def _refold(
        self,
        cursor: Cursor[DictRow],
        names: Sequence[str],
        progress: Callable[[int, int], None] | None,
        *,
        locked: bool = False,
    ) -> tuple[int, list[Unreadable]]:
        """Within ``cursor``'s transaction: empty the named read models and
        fold the log into them again, up to their position; the position and
        the events that could not be decoded."""
        if not locked:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        position = self._position_in(cursor)
        schema = self.store.datastore.schema or "public"
        for name in names:
            for table in self.views[name].tables:
                cursor.execute(
                    SQL("DELETE FROM {}.{}").format(
                        Identifier(schema), Identifier(table)
                    )
                )
        undecodable: list[Unreadable] = []
        mapper, recorder = self.app.mapper, self.app.recorder
        start = 1
        with folding(cursor):
            while start <= position:
                page = recorder.select_notifications(
                    start=start, limit=PAGE_SIZE, stop=position
                )
                if not page:
                    break
                for notification in page:
                    try:
                        domain_event = mapper.to_domain_event(notification)
                    except Exception as error:  # whatever a foreign mapper raises
                        undecodable.append(
                            Unreadable.from_error(notification, notification.id, error)
                        )
                        continue
                    tracking = Tracking(self.app.name, notification.id)
                    for projection, handler in self.store.handlers(
                        type(domain_event), names
                    ):
                        handler(projection, domain_event, tracking)
                start = page[-1].id + 1
                if progress is not None:
                    progress(min(start - 1, position), position)
        return position, undecodable


class PostgresDeliveries(DeliveryTables):
    """The deliveries in the application's PostgreSQL database (its tables
    are made with the read models', :data:`DDL`)."""

    claim_lock: ClassVar[str] = " FOR UPDATE OF d SKIP LOCKED"
    row_lock: ClassVar[str] = " FOR UPDATE"

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=True) as cursor:
            yield PgCursor(cursor)

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=False) as cursor:
            yield PgCursor(cursor)
