"""The schemathesis run of test_http_schema.py, with the app on PostgreSQL:
no 5xx, every answer as documented, a refused request writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import RecoveryService
from tests.integration.test_http_schema import CHECKS, schema
from tests.postgres import PostgresServer, create_database, drop_database


@pytest.fixture(scope="module")
def pg_service(pg_server: PostgresServer) -> Iterator[RecoveryService]:
    url = create_database(pg_server, "devs_schemathesis")
    service = open_service(Settings(database_url=url))
    service.start_run("r1", {"t1": [], "t2": ["t1"]})
    service.start_task("t1", run_id="r1")
    service.record_gate("t1", 1, error="boom")
    service.log_lesson("t1", "use a regex", "cannot nest")
    yield service
    service.close()
    drop_database(pg_server, "devs_schemathesis")


@pytest.fixture(scope="module")
def pg_app(pg_service: RecoveryService) -> Any:
    return create_app(pg_service, read_wait=0.05)


@schema.parametrize()
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_any_request_gets_a_documented_answer_on_postgresql(
    case: schemathesis.Case[Any], pg_service: RecoveryService, pg_app: Any
) -> None:
    """The cases of the SQLite run's schema (one OpenAPI document), sent to
    an app on PostgreSQL."""
    before = pg_service.recorder.max_notification_id()
    response = case.call(app=pg_app)
    case.validate_response(response, checks=CHECKS)
    if response.status_code >= 400:
        assert pg_service.recorder.max_notification_id() == before, response.text
