"""Notifications, the outbox and the webhooks' deliveries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from devs.adapters.http.contract import MessagePath, limit_query, position_query
from devs.adapters.http.dispatch import Devs, HttpRoute, ReadAfter
from devs.domain import (
    Notification,
)
from devs.domain.outbox import OutboxMessage
from devs.domain.ports import Redelivered, WebhooksReport
from devs.domain.values import DELIVERY_STATES

router = APIRouter(tags=["notifications"], route_class=HttpRoute)


# ------------------------------------------------------------ notifications


@router.get("/notifications")
def list_notifications(
    served: Devs,
    after: Annotated[int, position_query("log position to start after")] = 0,
    limit: Annotated[int, limit_query("at most this many")] = 100,
) -> list[Notification]:
    """Escalations, pauses, hand-offs and blocked attempts, in log order."""
    return served.service.notifications(after=after, limit=limit)


@router.get("/outbox")
def outbox_messages(
    served: Devs,
    position: ReadAfter,
    after_position: Annotated[
        int, position_query("log position to start after", alias="after_position")
    ] = 0,
    limit: Annotated[int, limit_query("at most this many")] = 100,
) -> list[OutboxMessage]:
    """The messages the log asks to send (session.opened, handoff.claimed,
    …), in log order: the ``outbox`` read model."""
    with served.service.reading_after(position):
        return served.service.outbox_messages(after=after_position, limit=limit)


@router.get("/webhooks")
def webhooks(
    served: Devs,
    state: Annotated[
        str | None,
        Query(
            json_schema_extra={"enum": list(DELIVERY_STATES)},
            description="only deliveries in this state",
        ),
    ] = None,
    limit: Annotated[int, limit_query("at most this many")] = 50,
) -> WebhooksReport:
    """``webhooks()``: every endpoint the outbox sends to (webhooks, Slack,
    e-mail) with its counts, and the latest deliveries (docs/notifications.md)."""
    return served.service.webhooks(state=state, limit=limit)  # type: ignore[arg-type]


@router.post("/webhooks/redeliver/{message_id}")
def redeliver(served: Devs, message_id: MessagePath) -> Redelivered:
    """``redeliver(message_id)``: try that message again at once on every
    endpoint it went to (404 when it has no delivery)."""
    return served.service.redeliver(message_id)


@router.post("/webhooks/redeliver-failed")
def redeliver_failed(served: Devs) -> Redelivered:
    """``redeliver_failed()``: try every dead letter again at once."""
    return served.service.redeliver_failed()
