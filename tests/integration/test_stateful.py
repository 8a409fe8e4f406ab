"""The project's model-based test is the user's: ``devs.testing``'s
``RecoveryMachine`` (one ladder model, ``LadderModel``), run on SQLite, on
PostgreSQL and over HTTP (``HttpRecoveryClient`` through the FastAPI app in
process). Hypothesis draws the policy across its whole range, the tasks, and
the commands; docs/testing.md lists the checks run after each step (here
every one of them after every command; over HTTP the store's after every
second)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.http import create_app
from devs.domain import Policy, RecoveryService
from devs.testing import RecoveryMachine, memory_service, sqlite_service, task_ids
from tests.postgres import PostgresServer, create_database, drop_database

EXAMPLES = int(os.environ.get("DEVS_STATEFUL_EXAMPLES", "40"))


def kit_settings(examples: int = EXAMPLES) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


class SQLiteMachine(RecoveryMachine):
    """The default store (eventsourcing's SQLite recorders, in memory), every
    check after every command."""

    store_checks_every = 1
    deep_checks_every = 10


SQLiteMachine.TestCase.settings = kit_settings()
test_the_ladder_on_sqlite = SQLiteMachine.TestCase


class HttpService(HttpRecoveryClient):
    """The client over the app in process; closing it closes both."""

    def __init__(self, service: RecoveryService) -> None:
        self._inner = service
        self._client = TestClient(create_app(service))
        self._client.__enter__()  # the app's lifespan, as `with` would
        super().__init__(self._client)

    def close(self) -> None:
        try:
            self._client.__exit__(None, None, None)
        finally:
            self._inner.close()


class HttpMachine(RecoveryMachine):
    """Every command and query through ``devs serve``'s API. The store's
    checks (history, replay, read models: some ten requests) run after every
    second command: each request crosses two threads in the test client, and
    they were most of the suite's longest test; the machines above run them
    after every command, on the same service."""

    make_service = staticmethod(lambda policy: HttpService(memory_service(policy)))
    store_checks_every = 2
    deep_checks_every = 10
    # The API names a task in its URL path: it refuses ids with "/" (the
    # kit found such a task unreachable over HTTP; now it is refused).
    ids = task_ids().filter(lambda task_id: "/" not in task_id)


HttpMachine.TestCase.settings = kit_settings(max(5, EXAMPLES // 2))
test_the_ladder_over_http = HttpMachine.TestCase

_databases = itertools.count()


def postgres_machine(server: PostgresServer) -> type[RecoveryMachine]:
    """A machine whose every example gets a new PostgreSQL database."""

    def make(policy: Policy) -> RecoveryService:
        name = f"kit_{os.getpid()}_{next(_databases)}"
        url = create_database(server, name)

        class Service(RecoveryService):
            dropped = False

            def close(self) -> None:
                # Once: eventsourcing's Application.__del__ closes again,
                # maybe after the session's server has stopped.
                try:
                    super().close()
                finally:
                    if not self.dropped:
                        self.dropped = True
                        drop_database(server, name)

        return Service(env={"DEVS_DATABASE_URL": url}, policy=policy)

    class PostgresMachine(RecoveryMachine):
        make_service: Callable[..., Any] = staticmethod(make)  # type: ignore[misc]
        store_checks_every = 1
        deep_checks_every = 10

    return PostgresMachine


def test_the_ladder_on_postgresql(pg_server: PostgresServer) -> None:
    run_state_machine_as_test(
        postgres_machine(pg_server), settings=kit_settings(max(5, EXAMPLES // 4))
    )


@pytest.mark.parametrize("machine", [SQLiteMachine, HttpMachine])
def test_the_machines_start_from_a_drawn_policy(machine: type[RecoveryMachine]) -> None:
    """A smoke check that the subclass wiring reaches the backend at all."""
    state = machine()
    try:
        state.begin(Policy(escalation_threshold=1), ["a", "b"])
        assert set(state.model.tasks) == {"a", "b"}
        assert state.service.task("a").policy.escalation_threshold == 1
    finally:
        state.teardown()


def test_the_api_refuses_an_id_it_could_not_address() -> None:
    service = sqlite_service(Policy())
    try:
        with TestClient(create_app(service)) as client:
            answer = client.post("/tasks", json={"task_id": "a/b"})
            assert answer.status_code == 422
            assert "must not contain '/'" in answer.text
            answer = client.post("/runs", json={"run_id": "r", "dag": {"x/y": []}})
            assert answer.status_code == 422
    finally:
        service.close()
