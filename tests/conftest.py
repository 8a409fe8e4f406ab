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
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RecoveryService]:
    for name in (
        "DEVS_ESCALATION_THRESHOLD",
        "DEVS_HANDOFF_THRESHOLD",
        "DEVS_HITL_ENTROPY_THRESHOLD",
        "DEVS_FAILURE_HISTORY_CAP",
        "DEVS_DB",
    ):
        monkeypatch.delenv(name, raising=False)
    app = RecoveryService(env={"SQLITE_DBNAME": str(db_path)})
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


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The env that opens the service on each backend: a SQLite file, or a
    PostgreSQL database named by ``DEVS_DATABASE_URL``."""
    if request.param == "sqlite":
        return {"SQLITE_DBNAME": str(tmp_path / "backend.sqlite")}
    return {"DEVS_DATABASE_URL": request.getfixturevalue("pg_url")}


@pytest.fixture
def make_service(backend: dict[str, str]) -> Iterator[MakeService]:
    """Opens services on the test's backend (as many as asked, each like a
    process of its own); closes them afterwards."""
    opened: list[RecoveryService] = []

    def make(**env: str) -> RecoveryService:
        service = RecoveryService(env={**backend, **env})
        opened.append(service)
        return service

    yield make
    for service in opened:
        service.close()
