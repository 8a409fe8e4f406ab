"""The embedded PostgreSQL server the tests use, end to end with eventsourcing."""

from __future__ import annotations

import itertools
import stat
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from eventsourcing.application import Application
from eventsourcing.domain import (
    BaseAggregate,
    CanInitAggregate,
    CanMutateAggregate,
    DomainEventProtocol,
    MetaDomainEvent,
    event,
)
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from eventsourcing.utils import get_topic
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from tests.postgres import (
    PostgresServer,
    create_database,
    drop_database,
    eventsourcing_env,
)

_numbers = itertools.count()


@pytest.fixture
def pg_dbname(pg_server: PostgresServer) -> Iterator[str]:
    name = f"test_{next(_numbers)}"
    create_database(pg_server, name)
    yield name
    drop_database(pg_server, name)


# ---------------------------------------------------------------- a tiny app


class ItemEvent(CanMutateAggregate[str], metaclass=MetaDomainEvent):
    """eventsourcing's own DomainEvent insists on UUIDs: these have text ids."""

    originator_id: str
    originator_version: int
    timestamp: datetime


class ItemCreated(ItemEvent, CanInitAggregate[str]):
    originator_topic: str


class Item(BaseAggregate[str]):
    class Event(ItemEvent):
        pass

    class Created(Event, ItemCreated):
        name: str

    @staticmethod
    def create_id(name: str) -> str:
        return f"item-{name}"

    @event("Created")
    def __init__(self, name: str) -> None:
        self.name = name
        self.notes: list[str] = []

    @event("Noted")
    def note(self, text: str) -> None:
        self.notes.append(text)


class Items(Application[str]):
    env = {"ORIGINATOR_ID_TYPE": "text"}

    def create(self, name: str) -> str:
        item = Item(name)
        self.save(item)
        return item.id

    def note(self, item_id: str, text: str) -> None:
        item: Item = self.repository.get(item_id)
        item.note(text)
        self.save(item)

    def notes(self, item_id: str) -> list[str]:
        item: Item = self.repository.get(item_id)
        return list(item.notes)


# ------------------------------------------------- a view in its own table


class NotesView(PostgresTrackingRecorder):
    """A materialised view: one table, written with the tracking record."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notes_table = f"{self.tracking_table_name}_notes"
        self.check_identifier_length(self.notes_table)
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {}.{} "
                "(item_id text PRIMARY KEY, notes integer NOT NULL)"
            ).format(Identifier(self.datastore.schema), Identifier(self.notes_table))
        )

    def count_note(self, item_id: str, tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "INSERT INTO {}.{} VALUES (%s, 1) ON CONFLICT (item_id) "
                    "DO UPDATE SET notes = {}.notes + 1"
                ).format(
                    Identifier(self.datastore.schema),
                    Identifier(self.notes_table),
                    Identifier(self.notes_table),
                ),
                (item_id,),
            )
            self._insert_tracking(curs, tracking)  # same transaction

    def notes_of(self, item_id: str) -> int:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                SQL("SELECT notes FROM {}.{} WHERE item_id = %s").format(
                    Identifier(self.datastore.schema), Identifier(self.notes_table)
                ),
                (item_id,),
            )
            row: DictRow | None = curs.fetchone()
            return 0 if row is None else int(row["notes"])


class CountNotes(Projection[NotesView]):
    name = "countnotes"  # env prefix and table names: countnotes_tracking...
    topics = (get_topic(Item.Noted),)  # type: ignore[attr-defined]

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        noted: DomainEventProtocol[str] = domain_event
        self.view.count_note(noted.originator_id, tracking)


# --------------------------------------------------------------------- tests


def test_server_listens_on_a_unix_socket_only(pg_server: PostgresServer) -> None:
    socket = pg_server.socket_dir / f".s.PGSQL.{pg_server.port}"
    assert stat.S_ISSOCK(socket.stat().st_mode)
    with pg_server.connect() as conn:
        row = conn.execute("SELECT current_setting('listen_addresses')").fetchone()
    assert row == ("",)


def test_created_database_is_empty_and_reachable_by_url(
    pg_server: PostgresServer, pg_dbname: str
) -> None:
    url = pg_server.url(pg_dbname)
    assert url == (
        f"postgresql://{pg_server.user}@/{pg_dbname}"
        f"?host={pg_server.socket_dir}&port={pg_server.port}"
    )
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT current_database(), count(*) FROM pg_tables "
            "WHERE schemaname = 'public'"
        ).fetchone()
    assert row == (pg_dbname, 0)


@pytest.mark.parametrize("db_functions", ["n", "y"])
def test_application_with_text_ids(
    pg_server: PostgresServer, pg_dbname: str, db_functions: str
) -> None:
    env = eventsourcing_env(pg_server, pg_dbname)
    env["POSTGRES_ENABLE_DB_FUNCTIONS"] = db_functions
    app = Items(env)
    try:
        assert isinstance(app.recorder, PostgresApplicationRecorder)
        assert app.recorder.datastore.originator_id_type == "text"
        assert app.recorder.datastore.enable_db_functions is (db_functions == "y")
        item_id = app.create("a")
        app.note(item_id, "one")
        app.note(item_id, "two")
        assert item_id == "item-a"
        assert app.notes(item_id) == ["one", "two"]
        assert app.recorder.max_notification_id() == 3
    finally:
        app.close()

    with pg_server.connect(pg_dbname) as conn:
        column = conn.execute(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_name = 'items_events' AND column_name = 'originator_id'"
        ).fetchone()
        functions = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'es_insert_events_text'"
        ).fetchone()
    assert column == ("text",)
    assert functions == (1,)

    again = Items(env)  # a new process would see the same events
    try:
        assert again.notes("item-a") == ["one", "two"]
    finally:
        again.close()


def test_projection_runner_follows_by_listen_notify(
    pg_server: PostgresServer, pg_dbname: str
) -> None:
    env = eventsourcing_env(pg_server, pg_dbname)
    with ProjectionRunner(
        application_class=Items,
        projection_class=CountNotes,
        view_class=NotesView,
        env=env,
    ) as runner:
        app: Items = runner.app
        item_id = app.create("b")
        app.note(item_id, "one")
        app.note(item_id, "two")
        last = app.recorder.max_notification_id()
        runner.wait(last, timeout=10)
        assert runner.view.notes_of(item_id) == 2
        assert runner.view.max_tracking_id(app.name) == last
