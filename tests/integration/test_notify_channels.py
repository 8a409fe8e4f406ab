"""The notify edge's seams: a new kind of channel is one module and one
line in the registry (here a channel defined in this test, registered by
that one line, delivered, retried and dead-lettered by the sender as every
other); and its one settings class refuses a bad value naming the
variable."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from devs.adapters.notify import registry
from devs.adapters.notify.channel import Channel, Endpoint, Threads
from devs.adapters.notify.people import headline
from devs.adapters.notify.sender import Sender
from devs.adapters.notify.settings import NotifySettings, notify_settings
from devs.adapters.notify.status import (
    Attempt,
    Attempted,
    answered,
    permanent,
)
from devs.domain import InvalidInput, RecoveryService
from devs.domain.names import DeliveryState
from devs.domain.outbox import OutboxMessage


class Pager:
    """A kind of channel this test adds: one endpoint (a pager), every
    message; what it answers is scripted by HTTP status."""

    kind = "pager"

    def __init__(self) -> None:
        self.paged: list[str] = []
        self.statuses: list[int] = []

    def endpoints(
        self, settings: NotifySettings, threads: Threads | None
    ) -> Sequence[Endpoint]:
        def page(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
        ) -> Attempt:
            self.paged.append(headline(message))
            status = self.statuses.pop(0) if self.statuses else 200
            return answered(status, "pager://on-call")

        return [Endpoint(self.kind, "on-call", "pager://on-call", None, page)]


def escalate(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id)
    for i in range(3):
        service.record_gate(task_id, 1, strategy=f"s{i}", error=f"E {i}")


def run_until(sender: Sender, done: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the sender did not get there in time"
        if not sender.step():
            sender.wait(0.02)
    sender.drain(5)


def test_a_channel_in_the_registry_is_sent_to_by_the_sender(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    pager = Pager()
    # The one line a new channel adds to registry.py (mypy checks here that
    # a Pager is a Channel):
    channels: tuple[Channel, ...] = (*registry.CHANNELS, pager)
    monkeypatch.setattr(registry, "CHANNELS", channels)
    settings = notify_settings({"DEVS_WEBHOOK_BACKOFF": "0.05"})
    assert [e.kind for e in registry.channels_of(settings)] == ["pager"]
    sender = Sender(service, settings)
    sender.open()
    pager.statuses = [503]  # tried again on the schedule, then delivered
    escalate(service, "t1")
    run_until(sender, lambda: len(pager.paged) >= 2)
    pager.statuses = [500, 500]  # no try left after the second: a dead letter
    escalate(service, "t2")
    run_until(sender, lambda: service.webhooks(state="dead").deliveries != [])
    sender.close()
    assert pager.paged == [
        "t1 needs a human: failed 3 times in a row",
        "t1 needs a human: failed 3 times in a row",
        "t2 needs a human: failed 3 times in a row",
        "t2 needs a human: failed 3 times in a row",
    ]
    (channel,) = service.webhooks().channels
    assert channel.kind == "pager"
    assert channel.shown == "pager://on-call"
    (dead,) = service.webhooks(state="dead").deliveries
    assert dead.last_status == 500
    assert dead.last_error == "pager://on-call answered 500"
    delivered = service.webhooks(state=DeliveryState.DELIVERED.value).deliveries
    assert len(delivered) == 1


def test_each_registered_channel_is_off_without_its_variables() -> None:
    assert [channel.kind for channel in registry.CHANNELS] == [
        "webhook",
        "slack",
        "email",
    ]
    assert registry.channels_of(notify_settings({})) == []


@pytest.mark.parametrize(
    ("status", "outcome", "refuses_the_message"),
    [
        (200, Attempted.DELIVERED, False),
        (204, Attempted.DELIVERED, False),
        (410, Attempted.GONE, False),
        (408, Attempted.RETRY, False),
        (429, Attempted.RETRY, False),
        (400, Attempted.RETRY, True),
        (404, Attempted.RETRY, True),
        (500, Attempted.RETRY, False),
        (503, Attempted.RETRY, False),
        (302, Attempted.RETRY, False),
    ],
)
def test_one_status_mapping(
    status: int, outcome: Attempted, refuses_the_message: bool
) -> None:
    tried = answered(status, "https://h.example", retry_after_header="7")
    assert tried.outcome is outcome
    assert tried.status == status
    assert permanent(status) is refuses_the_message
    if outcome is Attempted.RETRY:
        assert tried.retry_after == 7.0
        assert tried.error == f"https://h.example answered {status}"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEVS_WEBHOOK_TIMEOUT", "0"),
        ("DEVS_WEBHOOK_TIMEOUT", "61"),
        ("DEVS_WEBHOOK_TIMEOUT", "soon"),
        ("DEVS_HUMAN_REMINDER", "nan"),
        ("DEVS_HUMAN_DEADLINE", "-1"),
        ("DEVS_HUMAN_DEADLINE", "2592001"),
        ("DEVS_WEBHOOK_BACKOFF", "1,x"),
        ("DEVS_WEBHOOK_SECRET", "not-a-secret"),
        ("DEVS_SLACK_BOT_TOKEN", "xoxb-short"),
        ("DEVS_SLACK_CHANNEL", "#no spaces"),
        ("DEVS_SLACK_API_URL", "https://user:pw@slack.example/api"),
        ("DEVS_PUBLIC_URL", "ftp://devs.example"),
        ("DEVS_SMTP_URL", "http://mail.example"),
        ("DEVS_NOTIFY_EMAIL", "not an address"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(variable: str, value: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        notify_settings({variable: value})
    assert caught.value.field == variable
    assert variable in str(caught.value)


def test_the_defaults_and_the_variables_read(monkeypatch: pytest.MonkeyPatch) -> None:
    default = notify_settings({})
    assert default.webhook_timeout == 15.0
    assert default.lease == 70.0
    assert default.human_reminder is None
    assert default.slack_api_url == "https://slack.com/api"
    assert not default.webhooks_enabled
    assert not default.slack_enabled
    assert not default.email_enabled
    monkeypatch.setenv("DEVS_WEBHOOK_TIMEOUT", " 2.5 ")
    monkeypatch.setenv("DEVS_HUMAN_REMINDER", "60")
    from_environment = NotifySettings()
    assert from_environment.webhook_timeout == 2.5
    assert from_environment.human_reminder == 60.0
    assert notify_settings().lease == 20.0


def test_a_secret_is_never_shown_by_the_settings() -> None:
    token = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
    settings = notify_settings(
        {
            "DEVS_SLACK_BOT_TOKEN": token,
            "DEVS_SLACK_CHANNEL": "#ops",
            "DEVS_SMTP_URL": "smtps://ann:hunter2@mail.example",
            "DEVS_NOTIFY_EMAIL": "ops@corp.example",
        }
    )
    assert token not in repr(settings)
    assert "hunter2" not in repr(settings)
    with pytest.raises(InvalidInput) as caught:
        notify_settings({"DEVS_SLACK_BOT_TOKEN": token})
    assert caught.value.field == "DEVS_SLACK_CHANNEL"
    assert token not in str(caught.value)
