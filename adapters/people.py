"""The outbox's channels to people: Slack and e-mail. The settings, the text
a person reads, one delivery attempt.

- ``DEVS_SLACK_WEBHOOK_URL``: a Slack incoming webhook, ``https://`` (``http://``
  is taken too, for a receiver on the same machine). Slack keeps the hook's
  secret in the URL's path, so an error shows its scheme and host only
  (:func:`slack_shown`). Each message is a new Slack message.
- ``DEVS_SLACK_BOT_TOKEN`` and ``DEVS_SLACK_CHANNEL``: instead of a hook, a
  bot token (``xoxb-…``, never shown) and the channel it posts in, through
  the Web API's ``chat.postMessage`` at ``DEVS_SLACK_API_URL`` (default
  ``https://slack.com/api``). The first message of a task starts a thread;
  the later ones (a claim, an answer, a deadline) are replies in it.
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
  (:func:`console_link`), where it is answered.

People hear of what waits for them and of who picked it up
(:data:`PEOPLE_TYPES`): a stop or a hand-off, a deadline near or passed, a
claim, its release or take-over, an answer, a hand-off's end. Each is
written for a person (:func:`notice`): what happened and why in words, the
run, the agent, the gate and its exit code, the last error line, the
strategies tried, how long is left, and the link that answers. Every text of
a message's ``data`` came from an agent or a person and is read as hostile:
shown through :func:`devs.domain.output.readable` (terminal sequences gone,
bidirectional controls made visible), on one line, cut. For Slack's
``mrkdwn`` it is escaped (``&``, ``<``, ``>``) **then** cut, so no text
passes Slack's limits (:data:`SECTION_MAX` per section, :data:`HEADER_MAX`
per header, :data:`BLOCKS_MAX` blocks), and set in code spans, where ``*``,
``_`` and ``~`` format nothing. E-mail headers are built from the same
one-line text, so no CR or LF reaches them.

An attempt answers as a webhook's does (:class:`~devs.adapters.webhooks.Attempt`):
Slack ``delivered`` on 2xx, ``gone`` on 410 (Slack's answer for an archived
channel, ``channel_is_archived``), ``retry`` on a 408, a 429 (its
``Retry-After`` honoured), a 5xx or no answer. A permanent refusal (any
other 4xx, or the Web API's ``invalid_blocks`` and its kind) is answered, in
the same try, by the message as plain text; if Slack refuses that too, the
try is ``refused``: dead at once, never retried as it was. E-mail is
``delivered`` or ``retry``; its ``status`` is the server's SMTP reply code.
No error names a password, a bot token or a Slack hook's path.

Why not apprise: its Slack plugin builds the address it posts to from
``https://hooks.slack.com/services`` (or ``hooks.slack-gov.com``) and the
three tokens of a ``slack://`` URL, so no receiver on this machine can stand
in for Slack in a test; an incoming webhook is one JSON POST, which httpx
makes here as the webhooks do.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from enum import StrEnum
from ipaddress import ip_address
from typing import Any, Protocol, runtime_checkable
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
from devs.domain.names import HAND_OFF_REQUIRED, MessageType, SessionReason
from devs.domain.outbox import OutboxMessage
from devs.domain.output import error_line, one_line, readable

SLACK_ENV = "DEVS_SLACK_WEBHOOK_URL"
SLACK_TOKEN_ENV = "DEVS_SLACK_BOT_TOKEN"
SLACK_CHANNEL_ENV = "DEVS_SLACK_CHANNEL"
SLACK_API_ENV = "DEVS_SLACK_API_URL"
SLACK_API = "https://slack.com/api"
"""Slack's Web API, where ``chat.postMessage`` is."""
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
        MessageType.SESSION_CLAIMED.value,
        MessageType.HANDOFF_CLAIMED.value,
        MessageType.CLAIM_RELEASED.value,
        MessageType.CLAIM_TAKEN_OVER.value,
        MessageType.SESSION_ANSWERED.value,
        MessageType.HANDOFF_RESOLVED.value,
    }
)
"""The types of message that go to people: what waits for them, and who
picked it up and how it ended (the others, a gate passed and a skip or
rewind of a task nobody was asked about, go to webhooks only)."""
ID_SHOWN = 200
VALUE_SHOWN = 200
LAST_ERROR_SHOWN = 300
"""The longest last line of an error shown."""
STRATEGIES_SHOWN = 10
"""How many of the latest strategies tried are listed."""
SUBJECT_MAX = 200
SUBJECT_TASK = 100
"""How much of a task id a subject shows."""
REPLY_SHOWN = 120
"""How much of an SMTP server's or Slack's answer an error repeats."""
BUTTON = "Answer in the console"
SECTION_MAX = 3_000
"""Slack's longest text of a section block (and of a message's ``text``
here), counted once escaped."""
HEADER_MAX = 150
"""Slack's longest text of a header block."""
BLOCKS_MAX = 50
"""Slack's most blocks in one message."""
FACT_MAX = 400
"""The longest line of one fact in a Slack section, escaped."""
CHANNEL_MAX = 80
BACKTICK_SHOWN = "\u02cb"
"""What a backtick of an agent's text is shown as in Slack (it would end
the code span the text is set in)."""
_TS = re.compile(r"[0-9]{1,20}\.[0-9]{1,12}")
_CHANNEL = re.compile(r"#?[A-Za-z0-9._-]{1,80}")
_TOKEN = re.compile(r"xox[a-z]-[A-Za-z0-9-]{8,250}")

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
    slack_token: str | None = Field(default=None, repr=False)
    slack_channel: str | None = None
    slack_api_url: str = SLACK_API
    smtp: SmtpServer | None = None
    recipients: tuple[str, ...] = ()
    public_url: str | None = None

    @property
    def slack_enabled(self) -> bool:
        return self.slack_url is not None or self.slack_token is not None

    @property
    def slack_threads(self) -> bool:
        """Whether Slack is reached with a bot token (its messages threaded
        by task) rather than an incoming webhook."""
        return self.slack_token is not None

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


def _slack_token(text: str) -> str | None:
    token = text.strip()
    if not token:
        return None
    if not _TOKEN.fullmatch(token):
        # Never repeated: a token pasted in the wrong variable is a secret.
        msg = (
            f"{SLACK_TOKEN_ENV} is not a Slack bot token (xoxb- and letters, "
            "digits and dashes)"
        )
        raise InvalidInput(msg, field=SLACK_TOKEN_ENV)
    return token


def _slack_channel(text: str) -> str | None:
    channel = text.strip()
    if not channel:
        return None
    if not _CHANNEL.fullmatch(channel):
        msg = (
            f"{SLACK_CHANNEL_ENV} is not a channel's id or name (C0123ABCD, "
            f"#ops: letters, digits, '.', '_' and '-', at most {CHANNEL_MAX})"
        )
        raise InvalidInput(msg, field=SLACK_CHANNEL_ENV)
    return channel


def _slack_api_url(text: str) -> str:
    url = text.strip()
    if not url:
        return SLACK_API
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
    ):
        msg = (
            f"{SLACK_API_ENV} is not an http:// or https:// URL with a host, "
            f"without credentials, query or fragment (default {SLACK_API})"
        )
        raise InvalidInput(msg, field=SLACK_API_ENV)
    return url.rstrip("/")


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
    token = _slack_token(environ.get(SLACK_TOKEN_ENV, ""))
    channel = _slack_channel(environ.get(SLACK_CHANNEL_ENV, ""))
    if token is not None and channel is None:
        msg = f"{SLACK_TOKEN_ENV} is set: {SLACK_CHANNEL_ENV} must name the channel"
        raise InvalidInput(msg, field=SLACK_CHANNEL_ENV)
    if channel is not None and token is None:
        msg = f"{SLACK_CHANNEL_ENV} is set: {SLACK_TOKEN_ENV} must be set to post"
        raise InvalidInput(msg, field=SLACK_TOKEN_ENV)
    if token is not None and slack_url is not None:
        msg = (
            f"{SLACK_ENV} and {SLACK_TOKEN_ENV} are both set: Slack is reached "
            "one way, set one of them"
        )
        raise InvalidInput(msg, field=SLACK_TOKEN_ENV)
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
        slack_token=token,
        slack_channel=channel,
        slack_api_url=_slack_api_url(environ.get(SLACK_API_ENV, "")),
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


def units(text: str) -> int:
    """``text``'s length as Slack counts it at most: in UTF-16 code units
    (a character beyond the Basic Multilingual Plane, an emoji, is two)."""
    return len(text) + sum(1 for character in text if ord(character) > 0xFFFF)


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` UTF-16 code units, cut with ``…``."""
    if units(text) <= limit:
        return text
    raw = text.encode("utf-16-le", "surrogatepass")[: 2 * max(limit - 1, 0)]
    return raw.decode("utf-16-le", "ignore") + "…"


def clean(value: Any, limit: int = VALUE_SHOWN) -> str:
    """``value`` as one line of at most ``limit`` characters: control
    characters gone, runs of white space one space (settings, and the
    answers of servers). Linear in ``limit`` whatever ``value`` holds."""
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


def said(value: Any, limit: int = VALUE_SHOWN) -> str:
    """An agent's or a person's ``value`` as people read it: one line of at
    most ``limit`` characters, terminal control sequences gone and each
    bidirectional control written as ``<U+202E>``
    (:func:`devs.domain.output.readable`). Linear in ``limit`` whatever
    ``value`` holds."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except ValueError:  # an int too long to write out
            text = type(value).__name__
    return one_line(readable(text[: limit * 4]), limit)


def last_error_line(value: Any) -> str:
    """The last error a message carries, as people read it. ``last_error``
    is already the one line (:func:`devs.domain.output.error_line`); a
    longer text (a message recorded by an older release) is reduced by that
    same rule."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if "\n" in text or "\r" in text or len(text) > LAST_ERROR_SHOWN:
        text = error_line(text[:1_000_000])
    # Not cut again: a bidirectional control shown as <U+202E> lengthens it.
    return said(text, 8 * LAST_ERROR_SHOWN)


def _data(message: OutboxMessage) -> dict[str, Any]:
    return message.data if isinstance(message.data, dict) else {}


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _times(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def clock(moment: datetime, now: datetime) -> str:
    """``moment`` as a person reads a time: ``06:45 UTC`` when it is within
    a day of ``now``, else ``28 Nov 06:45 UTC`` (no seconds)."""
    moment = moment.astimezone(UTC)
    if abs((moment - now).total_seconds()) < 20 * 3600:
        return f"{moment:%H:%M} UTC"
    return f"{moment.day} {moment:%b %H:%M} UTC"


def _span(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return "less than a minute"
    if minutes < 120:
        return _times(minutes, "minute", "minutes")
    hours = round(seconds / 3600)
    if hours < 48:
        return _times(hours, "hour", "hours")
    return _times(round(seconds / 86_400), "day", "days")


def when(moment: datetime, now: datetime) -> str:
    """How far ``moment`` is from ``now``, and when:
    ``in 14 minutes (06:45 UTC)`` or ``passed 3 hours ago (06:45 UTC)``."""
    seconds = (moment - now).total_seconds()
    if seconds >= 0:
        return f"in {_span(seconds)} ({clock(moment, now)})"
    return f"passed {_span(-seconds)} ago ({clock(moment, now)})"


REASONS = {
    SessionReason.BLACKLISTED_STRATEGY.value: "repeated a strategy that already failed",
    HAND_OFF_REQUIRED: "handed off",
    "human_deadline": "nobody answered before the deadline",
}


def why(message: OutboxMessage) -> str:
    """Why the task stopped, in words: ``failed 3 times in a row``,
    ``repeated a strategy that already failed``, ``looked stuck (entropy
    0.91)``, ``handed off after 5 failures``, ``nobody answered before the
    deadline`` (``""``: the message says no reason)."""
    data = _data(message)
    reason = str(data.get("reason") or "")
    count = _count(data.get("failure_count"))
    if reason == SessionReason.MAX_RETRIES:
        if count is None:
            return "failed too many times in a row"
        return f"failed {_times(count, 'time', 'times')} in a row"
    if reason == SessionReason.ENTROPY_LIMIT:
        score = data.get("entropy_score")
        if isinstance(score, int | float) and not isinstance(score, bool):
            return f"looked stuck (entropy {score:.2f})"
        return "looked stuck"
    if reason == HAND_OFF_REQUIRED:
        if count:
            return f"handed off after {_times(count, 'failure', 'failures')}"
        return "handed off"
    if reason in REASONS:
        return REASONS[reason]
    return f"stopped ({said(reason, 60)})" if reason else ""


_ANSWERS = {
    "resume": "let {task} go on",
    "rewind": "sent {task} back to an earlier commit",
    "skip": "skipped {task}",
}
_RESOLUTIONS = {
    "return": "gave {task} back to the agent",
    "complete": "marked {task} done",
    "skip": "skipped {task}",
}


def headline(message: OutboxMessage, now: datetime | None = None) -> str:
    """One line saying what happened to the task, in words (no code, no
    session id, no timestamp): a chat line, a notification, an e-mail's
    first line."""
    data = _data(message)
    task = said(message.task_id, ID_SHOWN) or "?"
    kind = str(message.type)
    actor = said(data.get("actor"), 80) or "someone"
    if kind == MessageType.SESSION_OPENED:
        return f"{task} needs a human: {why(message) or 'it stopped'}"
    if kind == MessageType.HANDOFF_OPENED:
        return f"{task} needs a human to take it over: {why(message) or 'handed off'}"
    if kind == MessageType.DEADLINE_EXPIRED:
        return f"{task} was handed off: nobody answered before the deadline"
    if kind == DEADLINE_REMINDER:
        deadline = _moment(data.get("deadline_at"))
        if deadline is None:
            return f"{task} still needs a human: its deadline is near"
        moment = now or datetime.now(UTC)
        return f"{task} still needs a human: the deadline is {when(deadline, moment)}"
    if kind in (
        MessageType.SESSION_ANSWERED,
        MessageType.TASK_REWOUND,
        MessageType.TASK_SKIPPED,
    ):
        action = str(data.get("action") or "")
        done = _ANSWERS.get(action, "answered {task}").format(task=task)
        return f"{actor} {done}"
    if kind == MessageType.SESSION_CLAIMED:
        return f"{actor} is on {task}: others' answers wait for them"
    if kind == MessageType.HANDOFF_CLAIMED:
        return f"{actor} took {task} from the hand-off queue"
    if kind == MessageType.CLAIM_RELEASED:
        return f"{actor} let go of {task}: anyone may answer it"
    if kind == MessageType.CLAIM_TAKEN_OVER:
        previous = said(data.get("previous"), 80) or "its claimer"
        return f"{actor} took {task} over from {previous}"
    if kind == MessageType.HANDOFF_RESOLVED:
        resolution = str(data.get("resolution") or "")
        done = _RESOLUTIONS.get(resolution, "resolved {task}'s hand-off")
        return f"{actor} {done.format(task=task)}"
    if kind == MessageType.TASK_COMPLETED:
        return f"{task} passed its gate"
    return f"{task}: {said(kind, 60)}"


class Notice(Immutable):
    """What a person is told of a message, shared by Slack and e-mail: the
    headline, then labelled one-line facts (the run, the agent, the gate and
    its exit code, the deadline, who claimed it, what they said), the last
    error, the strategies tried (latest last), and the link that answers."""

    title: str
    facts: tuple[tuple[str, str], ...]
    error: str
    tried: tuple[str, ...]
    link: str | None


def _gate(data: dict[str, Any]) -> str:
    gate = said(data.get("gate"), 120)
    code = data.get("exit_code")
    exit_code = (
        f"exit code {code}"
        if isinstance(code, int) and not isinstance(code, bool)
        else ""
    )
    if gate and exit_code:
        return f"{gate}, {exit_code}"
    return gate or exit_code


def notice(
    message: OutboxMessage, link: str | None, now: datetime | None = None
) -> Notice:
    """What both channels say of ``message`` (``now``: the time the
    deadline is counted from; default the clock)."""
    data = _data(message)
    moment = now or datetime.now(UTC)
    kind = str(message.type)
    facts: list[tuple[str, str]] = []

    def add(label: str, text: str) -> None:
        if text:
            facts.append((label, text))

    if kind in (MessageType.SESSION_OPENED, MessageType.HANDOFF_OPENED):
        add("Why", why(message))
    count = _count(data.get("failure_count"))
    if count and str(data.get("reason")) not in (
        SessionReason.MAX_RETRIES.value,
        HAND_OFF_REQUIRED,
    ):
        add("Failures", f"{count} in a row")
    add("Task", said(message.task_id, ID_SHOWN))
    add("Run", said(data.get("run_id"), ID_SHOWN))
    add("Agent", said(data.get("agent")))
    add("Gate", _gate(data))
    blocked = said(data.get("blocked_strategy"))
    add("Blocked strategy", blocked)
    deadline = _moment(data.get("deadline_at"))
    if deadline is not None:
        if kind == MessageType.DEADLINE_EXPIRED:
            add("Deadline", f"passed at {clock(deadline, moment)}")
        elif kind in (MessageType.SESSION_OPENED, DEADLINE_REMINDER):
            add("Answer by", when(deadline, moment))
    add("Claimed by", said(data.get("claimed_by"), 80))
    if kind == MessageType.CLAIM_TAKEN_OVER or kind in (
        MessageType.SESSION_ANSWERED,
        MessageType.HANDOFF_RESOLVED,
        MessageType.TASK_REWOUND,
        MessageType.TASK_SKIPPED,
    ):
        add("Reason given", said(data.get("reason")))
    tried_raw = data.get("strategies_tried")
    tried = tuple(
        text
        for text in (
            said(item)
            for item in (tried_raw if isinstance(tried_raw, list) else [])[
                -STRATEGIES_SHOWN:
            ]
        )
        if text
    )
    return Notice(
        title=headline(message, moment),
        facts=tuple(facts),
        error=last_error_line(data.get("last_error")),
        tried=tried,
        link=link,
    )


def facts(message: OutboxMessage) -> tuple[tuple[str, str], ...]:
    """The labelled one-line facts both channels show of ``message``."""
    return notice(message, None).facts


# --------------------------------------------------------------------- Slack


@runtime_checkable
class Threads(Protocol):
    """Where each task's thread on a channel is remembered (the
    ``outbox_threads`` table): a Slack message's ``ts``, an e-mail's
    ``Message-ID``."""

    def thread_of(self, channel: str, task_id: str) -> str | None:
        """The thread of ``task_id`` on ``channel`` (``None``: none yet)."""

    def start_thread(
        self, channel: str, task_id: str, thread: str, message_id: str
    ) -> str:
        """Record ``thread`` as the thread of ``task_id`` on ``channel``,
        started by ``message_id``, unless one is recorded already; the id of
        the message that started the one recorded."""


def mrkdwn(text: str) -> str:
    """``text`` as Slack's ``mrkdwn`` shows it literally: ``&``, ``<`` and
    ``>`` escaped (no mention, no link can be written)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut_escaped(text: str, limit: int) -> str:
    """An escaped ``text`` cut to at most ``limit`` characters, with ``…``,
    never through an entity (``&amp;`` is kept whole or dropped whole)."""
    if units(text) <= limit:
        return text
    head = _cut(text, limit)[:-1]
    entity = head.rfind("&")
    if entity != -1 and ";" not in head[entity:]:
        head = head[:entity]
    return head + "…"


def code(text: str, limit: int) -> str:
    """``text`` as an inline code span of at most ``limit`` characters,
    escaped then cut: inside it ``*``, ``_`` and ``~`` format nothing, and a
    backtick, which would end it, is shown as U+02CB, a modifier letter
    grave accent."""
    inner = cut_escaped(mrkdwn(text.replace("`", BACKTICK_SHOWN)), max(limit - 2, 1))
    return f"`{inner}`"


def _section(text: str) -> dict[str, Any]:
    # verbatim: no bare URL becomes a link, no name a mention
    return {
        "type": "section",
        "text": {"type": "mrkdwn", "text": text, "verbatim": True},
    }


_CODED = frozenset({"Task", "Run", "Agent", "Gate", "Blocked strategy", "Claimed by"})
"""Facts that are an agent's or a person's text, shown as code."""


def _line(label: str, text: str, limit: int) -> str:
    head = f"*{label}:* "
    if label in _CODED or label == "Reason given":
        return head + code(text, limit - len(head))
    return head + cut_escaped(mrkdwn(text), limit - len(head))


def _lines_within(lines: Sequence[str], limit: int) -> str:
    """``lines`` joined, as many as fit in ``limit`` characters."""
    kept: list[str] = []
    size = 0
    for line in lines:
        grown = size + units(line) + (1 if kept else 0)
        if grown > limit:
            break
        kept.append(line)
        size = grown
    return "\n".join(kept)


def slack_blocks(note: Notice) -> list[dict[str, Any]]:
    """The blocks of ``note``, each within Slack's limits once escaped: a
    header (plain text, :data:`HEADER_MAX`), the facts, the last error and
    the strategies tried (each a section of at most :data:`SECTION_MAX`), a
    button to the console; at most :data:`BLOCKS_MAX` blocks."""
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            # plain text: nothing in it is a mention, a link or a format
            "text": {
                "type": "plain_text",
                "text": _cut(note.title, HEADER_MAX),
                "emoji": False,
            },
        }
    ]
    lines = [_line(label, text, FACT_MAX) for label, text in note.facts]
    if lines:
        blocks.append(_section(_lines_within(lines, SECTION_MAX)))
    if note.error:
        blocks.append(_section("*Last error:* " + code(note.error, SECTION_MAX - 14)))
    if note.tried:
        title = "*Tried* (latest last):"
        items = [f"• {code(item, FACT_MAX)}" for item in note.tried]
        blocks.append(_section(_lines_within([title, *items], SECTION_MAX)))
    if note.link:
        button = {
            "type": "button",
            "text": {"type": "plain_text", "text": BUTTON},
            "url": note.link,
        }
        blocks.append({"type": "actions", "elements": [button]})
    return blocks[:BLOCKS_MAX]


def slack_body(
    message: OutboxMessage, link: str | None, *, now: datetime | None = None
) -> dict[str, Any]:
    """The JSON Slack takes: the headline as ``text`` (what a notification
    shows) and the blocks of :func:`slack_blocks`."""
    note = notice(message, link, now)
    return {
        "text": cut_escaped(mrkdwn(note.title), SECTION_MAX),
        "blocks": slack_blocks(note),
    }


def slack_plain(
    message: OutboxMessage, link: str | None, *, now: datetime | None = None
) -> dict[str, Any]:
    """The plain-text message sent when Slack refused the blocks: the
    headline, the facts, the last error and the link, escaped, in at most
    :data:`SECTION_MAX` characters."""
    note = notice(message, link, now)
    lines = [note.title]
    lines += [f"{label}: {text}" for label, text in note.facts]
    if note.error:
        lines.append(f"Last error: {note.error}")
    if note.link:
        lines.append(f"{BUTTON}: {note.link}")
    escaped = [cut_escaped(mrkdwn(line), SECTION_MAX) for line in lines]
    return {"text": _lines_within(escaped, SECTION_MAX), "mrkdwn": False}


def _answer_said(answer: httpx.Response, secret: str | None) -> str:
    text = answer.text[:2_000]
    if secret:
        text = text.replace(secret, "***")
    return clean(text, REPLY_SHOWN)


def _slack_error(answer: httpx.Response) -> str | None:
    """The ``error`` of a Web API answer's JSON (``None``: ``ok``, or no
    JSON)."""
    try:
        body = orjson.loads(answer.content[:100_000])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or body.get("ok", True) is True:
        return None
    return clean(body.get("error") or "unknown_error", 80)


def _slack_ts(answer: httpx.Response) -> str | None:
    try:
        body = orjson.loads(answer.content[:100_000])
    except orjson.JSONDecodeError:
        return None
    ts = body.get("ts") if isinstance(body, dict) else None
    return ts if isinstance(ts, str) and _TS.fullmatch(ts) else None


def permanent(status: int) -> bool:
    """Whether an HTTP answer refuses the message itself, for good: a 4xx
    other than 408 (timeout) and 429 (too many requests), and not 410 (the
    channel is gone, which disables it)."""
    return 400 <= status < 500 and status not in (408, 410, 429)


class SlackPost(Immutable):
    """Where and how one Slack message is posted: an incoming webhook
    (``token`` ``None``), or the Web API's ``chat.postMessage`` with a bot
    token, in ``channel``, in the thread of ``thread_ts`` when given."""

    url: str = Field(repr=False)
    token: str | None = Field(default=None, repr=False)
    channel: str | None = None
    thread_ts: str | None = None

    @property
    def shown(self) -> str:
        return slack_shown(self.url)


class SlackSent(Immutable):
    attempt: Attempt
    ts: str | None = None
    """The posted message's ``ts`` (the Web API's answer; ``None`` from an
    incoming webhook)."""


def _post(
    client: httpx.Client, post: SlackPost, payload: dict[str, Any], timeout: float
) -> httpx.Response | Attempt:
    """One POST of ``payload``: Slack's answer, or the failed try when there
    was none."""
    headers = {
        "content-type": "application/json; charset=utf-8",
        "user-agent": "devs-recovery",
    }
    body = dict(payload)
    if post.token is not None:
        headers["authorization"] = f"Bearer {post.token}"
        body["channel"] = post.channel
        body["unfurl_links"] = False
        body["unfurl_media"] = False
        if post.thread_ts:
            body["thread_ts"] = post.thread_ts
    try:
        return client.post(
            post.url, content=orjson.dumps(body), headers=headers, timeout=timeout
        )
    except httpx.TimeoutException:
        return Attempt(
            outcome=Attempted.RETRY,
            status=None,
            error=f"no answer from {post.shown} within {timeout:g} s",
        )
    except httpx.HTTPError as error:
        kind = type(error).__name__
        return Attempt(
            outcome=Attempted.RETRY, status=None, error=f"{kind} calling {post.shown}"
        )


_REFUSED_MESSAGE = "refused"
_GONE_ERRORS = frozenset({"is_archived", "channel_is_archived"})
_MESSAGE_ERRORS = frozenset(
    {
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_too_long",
        "msg_blocks_too_long",
        "no_text",
        "invalid_arguments",
        "invalid_attachments",
        "too_many_attachments",
        "invalid_json",
        "json_not_object",
    }
)
"""The Web API's answers (HTTP 200, ``ok: false``) refusing the message
itself: sent again as plain text, never retried as it was."""


def _judged(answer: httpx.Response, post: SlackPost) -> tuple[str, Attempt]:
    """What an answer came to: ``("ok", …)``, ``("refused", …)`` (the
    message itself, for good) or ``("final", …)`` (a retry, a gone
    channel)."""
    status = answer.status_code
    said_text = _answer_said(answer, post.token)
    said_part = f" ({said_text})" if said_text else ""
    where = post.shown
    if status == 410:
        return "final", Attempt(
            outcome=Attempted.GONE,
            status=status,
            error=f"{where} answered 410 Gone{said_part}: the channel takes no more",
        )
    if 200 <= status < 300:
        error = _slack_error(answer) if post.token is not None else None
        if error is None:
            return "ok", Attempt(outcome=Attempted.DELIVERED, status=status)
        if error in _GONE_ERRORS:
            return "final", Attempt(
                outcome=Attempted.GONE,
                status=status,
                error=f"{where} answered {error}: the channel takes no more",
            )
        attempt = Attempt(
            outcome=Attempted.RETRY, status=status, error=f"{where} answered {error}"
        )
        return (_REFUSED_MESSAGE if error in _MESSAGE_ERRORS else "final"), attempt
    attempt = Attempt(
        outcome=Attempted.RETRY,
        status=status,
        error=f"{where} answered {status}{said_part}",
        retry_after=_retry_after(answer.headers.get("retry-after")),
    )
    return (_REFUSED_MESSAGE if permanent(status) else "final"), attempt


def post_slack(
    client: httpx.Client,
    post: SlackPost,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    now: datetime | None = None,
) -> SlackSent:
    """Post ``message`` once; what came of it. A permanent refusal of the
    blocks (a 4xx other than 408, 410 and 429, or the Web API's
    ``invalid_blocks`` and its kind) is followed, in the same try, by the
    message as plain text: delivered if Slack takes that, else
    ``refused`` (dead at once, the channel left enabled), never retried as
    it was."""
    answer = _post(client, post, slack_body(message, link, now=now), timeout)
    if isinstance(answer, Attempt):
        return SlackSent(attempt=answer)
    verdict, attempt = _judged(answer, post)
    if verdict == "ok":
        return SlackSent(attempt=attempt, ts=_slack_ts(answer))
    if verdict != _REFUSED_MESSAGE:
        return SlackSent(attempt=attempt)
    refusal = attempt.error
    again = _post(client, post, slack_plain(message, link, now=now), timeout)
    if isinstance(again, Attempt):
        return SlackSent(attempt=again)
    verdict, second = _judged(again, post)
    if verdict == "ok":
        delivered = Attempt(
            outcome=Attempted.DELIVERED,
            status=second.status,
            error=f"{refusal}; sent as plain text instead",
        )
        return SlackSent(attempt=delivered, ts=_slack_ts(again))
    if verdict == _REFUSED_MESSAGE:
        refused = Attempt(
            outcome=Attempted.REFUSED,
            status=second.status,
            error=f"{refusal}; as plain text too: {second.error}",
        )
        return SlackSent(attempt=refused)
    return SlackSent(attempt=second)


def send_slack(
    client: httpx.Client,
    url: str,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    now: datetime | None = None,
) -> Attempt:
    """POST ``message`` to the incoming webhook ``url``; what came of it
    (:func:`post_slack`)."""
    post = SlackPost(url=url)
    return post_slack(client, post, message, link, timeout=timeout, now=now).attempt


# -------------------------------------------------------------------- e-mail


def thread_root(task_id: str) -> str:
    """The ``Message-ID`` the e-mails of ``task_id`` thread under: derived
    from a digest of the task id (never the id itself, which an agent
    wrote), the same on every server."""
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"<task.{digest[:24]}@{SENDER_NAME}>"


def subject_of(message: OutboxMessage, *, first: bool = True) -> str:
    """The subject of every e-mail of a task, the same for all of them
    (``[devs] fix-login: needs a human``) so that mail clients that thread
    by subject thread them too; ``Re:`` before the replies."""
    task = said(message.task_id, SUBJECT_TASK) or "?"
    subject = f"[devs] {task}: needs a human"
    return subject if first else f"Re: {subject}"


def _body_text(note: Notice, message: OutboxMessage) -> str:
    lines = [note.title, ""]
    lines += [f"{label}: {text}" for label, text in note.facts]
    if note.error:
        lines.append(f"Last error: {note.error}")
    if note.tried:
        lines.append("Tried (latest last):")
        lines += [f"  - {item}" for item in note.tried]
    if note.link:
        lines += ["", f"Answer it: {note.link}"]
    lines += ["", "-- ", f"{SENDER_NAME}, message {clean(message.id, ID_SHOWN)}"]
    return "\n".join(lines) + "\n"


def email_of(
    message: OutboxMessage,
    link: str | None,
    sender: str,
    recipients: Sequence[str],
    *,
    first: bool = True,
    now: datetime | None = None,
) -> EmailMessage:
    """The e-mail of ``message``: the task's subject, a plain-text body, and
    headers that thread it: the first e-mail of a task has the task's
    ``Message-ID`` (:func:`thread_root`), each later one (``first`` false)
    a ``Message-ID`` made of the message's id (the same at every try, so a
    receiver can drop a second copy) and ``In-Reply-To``/``References``
    naming the first."""
    note = notice(message, link, now)
    mail = EmailMessage()
    mail["Subject"] = _cut(subject_of(message, first=first), SUBJECT_MAX)
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    mail["Date"] = format_datetime(message.timestamp)
    root = thread_root(message.task_id)
    if first:
        mail["Message-ID"] = root
    else:
        identity = _ID_CHARACTERS.sub("", message.id[:ID_SHOWN]) or "message"
        mail["Message-ID"] = f"<{identity}@{SENDER_NAME}>"
        mail["In-Reply-To"] = root
        mail["References"] = root
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies
    mail.set_content(_body_text(note, message))
    return mail


def _reply(error: smtplib.SMTPResponseException, password: str | None) -> str:
    raw = error.smtp_error
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if password:
        text = text.replace(password, "***")
    said_text = clean(text, REPLY_SHOWN)
    return f" ({said_text})" if said_text else ""


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
    first: bool = True,
    now: datetime | None = None,
) -> Attempt:
    """Send ``message`` by e-mail to ``settings``' recipients; what came of
    it. ``context`` checks the server's certificate (default: the system's
    trusted authorities); ``first``: the task's first e-mail, which the
    others reply to (:func:`email_of`)."""
    server = settings.smtp
    if server is None or not settings.recipients:
        msg = f"{SMTP_ENV} and {EMAIL_ENV} must be set to send e-mail"
        raise InvalidInput(msg, field=SMTP_ENV)
    recipients = settings.recipients
    mail = email_of(message, link, server.sender, recipients, first=first, now=now)
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
