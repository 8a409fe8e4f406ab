"""``DEVS_STORE_TIMEOUT`` bounds the whole wait of one command or query on
PostgreSQL, not each of its waits on its own.

Before, a command waited for a connection, then (its connection lost, or none
had in time) waited again to check the store for newer events, and a thread
whose task shared a lock with a waiting thread's first waited for that one:
with other clients writing during an outage, a command waited 4 s where 2 s
were allowed (14.4 s where 5 s were). Each test here stops a PostgreSQL
server of its own (a fast shutdown) and starts it again on the same data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import Conflict, RecoveryService, StoreError, StoreUnavailable
from devs.domain.commands import STORE_WAIT, StoreWait
from tests.postgres import PostgresServer, create_database, start_server

TIMEOUT = 2.0
MARGIN = 1.0
"""The documented overshoot is one of eventsourcing's 0.2 s pauses between
tries and a statement that fails on a lost connection; the rest is room for
a stalled thread on a shared 2-core machine. Before, the waits were 4 s."""


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
    return create_database(server, f"store_wait_{next(_names)}")


def opened(url: str, timeout: float = TIMEOUT) -> RecoveryService:
    return open_service(Settings(database_url=url, store_timeout=timeout))


class Clients:
    """Threads calling the service in a loop, each call timed from when it
    began, or from when the outage began if it began before it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.outage_from: float | None = None
        self.waits: list[tuple[float, str, BaseException | None]] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, name: str, call: Callable[[int], Any]) -> None:
        def loop() -> None:
            n = 0
            while not self.stop.is_set():
                n += 1
                started = time.monotonic()
                failure: BaseException | None = None
                try:
                    call(n)
                except Conflict:
                    # Six writers on one task: one may lose the race ten
                    # times running (said as a Conflict, nothing written).
                    # That is the writers' race, not a wait on the store.
                    continue
                except StoreError as error:
                    failure = error
                ended = time.monotonic()
                outage_from = self.outage_from
                if outage_from is not None and ended > outage_from:
                    with self._lock:
                        waited = ended - max(started, outage_from)
                        self.waits.append((waited, name, failure))

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in self.threads)


def writer(service: RecoveryService, tag: str) -> Callable[[int], Any]:
    """Lessons on one task shared by every writer (one lock, one stream)."""

    def write(n: int) -> Any:
        return service.log_lesson("shared", f"strategy-{tag}-{n}", "rca")

    return write


def reader(service: RecoveryService) -> Callable[[int], Any]:
    def read(n: int) -> Any:
        return service.task("shared") if n % 2 else service.tasks()

    return read


@pytest.mark.waits  # rounds of DEVS_STORE_TIMEOUT waits
def test_each_command_and_query_waits_the_store_timeout_in_all(
    server: PostgresServer, url: str
) -> None:
    """Two services (as two processes: a pool each), each with three threads
    writing to one shared task (so they also take turns on its lock) and one
    querying, while the database is stopped: every call ends within the
    store timeout, plus the documented margin."""
    services = [opened(url), opened(url)]
    clients = Clients()
    try:
        services[0].start_task("shared")
        for s, service in enumerate(services):
            for t in range(3):
                clients.start(f"writer-{s}-{t}", writer(service, f"{s}{t}"))
            clients.start(f"reader-{s}", reader(service))
        time.sleep(1.0)  # every client is writing or reading
        clients.outage_from = time.monotonic()
        server.halt()
        time.sleep(3 * TIMEOUT + 2)  # a few rounds of waits on every thread
    finally:
        clients.join()
    try:
        # A statement under way when the server stopped fails as it is cut
        # (a StoreError); every call after it waits for a connection, or for
        # its turn on the shared task behind a call that waits for one.
        said = [
            (name, str(error))
            for _, name, error in clients.waits
            if isinstance(error, StoreUnavailable)
        ]
        assert len({name for name, _ in said}) == 8, said  # every client waited
        assert any(f"no connection within {TIMEOUT:g} s" in text for _, text in said)
        assert all(f"within {TIMEOUT:g} s" in text for _, text in said), (
            said
        )  # no wait said more than the bound
        longest = max(clients.waits, key=lambda wait: wait[0])
        assert longest[0] <= TIMEOUT + MARGIN, longest
        server.restart()
        # Nothing of a call's spent wait is left behind for the next call.
        for service in services:
            service.log_lesson("shared", "after", "rca")
            assert service.task("shared").task_id == "shared"
    finally:
        for service in services:
            service.close()


def test_a_call_that_met_the_outage_does_not_wait_again(
    server: PostgresServer, url: str
) -> None:
    """A command whose save found no connection used its whole wait: the
    check for newer events that follows fails at once, not after a wait of
    its own (one call, one bound)."""
    service = opened(url)
    try:
        service.start_task("t1")
        server.halt()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="PostgreSQL is unreachable"):
            service.log_lesson("t1", "regex", "rca")
        assert time.monotonic() - started <= TIMEOUT + MARGIN
    finally:
        server.restart()
        service.close()


def test_a_call_past_its_wait_still_takes_a_free_connection(url: str) -> None:
    """The bound is on waiting, not on the call's length: a call that has
    waited longer than the store timeout in all, yet never found the store
    failing, still gets a connection that is free at once (a rebuild that
    runs for minutes is not cut short)."""
    service = opened(url, timeout=1)
    try:
        service.start_task("t1")
        spent = StoreWait()
        spent.waited = 60.0
        token = STORE_WAIT.set(spent)
        try:
            assert service.task("t1").task_id == "t1"
            service.log_lesson("t1", "regex", "rca")
        finally:
            STORE_WAIT.reset(token)
        # Once the store failed the call, its time is spent: not another wait.
        failed = StoreWait()
        failed.deadline = time.monotonic() - 1
        failed.reason = "the connection to it was lost"
        token = STORE_WAIT.set(failed)
        try:
            with pytest.raises(StoreUnavailable, match="the connection to it was lost"):
                service.task("t1")
        finally:
            STORE_WAIT.reset(token)
        assert service.task("t1").task_id == "t1"
    finally:
        service.close()
