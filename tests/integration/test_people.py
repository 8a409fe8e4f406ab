"""The outbox's channels to people: the settings, the text, a Slack incoming
webhook against a loopback receiver, and e-mail through a local SMTP server
(aiosmtpd), in plain text, with a login, over STARTTLS and over TLS."""

from __future__ import annotations

import email
import email.policy
import http.server
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from devs.adapters.notify.email import email_of, send_email, subject_of, thread_root
from devs.adapters.notify.people import (
    LAST_ERROR_SHOWN,
    console_link,
    facts,
    for_people,
    headline,
    last_error_line,
    notice,
    said,
    when,
)
from devs.adapters.notify.settings import (
    EMAIL_ENV,
    PUBLIC_URL_ENV,
    RECIPIENTS_MAX,
    SLACK_ENV,
    SMTP_ENV,
    NotifySettings,
    SmtpSecurity,
    notify_settings,
    slack_shown,
)
from devs.adapters.notify.slack import send_slack, slack_body
from devs.adapters.notify.status import Attempted
from devs.domain import InvalidInput
from devs.domain.names import HAND_OFF_REQUIRED, MessageType, SessionReason
from devs.domain.outbox import OutboxMessage, message_id

HOOK_PATH = "/services/T000/B000/XyZsecretPathToken"
PASSWORD = "hunter2:p@ss/w rd"
QUOTED_PASSWORD = "hunter2%3Ap%40ss%2Fw%20rd"
WHEN = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)


def a_message(
    kind: MessageType = MessageType.SESSION_OPENED,
    task_id: str = "fix-login",
    **data: Any,
) -> OutboxMessage:
    return OutboxMessage(
        id=message_id(f"task:{task_id}", 4),
        type=kind,
        timestamp=WHEN,
        task_id=task_id,
        position=9,
        data={"task_id": task_id, "state": "ESCALATION", **data},
    )


def escalated(task_id: str = "fix-login", **data: Any) -> OutboxMessage:
    fields: dict[str, Any] = {
        "reason": SessionReason.MAX_RETRIES.value,
        "session_id": "ses_1",
        "failure_count": 3,
        "last_error": "Traceback:\n  File x\nAssertionError: 1 != 2\n\n",
    }
    return a_message(MessageType.SESSION_OPENED, task_id, **(fields | data))


# ------------------------------------------------------------------ settings


def test_settings_read_every_variable() -> None:
    settings = notify_settings(
        {
            SLACK_ENV: f"https://hooks.slack.com{HOOK_PATH}",
            SMTP_ENV: f"smtp+starttls://ann%40corp:{QUOTED_PASSWORD}@mail.example"
            "?from=devs%40corp.example",
            EMAIL_ENV: " ann@corp.example, Bob <bob@corp.example>,ann@corp.example",
            PUBLIC_URL_ENV: "https://devs.example.com/",
        }
    )
    assert settings.slack_webhook_url == f"https://hooks.slack.com{HOOK_PATH}"
    assert settings.slack_enabled
    assert settings.email_enabled
    assert settings.notify_email == ("ann@corp.example", "bob@corp.example")
    assert settings.public_url == "https://devs.example.com"
    smtp = settings.smtp_url
    assert smtp is not None
    assert smtp.security is SmtpSecurity.STARTTLS
    assert (smtp.host, smtp.port) == ("mail.example", 587)
    assert (smtp.user, smtp.password) == ("ann@corp", PASSWORD)
    assert smtp.sender == "devs@corp.example"
    assert smtp.shown == "smtp+starttls://mail.example:587"
    # Neither the password nor the hook's path is in the settings' repr.
    assert "hunter2" not in repr(settings)
    assert "XyZsecret" not in repr(settings)
    nothing = notify_settings({})
    assert nothing == NotifySettings.from_environ({})
    assert not nothing.slack_enabled
    assert not nothing.email_enabled


@pytest.mark.parametrize(
    ("url", "security", "port", "sender"),
    [
        ("smtp://relay.local", SmtpSecurity.PLAIN, 25, "devs-recovery@relay.local"),
        ("smtps://mail.example", SmtpSecurity.TLS, 465, "devs-recovery@mail.example"),
        ("SMTP+STARTTLS://m.example:2525/", SmtpSecurity.STARTTLS, 2525, None),
        (
            "smtp://127.0.0.1:8025",
            SmtpSecurity.PLAIN,
            8025,
            "devs-recovery@[127.0.0.1]",
        ),
    ],
)
def test_each_smtp_scheme_has_its_port_and_a_sender(
    url: str, security: SmtpSecurity, port: int, sender: str | None
) -> None:
    smtp = notify_settings({SMTP_ENV: url, EMAIL_ENV: "a@b.example"}).smtp_url
    assert smtp is not None
    assert smtp.security is security
    assert smtp.port == port
    assert smtp.user is None
    assert smtp.password is None
    assert smtp.sender == (sender or "devs-recovery@m.example")


@pytest.mark.parametrize(
    ("environ", "field", "words"),
    [
        ({SLACK_ENV: "ftp://hooks.slack.com" + HOOK_PATH}, SLACK_ENV, "not an"),
        ({SLACK_ENV: "https://" + HOOK_PATH}, SLACK_ENV, "with a host"),
        ({SLACK_ENV: "https://h:port" + HOOK_PATH}, SLACK_ENV, "(not a URL)"),
        ({SMTP_ENV: "smtp://mail.example"}, EMAIL_ENV, "must name who"),
        ({EMAIL_ENV: "ann@corp.example"}, SMTP_ENV, "must name the server"),
        (
            {SMTP_ENV: f"imap://u:{QUOTED_PASSWORD}@m", EMAIL_ENV: "a@b"},
            SMTP_ENV,
            "not an SMTP URL",
        ),
        ({SMTP_ENV: f"u:{QUOTED_PASSWORD}@m", EMAIL_ENV: "a@b"}, SMTP_ENV, "not an"),
        (
            {SMTP_ENV: f"smtp://:{QUOTED_PASSWORD}@m", EMAIL_ENV: "a@b"},
            SMTP_ENV,
            "no user",
        ),
        ({SMTP_ENV: "smtp://ann@m", EMAIL_ENV: "a@b"}, SMTP_ENV, "no password"),
        ({SMTP_ENV: f"smtp://u:{PASSWORD}@m", EMAIL_ENV: "a@b"}, SMTP_ENV, "a path"),
        ({SMTP_ENV: "smtp://m:0", EMAIL_ENV: "a@b"}, SMTP_ENV, "1-65535"),
        ({SMTP_ENV: "smtp://m:x", EMAIL_ENV: "a@b"}, SMTP_ENV, "cannot be read"),
        ({SMTP_ENV: "smtp://m/x", EMAIL_ENV: "a@b"}, SMTP_ENV, "path"),
        ({SMTP_ENV: "smtp://m?to=x", EMAIL_ENV: "a@b"}, SMTP_ENV, "'to'"),
        ({SMTP_ENV: "smtp://m?from=nobody", EMAIL_ENV: "a@b"}, SMTP_ENV, "'nobody'"),
        ({SMTP_ENV: "smtp://", EMAIL_ENV: "a@b"}, SMTP_ENV, "no host"),
        ({SMTP_ENV: "smtp://m", EMAIL_ENV: "a@b, ann"}, EMAIL_ENV, "'ann'"),
        ({SMTP_ENV: "smtp://m", EMAIL_ENV: "a@b\r\nBcc: c@d"}, EMAIL_ENV, "address"),
        ({SMTP_ENV: "smtp://m", EMAIL_ENV: "a@b..c"}, EMAIL_ENV, "address"),
        (
            {SMTP_ENV: "smtp://m", EMAIL_ENV: "A\x01nn <a@b>"},
            EMAIL_ENV,
            "address",
        ),
        (
            {
                SMTP_ENV: "smtp://m",
                EMAIL_ENV: ",".join(f"u{i}@b" for i in range(RECIPIENTS_MAX + 1)),
            },
            EMAIL_ENV,
            f"limit is {RECIPIENTS_MAX}",
        ),
        ({PUBLIC_URL_ENV: "devs.example.com"}, PUBLIC_URL_ENV, "not an http"),
        (
            {PUBLIC_URL_ENV: "https://u:hunter2@d.example"},
            PUBLIC_URL_ENV,
            "credentials",
        ),
        ({PUBLIC_URL_ENV: "https://d.example/?k=hunter2"}, PUBLIC_URL_ENV, "query"),
    ],
)
def test_a_wrong_setting_is_refused_naming_its_variable_and_no_secret(
    environ: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        notify_settings(environ)
    assert refused.value.field == field
    said = str(refused.value)
    assert field in said
    assert words in said
    assert "hunter2" not in said
    assert "XyZsecret" not in said
    assert "T000" not in said


def test_slack_urls_are_shown_without_their_path() -> None:
    url = f"https://user:pw@hooks.slack.com:8443{HOOK_PATH}?x=1"
    assert slack_shown(url) == "https://hooks.slack.com:8443"
    assert slack_shown("xoxb-123:secret") == "(not an http(s) URL)"
    assert slack_shown("https://h:nope/T/B/C") == "(not a URL)"


def test_a_console_link_quotes_the_task_id() -> None:
    assert console_link(None, "t1") is None
    assert (
        console_link("https://d.example", "t1") == "https://d.example/console/tasks/t1"
    )
    assert console_link("https://d.example/", "a/b c?#") == (
        "https://d.example/console/tasks/a%2Fb%20c%3F%23"
    )


def test_people_hear_of_stops_claims_answers_and_deadlines() -> None:
    heard = {str(kind) for kind in MessageType if for_people(kind)}
    assert heard == {
        MessageType.SESSION_OPENED.value,
        MessageType.HANDOFF_OPENED.value,
        MessageType.DEADLINE_EXPIRED.value,
        MessageType.DEADLINE_REMINDER.value,
        MessageType.SESSION_CLAIMED.value,
        MessageType.HANDOFF_CLAIMED.value,
        MessageType.CLAIM_RELEASED.value,
        MessageType.CLAIM_TAKEN_OVER.value,
        MessageType.SESSION_ANSWERED.value,
        MessageType.HANDOFF_RESOLVED.value,
    }
    # Nobody was asked about these: webhooks only.
    for kind in ("task.completed", "task.skipped", "task.rewound", "x.y"):
        assert not for_people(kind)
    assert for_people(MessageType.DEADLINE_REMINDER)


# ---------------------------------------------------------------------- text

NOW = datetime(2026, 11, 28, 6, 31, 5, tzinfo=UTC)
DEADLINE = "2026-11-28T06:45:05.668247+00:00"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (escalated(), "fix-login needs a human: failed 3 times in a row"),
        (
            a_message(reason=SessionReason.ENTROPY_LIMIT.value, entropy_score=0.9071),
            "fix-login needs a human: looked stuck (entropy 0.91)",
        ),
        (
            a_message(reason=SessionReason.BLACKLISTED_STRATEGY.value),
            "fix-login needs a human: repeated a strategy that already failed",
        ),
        (
            a_message(reason="new_reason", failure_count=1),
            "fix-login needs a human: stopped (new_reason)",
        ),
        (
            a_message(
                MessageType.HANDOFF_OPENED, reason=HAND_OFF_REQUIRED, failure_count=5
            ),
            "fix-login needs a human to take it over: handed off after 5 failures",
        ),
        (
            a_message(
                MessageType.DEADLINE_EXPIRED,
                reason="human_deadline",
                session_id="ses_1",
                deadline_at=DEADLINE,
                actor="devs:deadline",
            ),
            "fix-login was handed off: nobody answered before the deadline",
        ),
        (
            a_message(MessageType.DEADLINE_REMINDER, deadline_at=DEADLINE),
            "fix-login still needs a human: the deadline is in 14 minutes (06:45 UTC)",
        ),
        (
            a_message(MessageType.SESSION_ANSWERED, actor="ann", action="resume"),
            "ann let fix-login go on",
        ),
        (
            a_message(MessageType.SESSION_ANSWERED, actor="ann", action="rewind"),
            "ann sent fix-login back to an earlier commit",
        ),
        (
            a_message(MessageType.TASK_SKIPPED, actor="ann", action="skip"),
            "ann skipped fix-login",
        ),
        (
            a_message(MessageType.SESSION_CLAIMED, actor="ann"),
            "ann is on fix-login: others' answers wait for them",
        ),
        (
            a_message(MessageType.HANDOFF_CLAIMED, actor="bob"),
            "bob took fix-login from the hand-off queue",
        ),
        (
            a_message(MessageType.CLAIM_RELEASED, actor="bob"),
            "bob let go of fix-login: anyone may answer it",
        ),
        (
            a_message(
                MessageType.CLAIM_TAKEN_OVER, actor="cy", previous="bob", reason="away"
            ),
            "cy took fix-login over from bob",
        ),
        (
            a_message(MessageType.HANDOFF_RESOLVED, actor="bob", resolution="skip"),
            "bob skipped fix-login",
        ),
        (
            a_message(MessageType.HANDOFF_RESOLVED, actor="bob", resolution="return"),
            "bob gave fix-login back to the agent",
        ),
        (
            a_message(MessageType.TASK_COMPLETED, gate="pytest"),
            "fix-login passed its gate",
        ),
    ],
)
def test_each_message_has_one_line_saying_what_happened_in_words(
    message: OutboxMessage, expected: str
) -> None:
    line = headline(message, NOW)
    assert line == expected
    for code in ("max_retries", "hand_off_required", "ESCALATION", "ses_1", "2026"):
        assert code not in line


def test_a_deadline_reads_as_how_long_and_when_without_microseconds() -> None:
    deadline = datetime.fromisoformat(DEADLINE)
    assert when(deadline, NOW) == "in 14 minutes (06:45 UTC)"
    assert when(deadline, deadline + timedelta(hours=3)) == (
        "passed 3 hours ago (06:45 UTC)"
    )
    assert when(deadline, deadline - timedelta(seconds=20)) == (
        "in less than a minute (06:45 UTC)"
    )
    assert (
        when(deadline, deadline - timedelta(days=3)) == "in 3 days (28 Nov 06:45 UTC)"
    )
    note = notice(escalated(deadline_at=DEADLINE, run_id="release-42"), None, NOW)
    assert ("Answer by", "in 14 minutes (06:45 UTC)") in note.facts
    expired = a_message(
        MessageType.DEADLINE_EXPIRED, deadline_at=DEADLINE, claimed_by="ann"
    )
    facts_of = dict(notice(expired, None, NOW).facts)
    assert facts_of["Deadline"] == "passed at 06:45 UTC"
    assert facts_of["Claimed by"] == "ann"


def test_a_notice_says_the_run_agent_gate_strategies_and_error() -> None:
    message = escalated(
        run_id="release-42",
        agent="coder",
        gate="pytest",
        exit_code=1,
        strategies_tried=[f"s{i}" for i in range(12)],
        last_error="E AssertionError: expected 200, got 500",
    )
    note = notice(message, "https://d.example/console/tasks/fix-login", NOW)
    assert dict(note.facts) == {
        "Why": "failed 3 times in a row",
        "Task": "fix-login",
        "Run": "release-42",
        "Agent": "coder",
        "Gate": "pytest, exit code 1",
    }
    assert note.tried == tuple(f"s{i}" for i in range(2, 12))  # the latest 10
    assert note.error == "E AssertionError: expected 200, got 500"
    blacklist = a_message(
        reason=SessionReason.BLACKLISTED_STRATEGY.value,
        blocked_strategy="regex",
        failure_count=2,
    )
    assert dict(notice(blacklist, None, NOW).facts) == {
        "Why": "repeated a strategy that already failed",
        "Task": "fix-login",
        "Blocked strategy": "regex",
        "Failures": "2 in a row",
    }
    answered = a_message(
        MessageType.SESSION_ANSWERED, actor="ann", action="resume", reason="go on"
    )
    assert dict(notice(answered, None, NOW).facts)["Reason given"] == "go on"


def test_hostile_text_is_one_readable_line() -> None:
    message = escalated(
        task_id="t\r\nBcc: x@y\x1b[31m\u202e",
        agent="a\x1b]0;title\x07gent\u2028x",
        last_error="first\n" + "x" * 5_000 + "\u2028\n \t\n\x0b",
    )
    line = headline(message)
    for character in ("\r", "\n", "\x1b", "\u202e", "\u2028"):
        assert character not in line
    assert line.startswith("t Bcc: x@y<U+202E> needs a human")
    assert dict(facts(message))["Agent"] == "agent x"
    # An older message's whole output is reduced by the one rule.
    assert last_error_line(message.data["last_error"]) == (
        "x" * (LAST_ERROR_SHOWN - 1) + "…"
    )
    assert last_error_line("one\nE   two  \nthree\n") == "E two"
    assert last_error_line("\n \n") == ""
    assert last_error_line(None) == ""
    assert said("\x1b[1;31mred\x1b[0m \u202egreen") == "red <U+202E>green"
    # Linear time: a megabyte of blank lines and a long line is quick.
    started = time.perf_counter()
    assert last_error_line("a\n" + "\n \r" * 1_000_000) == "a"
    assert last_error_line("y" * 2_000_000) == "y" * (LAST_ERROR_SHOWN - 1) + "…"
    assert time.perf_counter() - started < 2.0


# --------------------------------------------------------------------- Slack

HOSTILE = "<!channel> look <http://evil.example|your bank> & <@U123>"


def test_the_slack_body_says_what_stopped_and_why_escaped() -> None:
    message = escalated(
        reason=HOSTILE,
        agent=HOSTILE,
        last_error=f"E  {HOSTILE} `tick` *bold*",
        deadline_at=DEADLINE,
    )
    link = console_link(
        notify_settings({PUBLIC_URL_ENV: "https://devs.example.com"}).public_url,
        message.task_id,
    )
    body = slack_body(message, link, now=NOW)
    assert body["text"].startswith("fix-login needs a human: stopped (&lt;!channel")
    header, facts_block, error_block, actions = body["blocks"]
    assert header["type"] == "header"
    assert header["text"]["type"] == "plain_text"
    assert header["text"]["text"].startswith("fix-login needs a human")
    text = facts_block["text"]["text"]
    assert facts_block["text"]["verbatim"] is True
    assert "*Task:* `fix-login`" in text
    assert "*Answer by:* in 14 minutes (06:45 UTC)" in text
    assert "*Agent:* `&lt;!channel&gt; look &lt;http://evil.example|your bank" in text
    assert "ses_1" not in orjson.dumps(body).decode()
    error = error_block["text"]["text"]
    assert error == (
        "*Last error:* `E &lt;!channel&gt; look &lt;http://evil.example|your bank&gt;"
        " &amp; &lt;@U123&gt; \u02cbtick\u02cb *bold*`"
    )
    assert actions == {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Answer in the console"},
                "url": "https://devs.example.com/console/tasks/fix-login",
            }
        ],
    }
    sections = [b for b in body["blocks"] if b["type"] == "section"]
    raw = orjson.dumps(sections).decode() + body["text"]
    for injected in ("<!channel>", "<http://evil", "<@U123>", "& <"):
        assert injected not in raw


def test_without_a_public_url_there_is_no_button() -> None:
    settings = notify_settings({SLACK_ENV: "https://hooks.slack.com" + HOOK_PATH})
    body = slack_body(escalated(), console_link(settings.public_url, "fix-login"))
    assert [block["type"] for block in body["blocks"]] == [
        "header",
        "section",
        "section",
    ]
    assert "console" not in orjson.dumps(body).decode()


class SlackReceiver(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[list[tuple[int, dict[str, str], bytes]]] = []
    received: ClassVar[list[tuple[str, dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.received.append((self.path, headers, body))
        status, extra, answer = (
            self.answers.pop(0) if self.answers else (200, {}, b"ok")
        )
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slack() -> Iterator[str]:
    SlackReceiver.answers = []
    SlackReceiver.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlackReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}{HOOK_PATH}"
    server.shutdown()
    server.server_close()


def test_a_slack_delivery_posts_the_body(slack: str) -> None:
    message = escalated()
    with httpx.Client() as client:
        result = send_slack(client, slack, message, "https://d.example/x")
    assert result.outcome is Attempted.DELIVERED
    assert result.status == 200
    assert result.error is None
    [(path, headers, body)] = SlackReceiver.received
    assert path == HOOK_PATH
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert "authorization" not in headers  # a hook has its key in its path
    assert orjson.loads(body) == slack_body(message, "https://d.example/x")


@pytest.mark.parametrize(
    ("answer", "outcome", "retry_after"),
    [
        ((500, {}, b"rollup_error"), Attempted.RETRY, None),
        ((429, {"Retry-After": "7"}, b"rate_limited"), Attempted.RETRY, 7.0),
        ((408, {}, b"timeout"), Attempted.RETRY, None),
        ((410, {}, b"channel_is_archived"), Attempted.GONE, None),
    ],
)
def test_what_a_slack_attempt_comes_to(
    slack: str,
    answer: tuple[int, dict[str, str], bytes],
    outcome: Attempted,
    retry_after: float | None,
) -> None:
    SlackReceiver.answers = [answer]
    with httpx.Client() as client:
        result = send_slack(client, slack, escalated(), None, timeout=2.0)
    assert result.outcome is outcome
    assert result.status == answer[0]
    assert result.retry_after == retry_after
    assert result.error is not None
    assert result.error.startswith(f"{slack_shown(slack)} answered {answer[0]}")
    assert answer[2].decode() in result.error
    assert "XyZsecret" not in result.error
    assert "T000" not in result.error


def test_no_slack_listening_is_a_retry_naming_only_the_host() -> None:
    with httpx.Client() as client:
        result = send_slack(client, "http://127.0.0.1:9" + HOOK_PATH, escalated(), None)
    assert result.outcome is Attempted.RETRY
    assert result.status is None
    assert result.error == "ConnectError calling http://127.0.0.1:9"


# -------------------------------------------------------------------- e-mail


class Inbox:
    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []

    async def handle_DATA(  # noqa: N802 (aiosmtpd's name for the hook)
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        self.envelopes.append(envelope)
        return "250 OK"

    def mails(self) -> list[EmailMessage]:
        found = []
        for envelope in self.envelopes:
            assert isinstance(envelope.content, bytes)
            mail = email.message_from_bytes(
                envelope.content, policy=email.policy.default
            )
            assert isinstance(mail, EmailMessage)
            found.append(mail)
        return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def ann_only(
    server: SMTP,
    session: Session,
    envelope: Envelope,
    mechanism: str,
    auth_data: Any,
) -> AuthResult:
    assert isinstance(auth_data, LoginPassword)
    right = auth_data == LoginPassword(b"ann@corp", PASSWORD.encode())
    return AuthResult(success=right, handled=False)  # aiosmtpd answers 535


def smtp_server(inbox: Inbox, **options: Any) -> Controller:
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(), **options)
    controller.start()
    return controller


@pytest.fixture
def inbox() -> Iterator[tuple[Inbox, int]]:
    mailbox = Inbox()
    controller = smtp_server(mailbox)
    yield mailbox, controller.port
    controller.stop()


def settings_for(
    url: str, recipients: str = "ann@corp.example, bob@corp.example"
) -> NotifySettings:
    return notify_settings({SMTP_ENV: url, EMAIL_ENV: recipients})


def test_an_email_arrives_with_its_headers_and_body(inbox: tuple[Inbox, int]) -> None:
    mailbox, port = inbox
    settings = settings_for(f"smtp://127.0.0.1:{port}?from=devs%40corp.example")
    message = escalated()
    link = console_link("https://devs.example.com", message.task_id)
    result = send_email(settings, message, link, timeout=5.0)
    assert result.outcome is Attempted.DELIVERED
    assert result.error is None
    [envelope] = mailbox.envelopes
    assert envelope.mail_from == "devs@corp.example"
    assert envelope.rcpt_tos == ["ann@corp.example", "bob@corp.example"]
    [mail] = mailbox.mails()
    assert mail["Subject"] == "[devs] fix-login: needs a human"
    assert mail["From"] == "devs@corp.example"
    assert mail["To"] == "ann@corp.example, bob@corp.example"
    # The task's first e-mail: the root its later ones reply to.
    assert mail["Message-ID"] == thread_root("fix-login")
    assert mail["In-Reply-To"] is None
    assert mail["Date"] == "Fri, 01 May 2026 12:30:00 +0000"
    assert mail["Auto-Submitted"] == "auto-generated"
    body = mail.get_body(("plain",))
    assert body is not None
    text = body.get_content().replace("\r\n", "\n")
    assert "Task: fix-login\n" in text
    assert text.startswith("fix-login needs a human: failed 3 times in a row\n")
    assert "Why: failed 3 times in a row\n" in text
    assert "ses_1" not in text
    assert "max_retries" not in text
    assert "Last error: AssertionError: 1 != 2\n" in text
    assert "Answer it: https://devs.example.com/console/tasks/fix-login" in text


def test_the_default_sender_is_named_after_the_server(inbox: tuple[Inbox, int]) -> None:
    mailbox, port = inbox
    result = send_email(
        settings_for(f"smtp://127.0.0.1:{port}", "a@b.example"), escalated(), None
    )
    assert result.outcome is Attempted.DELIVERED
    [envelope] = mailbox.envelopes
    assert envelope.mail_from == "devs-recovery@[127.0.0.1]"
    [mail] = mailbox.mails()
    assert "console" not in str(mail.get_body(("plain",)))


def test_a_header_cannot_be_injected(inbox: tuple[Inbox, int]) -> None:
    mailbox, port = inbox
    injected = "\r\nBcc: x@y.example\r\nX-Evil: 1"
    message = escalated(task_id=f"t1{injected}", reason=f"max_retries{injected}")
    result = send_email(
        settings_for(f"smtp://127.0.0.1:{port}", "a@b.example"), message, None
    )
    assert result.outcome is Attempted.DELIVERED
    [envelope] = mailbox.envelopes
    assert envelope.rcpt_tos == ["a@b.example"]
    [mail] = mailbox.mails()
    assert mail["Bcc"] is None
    assert mail["X-Evil"] is None
    assert sorted(mail.keys()) == sorted(
        [
            "Subject",
            "From",
            "To",
            "Date",
            "Message-ID",
            "Auto-Submitted",
            "Content-Type",
            "Content-Transfer-Encoding",
            "MIME-Version",
        ]
    )
    assert mail["Subject"] == "[devs] t1 Bcc: x@y.example X-Evil: 1: needs a human"
    built = email_of(message, None, "d@e.example", ["a@b.example"])
    assert len(built["Subject"]) <= 200
    assert "\n" not in built["Subject"]


def test_a_login_works_and_a_wrong_password_is_a_retry_without_it() -> None:
    mailbox = Inbox()
    controller = smtp_server(mailbox, authenticator=ann_only, auth_require_tls=False)
    try:
        where = f"127.0.0.1:{controller.port}"
        good = settings_for(f"smtp://ann%40corp:{QUOTED_PASSWORD}@{where}")
        assert send_email(good, escalated(), None).outcome is Attempted.DELIVERED
        assert len(mailbox.envelopes) == 1
        bad = settings_for(f"smtp://ann%40corp:hunter2-wrong@{where}")
        result = send_email(bad, escalated(), None)
    finally:
        controller.stop()
    assert result.outcome is Attempted.RETRY
    assert result.status == 535
    assert result.error is not None
    assert result.error.startswith(f"smtp://{where} answered 535")
    assert "hunter2" not in result.error
    assert len(mailbox.envelopes) == 1


def test_a_server_that_is_down_is_a_retry_naming_host_and_port() -> None:
    port = free_port()
    settings = settings_for(f"smtp://ann:{QUOTED_PASSWORD}@127.0.0.1:{port}")
    result = send_email(settings, escalated(), None, timeout=2.0)
    assert result.outcome is Attempted.RETRY
    assert result.status is None
    assert result.error == f"ConnectionRefusedError calling smtp://127.0.0.1:{port}"


def test_every_recipient_refused_is_a_retry() -> None:
    class Refusing(Inbox):
        async def handle_RCPT(  # noqa: N802 (aiosmtpd's name for the hook)
            self,
            server: SMTP,
            session: Session,
            envelope: Envelope,
            address: str,
            rcpt_options: list[str],
        ) -> str:
            return "550 no such user"

    mailbox = Refusing()
    controller = smtp_server(mailbox)
    try:
        settings = settings_for(f"smtp://127.0.0.1:{controller.port}", "a@b.example")
        result = send_email(settings, escalated(), None)
    finally:
        controller.stop()
    assert result.outcome is Attempted.RETRY
    assert result.status == 550
    assert mailbox.envelopes == []


# ------------------------------------------------------------------ over TLS


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def contexts(certificate: tuple[Path, Path]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert, key = certificate
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


def test_starttls_comes_before_the_login(certificate: tuple[Path, Path]) -> None:
    server_context, client_context = contexts(certificate)
    mailbox = Inbox()
    controller = smtp_server(
        mailbox,
        tls_context=server_context,
        require_starttls=True,
        authenticator=ann_only,
    )
    try:
        where = f"127.0.0.1:{controller.port}"
        settings = settings_for(f"smtp+starttls://ann%40corp:{QUOTED_PASSWORD}@{where}")
        result = send_email(settings, escalated(), None, context=client_context)
        # The system's authorities do not know the test certificate.
        untrusted = send_email(settings, escalated(), None)
        # Plain SMTP to a server that requires STARTTLS sends nothing.
        plain = send_email(settings_for(f"smtp://{where}"), escalated(), None)
    finally:
        controller.stop()
    assert result.outcome is Attempted.DELIVERED
    assert untrusted.outcome is Attempted.RETRY
    assert (
        untrusted.error == f"SSLCertVerificationError calling smtp+starttls://{where}"
    )
    assert plain.outcome is Attempted.RETRY
    assert plain.status == 530
    assert len(mailbox.envelopes) == 1


def test_starttls_asked_of_a_server_without_it_is_a_retry(
    inbox: tuple[Inbox, int],
) -> None:
    mailbox, port = inbox
    settings = settings_for(f"smtp+starttls://ann:{QUOTED_PASSWORD}@127.0.0.1:{port}")
    result = send_email(settings, escalated(), None)
    assert result.outcome is Attempted.RETRY
    assert result.error == (
        f"SMTPNotSupportedError calling smtp+starttls://127.0.0.1:{port}"
    )
    assert mailbox.envelopes == []


def test_smtps_is_tls_from_the_first_byte(certificate: tuple[Path, Path]) -> None:
    server_context, client_context = contexts(certificate)
    mailbox = Inbox()
    controller = smtp_server(mailbox, ssl_context=server_context)
    try:
        settings = settings_for(f"smtps://127.0.0.1:{controller.port}", "a@b.example")
        result = send_email(settings, escalated(), None, context=client_context)
    finally:
        controller.stop()
    assert result.outcome is Attempted.DELIVERED
    [mail] = mailbox.mails()
    assert mail["Subject"] == subject_of(escalated())
