"""Shared fixtures: a service on a fresh SQLite file per test; the embedded
PostgreSQL server and a service on either backend."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from devs.adapters.config import Settings, memory_env, open_service
from devs.domain import RecoveryService
from tests.postgres import PostgresServer, create_database, drop_database, start_server

# No per-example deadline: CI's shared 2-core machine can stall any example
# for a quarter second, which hypothesis would report as a flaky failure.
# Speed is the benchmarks' business (bench/), not the tests'.
settings.register_profile("devs", deadline=None)
settings.load_profile("devs")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "devs_state.sqlite"


@pytest.fixture
def service(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RecoveryService]:
    """A fresh service with the default policy: in memory, or on the
    ``db_path`` file when the test asks for that fixture too (to open the
    file again, from another service, a process or raw SQL)."""
    for name in (
        "DEVS_ESCALATION_THRESHOLD",
        "DEVS_HANDOFF_THRESHOLD",
        "DEVS_HITL_ENTROPY_THRESHOLD",
        "DEVS_FAILURE_HISTORY_CAP",
        "DEVS_DB",
    ):
        monkeypatch.delenv(name, raising=False)
    if "db_path" in request.fixturenames:
        db = str(request.getfixturevalue("db_path"))
    else:
        db = memory_env()["DEVS_DB"]
    app = open_service(Settings(db=db, database_url=None))
    yield app
    app.close()


@pytest.fixture
def decisions(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="devs.decisions")
    return caplog


# ------------------------------------------------------------------ backends

_databases = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One embedded PostgreSQL server for the session (tests/postgres.py)."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database's libpq URL (a Unix socket), dropped afterwards."""
    name = f"devs_{os.getpid()}_{next(_databases)}"
    url = create_database(pg_server, name)
    yield url
    drop_database(pg_server, name)


MakeService = Callable[..., RecoveryService]


SHARED_STORE = (
    "needs two processes (or a raw connection, or a store that outlives its "
    "services) on one store; an in-memory store lives in one process, while "
    "a service holds it open"
)
NOT_IN_MEMORY: dict[str, str] = {
    f"tests/integration/{test}": SHARED_STORE
    for test in (
        "test_audit.py::test_the_chain_goes_on_across_snapshots_and_processes",
        "test_backends.py::test_two_processes_see_each_others_writes",
        "test_backends.py::test_exactly_once_across_processes",
        "test_backends.py::test_concurrent_processes_count_exactly",
        "test_contract.py::test_a_table_dropped_while_closed_is_remade_on_open",
        "test_read_position.py::test_a_query_at_a_position_waits_for_it_not_for_"
        "the_end_of_the_log",
        "test_read_position.py::test_a_position_past_the_end_of_the_log_is_"
        "refused_at_once",
        "test_read_position.py::test_over_http_after_n_answers_at_n_while_others_"
        "write_on",
        "test_read_position.py::test_the_http_client_waits_for_a_position_and_"
        "reads_at_it",
    )
}
"""The tests of the ``backend`` fixture that cannot hold on the in-memory
backend, each with why; ``backend`` skips them there, saying so. A test that
runs raw SQL through the ``execute`` fixture (a second connection to the
store) is skipped there too."""


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The env that opens the service on each backend: a SQLite file, a SQLite
    store in memory, or a PostgreSQL database named by ``DEVS_DATABASE_URL``.

    On ``memory`` the services of a test share one store in this process
    (``devs.testing.memory_env()``); a test that needs another process on it
    is skipped there (``NOT_IN_MEMORY``)."""
    if request.param == "sqlite":
        return {"DEVS_DB": str(tmp_path / "backend.sqlite"), "DEVS_DATABASE_URL": ""}
    if request.param == "memory":
        test = request.node.nodeid.split("[", 1)[0]
        reason = NOT_IN_MEMORY.get(test)
        if reason is None and "execute" in request.fixturenames:
            reason = SHARED_STORE
        if reason is not None:
            pytest.skip(f"not on the in-memory backend: {reason}")
        return memory_env()
    return {"DEVS_DATABASE_URL": request.getfixturevalue("pg_url")}


@pytest.fixture
def make_service(backend: dict[str, str]) -> Iterator[MakeService]:
    """Opens services on the test's backend (as many as asked, each like a
    process of its own); closes them afterwards."""
    opened: list[RecoveryService] = []

    def make(**env: str) -> RecoveryService:
        service = open_service(env={**backend, **env})
        opened.append(service)
        return service

    yield make
    for service in opened:
        service.close()
