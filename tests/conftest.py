"""Shared fixtures: a service on a fresh SQLite file per test; the embedded
PostgreSQL server and a service on either backend. And how the suite runs in
parallel (pytest-xdist): see "parallel runs" below."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from devs.adapters.config import Settings, memory_env, open_service
from devs.domain import RecoveryService
from tests.postgres import PostgresServer, create_database, drop_database, start_server

# ------------------------------------------------------------ parallel runs
#
# A plain ``pytest`` runs the tests in worker processes (pytest-xdist, the
# ``test`` extra): two per core, since most tests wait on a subprocess, a
# server or a socket rather than compute. ``-n N`` asks for N workers,
# ``-n 0`` or ``-p no:xdist`` runs everything in this one process (for
# ``--pdb``, or to read a failure in order). Each worker starts its own
# PostgreSQL server (``pg_server``), gets its own temporary directories
# (pytest's ``tmp_path``) and, for hypothesis, its own examples directory.

WORKER_ENV = "PYTEST_XDIST_WORKER"
"""Set by pytest-xdist in each worker process (``gw0``, ``gw1``, ...)."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Without ``-n``: ``-n auto``, the workers ``pytest_xdist_auto_num_workers``
    counts, unless every argument names a test file or a test (starting the
    workers would take longer than those few tests), or this pytest runs inside
    a worker (a test that runs pytest itself). With workers, ``--dist
    loadgroup``: the tests that share a module's server stay on one worker
    (``pytest_xdist_make_scheduler``)."""
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get(WORKER_ENV):
        return
    if config.option.numprocesses is None and not all(
        "::" in arg or arg.split("::")[0].endswith(".py") for arg in config.args
    ):
        config.option.numprocesses = "auto"
    if config.option.numprocesses is not None and config.option.dist == "no":
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Two workers per core this process may run on; pytest-xdist's own
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist reads it
    return 2 * len(os.sched_getaffinity(0))


ONE_WORKER_FOLDERS = ("tests/agents/",)
"""Folders each of whose modules runs on one worker: an agent's runs share
its caches (Copilot's unpacked package, ``PACKAGE_CACHE`` in
tests/agents/copilot.py), which two runs at once would write together."""

SHARED_FIXTURE = re.compile(r"""scope=["'](?:class|module|package)["']""")


@functools.cache
def runs_on_one_worker(root: Path, module: str) -> bool:
    """Whether a test module's tests stay together: it starts a server (or
    another fixture) once for several tests (``scope="module"``, ``"class"``
    or ``"package"``), which on several workers would start once per worker;
    or it is in :data:`ONE_WORKER_FOLDERS`."""
    if module.startswith(ONE_WORKER_FOLDERS):
        return True
    try:
        text = (root / module).read_text(encoding="utf-8")
    except OSError:
        return False
    return SHARED_FIXTURE.search(text) is not None


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup`` (the default chosen above): every test is a
    unit of work of its own, handed to whichever worker is free, but a module
    that :func:`runs_on_one_worker` is one unit. (pytest-xdist's own
    ``loadgroup`` reads ``xdist_group`` marks through a node id it rewrites,
    which pytest 9 no longer reads back: its groups are lost.) The largest
    units are handed out first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    root = config.rootpath

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if runs_on_one_worker(root, module) else nodeid

    return Scheduling(config, log)


def examples_database(home: Path | None = None) -> ExampleDatabase:
    """Hypothesis' examples under ``home`` (hypothesis' own default: the
    ``HYPOTHESIS_STORAGE_DIRECTORY`` folder, else ``.hypothesis`` here): each
    worker writes only its own directory (``examples-gw0``, ...; a run in one
    process, ``examples``) and reads every one, so a failure found by one
    worker is replayed first by whichever runs that test next, and no
    directory has two writers."""
    if home is None:
        home = Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or ".hypothesis")
    worker = os.environ.get(WORKER_ENV)
    own = home.absolute() / (f"examples-{worker}" if worker else "examples")
    others = sorted(
        path for path in own.parent.glob("examples*") if path.is_dir() and path != own
    )
    return MultiplexedDatabase(
        DirectoryBasedExampleDatabase(own),
        *(ReadOnlyDatabase(DirectoryBasedExampleDatabase(p)) for p in others),
    )


# No per-example deadline: CI's shared 2-core machine can stall any example
# for a quarter second, which hypothesis would report as a flaky failure.
# Speed is the benchmarks' business (bench/), not the tests'.
settings.register_profile("devs", deadline=None, database=examples_database())
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


SESSION_SERVER_SETTINGS = {"fsync": "off"}
"""The session's server skips fsync (PostgreSQL's "non-durable settings" for
a throwaway cluster): only a crash of the whole machine could leave its data
directory inconsistent, and the directory is a temporary one, deleted at the
end of the session either way. With fsync, each ``DROP DATABASE`` (some 200
a run, one per ``pg_url``) waited about a second on the disk's flushes; a
crash of the server or of a ``devs`` process still loses nothing it wrote.
The servers a test halts and restarts, and the benchmarks', keep
``tests/postgres.py``'s defaults."""


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One embedded PostgreSQL server for the session (tests/postgres.py),
    with :data:`SESSION_SERVER_SETTINGS`."""
    server = start_server(SESSION_SERVER_SETTINGS)
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
