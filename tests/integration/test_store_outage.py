"""PostgreSQL away, or refusing: a request waits at most ``DEVS_STORE_TIMEOUT``
and says why (libpq's reason), at once when waiting will not mend it; the
service recovers by itself when the database is back.

Each test here stops a PostgreSQL server of its own (a fast shutdown, as
``pg_ctl stop -m fast``) and starts it again on the same data: the session's
server, which other tests share, is never stopped. The time bounds asserted
are generous (this machine is shared): before, each of these waits took
minutes (eventsourcing's 30 s wait for a connection, tried ten times).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.adapters.store.postgres import PROBE_EVERY, BoundedPool
from devs.domain import RecoveryService, StoreUnavailable, UnknownTask
from devs.projections.postgres import PostgresReadModels
from tests.helpers import wait_until
from tests.postgres import PostgresServer, create_database, start_server

pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning"
)


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def server(own_server: PostgresServer) -> Iterator[PostgresServer]:
    """The module's server, running again after each test (even a failed one)."""
    yield own_server
    own_server.restart()


_names = iter(range(1_000_000))


@pytest.fixture
def url(server: PostgresServer) -> str:
    return create_database(server, f"outage_{next(_names)}")


def opened(url: str, timeout: float) -> RecoveryService:
    return open_service(Settings(database_url=url, store_timeout=timeout))


def took(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except BaseException as error:  # the test looks at it
        return time.monotonic() - started, error
    return time.monotonic() - started, None


@pytest.mark.waits  # waits out DEVS_STORE_TIMEOUT
def test_commands_and_queries_give_up_within_the_store_timeout(
    server: PostgresServer, url: str
) -> None:
    service = opened(url, timeout=2)
    try:
        service.start_task("before")
        server.halt()
        for call in (
            lambda: service.start_task("during"),
            lambda: service.tasks(),
            lambda: service.catch_up(),
        ):
            seconds, error = took(call)
            assert isinstance(error, StoreUnavailable), error
            assert seconds < 15, seconds  # minutes before
            text = str(error)
            assert "PostgreSQL is unreachable" in text
            assert "no connection within 2 s" in text
            assert "DEVS_STORE_TIMEOUT=2" in text
            assert error.retry_after == 2
        server.restart()
        # No restart of the service: the next command finds the database.
        service.start_task("after")
        service.catch_up()
        assert {task.task_id for task in service.tasks()} == {"before", "after"}
        with pytest.raises(UnknownTask):
            service.task("during")  # refused: nothing was written
    finally:
        service.close()


@pytest.mark.waits  # a 2 s outage
def test_a_short_outage_within_the_bound_is_ridden_through(
    server: PostgresServer, url: str
) -> None:
    service = opened(url, timeout=30)
    try:
        service.start_task("before")
        server.halt()
        # The command waits in a thread; the server is started again from
        # this one (it dies with the thread that started it).
        outcome: list[BaseException | None] = []
        waiting = threading.Thread(
            target=lambda: outcome.append(took(lambda: service.start_task("during"))[1])
        )
        waiting.start()
        time.sleep(2.0)
        server.restart()
        back = time.monotonic()
        waiting.join(60)
        assert outcome == [None]  # it waited for the database, then recorded
        # Found within about PROBE_EVERY, not at the pool's next back-off
        # (1, 2, 4, 8, 16 s: seconds after the database was back).
        assert time.monotonic() - back < 8
        assert service.task("during").task_id == "during"
    finally:
        service.close()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda url: url.replace("/outage_", "/nosuchdb_"), "does not exist"),
        (
            lambda url: url.replace("postgres@", "nosuchrole@"),
            'role "nosuchrole" does not exist',
        ),
    ],
    ids=["missing-database", "unknown-role"],
)
def test_a_refusal_is_said_at_once_with_libpqs_reason(
    url: str, change: Callable[[str], str], said: str
) -> None:
    seconds, error = took(lambda: opened(change(url), timeout=30))
    assert isinstance(error, StoreUnavailable), error
    assert seconds < 10, seconds  # not the 30 s allowed: waiting will not mend it
    assert said in str(error)
    assert "PostgreSQL refuses the connection" in str(error)
    assert "check DEVS_DATABASE_URL" in str(error)


def test_a_missing_socket_directory_waits_and_says_so(tmp_path: Any) -> None:
    url = f"postgresql://postgres@/db?host={tmp_path}/gone"
    seconds, error = took(lambda: opened(url, timeout=1))
    assert isinstance(error, StoreUnavailable), error
    assert seconds < 10, seconds
    assert "No such file or directory" in str(error)
    assert "no connection within 1 s" in str(error)


def test_a_password_never_reaches_the_message(url: str) -> None:
    secret = "hunter2-very-secret"
    wrong = url.replace("postgres@", f"nosuchrole:{secret}@")
    _, error = took(lambda: opened(wrong, timeout=5))
    assert isinstance(error, StoreUnavailable), error
    assert secret not in str(error)


def test_reopening_creates_nothing_that_exists(
    server: PostgresServer, url: str
) -> None:
    """eventsourcing ran ``CREATE TYPE`` at every open and let the error pass,
    which PostgreSQL logged each time ("type ... already exists")."""
    before = len(server.log_path.read_text(errors="replace"))
    for _ in range(3):
        opened(url, timeout=5).close()
    logged = server.log_path.read_text(errors="replace")[before:]
    assert "already exists" not in logged, logged


def test_over_http_a_503_says_when_to_ask_again_and_readyz_answers_fast(
    server: PostgresServer, url: str
) -> None:
    service = opened(url, timeout=3)
    app = create_app(service)
    try:
        with TestClient(app) as client:
            assert client.get("/readyz").json()["ready"] is True
            server.halt()
            started = time.monotonic()
            ready = client.get("/readyz")
            assert time.monotonic() - started < 5  # about 1 s
            assert ready.status_code == 503
            assert ready.json()["ready"] is False
            assert ready.json()["reason"]
            refused = client.post("/tasks", json={"task_id": "t1"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "store_unavailable"
            assert "PostgreSQL is unreachable" in refused.json()["detail"]
            assert refused.headers["Retry-After"] == "3"
            # A probe still waiting for the store is shared, not repeated.
            answers = [client.get("/readyz").status_code for _ in range(3)]
            assert answers == [503, 503, 503]
            server.restart()
            assert client.post("/tasks", json={"task_id": "t2"}).status_code == 201
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "never ready again"
                time.sleep(0.2)
    finally:
        service.close()


@pytest.mark.waits  # a 6 s outage
def test_the_projection_runner_says_an_outage_once_and_its_end_once(
    server: PostgresServer, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``devs project`` and ``devs serve``'s projector restart their runner
    every second while the database is away: one line for the outage, one
    when it runs again, not two lines a try."""
    service = opened(url, timeout=1)
    models = service.read_models
    assert isinstance(models, PostgresReadModels)
    stop = threading.Event()
    follower = threading.Thread(target=models.follow, args=(stop, 0.2))
    caplog.set_level(logging.WARNING, logger="devs.read_models")
    try:
        follower.start()
        service.start_task("before")
        service.catch_up()
        server.halt()
        time.sleep(6)  # several tries, each failing within the 1 s timeout
        server.restart()
        service.start_task("after")
        assert wait_until(lambda: "runs again" in caplog.text, 60), caplog.text
    finally:
        stop.set()
        follower.join(30)
        service.close()
    lines = [record.getMessage() for record in caplog.records]
    assert sum("cannot start yet" in line for line in lines) == 1, lines
    assert sum("runs again" in line for line in lines) == 1, lines
    assert sum("stopped" in line for line in lines) <= 1, lines
    assert not any(record.exc_info for record in caplog.records)


def test_waiting_requests_neither_pile_up_nor_each_knock(
    server: PostgresServer, url: str
) -> None:
    """psycopg's pool keeps a waiter that timed out in its queue until a
    connection is handed out: requests must not queue there while the
    database is away (one per slice grew it without end). And however many
    requests wait, one attempt to connect at a time finds out for all."""
    service = opened(url, timeout=1)
    try:
        service.start_task("before")
        server.halt()
        attempts: list[float] = []
        pool = service.factory.datastore.pool  # type: ignore[attr-defined]
        assert isinstance(pool, BoundedPool)
        connect = pool.connection_class.connect

        def counted(*args: Any, **kwargs: Any) -> Any:
            attempts.append(time.monotonic())
            return connect(*args, **kwargs)

        pool.connection_class.connect = counted  # type: ignore[method-assign]
        callers = [
            threading.Thread(target=took, args=(lambda: service.start_task("x"),))
            for _ in range(8)
        ]
        started = time.monotonic()
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(30)
        for _ in range(4):
            took(lambda: service.start_task("y"))
        seconds = time.monotonic() - started
        assert pool.get_stats().get("requests_waiting", 0) <= 1
        # about one a PROBE_EVERY, plus the pool's own replacements
        assert len(attempts) <= seconds / PROBE_EVERY + 10, (len(attempts), seconds)
    finally:
        server.restart()
        service.close()
