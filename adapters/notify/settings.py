"""The notify edge's settings: one pydantic-settings class reading every
``DEVS_*`` variable its channels, its sender and its sweeper take
(docs/notifications.md). A wrong value stops the server with an error
naming the variable, never repeating a secret: a channel mistyped must not
be dropped with a warning, nor a deadline (``DEVS_HUMAN_DEADLINE`` is the
policy's, checked here too, so it fails closed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Mapping
from email.utils import parseaddr
from enum import StrEnum
from ipaddress import ip_address
from typing import Annotated, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    NoDecode,
    SettingsConfigDict,
)

from devs.adapters.notify.people import clean
from devs.adapters.notify.status import ATTEMPT_TIMEOUT
from devs.domain.errors import InvalidInput
from devs.domain.model import Immutable
from devs.domain.policy import MAX_HUMAN_DEADLINE, EnvironSettings, env_var

URLS_ENV = "DEVS_WEBHOOK_URLS"
SECRET_ENV = "DEVS_WEBHOOK_SECRET"
BACKOFF_ENV = "DEVS_WEBHOOK_BACKOFF"
TIMEOUT_ENV = "DEVS_WEBHOOK_TIMEOUT"
REMINDER_ENV = "DEVS_HUMAN_REMINDER"
DEADLINE_ENV = env_var("human_deadline")
SLACK_ENV = "DEVS_SLACK_WEBHOOK_URL"
SLACK_TOKEN_ENV = "DEVS_SLACK_BOT_TOKEN"
SLACK_CHANNEL_ENV = "DEVS_SLACK_CHANNEL"
SLACK_API_ENV = "DEVS_SLACK_API_URL"
SMTP_ENV = "DEVS_SMTP_URL"
EMAIL_ENV = "DEVS_NOTIFY_EMAIL"
PUBLIC_URL_ENV = "DEVS_PUBLIC_URL"

DEFAULT_BACKOFF = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
"""Standard Webhooks' retry schedule, in seconds."""
URLS_MAX = 20
BACKOFF_MAX = 30 * 86_400
REMINDER_MAX = 30 * 86_400.0
DEADLINE_MAX = float(MAX_HUMAN_DEADLINE)
TIMEOUT_MAX = 60.0
SLACK_API = "https://slack.com/api"
"""Slack's Web API, where ``chat.postMessage`` is."""
RECIPIENTS_MAX = 20
URL_MAX = 1_000
"""The longest ``DEVS_PUBLIC_URL`` (a console link stays within Slack's
3,000 characters for a button's URL)."""
CHANNEL_MAX = 80
SENDER_NAME = "devs-recovery"
"""The name e-mail is sent as (``devs-recovery@host`` by default)."""
_CHANNEL = re.compile(r"#?[A-Za-z0-9._-]{1,80}")
_TOKEN = re.compile(r"xox[a-z]-[A-Za-z0-9-]{8,250}")
_ADDRESS = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}@[A-Za-z0-9.-]{1,189}")


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


def shown(url: str) -> str:
    """A URL as errors, listings and log lines show it: scheme, host and
    port, never its credentials or query, nor its path (where Discord,
    Teams or Zapier keep their keys): a path is shown as ``/…`` and a short
    digest of it, which tells two endpoints of one host apart."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(not a URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    path = ""
    if parts.path not in ("", "/"):
        digest = hashlib.sha256(parts.path.encode()).hexdigest()[:6]
        path = f"/…({digest})"
    return f"{parts.scheme}://{host}{port}{path}"


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


# ------------------------------------------------------------ one variable each


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _seconds(value: Any, name: str, upper: float) -> float | None:
    """``value`` as seconds in (0, ``upper``] (blank: ``None``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number, text = float(value), str(value)
    else:
        text = _text(value)
        if not text:
            return None
        try:
            number = float(text)
        except ValueError:
            number = -1.0
    if not 0 < number <= upper:  # NaN fails this too
        msg = f"{name} must be seconds in (0, {upper:.0f}], got {text[:40]!r}"
        raise InvalidInput(msg, field=name)
    return number


def _urls(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        value = ",".join(value)
    text = value if isinstance(value, str) else ""
    urls = tuple(part.strip() for part in text.split(",") if part.strip())
    if len(urls) > URLS_MAX:
        msg = f"{URLS_ENV} names {len(urls)} endpoints; the limit is {URLS_MAX}"
        raise InvalidInput(msg, field=URLS_ENV)
    for number, url in enumerate(urls, 1):
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - a port that is no number raises here
            fit = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            fit = False
        if not fit:
            # The URL itself is not repeated: one without a scheme would show
            # its password as the host's part.
            msg = (
                f"{URLS_ENV}'s endpoint number {number} is not an http:// or "
                "https:// URL with a host (and a port that is a number)"
            )
            raise InvalidInput(msg, field=URLS_ENV)
    return urls


def _secrets(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        value = " ".join(value)
    secrets = tuple(value.split()) if isinstance(value, str) else ()
    for number, secret in enumerate(secrets, 1):
        key = secret.removeprefix("whsec_")
        try:
            decoded = base64.b64decode(key + "=" * (-len(key) % 4), validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        if not secret.startswith("whsec_") or len(decoded) < 16:
            msg = (
                f"{SECRET_ENV}'s secret number {number} is not whsec_ followed "
                "by at least 16 bytes in base64 (say, whsec_$(openssl rand "
                "-base64 32))"
            )
            raise InvalidInput(msg, field=SECRET_ENV)
    return secrets


def _backoff(value: Any) -> tuple[float, ...]:
    if isinstance(value, list | tuple):
        value = ",".join(str(part) for part in value)
    text = value if isinstance(value, str) else ""
    if not text.strip():
        return tuple(float(s) for s in DEFAULT_BACKOFF)
    waits = []
    for part in text.split(","):
        try:
            wait = float(part.strip())
        except ValueError:
            wait = -1.0
        if not 0 < wait <= BACKOFF_MAX or wait != wait:
            msg = (
                f"{BACKOFF_ENV} must be comma-separated seconds, each in "
                f"(0, {BACKOFF_MAX}], got {part.strip()[:40]!r}"
            )
            raise InvalidInput(msg, field=BACKOFF_ENV)
        waits.append(wait)
    return tuple(waits)


def _slack_url(value: Any) -> str | None:
    url = _text(value)
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


def _slack_token(value: Any) -> str | None:
    token = _text(value)
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


def _slack_channel(value: Any) -> str | None:
    channel = _text(value)
    if not channel:
        return None
    if not _CHANNEL.fullmatch(channel):
        msg = (
            f"{SLACK_CHANNEL_ENV} is not a channel's id or name (C0123ABCD, "
            f"#ops: letters, digits, '.', '_' and '-', at most {CHANNEL_MAX})"
        )
        raise InvalidInput(msg, field=SLACK_CHANNEL_ENV)
    return channel


def _service_url(value: Any, name: str, default: str | None, limit: int) -> str | None:
    url = _text(value)
    if not url:
        return default
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
        or len(url) > limit
    ):
        # The value is not repeated: written without a scheme, its password
        # would be shown as part of the host.
        most = f", of at most {limit} characters" if limit < 1_000_000 else ""
        fallback = f" (default {default})" if default else ""
        msg = (
            f"{name} is not an http:// or https:// URL with a host, "
            f"without credentials, query or fragment{most}{fallback}"
        )
        raise InvalidInput(msg, field=name)
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


def _recipients(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        value = ",".join(value)
    text = value if isinstance(value, str) else ""
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


def _smtp(value: Any) -> SmtpServer | None:
    if isinstance(value, SmtpServer):
        return value
    url = _text(value)
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
    for key, text in query:
        if key != "from" or len(query) > 1:
            raise _smtp_refused(f"has the query {key[:40]!r}; it takes only ?from=")
        sender = _address(text, SMTP_ENV)
    return SmtpServer(
        security=security,
        host=parts.hostname,
        port=port or DEFAULT_PORTS[security],
        user=user,
        password=password,
        sender=sender,
    )


def _invalid(error: ValidationError) -> InvalidInput:
    """The first of pydantic's errors as ``InvalidInput`` naming the
    variable (the validators' own, when they raised one)."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidInput):
        return cause
    name = str(first["loc"][0]) if first["loc"] else ""
    variable = f"DEVS_{name.upper()}"
    return InvalidInput(f"{variable} is not valid: {first['msg']}", field=variable)


class NotifySettings(EnvironSettings):
    """What the channels, the sender and the sweeper are configured with.

    ``NotifySettings()`` reads ``os.environ``,
    ``NotifySettings.from_environ(mapping)`` a mapping; values given in code
    win over the environment. Each field is the variable ``DEVS_<FIELD>``.
    """

    model_config = SettingsConfigDict(
        env_prefix="DEVS_", case_sensitive=True, frozen=True
    )

    webhook_urls: Annotated[tuple[str, ...], NoDecode] = Field(default=(), repr=False)
    """``DEVS_WEBHOOK_URLS``: the webhook endpoints, comma-separated
    ``http(s)://`` URLs (at most :data:`URLS_MAX`)."""
    webhook_secret: Annotated[tuple[str, ...], NoDecode] = Field(default=(), repr=False)
    """``DEVS_WEBHOOK_SECRET``: ``whsec_`` and base64, several
    space-separated for a rotation; messages are signed with the first."""
    webhook_backoff: Annotated[tuple[float, ...], NoDecode] = tuple(
        float(s) for s in DEFAULT_BACKOFF
    )
    """``DEVS_WEBHOOK_BACKOFF``: seconds between tries, comma-separated
    (default Standard Webhooks' schedule, :data:`DEFAULT_BACKOFF`)."""
    webhook_timeout: float = ATTEMPT_TIMEOUT
    """``DEVS_WEBHOOK_TIMEOUT``: seconds an endpoint has to answer, in
    (0, 60]."""
    human_reminder: float | None = None
    """``DEVS_HUMAN_REMINDER``: seconds before a deadline to remind."""
    human_deadline: float | None = None
    """``DEVS_HUMAN_DEADLINE``: the policy's; checked here so that a wrong
    one stops the server."""
    slack_webhook_url: str | None = Field(default=None, repr=False)
    """``DEVS_SLACK_WEBHOOK_URL``: a Slack incoming webhook."""
    slack_bot_token: str | None = Field(default=None, repr=False)
    """``DEVS_SLACK_BOT_TOKEN``: a bot token (``xoxb-…``), with
    ``DEVS_SLACK_CHANNEL``, instead of a hook."""
    slack_channel: str | None = None
    """``DEVS_SLACK_CHANNEL``: the channel the bot posts in."""
    slack_api_url: str = SLACK_API
    """``DEVS_SLACK_API_URL``: where Slack's Web API is."""
    smtp_url: SmtpServer | None = None
    """``DEVS_SMTP_URL``: the server e-mail goes through."""
    notify_email: Annotated[tuple[str, ...], NoDecode] = ()
    """``DEVS_NOTIFY_EMAIL``: who is written to, comma-separated."""
    public_url: str | None = None
    """``DEVS_PUBLIC_URL``: where people reach the service; each message
    links to the task's page in its console."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise _invalid(error) from None

    @field_validator("webhook_urls", mode="before")
    @classmethod
    def _webhook_urls(cls, value: Any) -> tuple[str, ...]:
        return _urls(value)

    @field_validator("webhook_secret", mode="before")
    @classmethod
    def _webhook_secret(cls, value: Any) -> tuple[str, ...]:
        return _secrets(value)

    @field_validator("webhook_backoff", mode="before")
    @classmethod
    def _webhook_backoff(cls, value: Any) -> tuple[float, ...]:
        return _backoff(value)

    @field_validator("webhook_timeout", mode="before")
    @classmethod
    def _webhook_timeout(cls, value: Any) -> float:
        seconds = _seconds(value, TIMEOUT_ENV, TIMEOUT_MAX)
        return ATTEMPT_TIMEOUT if seconds is None else seconds

    @field_validator("human_reminder", mode="before")
    @classmethod
    def _human_reminder(cls, value: Any) -> float | None:
        return _seconds(value, REMINDER_ENV, REMINDER_MAX)

    @field_validator("human_deadline", mode="before")
    @classmethod
    def _human_deadline(cls, value: Any) -> float | None:
        return _seconds(value, DEADLINE_ENV, DEADLINE_MAX)

    @field_validator("slack_webhook_url", mode="before")
    @classmethod
    def _slack_webhook_url(cls, value: Any) -> str | None:
        return _slack_url(value)

    @field_validator("slack_bot_token", mode="before")
    @classmethod
    def _slack_bot_token(cls, value: Any) -> str | None:
        return _slack_token(value)

    @field_validator("slack_channel", mode="before")
    @classmethod
    def _slack_channel(cls, value: Any) -> str | None:
        return _slack_channel(value)

    @field_validator("slack_api_url", mode="before")
    @classmethod
    def _slack_api_url(cls, value: Any) -> str:
        return _service_url(value, SLACK_API_ENV, SLACK_API, 1_000_000) or SLACK_API

    @field_validator("smtp_url", mode="before")
    @classmethod
    def _smtp_url(cls, value: Any) -> SmtpServer | None:
        return _smtp(value)

    @field_validator("notify_email", mode="before")
    @classmethod
    def _notify_email(cls, value: Any) -> tuple[str, ...]:
        return _recipients(value)

    @field_validator("public_url", mode="before")
    @classmethod
    def _public_url(cls, value: Any) -> str | None:
        return _service_url(value, PUBLIC_URL_ENV, None, URL_MAX)

    @model_validator(mode="after")
    def _together(self) -> NotifySettings:
        """The variables that go in pairs, or one of two."""
        pairs: tuple[tuple[object, str, object, str, str], ...] = (
            (
                self.webhook_urls,
                URLS_ENV,
                self.webhook_secret,
                SECRET_ENV,
                "be set too, to sign them",
            ),
            (
                self.slack_bot_token,
                SLACK_TOKEN_ENV,
                self.slack_channel,
                SLACK_CHANNEL_ENV,
                "name the channel",
            ),
            (
                self.slack_channel,
                SLACK_CHANNEL_ENV,
                self.slack_bot_token,
                SLACK_TOKEN_ENV,
                "be set to post",
            ),
            (
                self.smtp_url,
                SMTP_ENV,
                self.notify_email,
                EMAIL_ENV,
                "name who to write to",
            ),
            (
                self.notify_email,
                EMAIL_ENV,
                self.smtp_url,
                SMTP_ENV,
                "name the server to send through",
            ),
        )
        for given, name, needed, other, what in pairs:
            if given and not needed:
                msg = f"{name} is set: {other} must {what}"
                raise InvalidInput(msg, field=other)
        if self.slack_bot_token is not None and self.slack_webhook_url is not None:
            msg = (
                f"{SLACK_ENV} and {SLACK_TOKEN_ENV} are both set: Slack is "
                "reached one way, set one of them"
            )
            raise InvalidInput(msg, field=SLACK_TOKEN_ENV)
        return self

    @property
    def webhooks_enabled(self) -> bool:
        return bool(self.webhook_urls)

    @property
    def slack_enabled(self) -> bool:
        return self.slack_webhook_url is not None or self.slack_bot_token is not None

    @property
    def slack_threads(self) -> bool:
        """Whether Slack is reached with a bot token (its messages threaded
        by task) rather than an incoming webhook."""
        return self.slack_bot_token is not None

    @property
    def email_enabled(self) -> bool:
        return self.smtp_url is not None and bool(self.notify_email)

    @property
    def lease(self) -> float:
        """How long a try's delivery is leased to its sender: a try's
        timeout applies to each of its phases (connecting, sending, each
        read), so four of them and 10 s more."""
        return 4 * self.webhook_timeout + 10.0


def notify_settings(environ: Mapping[str, str] | None = None) -> NotifySettings:
    """The settings of ``environ`` (default: ``os.environ``); ``InvalidInput``
    naming the variable that is wrong, never repeating a secret."""
    return NotifySettings.from_environ(environ)


def reminder_setting(environ: Mapping[str, str] | None = None) -> float | None:
    """``DEVS_HUMAN_REMINDER`` (and ``DEVS_HUMAN_DEADLINE`` checked): what
    the sweeper alone needs; ``InvalidInput`` naming a wrong one."""
    env = os.environ if environ is None else environ
    values = {name: env[name] for name in (REMINDER_ENV, DEADLINE_ENV) if name in env}
    return NotifySettings.from_environ(values).human_reminder
