"""The outbox's messages (derived from the log) and the webhooks that carry
them: Standard Webhooks' signature, one attempt against a loopback receiver,
the retry schedule, the settings."""

from __future__ import annotations

import base64
import http.server
import random
import re
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import orjson
import pytest
from standardwebhooks.webhooks import Webhook

from devs.adapters.notify.sender import Sender
from devs.adapters.notify.settings import DEFAULT_BACKOFF, notify_settings, shown
from devs.adapters.notify.status import JITTER, Attempted, next_wait
from devs.adapters.notify.sweeper import Sweeper
from devs.adapters.notify.webhook import send_webhook
from devs.domain import InvalidInput, RecoveryService
from devs.domain.outbox import OutboxMessage, message_of
from devs.domain.output import error_line
from devs.domain.policy import Policy
from devs.domain.task import RESOLUTION_TRIGGERS, Task
from tests.helpers import outbox_story

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"fedcba9876543210fedcba9876543210").decode()


STORY = (
    "session.opened",
    "session.answered",
    "session.opened",
    "session.answered",
    "handoff.opened",
    "handoff.claimed",
    "handoff.resolved",
    "task.skipped",
    "task.completed",
)
"""The message types :func:`tests.helpers.outbox_story` makes, in order (a
skip of a running task is said too, as ``task.skipped``)."""


def messages(service: RecoveryService) -> list[OutboxMessage]:
    found = []
    for notification in service.recorder.select_notifications(start=1, limit=10_000):
        event = service.mapper.to_domain_event(notification)
        message = message_of(event, notification.id)
        if message is not None:
            found.append(message)
    return found


def test_each_stop_answer_and_end_is_one_message_with_a_stable_id(
    service: RecoveryService,
) -> None:
    outbox_story(service)
    found = messages(service)
    assert [m.type.value for m in found] == list(STORY)
    opened = found[0].data
    assert opened["task_id"] == "t1"
    assert opened["state"] == "ESCALATION"
    assert opened["reason"] == "max_retries"
    assert opened["failure_count"] == 3
    assert opened["session_id"]
    assert found[1].data["actor"] == "ann"
    assert found[1].data["state"] == "RUNNING"
    assert found[6].data["resolution"] == "complete"
    assert found[7].data["state"] == "SKIPPED"
    assert found[7].data["actor"] == "ann"
    assert found[8].data["state"] == "COMPLETED"
    # The ids: one per event, the same at every reading of the log.
    assert len({m.id for m in found}) == len(found)
    assert [m.id for m in messages(service)] == [m.id for m in found]
    assert all(m.id.startswith("msg_") and len(m.id) == 36 for m in found)


def test_messages_carry_no_secret(service: RecoveryService) -> None:
    service.start_task("t1")
    for i in range(3):
        service.record_gate("t1", 1, strategy=f"s{i}", error="token=ghp_" + "a" * 36)
    body = orjson.dumps([m.payload() for m in messages(service)])
    assert b"ghp_" not in body


# --------------------------------------------------------------- a receiver


class Receiver(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[list[tuple[int, dict[str, str], float]]] = []
    received: ClassVar[list[tuple[dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        self.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        status, headers, delay = self.answers.pop(0) if self.answers else (204, {}, 0)
        time.sleep(delay)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.answers = []
    Receiver.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook?key=s3cret"
    server.shutdown()
    server.server_close()


def a_message(service: RecoveryService) -> OutboxMessage:
    service.start_task("t1")
    for i in range(3):
        service.record_gate("t1", 1, strategy=f"s{i}", error=f"E {i}")
    return messages(service)[0]


def test_a_delivery_is_signed_as_standard_webhooks_verify_it(
    service: RecoveryService, receiver: str
) -> None:
    message = a_message(service)
    with httpx.Client() as client:
        result = send_webhook(client, receiver, message, SECRET)
    assert result.outcome is Attempted.DELIVERED
    assert result.status == 204
    [(headers, body)] = Receiver.received
    assert headers["webhook-id"] == message.id
    assert headers["content-type"] == "application/json"
    verified = Webhook(SECRET).verify(body, headers)
    assert verified["type"] == "session.opened"
    assert verified["data"]["task_id"] == "t1"
    assert set(verified) == {"type", "timestamp", "data"}
    with pytest.raises(Exception, match="signature"):
        Webhook(OLD_SECRET).verify(body, headers)


@pytest.mark.parametrize(
    ("answer", "outcome", "retry_after"),
    [
        ((500, {}, 0.0), Attempted.RETRY, None),
        ((429, {"Retry-After": "120"}, 0.0), Attempted.RETRY, 120.0),
        ((503, {"Retry-After": "soon"}, 0.0), Attempted.RETRY, None),
        ((410, {}, 0.0), Attempted.GONE, None),
        ((301, {"Location": "http://elsewhere/"}, 0.0), Attempted.RETRY, None),
        ((200, {}, 2.0), Attempted.RETRY, None),  # too slow: no answer in time
    ],
)
def test_what_an_attempt_comes_to(
    service: RecoveryService,
    receiver: str,
    answer: tuple[int, dict[str, str], float],
    outcome: Attempted,
    retry_after: float | None,
) -> None:
    message = a_message(service)
    Receiver.answers = [answer]
    with httpx.Client() as client:
        result = send_webhook(client, receiver, message, SECRET, timeout=0.5)
    assert result.outcome is outcome
    assert result.retry_after == retry_after
    if outcome is not Attempted.DELIVERED:
        assert result.error is not None
        assert "s3cret" not in result.error  # the URL's query is never shown


def test_no_receiver_is_a_retry(service: RecoveryService) -> None:
    message = a_message(service)
    with httpx.Client() as client:
        result = send_webhook(client, "http://127.0.0.1:9/x?token=abc", message, SECRET)
    assert result.outcome is Attempted.RETRY
    assert result.status is None
    assert result.error == f"ConnectError calling {shown('http://127.0.0.1:9/x')}"
    assert "token" not in result.error


def test_the_retry_schedule_with_jitter_and_retry_after() -> None:
    backoff = tuple(float(s) for s in DEFAULT_BACKOFF)
    rng = random.Random(7)
    for tries, base in enumerate(backoff, 1):
        wait = next_wait(tries, backoff, rng=rng)
        assert wait is not None
        assert base <= wait <= base * (1 + JITTER)
    assert next_wait(len(backoff) + 1, backoff) is None  # dead-lettered
    assert next_wait(0, backoff) is None
    assert next_wait(1, backoff, retry_after=600.0, rng=rng) == 600.0
    low = next_wait(1, backoff, retry_after=1.0, rng=random.Random(1))
    assert low is not None
    assert low >= 5.0


def test_settings_are_checked_and_name_the_variable() -> None:
    settings = notify_settings(
        {
            "DEVS_WEBHOOK_URLS": "https://a.example/h, http://127.0.0.1:8000/x",
            "DEVS_WEBHOOK_SECRET": f"{SECRET} {OLD_SECRET}",
        }
    )
    assert settings.webhook_urls == ("https://a.example/h", "http://127.0.0.1:8000/x")
    assert settings.webhook_secret == (SECRET, OLD_SECRET)
    assert settings.webhook_backoff == tuple(float(s) for s in DEFAULT_BACKOFF)
    assert not notify_settings({}).webhooks_enabled
    custom = notify_settings({"DEVS_WEBHOOK_BACKOFF": "1, 2.5,60"})
    assert custom.webhook_backoff == (1.0, 2.5, 60.0)
    for environ, field, words in (
        ({"DEVS_WEBHOOK_URLS": "ftp://x/"}, "DEVS_WEBHOOK_URLS", "not an http"),
        ({"DEVS_WEBHOOK_URLS": "https://x/"}, "DEVS_WEBHOOK_SECRET", "must be set"),
        ({"DEVS_WEBHOOK_SECRET": "hunter2hunter2"}, "DEVS_WEBHOOK_SECRET", "whsec_"),
        ({"DEVS_WEBHOOK_SECRET": "whsec_c2hvcnQ="}, "DEVS_WEBHOOK_SECRET", "16 bytes"),
        ({"DEVS_WEBHOOK_BACKOFF": "5,nan"}, "DEVS_WEBHOOK_BACKOFF", "'nan'"),
        ({"DEVS_WEBHOOK_BACKOFF": "5,-1"}, "DEVS_WEBHOOK_BACKOFF", "'-1'"),
        ({"DEVS_WEBHOOK_BACKOFF": "5,,6"}, "DEVS_WEBHOOK_BACKOFF", "''"),
    ):
        with pytest.raises(InvalidInput) as refused:
            notify_settings(environ)
        assert refused.value.field == field
        assert words in str(refused.value)
        assert "hunter2" not in str(refused.value)
    # No credentials, no query, no path (Discord keeps its token there): a
    # digest of the path tells two endpoints of one host apart.
    first = shown("https://user:pw@hooks.example:8443/p/q?key=1")
    assert re.fullmatch(r"https://hooks\.example:8443/…\([0-9a-f]{6}\)", first)
    assert shown("https://hooks.example:8443/p/q") == first
    assert shown("https://hooks.example:8443/p/other") != first
    assert shown("https://discord.com/api/webhooks/1/tok3n") == (
        shown("https://discord.com/api/webhooks/1/tok3n")
    )
    assert "tok3n" not in shown("https://discord.com/api/webhooks/1/tok3n")
    assert shown("http://h:abc/x") == "(not a URL)"
    assert shown("https://hooks.example") == "https://hooks.example"
    # A value refused is never repeated: written without a scheme, its
    # password would be read as part of the host.
    for bad in ("admin:hunter2@hooks.example/x", "http://h:abc/x", "http://[::1/x"):
        with pytest.raises(InvalidInput) as refused:
            notify_settings({"DEVS_WEBHOOK_URLS": bad, "DEVS_WEBHOOK_SECRET": SECRET})
        assert "hunter2" not in str(refused.value)
        assert "endpoint number 1" in str(refused.value)


def test_the_state_a_message_names_is_the_same_from_every_state_its_event_follows() -> (
    None
):
    """``message_of`` names the state after an event without folding the
    task: the chart must give one destination from every source, or (a
    reminder, a claim, its release or take-over) leave every source as it
    is, the event recording which."""
    from devs.domain.chart import Trigger, destination
    from devs.domain.outbox import MESSAGING_EVENTS, sources

    checked = 0
    for cls in MESSAGING_EVENTS:
        triggers: list[Trigger] = (
            list(RESOLUTION_TRIGGERS.values())
            if cls is Task.HandoffResolved
            else [cls.trigger]
        )
        for trigger in triggers:
            froms = sources(trigger)
            assert froms, (cls, trigger)
            after = {destination(trigger, source) for source in froms}
            if cls in WAITING_EVENTS:
                assert after == set(froms), (cls, trigger, after)
                assert "waiting_in" in cls.model_fields
            else:
                assert len(after) == 1, (cls, trigger, after)
            checked += 1
    assert checked == len(MESSAGING_EVENTS) + len(RESOLUTION_TRIGGERS) - 1


WAITING_EVENTS = (
    Task.BudgetWarned,
    Task.DeadlineReminded,
    Task.HandoffClaimed,
    Task.ClaimReleased,
    Task.ClaimTakenOver,
)
"""The events that leave the task waiting where it waits."""


# ------------------------------------------------- payloads, end to end

HOSTILE_OUTPUT = (
    "\x1b[1m============ FAILURES ============\x1b[0m\n"
    "\x1b[31mE   \u202eAssertionError: " + "<!channel> *x* `y` & " * 250 + "\x1b[0m\n"
    "\x1b[31mFAILED\x1b[0m tests/test_login.py::test_login - AssertionError\n"
    "1 failed in 0.12s\n"
)
"""A test run's output at its worst: ANSI colours, a 5,000-character ``E``
line, a right-to-left override."""


def hostile_story(service: RecoveryService) -> None:
    """An escalation, a blacklist pause, an entropy pause that expires, a
    pause of a task that never failed that expires, the escalation expiring
    (a hand-off after the deadline), and a hand-off by the ladder, each
    after the same hostile output."""
    service.policy = Policy(human_deadline=0.5)
    service.start_task("esc", agent="coder")
    for i in range(3):
        service.record_gate(
            "esc", 1, gate="pytest", strategy=f"s{i}", output=HOSTILE_OUTPUT
        )
    service.start_task("blk", agent="coder")
    service.record_gate(
        "blk", 1, gate="pytest", strategy="regex", output=HOSTILE_OUTPUT
    )
    service.log_lesson("blk", "regex", "the tokenizer cannot nest")
    service.begin_attempt("blk", "regex")
    service.start_task("ent", agent="coder")
    service.record_gate("ent", 1, gate="pytest", strategy="a", output=HOSTILE_OUTPUT)
    service.report_entropy("ent", 0.99)
    service.start_task("calm", agent="coder")
    service.report_entropy("calm", 0.99)
    time.sleep(0.6)
    expired, _ = Sweeper(service, None).sweep()
    assert sorted(expired) == ["blk", "calm", "ent", "esc"]
    service.policy = Policy()
    service.start_task("off", agent="coder")
    for i in range(5):
        decision = service.record_gate(
            "off", 1, gate="pytest", strategy=f"o{i}", output=HOSTILE_OUTPUT
        )
        if decision.outcome.value == "escalate":
            service.resume("off", actor="ann", reason="once more")


def test_webhook_payloads_carry_the_one_error_line_end_to_end(
    service: RecoveryService, receiver: str
) -> None:
    settings = notify_settings(
        {
            "DEVS_WEBHOOK_URLS": receiver,
            "DEVS_WEBHOOK_SECRET": SECRET,
            "DEVS_WEBHOOK_BACKOFF": "0.05",
        }
    )
    sender = Sender(service, settings)
    sender.open()
    hostile_story(service)
    line = error_line(HOSTILE_OUTPUT)
    assert line.startswith("E \u202eAssertionError: <!channel> *x* `y` &")
    assert len(line) == 300
    wanted = len(service.outbox_messages(limit=1000))
    deadline = time.monotonic() + 15
    while len(Receiver.received) < wanted:
        assert time.monotonic() < deadline
        if not sender.step():
            sender.wait(0.02)
    sender.drain(5)
    sender.close()
    got: dict[tuple[str, str], dict[str, Any]] = {}
    for headers, body in Receiver.received:
        payload = Webhook(SECRET).verify(body, headers)
        got[(payload["data"]["task_id"], payload["type"])] = payload["data"]
    # The escalation, its expiry (a hand-off after the deadline), the
    # entropy pause's expiry and the ladder's hand-off: the same one line.
    for key in (
        ("esc", "session.opened"),
        ("esc", "deadline.expired"),
        ("ent", "session.opened"),
        ("ent", "deadline.expired"),
        ("off", "handoff.opened"),
    ):
        assert got[key]["last_error"] == line, key
        assert got[key]["gate"] == "pytest", key
        assert got[key]["exit_code"] == 1, key
    assert got[("esc", "session.opened")]["strategies_tried"] == ["s0", "s1", "s2"]
    assert got[("esc", "session.opened")]["agent"] == "coder"
    # The blacklist pause names the strategy it blocked and the count; its
    # last error is the block's own line.
    blocked = got[("blk", "session.opened")]
    assert blocked["reason"] == "blacklisted_strategy"
    assert blocked["blocked_strategy"] == "regex"
    assert blocked["failure_count"] == 2
    assert "\n" not in blocked["last_error"]
    assert len(blocked["last_error"]) <= 300
    # A task that never failed: its pause's expiry has no last_error at all.
    assert "last_error" not in got[("calm", "deadline.expired")]
    assert "last_error" not in got[("calm", "session.opened")]
    for data in got.values():
        assert "\x1b" not in orjson.dumps(data).decode()
        assert len(data.get("last_error", "")) <= 300
