"""Webhooks as Standard Webhooks defines them: the settings, the signature,
one delivery attempt, and when to try again.

- ``DEVS_WEBHOOK_URLS``: the endpoints, comma-separated ``http(s)://`` URLs;
- ``DEVS_WEBHOOK_SECRET``: ``whsec_`` and base64, several space-separated
  for a rotation; messages are signed with the first (the ``standardwebhooks``
  package signs, so any Standard Webhooks library verifies);
- ``DEVS_WEBHOOK_BACKOFF``: seconds between tries, comma-separated (default
  Standard Webhooks' own: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h,
  24 h), each with up to 20 % jitter; a ``Retry-After`` answer is honoured
  when it asks for longer.

An attempt answers what became of it: ``delivered`` (2xx), ``retry`` (any
other answer, or none within :data:`ATTEMPT_TIMEOUT`), ``gone`` (410: the
endpoint asks never to be called again). No secret reaches an error, a log
line or the terminal: a URL is shown without its query and credentials.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import random
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from urllib.parse import urlsplit

import httpx
import orjson
from standardwebhooks.webhooks import Webhook

from devs.domain import InvalidInput
from devs.domain.model import Immutable
from devs.domain.outbox import OutboxMessage

URLS_ENV = "DEVS_WEBHOOK_URLS"
SECRET_ENV = "DEVS_WEBHOOK_SECRET"
BACKOFF_ENV = "DEVS_WEBHOOK_BACKOFF"
DEFAULT_BACKOFF = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
"""Standard Webhooks' retry schedule, in seconds."""
ATTEMPT_TIMEOUT = 15.0
"""Seconds an endpoint has to answer an attempt."""
JITTER = 0.2
RETRY_AFTER_MAX = 86_400.0
"""The longest ``Retry-After`` honoured (a day); longer is taken as a day."""
URLS_MAX = 20
BACKOFF_MAX = 30 * 86_400
ERROR_SHOWN = 300


class Attempted(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    GONE = "gone"
    REFUSED = "refused"
    """The endpoint refused this message for good (Slack's ``invalid_blocks``
    and then its plain-text form too): dead at once, the endpoint left
    enabled."""


class Attempt(Immutable):
    """What one delivery attempt came to."""

    outcome: Attempted
    status: int | None
    """The endpoint's HTTP status (``None``: no answer)."""
    error: str | None = None
    retry_after: float | None = None
    """Seconds the endpoint asked to wait (``Retry-After``), if it did."""


class WebhookSettings(Immutable):
    urls: tuple[str, ...]
    secrets: tuple[str, ...]
    backoff: tuple[float, ...]

    @property
    def enabled(self) -> bool:
        return bool(self.urls)


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


def _urls(text: str) -> tuple[str, ...]:
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


def _secrets(text: str) -> tuple[str, ...]:
    secrets = tuple(text.split())
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


def _backoff(text: str) -> tuple[float, ...]:
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


def webhook_settings(environ: Mapping[str, str]) -> WebhookSettings:
    """The webhook settings of ``environ``; ``InvalidInput`` naming the
    variable that is wrong (never repeating a secret)."""
    urls = _urls(environ.get(URLS_ENV, ""))
    secrets = _secrets(environ.get(SECRET_ENV, ""))
    if urls and not secrets:
        msg = f"{URLS_ENV} is set: {SECRET_ENV} must be set too, to sign them"
        raise InvalidInput(msg, field=SECRET_ENV)
    return WebhookSettings(
        urls=urls, secrets=secrets, backoff=_backoff(environ.get(BACKOFF_ENV, ""))
    )


def body_of(message: OutboxMessage) -> bytes:
    """The JSON body of ``message``: ``{"type", "timestamp", "data"}``."""
    return orjson.dumps(message.payload())


def signed_headers(
    message: OutboxMessage, body: bytes, secret: str, *, now: datetime | None = None
) -> dict[str, str]:
    """Standard Webhooks' headers for ``body``: ``webhook-id``,
    ``webhook-timestamp`` (now, in seconds) and ``webhook-signature``
    (``v1,…``, signed with ``secret`` by the ``standardwebhooks`` package)."""
    moment = now or datetime.now(UTC)
    signature = Webhook(secret).sign(message.id, moment, body.decode())
    return {
        "webhook-id": message.id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": "devs-recovery",
    }


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MAX)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (moment - datetime.now(UTC)).total_seconds()
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


def attempt(
    client: httpx.Client,
    url: str,
    message: OutboxMessage,
    secret: str,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
) -> Attempt:
    """POST ``message`` to ``url``, signed; what came of it."""
    body = body_of(message)
    headers = signed_headers(message, body, secret)
    try:
        # Only the status and headers are read: a receiver's body, however
        # large, is never taken in.
        with client.stream(
            "POST", url, content=body, headers=headers, timeout=timeout
        ) as answer:
            status = answer.status_code
            retry_after = answer.headers.get("retry-after")
    except httpx.TimeoutException:
        return Attempt(
            outcome=Attempted.RETRY,
            status=None,
            error=f"no answer from {shown(url)} within {timeout:g} s",
        )
    except httpx.HTTPError as error:
        kind = type(error).__name__
        return Attempt(
            outcome=Attempted.RETRY,
            status=None,
            error=f"{kind} calling {shown(url)}",
        )
    if 200 <= status < 300:
        return Attempt(outcome=Attempted.DELIVERED, status=status)
    if status == 410:
        return Attempt(
            outcome=Attempted.GONE,
            status=status,
            error=f"{shown(url)} answered 410 Gone: it is disabled",
        )
    return Attempt(
        outcome=Attempted.RETRY,
        status=status,
        error=f"{shown(url)} answered {status}",
        retry_after=_retry_after(retry_after),
    )


def next_wait(
    tries: int,
    backoff: Sequence[float],
    retry_after: float | None = None,
    *,
    rng: random.Random | None = None,
) -> float | None:
    """Seconds until the next try after ``tries`` failed ones (``None``: no
    try is left, the message is dead-lettered). The schedule's wait with up
    to :data:`JITTER` of it added, or the endpoint's ``Retry-After`` when it
    asks for longer."""
    if tries < 1 or tries > len(backoff):
        return None
    wait = backoff[tries - 1]
    wait += wait * JITTER * (rng or random).random()
    if retry_after is not None and retry_after > wait:
        wait = retry_after
    return wait


def due(wait: float, now: float | None = None) -> float:
    """The clock time (``time.time()``) ``wait`` seconds from ``now``."""
    return (now if now is not None else time.time()) + wait
