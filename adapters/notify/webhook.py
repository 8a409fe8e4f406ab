"""Webhooks as Standard Webhooks defines them: the signed request, one
delivery attempt, and the channel that gives an endpoint per URL of
``DEVS_WEBHOOK_URLS``.

Messages are signed with the first secret of ``DEVS_WEBHOOK_SECRET`` (the
``standardwebhooks`` package signs, so any Standard Webhooks library
verifies). What an answer comes to is the one status mapping's
(:func:`devs.adapters.notify.status.answered`): a webhook retries any answer
but a 2xx or a 410, as Standard Webhooks does. No secret reaches an error, a
log line or the terminal: a URL is shown without its query, credentials or
path (:func:`~devs.adapters.notify.settings.shown`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import httpx
import orjson
from standardwebhooks.webhooks import Webhook

from devs.adapters.notify.channel import Endpoint, Threads
from devs.adapters.notify.settings import NotifySettings, shown
from devs.adapters.notify.status import (
    ATTEMPT_TIMEOUT,
    Attempt,
    answered,
    unanswered,
)
from devs.domain.outbox import OutboxMessage


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


def send_webhook(
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
    except httpx.HTTPError as error:
        return unanswered(error, shown(url), timeout)
    return answered(status, shown(url), retry_after_header=retry_after)


class WebhookChannel:
    """An endpoint for each URL of ``DEVS_WEBHOOK_URLS``; every message goes
    to each, with the console's ``link`` added to its data when there is
    one."""

    kind = "webhook"

    def endpoints(
        self, settings: NotifySettings, threads: Threads | None
    ) -> Sequence[Endpoint]:
        secret = settings.webhook_secret[0] if settings.webhook_secret else ""
        found: list[Endpoint] = []
        for url in settings.webhook_urls:

            def to_webhook(
                client: httpx.Client,
                message: OutboxMessage,
                link: str | None,
                timeout: float,
                url: str = url,
            ) -> Attempt:
                if link is not None:
                    message = message.model_copy(
                        update={"data": {**message.data, "link": link}}
                    )
                return send_webhook(client, url, message, secret, timeout=timeout)

            found.append(Endpoint(self.kind, url, shown(url), None, to_webhook))
        return found


CHANNEL = WebhookChannel()
