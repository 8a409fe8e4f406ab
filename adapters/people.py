"""The outbox's channels to people: a Slack incoming webhook and e-mail. The
settings, the text a person reads, one delivery attempt.

- ``DEVS_SLACK_WEBHOOK_URL``: a Slack incoming webhook, ``https://`` (``http://``
  is taken too, for a receiver on the same machine). Slack keeps the hook's
  secret in the URL's path, so an error shows its scheme and host only
  (:func:`slack_shown`).
- ``DEVS_SMTP_URL``: the server e-mail goes through,
  ``smtp://[user:password@]host[:port]`` (plain, port 25 by default: a relay
  on the same machine or network, the password crossing it unencrypted),
  ``smtp+starttls://…`` (STARTTLS, port 587) or ``smtps://…`` (TLS from the
  first byte, port 465). The user and the password are percent-decoded (a
  ``@`` in a password is ``%40``). ``?from=address`` sets the sender; without
  it the sender is ``devs-recovery@`` and the server's host name
  (``devs-recovery@[192.0.2.1]`` for an address).
- ``DEVS_NOTIFY_EMAIL``: who is written to, comma-separated addresses (at most
  :data:`RECIPIENTS_MAX`); set with ``DEVS_SMTP_URL`` or not at all.
- ``DEVS_PUBLIC_URL``: where people reach the service (``https://devs.example``);
  when set, each message links to the task's page in the console
  (:func:`console_link`).

People hear of what waits for them (:data:`PEOPLE_TYPES`): a session opened,
a hand-off, a human deadline passed or near. Every text of a message's
``data`` came from an agent or a person and is read as hostile: it is cut,
rid of control characters, and (for Slack's ``mrkdwn``) its ``&``, ``<`` and
``>`` escaped, so it cannot mention ``<!channel>`` or hide a link. E-mail
headers are built from the same cleaned text, so no CR or LF reaches them.

An attempt answers as a webhook's does (:class:`~devs.adapters.webhooks.Attempt`):
Slack ``delivered`` on 2xx, ``gone`` on 410 (Slack's answer for an archived
channel, ``channel_is_archived``), ``retry`` on any other answer (a 429's
``Retry-After`` honoured) or none. Slack's changelog of 2016-05-17 lists 404
for ``channel_not_found`` and no status for a removed hook, so 404 is retried
like the rest. E-mail is ``delivered`` or ``retry``, never ``gone``; its
``status`` is the server's SMTP reply code. No error names a password or a
Slack hook's path.

Why not apprise: its Slack plugin builds the address it posts to from
``https://hooks.slack.com/services`` (or ``hooks.slack-gov.com``) and the
three tokens of a ``slack://`` URL, so no receiver on this machine can stand
in for Slack in a test; an incoming webhook is one JSON POST, which httpx
makes here as the webhooks do.
"""

from __future__ import annotations

import contextlib
import re
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from enum import StrEnum
from ipaddress import ip_address
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import httpx
import orjson
from pydantic import Field

from devs.adapters.webhooks import (
    ATTEMPT_TIMEOUT,
    Attempt,
    Attempted,
    _retry_after,  # the webhooks' reading of Retry-After, shared as it is
)
from devs.domain import InvalidInput
from devs.domain.model import Immutable
from devs.domain.names import MessageType, SessionReason
from devs.domain.outbox import OutboxMessage

SLACK_ENV = "DEVS_SLACK_WEBHOOK_URL"
SMTP_ENV = "DEVS_SMTP_URL"
EMAIL_ENV = "DEVS_NOTIFY_EMAIL"
PUBLIC_URL_ENV = "DEVS_PUBLIC_URL"
RECIPIENTS_MAX = 20
URL_MAX = 1_000
"""The longest ``DEVS_PUBLIC_URL`` (a console link stays within Slack's
3,000 characters for a button's URL)."""
SENDER_NAME = "devs-recovery"
DEADLINE_REMINDER = "deadline.reminder"
"""The type of a reminder that a human deadline is near, as
:class:`~devs.domain.names.MessageType` spells it: compared by value, so this
module works with a ``MessageType`` with or without that member."""
PEOPLE_TYPES: frozenset[str] = frozenset(
    {
        MessageType.SESSION_OPENED.value,
        MessageType.HANDOFF_OPENED.value,
        MessageType.DEADLINE_EXPIRED.value,
        DEADLINE_REMINDER,
    }
)
"""The types of message that go to people (the others go to webhooks only)."""
ID_SHOWN = 200
VALUE_SHOWN = 200
LAST_ERROR_SHOWN = 300
"""The longest last line of an error shown."""
SUBJECT_MAX = 200
REPLY_SHOWN = 120
"""How much of an SMTP server's or Slack's answer an error repeats."""
BUTTON = "Open in the console"

_CONTROLS = dict.fromkeys(
    [
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x2028,
        0x2029,
    ],
    " ",
)
"""Control, line-separating and text-direction characters: each becomes a
space."""
_ADDRESS = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}@[A-Za-z0-9.-]{1,189}")
_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]")


class SmtpSecurity(StrEnum):
    """How the connection to the SMTP server is protected (the URL's scheme)."""

    PLAIN = "smtp"
    STARTTLS = "smtp+starttls"
    TLS = "smtps"


DEFAULT_PORTS = {
    SmtpSecurity.PLAIN: 25,
    SmtpSecurity.STARTTLS: 587,
    SmtpSecurity.TLS: 465,
}


class SmtpServer(Immutable):
    security: SmtpSecurity
    host: str
    port: int
    user: str | None = None
    password: str | None = Field(default=None, repr=False)
    sender: str

    @property
    def shown(self) -> str:
        """The server as errors show it: scheme, host and port."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.security.value}://{host}:{self.port}"


class PeopleSettings(Immutable):
    slack_url: str | None = Field(default=None, repr=False)
    smtp: SmtpServer | None = None
    recipients: tuple[str, ...] = ()
    public_url: str | None = None

    @property
    def slack_enabled(self) -> bool:
        return self.slack_url is not None

    @property
    def email_enabled(self) -> bool:
        return self.smtp is not None and bool(self.recipients)


# ------------------------------------------------------------------ settings


def slack_shown(url: str) -> str:
    """A Slack webhook URL as errors show it: scheme, host and port, never
    its path (where Slack keeps the hook's secret)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(not a URL)"
    if parts.scheme not in ("http", "https"):
        return "(not an http(s) URL)"
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def _slack_url(text: str) -> str | None:
    url = text.strip()
    if not url:
        return None
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = (
            f"{SLACK_ENV} holds {slack_shown(url)!r}, which is not an https:// "
            "URL with a host (Slack's https://hooks.slack.com/services/…)"
        )
        raise InvalidInput(msg, field=SLACK_ENV)
    return url


def _address(text: str, env: str) -> str:
    text = text.strip()
    address = parseaddr(text)[1]
    if (
        not _ADDRESS.fullmatch(address)
        or ".." in address.partition("@")[2]
        or not (text == address or text.endswith(f"<{address}>"))
        or text != clean(text, len(text))  # a control character, a line break
    ):
        msg = f"{env} holds {text[:80]!r}, which is not an address local@domain"
        raise InvalidInput(msg, field=env)
    return address


def _recipients(text: str) -> tuple[str, ...]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) > RECIPIENTS_MAX:
        msg = f"{EMAIL_ENV} names {len(parts)} addresses; the limit is {RECIPIENTS_MAX}"
        raise InvalidInput(msg, field=EMAIL_ENV)
    return tuple(dict.fromkeys(_address(part, EMAIL_ENV) for part in parts))


def _smtp_refused(why: str) -> InvalidInput:
    msg = (
        f"{SMTP_ENV} {why} (it takes smtp://, smtp+starttls:// or "
        "smtps://[user:password@]host[:port][?from=address])"
    )
    return InvalidInput(msg, field=SMTP_ENV)


def _default_sender(host: str) -> str:
    try:
        ip_address(host)
    except ValueError:
        return f"{SENDER_NAME}@{host}"
    return f"{SENDER_NAME}@[{host}]"


def _smtp(text: str) -> SmtpServer | None:
    url = text.strip()
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _smtp_refused("has a host or a port that cannot be read") from None
    try:
        security = SmtpSecurity(parts.scheme.lower())
    except ValueError:
        raise _smtp_refused("is not an SMTP URL") from None
    if not parts.hostname:
        raise _smtp_refused("names no host")
    if port == 0:
        raise _smtp_refused("has a port that is not a number in 1-65535")
    if parts.path not in ("", "/") or parts.fragment:
        raise _smtp_refused("has a path or a fragment; it takes neither")
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if user is None and password:
        raise _smtp_refused("has a password but no user")
    if user is not None and not password:
        raise _smtp_refused("has a user but no password")
    sender = _default_sender(parts.hostname)
    query = parse_qsl(parts.query, keep_blank_values=True)
    for key, value in query:
        if key != "from" or len(query) > 1:
            raise _smtp_refused(f"has the query {key[:40]!r}; it takes only ?from=")
        sender = _address(value, SMTP_ENV)
    return SmtpServer(
        security=security,
        host=parts.hostname,
        port=port or DEFAULT_PORTS[security],
        user=user,
        password=password,
        sender=sender,
    )


def _public_url(text: str) -> str | None:
    url = text.strip()
    if not url:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is no number raises here
    except ValueError:
        parts = urlsplit("")
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or len(url) > URL_MAX
    ):
        # The value is not repeated: written without a scheme, its password
        # would be shown as part of the host.
        msg = (
            f"{PUBLIC_URL_ENV} is not an http:// or https:// URL with a host, "
            f"without credentials, query or fragment, of at most {URL_MAX} "
            "characters"
        )
        raise InvalidInput(msg, field=PUBLIC_URL_ENV)
    return url.rstrip("/")


def people_settings(environ: Mapping[str, str]) -> PeopleSettings:
    """The people channels' settings of ``environ``; ``InvalidInput`` naming
    the variable that is wrong (never repeating a password or a hook's path)."""
    slack_url = _slack_url(environ.get(SLACK_ENV, ""))
    smtp = _smtp(environ.get(SMTP_ENV, ""))
    recipients = _recipients(environ.get(EMAIL_ENV, ""))
    if smtp is not None and not recipients:
        msg = f"{SMTP_ENV} is set: {EMAIL_ENV} must name who to write to"
        raise InvalidInput(msg, field=EMAIL_ENV)
    if recipients and smtp is None:
        msg = f"{EMAIL_ENV} is set: {SMTP_ENV} must name the server to send through"
        raise InvalidInput(msg, field=SMTP_ENV)
    return PeopleSettings(
        slack_url=slack_url,
        smtp=smtp,
        recipients=recipients,
        public_url=_public_url(environ.get(PUBLIC_URL_ENV, "")),
    )


def console_link(public_url: str | None, task_id: str) -> str | None:
    """The console's page of ``task_id`` under ``public_url`` (``None``
    without one)."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/console/tasks/{quote(task_id, safe='')}"


def for_people(message_type: str) -> bool:
    """Whether a message of ``message_type`` goes to people."""
    return str(message_type) in PEOPLE_TYPES


# ---------------------------------------------------------------------- text


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean(value: Any, limit: int = VALUE_SHOWN) -> str:
    """``value`` as one line of at most ``limit`` characters: control
    characters gone, runs of white space one space. Linear in ``limit``
    whatever ``value`` holds."""
    if value is None:
        return ""
    if isinstance(value, float):
        text = f"{value:.3g}"
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except ValueError:  # an int too long to write out
            text = type(value).__name__
    return _cut(" ".join(text[: limit * 4].translate(_CONTROLS).split()), limit)


def last_error_line(value: Any) -> str:
    """The last non-empty line of an error (``""``: none), cleaned and cut
    to :data:`LAST_ERROR_SHOWN` characters."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return clean(value, LAST_ERROR_SHOWN)
    for line in reversed(value.splitlines()):
        shown_line = clean(line, LAST_ERROR_SHOWN)
        if shown_line:
            return shown_line
    return ""


def _data(message: OutboxMessage) -> dict[str, Any]:
    return message.data if isinstance(message.data, dict) else {}


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


_FACTS = (
    ("State", "state"),
    ("Why", "reason"),
    ("Failures", "failure_count"),
    ("Entropy", "entropy_score"),
    ("Agent", "agent"),
    ("Deadline", "deadline_at"),
    ("Answered by", "actor"),
    ("Action", "action"),
    ("Resolution", "resolution"),
    ("Gate", "gate"),
    ("Session", "session_id"),
)


def facts(message: OutboxMessage) -> tuple[tuple[str, str], ...]:
    """What ``message`` says, as labelled one-line texts both channels show
    (the task first; the last error apart, :func:`last_error_line`)."""
    data = _data(message)
    found = [("Task", clean(message.task_id, ID_SHOWN))]
    for label, key in _FACTS:
        text = clean(data.get(key))
        if text:
            found.append((label, text))
    return tuple(found)


def _failures(data: dict[str, Any]) -> str:
    count = _count(data.get("failure_count"))
    if count is None:
        return ""
    return f" after {count} failure{'' if count == 1 else 's'}"


def _waiting(data: dict[str, Any]) -> str:
    reason = clean(data.get("reason"))
    if reason == SessionReason.MAX_RETRIES:
        cause = f"escalated{_failures(data)}"
    elif reason == SessionReason.BLACKLISTED_STRATEGY:
        cause = "paused, a blacklisted strategy was tried again"
    elif reason == SessionReason.ENTROPY_LIMIT:
        score = clean(data.get("entropy_score"))
        cause = f"paused, its output's entropy is {score}" if score else "paused"
    else:
        cause = f"stopped{_failures(data)}"
    return f"{cause} ({reason})" if reason else cause


def headline(message: OutboxMessage) -> str:
    """One line saying what happened to the task, for a chat line or a
    subject."""
    data = _data(message)
    task = clean(message.task_id, ID_SHOWN) or "?"
    kind = str(message.type)
    actor = clean(data.get("actor")) or "someone"
    if kind == MessageType.SESSION_OPENED:
        return f"Task {task} is waiting for a human: {_waiting(data)}"
    if kind == MessageType.HANDOFF_OPENED:
        return f"Task {task} was handed off to the human queue{_failures(data)}"
    if kind == MessageType.DEADLINE_EXPIRED:
        reason = clean(data.get("reason"))
        said = f" ({reason})" if reason else ""
        return f"Task {task}: nobody answered in time; it was handed off{said}"
    if kind == DEADLINE_REMINDER:
        deadline = clean(data.get("deadline_at"), 40)
        when = f"is at {deadline}" if deadline else "is near"
        return f"Task {task}: its human deadline {when} (reminder)"
    if kind == MessageType.SESSION_ANSWERED:
        action = clean(data.get("action"), 40)
        return f"Task {task}: {actor} answered ({action or 'an answer'})"
    if kind == MessageType.HANDOFF_CLAIMED:
        return f"Task {task} was claimed from the human queue by {actor}"
    if kind == MessageType.HANDOFF_RESOLVED:
        resolution = clean(data.get("resolution"), 40)
        return f"Task {task}: its hand-off was resolved by {actor} ({resolution})"
    if kind == MessageType.TASK_COMPLETED:
        gate = clean(data.get("gate"))
        return f"Task {task} completed" + (f" (gate {gate})" if gate else "")
    state = clean(data.get("state"), 40)
    return f"Task {task}: {clean(kind, 60)}" + (f" (state {state})" if state else "")


# --------------------------------------------------------------------- Slack


def mrkdwn(text: str) -> str:
    """``text`` as Slack's ``mrkdwn`` shows it literally: ``&``, ``<`` and
    ``>`` escaped (no mention, no link can be written)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(message: OutboxMessage, link: str | None) -> dict[str, Any]:
    """The JSON an incoming webhook takes: the headline as ``text`` (what a
    notification shows) and blocks saying what stopped, why, how often, the
    last error, and a button to the console when ``link`` is given."""
    title = mrkdwn(headline(message))
    lines = [f"*{title}*"]
    lines += [f"*{label}:* {mrkdwn(text)}" for label, text in facts(message)]
    error = last_error_line(_data(message).get("last_error"))
    if error:
        code = mrkdwn(error.replace("`", "'"))  # a backtick would end the span
        lines.append(f"*Last error:* `{code}`")
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            # verbatim: no bare URL becomes a link, no name a mention
            "text": {"type": "mrkdwn", "text": "\n".join(lines), "verbatim": True},
        }
    ]
    if link:
        button = {
            "type": "button",
            "text": {"type": "plain_text", "text": BUTTON},
            "url": link,
        }
        blocks.append({"type": "actions", "elements": [button]})
    return {"text": title, "blocks": blocks}


def send_slack(
    client: httpx.Client,
    url: str,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
) -> Attempt:
    """POST ``message`` to the incoming webhook ``url``; what came of it."""
    body = orjson.dumps(slack_body(message, link))
    headers = {"content-type": "application/json", "user-agent": "devs-recovery"}
    where = slack_shown(url)
    try:
        answer = client.post(url, content=body, headers=headers, timeout=timeout)
    except httpx.TimeoutException:
        return Attempt(
            outcome=Attempted.RETRY,
            status=None,
            error=f"no answer from {where} within {timeout:g} s",
        )
    except httpx.HTTPError as error:
        kind = type(error).__name__
        return Attempt(
            outcome=Attempted.RETRY, status=None, error=f"{kind} calling {where}"
        )
    status = answer.status_code
    if 200 <= status < 300:
        return Attempt(outcome=Attempted.DELIVERED, status=status)
    said = clean(answer.text, REPLY_SHOWN)
    said = f" ({said})" if said else ""
    if status == 410:
        return Attempt(
            outcome=Attempted.GONE,
            status=status,
            error=f"{where} answered 410 Gone{said}: the channel takes no more",
        )
    return Attempt(
        outcome=Attempted.RETRY,
        status=status,
        error=f"{where} answered {status}{said}",
        retry_after=_retry_after(answer.headers.get("retry-after")),
    )


# -------------------------------------------------------------------- e-mail


def _body_text(message: OutboxMessage, link: str | None) -> str:
    lines = [headline(message), ""]
    lines += [f"{label}: {text}" for label, text in facts(message)]
    error = last_error_line(_data(message).get("last_error"))
    if error:
        lines.append(f"Last error: {error}")
    if link:
        lines += ["", f"{BUTTON}: {link}"]
    lines += ["", "-- ", f"{SENDER_NAME}, message {clean(message.id, ID_SHOWN)}"]
    return "\n".join(lines) + "\n"


def email_of(
    message: OutboxMessage,
    link: str | None,
    sender: str,
    recipients: Sequence[str],
) -> EmailMessage:
    """The e-mail of ``message``: the headline as its subject, a plain-text
    body, and a ``Message-ID`` made of the message's id (the same at every
    try, so a receiver can drop a second copy)."""
    mail = EmailMessage()
    mail["Subject"] = _cut(headline(message), SUBJECT_MAX)
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    mail["Date"] = format_datetime(message.timestamp)
    identity = _ID_CHARACTERS.sub("", message.id[:ID_SHOWN]) or "message"
    mail["Message-ID"] = f"<{identity}@{SENDER_NAME}>"
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies
    mail.set_content(_body_text(message, link))
    return mail


def _reply(error: smtplib.SMTPResponseException, password: str | None) -> str:
    raw = error.smtp_error
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if password:
        text = text.replace(password, "***")
    said = clean(text, REPLY_SHOWN)
    return f" ({said})" if said else ""


def _send(
    server: SmtpServer,
    mail: EmailMessage,
    recipients: Sequence[str],
    timeout: float,
    context: ssl.SSLContext | None,
) -> dict[str, tuple[int, bytes]]:
    client: smtplib.SMTP
    if server.security is SmtpSecurity.TLS:
        client = smtplib.SMTP_SSL(
            server.host,
            server.port,
            timeout=timeout,
            context=context or ssl.create_default_context(),
        )
    else:
        client = smtplib.SMTP(server.host, server.port, timeout=timeout)
    try:
        if server.security is SmtpSecurity.STARTTLS:
            client.starttls(context=context or ssl.create_default_context())
        if server.user is not None:
            client.login(server.user, server.password or "")
        return client.send_message(
            mail, from_addr=server.sender, to_addrs=list(recipients)
        )
    finally:
        with contextlib.suppress(OSError):  # sent is sent, whatever QUIT says
            client.quit()
        client.close()


def send_email(
    settings: PeopleSettings,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    context: ssl.SSLContext | None = None,
) -> Attempt:
    """Send ``message`` by e-mail to ``settings``' recipients; what came of
    it. ``context`` checks the server's certificate (default: the system's
    trusted authorities)."""
    server = settings.smtp
    if server is None or not settings.recipients:
        msg = f"{SMTP_ENV} and {EMAIL_ENV} must be set to send e-mail"
        raise InvalidInput(msg, field=SMTP_ENV)
    recipients = settings.recipients
    mail = email_of(message, link, server.sender, recipients)
    try:
        refused = _send(server, mail, recipients, timeout, context)
    except smtplib.SMTPRecipientsRefused as error:
        codes = sorted({code for code, _ in error.recipients.values()})
        return Attempt(
            outcome=Attempted.RETRY,
            status=codes[0] if codes else None,
            error=f"{server.shown} refused every recipient ({codes})",
        )
    except smtplib.SMTPResponseException as error:
        return Attempt(
            outcome=Attempted.RETRY,
            status=error.smtp_code,
            error=(
                f"{server.shown} answered {error.smtp_code}"
                f"{_reply(error, server.password)}"
            ),
        )
    except TimeoutError:
        return Attempt(
            outcome=Attempted.RETRY,
            status=None,
            error=f"no answer from {server.shown} within {timeout:g} s",
        )
    except (OSError, ValueError) as error:  # smtplib's, ssl's, the socket's
        kind = type(error).__name__
        return Attempt(
            outcome=Attempted.RETRY, status=None, error=f"{kind} calling {server.shown}"
        )
    if refused:
        return Attempt(
            outcome=Attempted.DELIVERED,
            status=250,
            error=(
                f"{server.shown} refused {len(refused)} of {len(recipients)} "
                f"recipients: {', '.join(sorted(refused))}"
            ),
        )
    return Attempt(outcome=Attempted.DELIVERED, status=250)
