"""schemathesis against the HTTP app in process: whatever a client sends, no
5xx, every answer matches the OpenAPI document, and a refused request writes
nothing."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devs.adapters.config import memory_env, open_service
from devs.adapters.http import create_app
from tests.helpers import event_count

SERVICE = open_service(env=memory_env())
SERVICE.start_run("r1", {"t1": [], "t2": ["t1"]})
SERVICE.start_task("t1", run_id="r1")
SERVICE.record_gate("t1", 1, error="boom")
SERVICE.log_lesson("t1", "use a regex", "cannot nest")
APP = create_app(SERVICE, read_wait=0.05)


@schemathesis.check
def no_server_error(
    ctx: schemathesis.CheckContext,
    response: schemathesis.Response,
    case: schemathesis.Case[Any],
) -> bool | None:
    """No 5xx, but the documented 504 of a read-your-writes wait that runs
    out (a position nobody has written yet is a 422 at once)."""
    if response.status_code >= 500:
        body = response.json() if response.content else {}
        assert response.status_code == 504, response.text
        assert body.get("error") == "not_caught_up", response.text
    return None


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

schema = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(
    path="/notifications/stream"  # an endless stream; its refusals are tested apart
)


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_any_request_gets_a_documented_answer(case: schemathesis.Case[Any]) -> None:
    before = event_count(SERVICE)
    response = case.call()
    case.validate_response(response, checks=CHECKS)
    if response.status_code >= 400:
        assert event_count(SERVICE) == before, response.text
