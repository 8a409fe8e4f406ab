"""The console's outbox page (endpoints, deliveries, redelivery) and each
wait's deadline countdown, in process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import RecoveryService
from devs.domain.names import DeliveryState
from devs.domain.policy import Policy
from devs.domain.ports import Settled
from tests.integration.test_console import SAME, SECRET, TOKEN, escalate, sign_in

OWNER = "test-sender"


@pytest.fixture
def console(db_path: Path) -> Iterator[tuple[TestClient, RecoveryService]]:
    service = open_service(
        Settings(db=str(db_path)), policy=Policy(human_deadline=3600)
    )
    app = create_app(service, token=TOKEN, read_wait=0.3, console_secret=SECRET)
    with TestClient(app, follow_redirects=False) as client:
        yield client, service
    service.close()


def dead_letter(service: RecoveryService, task_id: str) -> str:
    """A message of ``task_id`` tried for the last time, and refused."""
    deliveries = service.read_models.deliveries
    deliveries.open_channels([("webhook:test", "webhook", "https://hooks.test/x")], 0)
    escalate(service, task_id)
    service.catch_up()
    deliveries.enqueue({"webhook:test": None}, 100)
    (claimed,) = deliveries.claim(OWNER, ["webhook:test"], time.time(), 30, 10)
    deliveries.settle(
        OWNER,
        [
            Settled(
                channel=claimed.channel,
                message_id=claimed.message.id,
                state=DeliveryState.DEAD,
                next_at=None,
                status=500,
                error="https://hooks.test/x answered 500",
            )
        ],
        time.time(),
    )
    return claimed.message.id


def test_the_outbox_page_lists_endpoints_and_dead_letters(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    message_id = dead_letter(service, "t1")
    page = client.get("/console/outbox").text
    assert "https://hooks.test/x" in page
    assert f'data-message-id="{message_id}"' in page
    assert 'data-state="dead"' in page
    assert "answered 500" in page
    assert "Redeliver every dead letter" in page
    assert 'href="/console/outbox"' in client.get("/console/").text  # the nav
    only_delivered = client.get("/console/outbox?state=delivered").text
    assert message_id not in only_delivered
    assert "No deliveries in state delivered" in only_delivered


def test_redeliver_from_the_console_makes_the_message_due_again(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    message_id = dead_letter(service, "t1")
    before = service.webhooks().deliveries
    # First a confirmation, which names what it re-sends and to whom.
    asked = client.post(
        "/console/outbox/redeliver", data={"message_id": message_id}, headers=SAME
    )
    assert asked.status_code == 200
    assert f"Redeliver message <code>{message_id}</code>?" in asked.text
    assert "including those that already received it" in asked.text
    assert "https://hooks.test/x" in asked.text
    assert 'name="confirmed" value="1"' in asked.text
    assert service.webhooks().deliveries == before  # nothing done yet
    answer = client.post(
        "/console/outbox/redeliver",
        data={"message_id": message_id, "confirmed": "1"},
        headers=SAME,
    )
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/console/outbox?done=")
    (delivery,) = service.webhooks().deliveries
    assert delivery.state is DeliveryState.PENDING
    assert delivery.tries == 0
    assert "1 deliveries due again" in client.get(answer.headers["location"]).text


def test_redeliver_every_dead_letter_and_the_refusals(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    dead_letter(service, "t1")
    cross = client.post(
        "/console/outbox/redeliver",
        data={"failed": "1"},
        headers={"Origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    assert service.webhooks(state="dead").deliveries != []  # nothing changed
    unknown = client.post(
        "/console/outbox/redeliver",
        data={"message_id": "msg_" + "0" * 32, "confirmed": "1"},
        headers=SAME,
    )
    assert unknown.status_code == 404
    assert "no delivery of message" in unknown.text
    malformed = client.post(
        "/console/outbox/redeliver",
        data={"message_id": "<b>", "confirmed": "1"},
        headers=SAME,
    )
    assert malformed.status_code == 422
    assert "<b>" not in malformed.text
    asked = client.post("/console/outbox/redeliver", data={"failed": "1"}, headers=SAME)
    assert asked.status_code == 200
    assert "Redeliver every dead letter?" in asked.text
    assert service.webhooks(state="dead").deliveries != []  # not before "yes"
    every = client.post(
        "/console/outbox/redeliver",
        data={"failed": "1", "confirmed": "1"},
        headers=SAME,
    )
    assert every.status_code == 303
    assert service.webhooks(state="dead").deliveries == []


def test_the_outbox_page_needs_a_session(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, _ = console
    assert client.get("/console/outbox").status_code == 303
    answer = client.post(
        "/console/outbox/redeliver", data={"failed": "1"}, headers=SAME
    )
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/console/login")


def test_each_wait_shows_its_deadline_and_the_time_left(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    escalate(service, "t1")
    (session,) = service.pending_sessions()
    assert session.deadline_at is not None
    page = client.get("/console/").text
    assert f'data-deadline="{session.deadline_at.isoformat()}"' in page
    assert "59 min left" in page or "1 h 0 min left" in page
    task_page = client.get("/console/tasks/t1").text
    assert "data-deadline=" in task_page


def test_each_delivery_says_when_it_was_delivered_or_given_up(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    message_id = dead_letter(service, "t1")
    (delivery,) = service.webhooks().deliveries
    page = client.get("/console/outbox").text
    row = page[page.index(f'data-message-id="{message_id}"') :].split("</tr>")[0]
    utc = delivery.updated_at.astimezone(UTC)
    assert (
        f'given up <time class="at" datetime="{utc.isoformat()}" '
        f'title="{utc:%Y-%m-%d %H:%M:%S} UTC">'
    ) in row
    # The tables scroll inside the page on a phone, and by keyboard.
    assert '<div class="table-scroll" role="region" aria-label="Deliveries" ' in page
