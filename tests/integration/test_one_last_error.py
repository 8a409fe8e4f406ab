"""One "last error", everywhere: the same hostile test output (ANSI colours,
a 5,000-character ``E`` line, a right-to-left override) fed to the referee
once, and every surface a person reads shows the same line — the one
``devs.domain.output.error_line`` chose, displayed through ``shown``.

Slack, e-mail and the webhook payload are compared in
``tests/integration/test_people_output.py``; here: the HTTP API, the
console's inbox and task page, the CLI's ``devs task show``, the outbox
message, the hand-off queue, and the hooks' stop reason."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from devs.adapters.cli.tasks import describe_task
from devs.adapters.config import Settings, open_service
from devs.adapters.hooks.breaker import error_line as hook_error_line
from devs.adapters.http import create_app
from devs.domain import RecoveryService
from devs.domain.output import error_line, shown
from tests.integration.test_console import SAME, SECRET, TOKEN, sign_in
from tests.integration.test_webhooks import HOSTILE_OUTPUT

LINE = error_line(HOSTILE_OUTPUT)
SHOWN = shown(LINE)


@pytest.fixture
def served(db_path: Path) -> Iterator[tuple[TestClient, RecoveryService]]:
    service = open_service(Settings(db=str(db_path)))
    app = create_app(service, token=TOKEN, read_wait=0.3, console_secret=SECRET)
    with TestClient(app, follow_redirects=False) as client:
        yield client, service
    service.close()


def test_the_line_is_the_e_line_cleaned_cut_and_made_visible() -> None:
    assert LINE.startswith("E \u202eAssertionError: <!channel> *x* `y` &")
    assert "\x1b" not in LINE
    assert len(LINE) == 300
    assert SHOWN.startswith("E <U+202E>AssertionError:")


def test_every_surface_shows_the_same_line(
    served: tuple[TestClient, RecoveryService],
) -> None:
    client, service = served
    service.start_task("esc", agent="coder")
    service.start_task("off", agent="coder")
    for _ in range(3):
        service.record_gate("esc", 1, gate="pytest", output=HOSTILE_OUTPUT)
    for i in range(5):
        decision = service.record_gate(
            "off", 1, gate="pytest", strategy=f"s{i}", output=HOSTILE_OUTPUT
        )
        if str(decision.outcome) == "escalate":
            service.resume("off", actor="ann", reason="again")
    # The record, the report and the hand-off payload.
    summary = service.task("esc")
    assert summary.failure_history[-1].last_error == LINE
    assert summary.failure_history[-1].error_line == LINE
    assert service.failure_report("esc").last_error == LINE
    [entry] = service.handoff_queue()
    assert entry.payload.last_error == LINE
    # HTTP: the same record.
    answer = client.get("/tasks/esc", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.json()["failure_history"][-1]["error_line"] == LINE
    # The outbox (the webhooks' payloads): one line for the escalation and the
    # hand-off alike.
    said = {
        m.type.value: m.data["last_error"]
        for m in service.outbox_messages()
        if "last_error" in m.data
    }
    assert said["session.opened"] == LINE
    assert said["handoff.opened"] == LINE
    # The CLI.
    assert SHOWN[:90] in describe_task(summary)  # cut to 100 on its line
    # The hooks' stop reason (redacted, cut to 300 like the rest).
    assert hook_error_line(HOSTILE_OUTPUT, 1) == SHOWN[:299] + "…"
    # The console's inbox (both stops) and the task page.
    sign_in(client, service)
    for page in ("/console/", "/console/?view=list", "/console/tasks/esc"):
        body = client.get(page, headers=SAME).text
        if page.endswith("view=list"):
            continue  # one row per stop: no error line in the dense list
        assert html.escape(SHOWN) in body, page
        assert "\u202e" not in body
        assert "\x1b" not in body
