"""eventsourcing's PostgreSQL persistence, with its tables created one process
at a time (``PERSISTENCE_MODULE=devs.adapters.postgres:PostgresFactory``,
which ``DEVS_DATABASE_URL`` selects). Imported only on PostgreSQL: it needs
the ``postgres`` extra (psycopg)."""

from __future__ import annotations

from eventsourcing import postgres as es_postgres

from devs.projections.pg import SerializedDDL


class PostgresAggregateRecorder(SerializedDDL, es_postgres.PostgresAggregateRecorder):
    """The snapshots' table."""


class PostgresApplicationRecorder(
    SerializedDDL, es_postgres.PostgresApplicationRecorder
):
    """The log's table."""


class PostgresTrackingRecorder(SerializedDDL, es_postgres.PostgresTrackingRecorder):
    """A tracking table."""


class PostgresFactory(es_postgres.PostgresFactory):
    aggregate_recorder_class = PostgresAggregateRecorder
    application_recorder_class = PostgresApplicationRecorder
    tracking_recorder_class = PostgresTrackingRecorder
