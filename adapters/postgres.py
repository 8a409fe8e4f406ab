"""eventsourcing's PostgreSQL persistence, with its tables created one process
at a time and events inserted in one round trip
(``PERSISTENCE_MODULE=devs.adapters.postgres:PostgresFactory``, which
``DEVS_DATABASE_URL`` selects). Imported only on PostgreSQL: it needs the
``postgres`` extra (psycopg)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from eventsourcing import postgres as es_postgres
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.utils import Environment, EnvType, retry
from psycopg.sql import SQL, Identifier

from devs.adapters.config import LIBPQ_OPTIONS
from devs.projections.pg import SerializedDDL


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
    which eventsourcing's own settings have no place for."""

    aggregate_recorder_class = PostgresAggregateRecorder
    application_recorder_class = PostgresApplicationRecorder
    tracking_recorder_class = PostgresTrackingRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        options = self.env.get(LIBPQ_OPTIONS)
        if options:
            # The pool is not open yet: its first connection has them too.
            kwargs = self.datastore.pool.kwargs
            assert isinstance(kwargs, dict), "eventsourcing gives its pool a dict"
            kwargs.update(parse_qsl(options, strict_parsing=True))
