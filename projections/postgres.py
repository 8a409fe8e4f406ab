"""The PostgreSQL read models, kept by eventsourcing's ``ProjectionRunner``.

On PostgreSQL the read models are not caught up inside queries. A
``ProjectionRunner`` follows the application's log (a subscription woken by
``LISTEN``/``NOTIFY``) and feeds the events to :class:`ReadModelsProjection`,
which folds them into every read model's tables and records the position, all
in one transaction per batch of events already fetched (:class:`PostgresViews`,
:class:`ReadModelsRunner`). The runner lives in each process
that opens the service (``DEVS_PROJECTIONS=runner``, the default: every
``devs serve`` worker, a script) or in a separate ``devs project`` worker
(``DEVS_PROJECTIONS=external`` for the others). Any number of runners may
follow one database: each fold first takes a transaction-scoped advisory lock
and skips an event another runner already folded, so every event is folded
once.

A query waits, bounded by ``DEVS_READ_WAIT`` seconds, until the runner has
folded the log as it ended when the query began: the Python API reads its own
writes on PostgreSQL as on SQLite.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from queue import Queue
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, StoredEvent, Tracking
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
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from devs.domain.database import PROJECTIONS_ENV, READ_WAIT_ENV, read_wait
from devs.domain.errors import DevsError, InvalidInput, StoreError, UnreadableEvent
from devs.domain.ports import Verification
from devs.domain.redaction import redact
from devs.projections.base import Handler, ReadModelProjection, differences
from devs.projections.pg import (
    DDL_LOCK,
    POSTGRES,
    PostgresView,
    SerializedDDL,
    folding,
)
from devs.projections.queries import ViewQueries

PROJECTION_NAME = "devs_views"
TRACKING_TABLE = f"{PROJECTION_NAME}_tracking"
SCHEMA_TABLE = f"{PROJECTION_NAME}_schema"
LOCK_KEY = 0x64657673_76696577  # "devsview": one fold at a time, per database
PAGE_SIZE = 500
MODE_ENV = PROJECTIONS_ENV
MODES = ("runner", "external")

logger = logging.getLogger("devs.read_models")


class Undecodable:
    """An event the runner could not decode: folded into nothing, its position
    recorded (``devs verify`` reports it)."""

    def __init__(self, stored: StoredEvent) -> None:
        self.originator_id = stored.originator_id
        self.originator_version = stored.originator_version


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
        with (
            self.datastore.get_connection() as connection,
            connection.pipeline(),
            connection.transaction(),
            connection.cursor() as cursor,
        ):
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            current = self._max_tracking_id(name, cursor) or 0
            with folding(cursor):
                for domain_event, tracking in events:
                    if tracking.notification_id <= current:
                        continue
                    for projection, handler in self.handlers(type(domain_event)):
                        handler(projection, domain_event, tracking)
                    folded += 1
            last = events[-1][1]
            if last.notification_id > current:
                self._insert_tracking(cursor, last)
        return folded

    def rows(self, cursor: Cursor[DictRow], name: str) -> dict[str, Counter[Any]]:
        """Each table of read model ``name``, as a multiset of rows."""
        found: dict[str, Counter[Any]] = {}
        for table in self.views[name].tables:
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
    pulled = subscription.subscription
    try:
        page: Sequence[Any] = pulled._notifications  # type: ignore[attr-defined]
        index: int = pulled._notifications_index  # type: ignore[attr-defined]
        queue: Queue[Any] = pulled._notifications_queue  # type: ignore[attr-defined]
    except AttributeError:  # another subscription class: one event at a time
        return False
    return index < len(page) or not queue.empty()


class ReadModelsRunner(ProjectionRunner[Application[Any], PostgresViews]):
    """eventsourcing's ``ProjectionRunner`` (its LISTEN/NOTIFY subscription,
    threads and error handling), folding in one transaction the events its
    subscription has already fetched, up to a page, instead of one
    transaction per event: under load the read models keep up with the log
    (docs/performance.md)."""

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
                found._thread_error = error
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
                except UnreadableEvent as error:
                    logger.error("read models: event left out: %s", error)
                    return Undecodable(stored)

            mapper.to_domain_event = tolerant  # type: ignore[method-assign,assignment]
            return mapper

    RecoveryLog.name = name
    return RecoveryLog


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
        self.wait = read_wait(app.env.get(READ_WAIT_ENV))
        self.store = PostgresViews(app.factory.datastore)
        self.store.create_table()
        self.views: dict[str, Any] = dict(self.store.views)
        self.names = tuple(self.views)
        self._runner: ReadModelsRunner | None = None
        self._runner_lock = threading.Lock()
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
        """Restart a runner that stopped on an error (the database went away)."""
        runner = self._runner
        if runner is None or not runner.is_interrupted.is_set():
            return
        with self._runner_lock:
            if self._runner is not runner:
                return
            try:
                runner.run_forever(timeout=0)
            except Exception as error:
                logger.warning("read models' runner stopped (%s); restarting", error)
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
                logger.warning("read models' runner cannot start yet (%s)", error)

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop()
            runner.app.close()
            runner.view.datastore.close()

    # ------------------------------------------------------------ positions

    def position(self) -> int:
        return self.store.max_tracking_id(self.app.name) or 0

    def positions(self) -> dict[str, int]:
        position = self.position()
        return dict.fromkeys(self.names, position)

    def catch_up(self) -> int:
        """Wait until the runner folded the log as it ends now; the position."""
        return self.catch_up_to(self.app.recorder.max_notification_id() or 0)

    def catch_up_to(self, target: int) -> int:
        deadline = time.monotonic() + self.wait
        pause = 0.0005
        while True:
            position = self.position()
            if position >= target:
                return position
            self._check_runner()
            if time.monotonic() >= deadline:
                where = (
                    "this process's runner is behind"
                    if self._runner is not None
                    else "is a `devs project` worker running?"
                )
                msg = (
                    f"the read models reached position {position}, not {target}, "
                    f"within {self.wait:g} s ({READ_WAIT_ENV}); {where}"
                )
                raise StoreError(msg)
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    # ------------------------------------------------- rebuilding, verifying

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Refold the named read models from position 0 in one transaction:
        queries see the old rows until it commits; runners wait for it."""
        chosen = self._chosen(names)
        with self.store.datastore.transaction(commit=True) as cursor:
            position, _ = self._refold(cursor, chosen, progress)
        return position

    def verify(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Verification:
        """Refold every read model inside a transaction that is rolled back,
        and compare with the rows it held: writes nothing."""
        problems: list[str] = []
        last = self.app.recorder.max_notification_id() or 0
        with self.store.datastore.transaction(commit=False) as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            position = self.store._max_tracking_id(self.app.name, cursor) or 0
            stored = {name: self.store.rows(cursor, name) for name in self.names}
            _, undecodable = self._refold(cursor, self.names, progress, locked=True)
            expected = {name: self.store.rows(cursor, name) for name in self.names}
        if position > last:
            problems.append(
                f"the read models are at position {position}, past the end of "
                f"the log ({last}); rebuild them"
            )
        for name in self.names:
            problems.extend(differences(name, position, stored[name], expected[name]))
        problems.extend(
            f"event at log position {found} cannot be decoded; the read models "
            "leave it out"
            for found in undecodable
            if found <= position
        )
        return Verification(
            ok=not problems,
            problems=[redact(problem) for problem in problems],
            position=last,
            read_models=self.names,
            positions=dict.fromkeys(self.names, position),
        )

    def _chosen(self, names: Sequence[str] | None) -> tuple[str, ...]:
        if names is None:
            return self.names
        unknown = [name for name in names if name not in self.views]
        if unknown:
            msg = (
                f"no read model named {unknown[0]!r:.80}; "
                f"there are {', '.join(self.names)}"
            )
            raise InvalidInput(msg, field="names")
        return tuple(dict.fromkeys(names))

    def _refold(
        self,
        cursor: Cursor[DictRow],
        names: Sequence[str],
        progress: Callable[[int, int], None] | None,
        *,
        locked: bool = False,
    ) -> tuple[int, list[int]]:
        """Within ``cursor``'s transaction: empty the named read models and
        fold the log into them again, up to their position; the position and
        the log positions of the events that could not be decoded."""
        if not locked:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        position = self.store._max_tracking_id(self.app.name, cursor) or 0
        schema = self.store.datastore.schema or "public"
        for name in names:
            for table in self.views[name].tables:
                cursor.execute(
                    SQL("DELETE FROM {}.{}").format(
                        Identifier(schema), Identifier(table)
                    )
                )
        undecodable: list[int] = []
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
                    except UnreadableEvent:
                        undecodable.append(notification.id)
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
