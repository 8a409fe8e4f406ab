"""eventsourcing's PostgreSQL persistence, with its tables created one process
at a time and events inserted in one round trip
(``PERSISTENCE_MODULE=devs.adapters.store.postgres:PostgresFactory``, which
``DEVS_DATABASE_URL`` selects). Imported only on PostgreSQL: it needs the
``postgres`` extra (psycopg)."""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import psycopg
from eventsourcing import postgres as es_postgres
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.utils import Environment, EnvType, retry
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier
from psycopg_pool import PoolTimeout, TooManyRequests

from devs.adapters.config import (
    DEFAULT_STORE_TIMEOUT,
    LIBPQ_OPTIONS,
    STORE_TIMEOUT_ENV,
)
from devs.adapters.store import errors
from devs.domain.commands import STORE_WAIT
from devs.domain.errors import StoreUnavailable
from devs.projections.pg import SerializedDDL

# ------------------------------------------------------ reaching the database

PERMANENT = re.compile(
    r"does not exist|password authentication failed|no pg_hba\.conf entry"
    r"|permission denied|not permitted to log in|authentication failed"
    r"|invalid sslmode value|invalid (?:URI query parameter|connection option)"
    r"|server does not support SSL|certificate verify failed",
    re.IGNORECASE,
)
"""libpq's reasons that waiting will not mend: the setting must change. (A
connection error carries no SQLSTATE; libpq's words are all there is.) A host
name that does not resolve is not one: a stopped container's name stops
resolving until it is started again."""
PROBE_EVERY = 0.5
"""While the database is away, one attempt to connect per process at most
this often, whatever the number of requests waiting."""
MIN_CONNECT_TIMEOUT = 2
"""libpq treats a ``connect_timeout`` below 2 s as 2 s."""


def reason_of(error: BaseException) -> str:
    """libpq's reason for a failed connection, on one line (it never holds
    the password: libpq does not repeat it)."""
    text = " ".join(str(error).split())
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text[:500] or type(error).__name__


@dataclass(frozen=True)
class Failure:
    """One failed attempt to connect."""

    at: float  # time.monotonic()
    reason: str
    permanent: bool


class StoreHealth:
    """What the attempts to connect to one database said last, shared by
    the pool's threads (which connect) and the requests (which wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failure: Failure | None = None
        self.reached = False
        """Whether an attempt to connect has succeeded since the last failed."""

    def failed(self, error: BaseException) -> Failure:
        reason = reason_of(error)
        failure = Failure(time.monotonic(), reason, bool(PERMANENT.search(reason)))
        with self._lock:
            self.failure, self.reached = failure, False
        return failure

    def connected(self) -> None:
        with self._lock:
            self.failure, self.reached = None, True

    @property
    def healthy(self) -> bool:
        """The last attempt to connect succeeded: wait in the pool's queue."""
        return self.reached


def recording(
    health: StoreHealth, base: type[psycopg.Connection[DictRow]]
) -> type[psycopg.Connection[DictRow]]:
    """A connection class whose ``connect`` (what the pool calls, in its own
    threads) tells ``health`` how it went: psycopg's pool logs the reason
    only, and eventsourcing silences that log."""

    class Recording(base):  # type: ignore[valid-type,misc]
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                connection = super().connect(*args, **kwargs)
            except psycopg.OperationalError as error:
                health.failed(error)
                raise
            health.connected()
            return connection

    return Recording


class BoundedPool(es_postgres.ConnectionPool[psycopg.Connection[DictRow]]):
    """eventsourcing's pool, whose wait for a connection is bounded and says
    why it failed (:func:`bound` makes a datastore's pool one).

    While the last attempt to connect succeeded, a request waits in the
    pool's queue as usual, at most the time it has left. Otherwise (the
    database is away, refuses, or was never reached by this process) it
    does not queue: one attempt to connect at a time, at most every
    :data:`PROBE_EVERY`, finds out for every request waiting, and a request
    goes to the pool once one succeeds. psycopg's pool keeps a waiter that
    timed out in its queue until a connection is handed out, and backs off
    its own attempts for up to a minute: neither grows nor slows while the
    database is away.

    The waits of one call of the service (a command or a query: the domain's
    ``STORE_WAIT``) are bounded together, not each on its own: a command
    that loads its task, loses its connection, is tried again by
    eventsourcing's recorder (ten times, 0.2 s apart) and then checks the
    store for newer events waited for a connection three times or more,
    each up to the store timeout (14.4 s where 5 s was allowed). Here the
    time spent waiting adds up, and once the store has failed the call (no
    connection in time, or one lost under it) the call has what was left of
    the timeout, in all, and then none: every later wait of the call fails at
    once. A call past its timeout that never met a failure (a long rebuild)
    still takes a connection that is free at once."""

    health: StoreHealth
    store_timeout: float
    where: str
    _probe_lock: threading.Lock
    _probed_at: float
    _probing: threading.Event | None

    def getconn(self, timeout: float | None = None) -> Any:
        """A connection within ``timeout`` seconds (default: the store
        timeout) and within what the call has left of it, or
        :class:`~devs.domain.errors.StoreUnavailable` naming libpq's reason:
        at once when the reason is one waiting will not mend."""
        call = STORE_WAIT.get()
        started = time.monotonic()
        budget = self.store_timeout if timeout is None else timeout
        deadline = started + budget
        if call is not None:
            budget = self.store_timeout  # what the message says was allowed
            if call.deadline is not None:
                deadline = min(deadline, call.deadline)
            else:
                deadline = min(deadline, started + self.store_timeout - call.waited)
        try:
            if call is not None and call.deadline is not None and started >= deadline:
                reason = self._reason() or call.reason or "the connection was lost"
                raise self._unavailable(budget, reason)  # the call's time is spent
            return self._wait(budget, deadline)
        except StoreUnavailable as error:
            if call is not None:  # nothing more to wait for in this call
                call.deadline = time.monotonic()
                call.reason = call.reason or str(error)
            raise
        finally:
            if call is not None and call.deadline is None:
                call.waited += time.monotonic() - started

    def putconn(self, conn: Any) -> None:
        """psycopg's; a connection given back lost (the database went away
        under the statement) starts the call's last wait: what it had left of
        the store timeout, from now, in all."""
        call = STORE_WAIT.get()
        if call is not None and call.deadline is None and conn.broken:
            left = max(0.0, self.store_timeout - call.waited)
            call.deadline = time.monotonic() + left
            call.reason = "the connection to it was lost"
        super().putconn(conn)

    def _wait(self, budget: float, deadline: float) -> Any:
        while True:
            remaining = deadline - time.monotonic()
            if self.health.healthy:
                try:
                    return super().getconn(timeout=max(0.001, remaining))
                except TooManyRequests as error:
                    raise self._unavailable(budget, reason_of(error)) from None
                except PoolTimeout:
                    if self.health.healthy:  # it answers: every connection in use
                        raise self._unavailable(budget, None) from None
                    continue  # it went away meanwhile: find out below
            failure = self._probe(deadline)
            if failure is None:
                continue  # reached: to the pool
            if failure.permanent:
                raise self._refused(failure) from None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._unavailable(budget, failure.reason) from None
            time.sleep(min(PROBE_EVERY, remaining))

    def _reason(self) -> str | None:
        failure = self.health.failure
        return failure.reason if failure is not None else None

    def _probe(self, deadline: float) -> Failure | None:
        """Attempt to connect, outside the pool, unless an attempt is under
        way or the last began less than :data:`PROBE_EVERY` ago; wait for
        the attempt under way until ``deadline`` at most (libpq's own
        ``connect_timeout`` is 2 s at least, and an attempt to a host that
        does not answer takes that long: it goes on in a thread of its own).
        The failure, or ``None`` once the database is reached."""
        with self._probe_lock:
            probing = self._probing
            if probing is None and time.monotonic() - self._probed_at >= PROBE_EVERY:
                self._probed_at = time.monotonic()
                probing = self._probing = threading.Event()
                threading.Thread(
                    target=self._attempt,
                    args=(probing,),
                    name="devs-pg-probe",
                    daemon=True,
                ).start()
        if probing is not None:
            probing.wait(max(0.0, deadline - time.monotonic()))
        if self.health.healthy:
            return None
        return self.health.failure or Failure(
            time.monotonic(), "no answer from PostgreSQL yet", False
        )

    def _attempt(self, done: threading.Event) -> None:
        """One attempt to connect (the connection class records how it went)."""
        try:
            assert isinstance(self.kwargs, dict)
            kwargs = dict(self.kwargs)
            if self.get_password_func is not None:  # eventsourcing's refresh
                kwargs["password"] = self.get_password_func()
            with contextlib.suppress(psycopg.Error):
                self.connection_class.connect(**kwargs).close()
        finally:
            with self._probe_lock:
                self._probing = None
            done.set()

    def _refused(self, failure: Failure) -> StoreUnavailable:
        msg = (
            f"PostgreSQL refuses the connection to {self.where}: {failure.reason}; "
            "check DEVS_DATABASE_URL"
        )
        return StoreUnavailable(msg, retry_after=REFUSED_RETRY_AFTER)

    def _unavailable(self, budget: float, reason: str | None) -> StoreUnavailable:
        if reason is None:  # the database answers: every connection is in use
            why = f"all {self.max_size} connections of this process stayed in use"
            retry_after = 1.0
        else:
            why = f"PostgreSQL is unreachable: {reason}"
            retry_after = budget
        msg = (
            f"{why} ({self.where}; no connection within {budget:g} s, "
            f"{STORE_TIMEOUT_ENV}={self.store_timeout:g})"
        )
        return StoreUnavailable(msg, retry_after=retry_after)


REFUSED_RETRY_AFTER = 30.0
"""A refusal lasts until someone fixes the setting: ask again this late."""
RECONNECT_GIVE_UP = 2.0
"""The pool's own attempts to replace a connection lost are given up this
late (psycopg_pool backs off 1, 2, 4, … s for five minutes by default): once
the database is back, the next request's wait starts a fresh one at once."""


def bound(datastore: es_postgres.PostgresDatastore, timeout: float) -> BoundedPool:
    """Make ``datastore``'s pool (not open yet) a :class:`BoundedPool`: a wait
    for a connection bounded in all by ``timeout`` seconds
    (``DEVS_STORE_TIMEOUT``), which says why it failed.

    eventsourcing waits ``POSTGRES_CONNECT_TIMEOUT`` (30 s) for its pool's
    connection, and its recorders try again ten times: minutes. Here a
    request waits at most ``timeout`` seconds and then raises
    :class:`~devs.domain.errors.StoreUnavailable` with libpq's reason: at
    once when the reason is one waiting will not mend (a database that does
    not exist, a wrong password). That error is not one of the driver's, so
    eventsourcing's recorders do not try again. Nothing needs a restart: a
    request after the database is back gets its connection.
    """
    pool = datastore.pool
    pool_kwargs = pool.kwargs
    assert isinstance(pool_kwargs, dict), "eventsourcing gives its pool a dict"
    health = StoreHealth()
    pool.__class__ = BoundedPool  # the same pool, its getconn bounded
    assert isinstance(pool, BoundedPool)
    pool.health = health
    pool.store_timeout = timeout
    pool._probe_lock = threading.Lock()
    pool._probed_at = -math.inf
    pool._probing = None
    pool.where = (
        f"database {pool_kwargs.get('dbname')!r} on "
        f"{pool_kwargs.get('host')}:{pool_kwargs.get('port')}"
    )
    pool.connection_class = recording(health, pool.connection_class)
    pool.timeout = timeout
    pool.reconnect_timeout = RECONNECT_GIVE_UP
    pool_kwargs.setdefault(
        "connect_timeout", max(MIN_CONNECT_TIMEOUT, math.floor(timeout))
    )
    return pool


def health_of(datastore: es_postgres.PostgresDatastore) -> StoreHealth | None:
    """What the attempts to connect to ``datastore``'s database said last."""
    pool = datastore.pool
    return pool.health if isinstance(pool, BoundedPool) else None


class PostgresAggregateRecorder(SerializedDDL, es_postgres.PostgresAggregateRecorder):
    """The snapshots' table."""


class PostgresApplicationRecorder(
    SerializedDDL, es_postgres.PostgresApplicationRecorder
):
    """The log's table, written by one prepared statement per save.

    eventsourcing's recorder sends a save as a pipelined transaction of five
    statements (``BEGIN``, ``SET LOCAL lock_timeout``, ``LOCK TABLE … IN
    EXCLUSIVE MODE``, ``NOTIFY``, the ``INSERT``) and a ``COMMIT``. Here the
    same statements are the body of one PL/pgSQL function, created with the
    table and called on an autocommit connection: one round trip and one
    transaction, about twice the saves per second on this machine (see
    docs/performance.md). The table lock is kept, so the order of commits is
    the order of notification ids, which the projection runners rely on
    (eventsourcing's own ``POSTGRES_ENABLE_DB_FUNCTIONS`` function leaves it
    out). Saves that carry tracking, or with that setting on, take
    eventsourcing's own path.
    """

    def __init__(
        self,
        datastore: es_postgres.PostgresDatastore,
        *,
        events_table_name: str = "stored_events",
    ) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self.insert_function_name = f"devs_insert_{self.events_table_name}"
        self.check_identifier_length(self.insert_function_name)
        schema = Identifier(datastore.schema or "public")
        function = Identifier(self.insert_function_name)
        id_type = SQL(datastore.originator_id_type)
        self.sql_create_statements.append(
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.{function}("
                "ids {id_type}[], versions bigint[], topics text[], states bytea[]) "
                "RETURNS SETOF bigint LANGUAGE plpgsql AS $BODY$ "
                "BEGIN "
                "SET LOCAL lock_timeout = '{lock_timeout}s'; "
                "LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE; "
                "NOTIFY {channel}; "
                "RETURN QUERY INSERT INTO {schema}.{table} "
                "(originator_id, originator_version, topic, state) "
                "SELECT * FROM unnest(ids, versions, topics, states) "
                "RETURNING notification_id; "
                "END; $BODY$"
            ).format(
                schema=schema,
                function=function,
                id_type=id_type,
                lock_timeout=datastore.lock_timeout,
                table=Identifier(self.events_table_name),
                channel=Identifier(self.channel_name),
            )
        )
        self.insert_call = SQL(
            "SELECT {schema}.{function}"
            "(%s::{id_type}[], %s::bigint[], %s::text[], %s::bytea[]) AS id"
        ).format(schema=schema, function=function, id_type=id_type)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        kwargs.pop("decoded", None)  # the events as the commands hold them
        if (
            any(value is not None for value in kwargs.values())  # tracking
            or self.datastore.enable_db_functions
            or not stored_events
        ):
            ids: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return ids
        columns = (
            [event.originator_id for event in stored_events],
            [event.originator_version for event in stored_events],
            [event.topic for event in stored_events],
            [event.state for event in stored_events],
        )
        with self.datastore.get_connection() as connection:
            rows = connection.execute(self.insert_call, columns, prepare=True)
            return [int(row["id"]) for row in rows.fetchall()]


class PostgresTrackingRecorder(SerializedDDL, es_postgres.PostgresTrackingRecorder):
    """A tracking table."""


class PostgresFactory(es_postgres.PostgresFactory):
    """eventsourcing's factory, its recorders ours; every connection also
    gets the libpq parameters of ``DEVS_DATABASE_URL`` beyond its parts
    (``sslmode``, ``application_name``, ...: ``POSTGRES_LIBPQ_OPTIONS``),
    which eventsourcing's own settings have no place for, and a request's
    wait for a connection is bounded by ``DEVS_STORE_TIMEOUT`` (:func:`bound`)."""

    aggregate_recorder_class = PostgresAggregateRecorder
    application_recorder_class = PostgresApplicationRecorder
    tracking_recorder_class = PostgresTrackingRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        errors.install()
        options = self.env.get(LIBPQ_OPTIONS)
        if options:
            # The pool is not open yet: its first connection has them too.
            kwargs = self.datastore.pool.kwargs
            assert isinstance(kwargs, dict), "eventsourcing gives its pool a dict"
            kwargs.update(parse_qsl(options, strict_parsing=True))
        timeout = float(self.env.get(STORE_TIMEOUT_ENV) or DEFAULT_STORE_TIMEOUT)
        self.store_timeout = timeout
        """The longest one command or query waits for the store in all (the
        domain's ``StoreWait`` reads it)."""
        bound(self.datastore, timeout)
