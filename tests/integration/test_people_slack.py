"""Slack at its limits and in threads: every text within Slack's limits once
escaped, a permanent refusal answered by a plain-text message (not ten
retries), the bot token's Web API against a fake Slack on 127.0.0.1 (each
task's later messages replies in the thread of its first), and e-mails of a
task threaded under one root."""

from __future__ import annotations

import http.server
import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import orjson
import pytest

from devs.adapters.notify.email import thread_root
from devs.adapters.notify.people import units
from devs.adapters.notify.sender import Sender
from devs.adapters.notify.settings import (
    SLACK_API,
    SLACK_API_ENV,
    SLACK_CHANNEL_ENV,
    SLACK_ENV,
    SLACK_TOKEN_ENV,
    notify_settings,
)
from devs.adapters.notify.slack import (
    BLOCKS_MAX,
    HEADER_MAX,
    SECTION_MAX,
    SlackPost,
    post_slack,
    send_slack,
    slack_body,
)
from devs.adapters.notify.status import Attempted
from devs.domain import InvalidInput, RecoveryService
from devs.domain.names import DeliveryState, MessageType, SessionReason
from devs.domain.outbox import OutboxMessage
from tests.integration.test_people import Inbox, a_message, escalated, inbox

__all__ = ["inbox"]

TOKEN = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
HOOK_PATH = "/services/T000/B000/XyZsecretPathToken"
ENTITY = re.compile(r"&(?!amp;|lt;|gt;)")


class FakeSlack(http.server.BaseHTTPRequestHandler):
    """Slack on 127.0.0.1: records each request; answers from ``answers``,
    else as Slack does (``ok`` to a hook, ``{"ok": true, "ts": …}`` to the
    Web API)."""

    answers: ClassVar[list[tuple[int, bytes]]] = []
    received: ClassVar[list[tuple[str, dict[str, str], dict[str, Any]]]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.lock:
            self.received.append((self.path, headers, orjson.loads(body)))
            number = len(self.received)
            answer = self.answers.pop(0) if self.answers else None
        if answer is None:
            if self.path.endswith("/chat.postMessage"):
                ts = f"1790000000.{number:06d}"
                answer = (200, orjson.dumps({"ok": True, "ts": ts}))
            else:
                answer = (200, b"ok")
        status, content = answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_slack() -> Iterator[str]:
    FakeSlack.answers = []
    FakeSlack.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeSlack)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def hostile_message() -> OutboxMessage:
    """Every text an agent or a person writes at its longest, made of the
    characters escaping lengthens fivefold, with formatting marks."""
    worst = "&<>*_~`" * 800
    return a_message(
        MessageType.SESSION_OPENED,
        task_id="&" * 200,
        reason=SessionReason.BLACKLISTED_STRATEGY.value,
        run_id="<" * 200,
        agent=worst,
        gate=worst,
        exit_code=2,
        blocked_strategy=worst,
        strategies_tried=[worst[i:] for i in range(10)],
        claimed_by=worst,
        last_error="&" * 300,
        failure_count=4,
        deadline_at="2026-11-28T06:45:05.668247+00:00",
    )


def within_limits(body: dict[str, Any]) -> int:
    """Checks every Slack limit of ``body``; its longest section's length."""
    blocks = body["blocks"]
    assert len(blocks) <= BLOCKS_MAX
    assert units(body["text"]) <= SECTION_MAX
    longest = 0
    for block in blocks:
        if block["type"] == "header":
            assert units(block["text"]["text"]) <= HEADER_MAX
        if block["type"] == "section":
            text = block["text"]["text"]
            longest = max(longest, units(text))
            assert units(text) <= SECTION_MAX
            assert not ENTITY.search(text), "an entity was cut through"
            for line in text.split("\n"):
                # each code span is closed: nothing after it is code
                assert line.count("`") % 2 == 0, line
    return longest


def test_every_slack_limit_holds_after_escaping() -> None:
    body = slack_body(hostile_message(), "https://devs.example/console/tasks/x")
    longest = within_limits(body)
    assert longest > 2_000  # the texts do fill the sections
    raw = orjson.dumps(body).decode()
    assert "<" not in raw.replace("&lt;", "")  # every < escaped
    # An agent's backtick cannot close the code span its text is set in, so
    # its * and _ stay literal.
    text = body["blocks"][1]["text"]["text"]
    agent = next(line for line in text.split("\n") if line.startswith("*Agent:*"))
    assert agent.startswith("*Agent:* `&amp;&lt;&gt;*_~\u02cb&amp;")
    assert agent.endswith("…`")


def test_a_permanent_refusal_is_answered_by_plain_text_in_the_same_try(
    fake_slack: str,
) -> None:
    FakeSlack.answers = [(400, b"invalid_blocks")]
    message = escalated(last_error="E boom <!channel>")
    with httpx.Client() as client:
        result = send_slack(client, fake_slack + HOOK_PATH, message, None)
    assert result.outcome is Attempted.DELIVERED
    assert result.error is not None
    assert "answered 400 (invalid_blocks)" in result.error
    assert "sent as plain text instead" in result.error
    assert "XyZsecret" not in result.error
    first, second = (body for _, _, body in FakeSlack.received)
    assert "blocks" in first
    assert "blocks" not in second
    assert second["text"].startswith("fix-login needs a human: failed 3 times")
    assert "Last error: E boom &lt;!channel&gt;" in second["text"]


@pytest.mark.parametrize("status", [400, 403, 404])
def test_a_message_refused_twice_is_refused_not_retried(
    fake_slack: str, status: int
) -> None:
    FakeSlack.answers = [(status, b"invalid_blocks"), (status, b"no_text")]
    with httpx.Client() as client:
        result = send_slack(client, fake_slack + HOOK_PATH, escalated(), None)
    assert result.outcome is Attempted.REFUSED
    assert result.status == status
    assert result.error is not None
    assert "as plain text too" in result.error
    assert len(FakeSlack.received) == 2


def api_post(url: str, thread_ts: str | None = None) -> SlackPost:
    return SlackPost(
        url=f"{url}/api/chat.postMessage",
        token=TOKEN,
        channel="C0123ABCD",
        thread_ts=thread_ts,
    )


def test_the_web_api_posts_with_the_token_in_a_thread(fake_slack: str) -> None:
    with httpx.Client() as client:
        sent = post_slack(client, api_post(fake_slack), escalated(), None)
        reply = post_slack(
            client, api_post(fake_slack, sent.ts), a_message(actor="ann"), None
        )
    assert sent.attempt.outcome is Attempted.DELIVERED
    assert sent.ts == "1790000000.000001"
    assert reply.attempt.outcome is Attempted.DELIVERED
    (_, headers, first), (_, _, second) = FakeSlack.received
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert first["channel"] == "C0123ABCD"
    assert "thread_ts" not in first
    assert first["unfurl_links"] is False
    assert second["thread_ts"] == "1790000000.000001"
    assert TOKEN not in repr(api_post(fake_slack))


@pytest.mark.parametrize(
    ("answers", "outcome", "requests"),
    [
        ([(200, b'{"ok": false, "error": "invalid_blocks"}')], Attempted.DELIVERED, 2),
        (
            [
                (200, b'{"ok": false, "error": "invalid_blocks"}'),
                (200, b'{"ok": false, "error": "msg_too_long"}'),
            ],
            Attempted.REFUSED,
            2,
        ),
        ([(200, b'{"ok": false, "error": "not_in_channel"}')], Attempted.RETRY, 1),
        ([(200, b'{"ok": false, "error": "is_archived"}')], Attempted.GONE, 1),
        ([(429, b'{"ok": false, "error": "ratelimited"}')], Attempted.RETRY, 1),
        ([(503, b"")], Attempted.RETRY, 1),
    ],
)
def test_what_a_web_api_answer_comes_to(
    fake_slack: str,
    answers: list[tuple[int, bytes]],
    outcome: Attempted,
    requests: int,
) -> None:
    FakeSlack.answers = list(answers)
    with httpx.Client() as client:
        sent = post_slack(client, api_post(fake_slack), escalated(), None)
    assert sent.attempt.outcome is outcome
    assert len(FakeSlack.received) == requests
    assert TOKEN not in (sent.attempt.error or "")


def test_a_token_slack_echoes_is_not_repeated(fake_slack: str) -> None:
    FakeSlack.answers = [(500, f"bad token {TOKEN}".encode())]
    with httpx.Client() as client:
        sent = post_slack(client, api_post(fake_slack), escalated(), None)
    assert sent.attempt.outcome is Attempted.RETRY
    assert sent.attempt.error is not None
    assert "bad token ***" in sent.attempt.error
    assert TOKEN not in sent.attempt.error


# ------------------------------------------------------------------ settings


def test_the_bot_token_settings() -> None:
    settings = notify_settings(
        {SLACK_TOKEN_ENV: TOKEN, SLACK_CHANNEL_ENV: "#ops", SLACK_API_ENV: ""}
    )
    assert settings.slack_enabled
    assert settings.slack_threads
    assert settings.slack_api_url == SLACK_API
    assert settings.slack_channel == "#ops"
    assert TOKEN not in repr(settings)
    hook = notify_settings({SLACK_ENV: "https://hooks.slack.com" + HOOK_PATH})
    assert hook.slack_enabled
    assert not hook.slack_threads


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({SLACK_TOKEN_ENV: TOKEN}, SLACK_CHANNEL_ENV),
        ({SLACK_CHANNEL_ENV: "C1"}, SLACK_TOKEN_ENV),
        (
            {
                SLACK_TOKEN_ENV: TOKEN,
                SLACK_CHANNEL_ENV: "C1",
                SLACK_ENV: "https://hooks.slack.com" + HOOK_PATH,
            },
            SLACK_TOKEN_ENV,
        ),
        (
            {SLACK_TOKEN_ENV: "hunter2-" + TOKEN, SLACK_CHANNEL_ENV: "C1"},
            SLACK_TOKEN_ENV,
        ),
        ({SLACK_TOKEN_ENV: TOKEN, SLACK_CHANNEL_ENV: "ops room"}, SLACK_CHANNEL_ENV),
        (
            {
                SLACK_TOKEN_ENV: TOKEN,
                SLACK_CHANNEL_ENV: "C1",
                SLACK_API_ENV: "https://u:hunter2@slack.example/api",
            },
            SLACK_API_ENV,
        ),
    ],
)
def test_a_wrong_slack_setting_is_refused_without_the_token(
    environ: dict[str, str], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        notify_settings(environ)
    assert refused.value.field == field
    assert field in str(refused.value)
    assert "hunter2" not in str(refused.value)
    assert TOKEN[10:] not in str(refused.value)


# ------------------------------------------------------------- the sender


def run_until(sender: Sender, done: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the sender did not get there in time"
        if not sender.step():
            sender.wait(0.02)
    sender.drain(5)


def stop_claim_answer(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id, agent="coder")
    for i in range(3):
        service.record_gate(task_id, 1, gate="pytest", strategy=f"s{i}", error="E x")
    service.claim(task_id, actor="ann")
    service.resume(task_id, actor="ann", reason="go on")


def test_a_tasks_messages_thread_in_slack_and_in_e_mail(
    make_service: Any, fake_slack: str, inbox: tuple[Inbox, int]
) -> None:
    mailbox, port = inbox
    service: RecoveryService = make_service()
    settings = notify_settings(
        {
            SLACK_TOKEN_ENV: TOKEN,
            SLACK_CHANNEL_ENV: "C0123ABCD",
            SLACK_API_ENV: f"{fake_slack}/api",
            "DEVS_SMTP_URL": f"smtp://127.0.0.1:{port}",
            "DEVS_NOTIFY_EMAIL": "ann@corp.example",
            "DEVS_WEBHOOK_BACKOFF": "0.05",
        }
    )
    sender = Sender(service, settings)
    sender.open()
    stop_claim_answer(service, "t1")
    stop_claim_answer(service, "t2")
    run_until(
        sender, lambda: len(mailbox.mails()) >= 6 and len(FakeSlack.received) >= 6
    )
    sender.close()
    by_task: dict[str, list[dict[str, Any]]] = {}
    for path, headers, body in FakeSlack.received:
        assert path == "/api/chat.postMessage"
        assert headers["authorization"] == f"Bearer {TOKEN}"
        task = "t1" if "t1" in body["text"] else "t2"
        by_task.setdefault(task, []).append(body)
    for task, bodies in by_task.items():
        opened, claimed, answered = bodies
        assert opened["text"].startswith(f"{task} needs a human")
        assert "thread_ts" not in opened
        assert claimed["text"] == f"ann is on {task}: others' answers wait for them"
        assert answered["text"] == f"ann let {task} go on"
        assert claimed["thread_ts"] == answered["thread_ts"]
        assert re.fullmatch(r"1790000000\.\d{6}", claimed["thread_ts"])
    assert by_task["t1"][1]["thread_ts"] != by_task["t2"][1]["thread_ts"]
    mails = mailbox.mails()
    for task in ("t1", "t2"):
        root = thread_root(task)
        assert task not in root
        threaded = [m for m in mails if task in m["Subject"]]
        assert len(threaded) == 3
        first, *replies = threaded
        assert first["Message-ID"] == root
        assert first["Subject"] == f"[devs] {task}: needs a human"
        for reply in replies:
            assert reply["Subject"] == f"Re: [devs] {task}: needs a human"
            assert reply["In-Reply-To"] == root
            assert reply["References"] == root
            assert reply["Message-ID"] != root
    report = service.webhooks()
    assert all(c.delivered == 6 for c in report.channels)
    assert TOKEN not in report.model_dump_json()


def test_a_refused_slack_message_is_dead_after_one_try(
    make_service: Any, fake_slack: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="devs.outbox")
    service: RecoveryService = make_service()
    settings = notify_settings(
        {SLACK_ENV: fake_slack + HOOK_PATH, "DEVS_WEBHOOK_BACKOFF": "0.05,0.05,0.05"}
    )
    sender = Sender(service, settings)
    sender.open()
    FakeSlack.answers = [(400, b"invalid_blocks"), (400, b"invalid_blocks")]
    service.start_task("t1")
    for i in range(3):
        service.record_gate("t1", 1, strategy=f"s{i}", error="E x")
    run_until(sender, lambda: service.webhooks(state="dead").deliveries != [])
    time.sleep(0.3)  # a retry, were there one, would come by now
    sender.step()
    sender.drain(2)
    sender.close()
    assert len(FakeSlack.received) == 2  # the blocks, then the plain text
    (dead,) = service.webhooks(state="dead").deliveries
    assert dead.tries == 1
    assert dead.state is DeliveryState.DEAD
    assert dead.last_error is not None
    assert "as plain text too" in dead.last_error
    (channel,) = service.webhooks().channels
    assert channel.enabled  # the next message is tried as usual
    said = [r.getMessage() for r in caplog.records if r.name == "devs.outbox"]
    assert any("refused" in line and "for good" in line for line in said)
    assert not any("XyZsecret" in line for line in said)


def test_a_message_sent_as_plain_text_is_delivered_with_a_warning(
    make_service: Any, fake_slack: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="devs.outbox")
    service: RecoveryService = make_service()
    settings = notify_settings({SLACK_ENV: fake_slack + HOOK_PATH})
    sender = Sender(service, settings)
    sender.open()
    FakeSlack.answers = [(400, b"invalid_blocks")]
    service.start_task("t1")
    for i in range(3):
        service.record_gate("t1", 1, strategy=f"s{i}", error="E x")
    run_until(sender, lambda: service.webhooks().channels[0].delivered == 1)
    sender.close()
    assert len(FakeSlack.received) == 2
    said = [r.getMessage() for r in caplog.records if r.name == "devs.outbox"]
    assert any("sent as plain text instead" in line for line in said)
    assert not any("XyZsecret" in line for line in said)
