"""The runs view keeps a run's edges by node position (``run_links``, schema
v5), not by id (``run_edges``, v4 and before); a database written by v4, with
runs in flight, goes on: SQLite remakes the view from the log (and drops
``run_edges``), PostgreSQL moves the edges into ``run_links`` when the new
release first opens it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg

from devs.adapters.config import Settings, open_service
from devs.domain import RecoveryService
from devs.projections.pg import pg_ddl
from devs.projections.runs import RunsTables

LONG = "n" * 190
FIRST = {"a": [], "b": ["a"], "c": ["a", "b"], "d": ["c"], LONG: ["a", "d"]}
SECOND = {"d": [], "c": ["d"], "b": ["c"], "a": ["b", "d"]}
"""Two runs in flight with the same node ids at other positions: an edge is
its own run's."""

V4_EDGES_DDL = (
    "CREATE TABLE IF NOT EXISTS run_edges ("
    "run_id TEXT NOT NULL, "
    "prerequisite TEXT NOT NULL, "
    "node_id TEXT NOT NULL, "
    "ordinal INTEGER NOT NULL, "
    "PRIMARY KEY (run_id, prerequisite, node_id))",
    "CREATE INDEX IF NOT EXISTS run_edges_node ON run_edges (run_id, node_id)",
)
"""Schema v4's edges table, as that release made it."""

V4_ROWS = [
    (run_id, prerequisite, node, ordinal)
    for run_id, dag in (("r1", FIRST), ("r2", SECOND))
    for node, prerequisites in dag.items()
    for ordinal, prerequisite in enumerate(prerequisites)
]
"""The rows v4 folded for both runs: each edge by its two ids."""


def _in_flight(service: RecoveryService) -> None:
    """Two runs started, the first with ``a`` passed (``b`` ready, ``c``
    still waiting for ``b``)."""
    service.start_run("r1", FIRST)
    service.start_run("r2", SECOND)
    service.start_task("a", run_id="r1")
    service.record_gate("a", 0, gate="tests")


def _states(service: RecoveryService) -> dict[str, dict[str, Any]]:
    found = {}
    for run_id in ("r1", "r2"):
        state = service.run_state(run_id)
        assert state is not None
        found[run_id] = state.model_dump(mode="json", exclude={"updated_at"})
    return found


def _goes_on(service: RecoveryService) -> None:
    """Settling a prerequisite still readies what waits for it, in its run."""
    state = service.run_state("r1")
    assert state.ready == ("b",)
    service.start_task("b", run_id="r1")
    service.record_gate("b", 0, gate="tests")
    assert service.run_state("r1").ready == ("c",)  # waited for a and b
    service.start_task("c", run_id="r1")
    service.record_gate("c", 0, gate="tests")
    assert service.run_state("r1").ready == ("d",)
    service.start_task("d", run_id="r1")
    service.record_gate("d", 0, gate="tests")
    assert service.run_state("r1").ready == (LONG,)
    assert service.run_state("r2").ready == ("d",)  # the other run did not move
    report = service.verify()
    assert report.ok, report.problems


def test_edges_are_kept_as_positions(db_path: Path) -> None:
    with open_service(Settings(db=str(db_path))) as service:
        service.start_run("r1", FIRST)
        state = service.run_state("r1")
        assert state.dag == {node: tuple(before) for node, before in FIRST.items()}
        position = {node: index for index, node in enumerate(state.order)}
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute(
            "SELECT run_id, prerequisite, node, ordinal, typeof(prerequisite), "
            "typeof(node) FROM run_links ORDER BY node, ordinal"
        ).fetchall()
        tables = {
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            )
        }
    assert rows == sorted(
        (
            ("r1", position[before], position[node], ordinal, "integer", "integer")
            for node, prerequisites in FIRST.items()
            for ordinal, before in enumerate(prerequisites)
        ),
        key=lambda row: (row[2], row[3]),
    )
    assert "run_edges" not in tables


def test_the_largest_dags_edges_hold_no_ids(db_path: Path) -> None:
    """An edge costs a few integers however long its nodes' ids."""
    nodes = [f"{i:04d}".rjust(200, "x") for i in range(200)]
    dag = {node: nodes[max(0, i - 10) : i] for i, node in enumerate(nodes)}
    with open_service(Settings(db=str(db_path))) as service:
        service.start_run("wide", dag)
        assert service.run_state("wide").dag == {
            node: tuple(before) for node, before in dag.items()
        }
    with sqlite3.connect(db_path) as connection:
        (longest,) = connection.execute(
            "SELECT max(length(prerequisite) + length(node)) FROM run_links"
        ).fetchone()
    assert longest <= 6


def test_a_sqlite_file_of_schema_v4_goes_on(db_path: Path) -> None:
    """A file whose runs view is v4 (``run_edges``) is remade from the log
    when the new release opens it: ``run_edges`` is dropped, the runs in
    flight read and move on as before."""
    with open_service(Settings(db=str(db_path))) as service:
        _in_flight(service)
        before = _states(service)
    with sqlite3.connect(db_path) as connection:
        links = connection.execute("SELECT * FROM run_links").fetchall()
        connection.execute("DROP TABLE run_links")
        for statement in V4_EDGES_DDL:
            connection.execute(statement)
        connection.executemany("INSERT INTO run_edges VALUES (?, ?, ?, ?)", V4_ROWS)
        v4 = f"RecoveryService/runs.v{RunsTables.schema_version - 1}"
        for suffix in ("", "#generation"):
            connection.execute(
                "UPDATE tracking SET application_name = ? WHERE application_name = ?",
                (v4 + suffix, RunsTables.tracking_name_for("RecoveryService") + suffix),
            )
    with open_service(Settings(db=str(db_path))) as upgraded:
        assert _states(upgraded) == before
        with sqlite3.connect(db_path) as connection:
            assert sorted(connection.execute("SELECT * FROM run_links")) == sorted(
                links
            )
            assert not connection.execute(
                "SELECT name FROM sqlite_master WHERE name LIKE 'run_edges%'"
            ).fetchall()
        _goes_on(upgraded)


def _to_v4(url: str) -> list[tuple[Any, ...]]:
    """Turn the runs view of the database at ``url`` into schema v4's (the
    edges by id, in ``run_edges``, as that release wrote them) and forget
    that this release's statements ran on it; the ``run_links`` rows it had."""
    with psycopg.connect(url, autocommit=True) as pg:
        links = pg.execute("SELECT * FROM run_links").fetchall()
        with pg.transaction():
            pg.execute("DROP TABLE run_links")
            for statement in V4_EDGES_DDL:
                pg.execute(pg_ddl(statement).encode())
            with pg.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO run_edges VALUES (%s, %s, %s, %s)", V4_ROWS
                )
            # v4's statements differ: this release's have not run there yet.
            pg.execute("DELETE FROM devs_views_schema")
    return links


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as pg:
        return {
            row[0]
            for row in pg.execute(
                "SELECT tablename FROM pg_catalog.pg_tables "
                "WHERE schemaname = current_schema()"
            )
        }


def test_a_postgresql_database_of_schema_v4_goes_on(pg_url: str) -> None:
    """The new release's first opening moves v4's edges (ids) into
    ``run_links`` (positions, read from ``run_nodes``) and drops ``run_edges``,
    in the transaction that runs its statements: the runs in flight read the
    same DAG and settle as before, with no rebuild."""
    settings = Settings(database_url=pg_url)
    with open_service(settings) as service:
        _in_flight(service)
        before = _states(service)
    links = _to_v4(pg_url)
    assert "run_edges" in _tables(pg_url)
    assert "run_links" not in _tables(pg_url)
    with open_service(settings) as upgraded:
        tables = _tables(pg_url)
        assert "run_edges" not in tables
        assert "run_links" in tables
        with psycopg.connect(pg_url) as pg:
            assert sorted(pg.execute("SELECT * FROM run_links").fetchall()) == sorted(
                links
            )
        assert _states(upgraded) == before
        report = upgraded.verify()  # the moved rows are the fold's
        assert report.ok, report.problems
        _goes_on(upgraded)
        after = _states(upgraded)
    with psycopg.connect(pg_url, autocommit=True) as pg:
        pg.execute("DELETE FROM devs_views_schema")  # the statements run again
    with open_service(settings) as again:  # nothing left to move: nothing moves
        assert _states(again) == after
        assert again.verify().ok


def test_the_move_of_v4_edges_is_idempotent(pg_url: str) -> None:
    """Each of the runs view's statements can run again on a database that
    already took them (a migration runs on every opening whose fingerprint
    is new)."""
    with open_service(Settings(database_url=pg_url)) as service:
        _in_flight(service)
    _to_v4(pg_url)
    statements = [pg_ddl(s) for s in (*RunsTables.ddl, *RunsTables.pg_migrations)]
    with psycopg.connect(pg_url) as pg:
        for _ in range(2):
            for statement in statements:
                pg.execute(statement.encode())
        (count,) = pg.execute("SELECT count(*) FROM run_links").fetchone() or (0,)
    assert count == len(V4_ROWS)
    assert "run_edges" not in _tables(pg_url)
