"""The outbox's sender, in process, on every backend: a channel hears of
what is recorded after it was first configured, each message is delivered
signed, retried on the schedule, dead-lettered after its last try, disabled
by a 410, redelivered on demand; two senders on one store never try one
message at once."""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

import orjson
import pytest
from standardwebhooks.webhooks import Webhook

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.http import create_app
from devs.adapters.notify.registry import channels_of
from devs.adapters.notify.sender import Background, Sender
from devs.adapters.notify.settings import notify_settings
from devs.domain import InvalidInput, NotFound, RecoveryService, UnknownMessage
from devs.domain.names import DeliveryState
from tests.helpers import outbox_story
from tests.integration.test_people import Inbox, SlackReceiver, inbox, slack
from tests.integration.test_webhooks import STORY, Receiver, receiver

__all__ = ["inbox", "receiver", "slack"]

PEOPLE_STORY = (
    "t1 needs a human: failed 3 times in a row",
    "ann let t1 go on",
    "t1 needs a human: failed 4 times in a row",
    "ann let t1 go on",
    "t1 needs a human to take it over: handed off after 5 failures",
    "bob took t1 from the hand-off queue",
    "bob marked t1 done",
)
"""What people are told of :func:`tests.helpers.outbox_story`, in order (a
task's messages go to people one at a time, in order)."""

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def settings_for(url: str, **more: str) -> Any:
    return notify_settings(
        {
            "DEVS_WEBHOOK_URLS": url,
            "DEVS_WEBHOOK_SECRET": SECRET,
            "DEVS_WEBHOOK_BACKOFF": "0.05,0.05",
            "DEVS_WEBHOOK_TIMEOUT": "2",
            **more,
        }
    )


def run_until(sender: Sender, done: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the sender did not get there in time"
        if not sender.step():
            sender.wait(0.02)
    sender.drain(5)


def escalate(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id)
    for i in range(3):
        service.record_gate(task_id, 1, strategy=f"s{i}", error=f"E {i}")


@pytest.fixture
def sending(make_service: Any, receiver: str) -> tuple[Any, str]:
    return make_service, receiver


def test_each_message_arrives_signed_once_in_order_of_its_events(
    sending: tuple[Any, str],
) -> None:
    make_service, url = sending
    service: RecoveryService = make_service()
    sender = Sender(service, settings_for(url))
    sender.open()
    outbox_story(service)
    run_until(sender, lambda: len(Receiver.received) >= len(STORY))
    sender.close()
    types = [orjson.loads(body)["type"] for _, body in Receiver.received]
    assert sorted(types) == sorted(STORY)
    verifier = Webhook(SECRET)
    ids = []
    for headers, body in Receiver.received:
        verifier.verify(body, headers)  # raises unless signed with the secret
        ids.append(headers["webhook-id"])
    assert len(set(ids)) == len(STORY)
    assert {m.id for m in service.outbox_messages()} == set(ids)
    report = service.webhooks()
    (channel,) = report.channels
    assert channel.kind == "webhook"
    assert channel.shown.startswith("http://127.0.0.1:")  # no path, no query
    assert "hook" not in channel.shown
    assert "s3cret" not in channel.model_dump_json()
    assert (channel.pending, channel.delivered, channel.dead) == (0, len(STORY), 0)
    assert {d.state for d in report.deliveries} == {DeliveryState.DELIVERED}


def test_a_new_channel_sends_none_of_the_history(sending: tuple[Any, str]) -> None:
    make_service, url = sending
    service: RecoveryService = make_service()
    escalate(service, "old")
    sender = Sender(service, settings_for(url))
    sender.open()
    escalate(service, "new")
    run_until(sender, lambda: len(Receiver.received) >= 1)
    time.sleep(0.2)
    sender.step()
    sender.drain(5)  # a wrongly sent old message would have arrived by now
    sender.close()
    tasks = [orjson.loads(body)["data"]["task_id"] for _, body in Receiver.received]
    assert tasks == ["new"]
    (channel,) = service.webhooks().channels
    assert channel.since_position > 0


def test_retries_then_a_dead_letter_then_a_redelivery(
    sending: tuple[Any, str],
) -> None:
    make_service, url = sending
    service: RecoveryService = make_service()
    sender = Sender(service, settings_for(url))
    sender.open()
    Receiver.answers = [(500, {}, 0.0), (503, {}, 0.0), (500, {}, 0.0)]
    escalate(service, "t1")
    run_until(
        sender,
        lambda: service.webhooks(state="dead").deliveries != [],
    )
    assert len(Receiver.received) == 3  # the first try and the two retries
    (dead,) = service.webhooks(state="dead").deliveries
    assert dead.tries == 3
    assert dead.last_status == 500
    assert dead.last_error is not None
    assert "answered 500" in dead.last_error
    assert dead.next_at is None
    # Redelivered, it arrives (the receiver answers 204 now).
    assert service.redeliver(dead.message_id).count == 1
    run_until(sender, lambda: len(Receiver.received) == 4)
    sender.close()
    (again,) = service.webhooks().deliveries
    assert again.state is DeliveryState.DELIVERED
    assert Receiver.received[-1][0]["webhook-id"] == dead.message_id


def test_a_410_disables_the_endpoint_until_a_redelivery(
    sending: tuple[Any, str],
) -> None:
    make_service, url = sending
    service: RecoveryService = make_service()
    sender = Sender(service, settings_for(url))
    sender.open()
    Receiver.answers = [(410, {}, 0.0)]
    escalate(service, "t1")
    run_until(sender, lambda: service.webhooks(state="dead").deliveries != [])
    escalate(service, "t2")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        sender.step()
        time.sleep(0.02)
    assert len(Receiver.received) == 1  # nothing more went to it
    (channel,) = service.webhooks().channels
    assert not channel.enabled
    assert channel.disabled_reason is not None
    assert "410" in channel.disabled_reason
    assert channel.pending == 1  # t2's message waits
    assert service.redeliver_failed().count == 1
    run_until(sender, lambda: len(Receiver.received) == 3)
    sender.close()
    assert service.webhooks().channels[0].enabled


def test_two_senders_never_try_one_message_at_once(
    sending: tuple[Any, str],
) -> None:
    make_service, url = sending
    first: RecoveryService = make_service()
    second: RecoveryService = make_service()
    senders = [Sender(first, settings_for(url)), Sender(second, settings_for(url))]
    for sender in senders:
        sender.open()
    for i in range(20):
        escalate(first, f"t{i}")
    stop = threading.Event()

    def run(sender: Sender) -> None:
        while not stop.is_set():
            if not sender.step():
                sender.wait(0.01)
        sender.drain(5)

    threads = [threading.Thread(target=run, args=(s,)) for s in senders]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(Receiver.received) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join()
    for sender in senders:
        sender.close()
    ids = [headers["webhook-id"] for headers, _ in Receiver.received]
    assert len(ids) == 20
    assert len(set(ids)) == 20


def test_the_background_thread_delivers_and_stops(sending: tuple[Any, str]) -> None:
    make_service, url = sending
    service: RecoveryService = make_service()
    background = Background(service, settings_for(url)).start()
    try:
        time.sleep(0.3)  # the channel opens
        escalate(service, "t1")
        deadline = time.monotonic() + 10
        while not Receiver.received and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        background.stop()
    assert len(Receiver.received) == 1
    assert not background.thread.is_alive()


def test_webhooks_and_redelivery_over_http(sending: tuple[Any, str]) -> None:
    make_service, url = sending
    service: RecoveryService = make_service()
    sender = Sender(service, settings_for(url))
    sender.open()
    Receiver.answers = [(500, {}, 0.0)] * 3
    escalate(service, "t1")
    run_until(sender, lambda: service.webhooks(state="dead").deliveries != [])
    sender.close()
    from fastapi.testclient import TestClient

    with TestClient(create_app(service)) as http:
        client = HttpRecoveryClient(http)
        report = client.webhooks(state="dead")
        assert report == service.webhooks(state="dead")
        (dead,) = report.deliveries
        assert client.redeliver(dead.message_id).count == 1
        assert client.webhooks(state="pending").deliveries[0].message_id == (
            dead.message_id
        )
        with pytest.raises(NotFound, match="no delivery of message"):
            client.redeliver("msg_" + "0" * 32)
        with pytest.raises(InvalidInput, match="message_id"):
            client.redeliver("nope")
        with pytest.raises(InvalidInput, match="state"):
            client.webhooks(state="lost")  # type: ignore[arg-type]
        assert client.redeliver_failed().count == 0


def test_an_unknown_message_and_a_bad_state_are_refused(
    service: RecoveryService,
) -> None:
    with pytest.raises(UnknownMessage, match="msg_"):
        service.redeliver("msg_" + "a" * 32)
    with pytest.raises(InvalidInput, match="message_id must be a message id"):
        service.redeliver("msg_XYZ")
    with pytest.raises(InvalidInput, match="state must be one of"):
        service.webhooks(state="gone")  # type: ignore[arg-type]
    assert service.redeliver_failed().count == 0
    assert service.webhooks().channels == []


def test_settings_are_checked_and_name_the_variable() -> None:
    with pytest.raises(InvalidInput, match="DEVS_WEBHOOK_TIMEOUT"):
        notify_settings({"DEVS_WEBHOOK_TIMEOUT": "nan"})
    with pytest.raises(InvalidInput, match="DEVS_HUMAN_REMINDER"):
        notify_settings({"DEVS_HUMAN_REMINDER": "-5"})
    # A deadline fails closed: a mistyped one stops the server (exit 6), it is
    # not dropped with a warning as the other policy fields are.
    with pytest.raises(InvalidInput, match="DEVS_HUMAN_DEADLINE") as refused:
        notify_settings({"DEVS_HUMAN_DEADLINE": "1h"})
    assert "2592000" in str(refused.value)
    assert notify_settings({}).human_reminder is None
    assert channels_of(notify_settings({})) == []
    both = notify_settings(
        {
            "DEVS_WEBHOOK_URLS": "http://a.example/x, http://b.example/y",
            "DEVS_WEBHOOK_SECRET": SECRET,
        }
    )
    keys = [channel.key for channel in channels_of(both)]
    assert len(set(keys)) == 2
    assert all(key.startswith("webhook:") for key in keys)
    assert [channel.types for channel in channels_of(both)] == [None, None]


def test_people_hear_of_stops_by_slack_and_e_mail_through_the_same_outbox(
    service: RecoveryService,
    slack: str,
    inbox: tuple[Inbox, int],
) -> None:
    mailbox, port = inbox
    settings = notify_settings(
        {
            "DEVS_SLACK_WEBHOOK_URL": slack,
            "DEVS_SMTP_URL": f"smtp://127.0.0.1:{port}",
            "DEVS_NOTIFY_EMAIL": "ann@corp.example",
            "DEVS_PUBLIC_URL": "https://devs.example",
            "DEVS_WEBHOOK_BACKOFF": "0.05",
        }
    )
    kinds = sorted(channel.kind for channel in channels_of(settings))
    assert kinds == ["email", "slack"]
    sender = Sender(service, settings)
    sender.open()
    outbox_story(service)  # two stops, a hand-off; answers and ends too
    run_until(sender, lambda: len(mailbox.mails()) >= len(PEOPLE_STORY))
    time.sleep(0.2)
    sender.step()
    sender.close()
    # What asks for a person and who answered it: not the skip of a running
    # task nobody was asked about, nor the gate that passed.
    texts = [orjson.loads(body)["text"] for _, _, body in SlackReceiver.received]
    assert texts == list(PEOPLE_STORY)
    mails = mailbox.mails()
    firsts = [m.get_content().splitlines()[0] for m in mails]
    assert firsts == list(PEOPLE_STORY)
    assert all(m["To"] == "ann@corp.example" for m in mails)
    assert "https://devs.example/console/tasks/t1" in mails[0].get_content()
    ids = {m["Message-ID"] for m in mails}
    assert len(ids) == len(PEOPLE_STORY)
    # One thread: the first is the root, the others reply to it.
    assert [m["In-Reply-To"] for m in mails[1:]] == [mails[0]["Message-ID"]] * 6
    report = service.webhooks()
    assert sorted(c.kind for c in report.channels) == ["email", "slack"]
    assert all(c.delivered == len(PEOPLE_STORY) for c in report.channels)
    assert slack.rsplit("/", 1)[-1] not in report.model_dump_json()  # no key


def test_a_look_that_meets_another_writer_s_lock_is_taken_again(
    sending: tuple[Any, str],
) -> None:
    """Another writer holding the deliveries' lock (a second sender; on a
    store in memory shared by two services, a query folding) makes one look
    do nothing: the sender is not stopped, the tries that ended are
    recorded at the next look, and every message still goes once."""
    from eventsourcing.persistence import OperationalError

    make_service, url = sending
    service: RecoveryService = make_service()
    sender = Sender(service, settings_for(url))
    sender.open()
    escalate(service, "t1")
    real = sender.store.exchange
    refused: list[int] = []

    def exchange(*args: Any) -> Any:
        if len(refused) < 3:  # the first looks, then every other
            refused.append(1)
            raise OperationalError("database table is locked: outbox_deliveries")
        return real(*args)

    sender.store.exchange = exchange  # type: ignore[method-assign,assignment]
    assert sender.step() == 0
    run_until(sender, lambda: len(Receiver.received) == 1)
    sender.close()
    assert len(refused) == 3
    assert len(Receiver.received) == 1
