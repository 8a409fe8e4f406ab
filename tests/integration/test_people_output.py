"""One hostile test output, three channels: the webhook's payload, Slack and
the e-mail show the same one error line (Slack and e-mail through
``devs.domain.output.readable``: ANSI gone, the right-to-left override made
visible)."""

from __future__ import annotations

import time
from typing import Any

import orjson
from standardwebhooks.webhooks import Webhook

from devs.adapters.notify.sender import Sender
from devs.adapters.notify.settings import notify_settings
from devs.adapters.notify.slack import BACKTICK_SHOWN
from devs.domain import RecoveryService
from devs.domain.output import error_line, readable
from tests.integration.test_people import Inbox, SlackReceiver, inbox, slack
from tests.integration.test_webhooks import (
    HOSTILE_OUTPUT,
    SECRET,
    Receiver,
    receiver,
)

__all__ = ["inbox", "receiver", "slack"]


def unescaped(text: str) -> str:
    """Slack's ``mrkdwn`` as a person reads it."""
    return (
        text.replace(BACKTICK_SHOWN, "`")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
    )


def test_slack_e_mail_and_the_webhook_show_the_same_error_line(
    service: RecoveryService,
    receiver: str,
    slack: str,
    inbox: tuple[Inbox, int],
) -> None:
    mailbox, port = inbox
    settings = notify_settings(
        {
            "DEVS_WEBHOOK_URLS": receiver,
            "DEVS_WEBHOOK_SECRET": SECRET,
            "DEVS_SLACK_WEBHOOK_URL": slack,
            "DEVS_SMTP_URL": f"smtp://127.0.0.1:{port}",
            "DEVS_NOTIFY_EMAIL": "ann@corp.example",
            "DEVS_WEBHOOK_BACKOFF": "0.05",
        }
    )
    sender = Sender(service, settings)
    sender.open()
    service.start_task("t1", agent="coder")
    for i in range(3):
        service.record_gate(
            "t1", 1, gate="pytest", strategy=f"s{i}", output=HOSTILE_OUTPUT
        )
    deadline = time.monotonic() + 15
    while not (Receiver.received and SlackReceiver.received and mailbox.mails()):
        assert time.monotonic() < deadline
        if not sender.step():
            sender.wait(0.02)
    sender.drain(5)
    sender.close()
    line = error_line(HOSTILE_OUTPUT)
    shown = readable(line)
    assert "\u202e" in line
    assert shown.startswith("E <U+202E>AssertionError: <!channel> *x* `y` &")
    # The webhook: the line as the domain chose it.
    [(headers, body)] = Receiver.received
    payload: dict[str, Any] = Webhook(SECRET).verify(body, headers)
    assert payload["data"]["last_error"] == line
    # Slack: the same line, escaped, in a code span of its own.
    [(_, _, raw)] = SlackReceiver.received
    sections = [
        block["text"]["text"]
        for block in orjson.loads(raw)["blocks"]
        if block["type"] == "section"
    ]
    [error] = [text for text in sections if text.startswith("*Last error:*")]
    assert error.startswith("*Last error:* `")
    assert error.endswith("`")
    assert unescaped(error.removeprefix("*Last error:* `")[:-1]) == shown
    assert "<!channel>" not in error
    assert "\u202e" not in orjson.dumps(sections).decode()
    # E-mail: the same line.
    [mail] = mailbox.mails()
    text = mail.get_content()
    [said] = [row for row in text.splitlines() if row.startswith("Last error: ")]
    assert said.removeprefix("Last error: ") == shown
    assert "\x1b" not in text
    assert "\u202e" not in text
