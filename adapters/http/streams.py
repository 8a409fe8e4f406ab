"""The notification stream (server-sent events) and its shutdown."""

from __future__ import annotations

import threading
import time
from collections.abc import (
    Iterator,
)
from typing import Annotated

import orjson
from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse

from devs.adapters.http.contract import (
    POSITION_TEXT,
    STREAM_HEARTBEAT,
    STREAM_POLL,
    STREAM_RETRY,
    logger,
    position_query,
)
from devs.adapters.http.dispatch import Devs, HttpRoute
from devs.domain import (
    InvalidInput,
    RecoveryService,
    StoreError,
    UnreadableEvent,
)

router = APIRouter(tags=["notifications"], route_class=HttpRoute)


@router.get(
    "/notifications/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def stream(
    served: Devs,
    after: Annotated[int, position_query("log position to start after")] = 0,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            json_schema_extra={"pattern": POSITION_TEXT},
            description="the last event's id a reconnecting client saw",
        ),
    ] = None,
) -> StreamingResponse:
    """Server-Sent Events: each notification as it is recorded, ``id:`` its
    log position, ``data:`` its JSON. A client reconnecting with
    ``Last-Event-ID`` misses nothing."""
    start = after
    if last_event_id is not None:
        try:
            start = int(last_event_id)
        except ValueError:
            msg = f"Last-Event-ID must be an integer, got {last_event_id[:40]!r}"
            raise InvalidInput(msg, field="Last-Event-ID") from None
    service = served.service
    service.notifications(after=start, limit=1)  # a bad position fails here, as 422
    return StreamingResponse(_events(service, start), media_type="text/event-stream")


STREAMS_END = threading.Event()
"""Set when this process shuts down (``devs serve`` on SIGTERM): every open
stream ends at once, instead of holding the shutdown until its client goes."""


def end_streams() -> None:
    """End every notification stream of this process (at shutdown)."""
    STREAMS_END.set()


class _Outage:
    """Logs once that the streams wait for the store, and once that it is
    back: one line each, never a traceback, however many streams wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None

    def began(self, error: StoreError) -> None:
        with self._lock:
            if self.since is not None:
                return
            self.since = time.monotonic()
        logger.warning("notification streams wait for the store: %s", error)

    def ended(self) -> None:
        with self._lock:
            if self.since is None:
                return
            lasted, self.since = time.monotonic() - self.since, None
        logger.warning(
            "notification streams go on: the store is back after %.0f s", lasted
        )


_OUTAGE = _Outage()


def _events(service: RecoveryService, after: int) -> Iterator[bytes]:
    """The SSE stream from ``after`` on, until the client goes away or the
    server shuts down. While the store cannot be used the stream stays open,
    a comment line each :data:`STREAM_RETRY`, and goes on from its position
    when the store is back."""
    position = after
    quiet_since = time.monotonic()
    yield b"retry: 1000\n\n"
    while not STREAMS_END.is_set():
        try:
            found = service.notifications(after=position, limit=100)
        except UnreadableEvent:
            raise
        except StoreError as error:
            _OUTAGE.began(error)
            yield b": the store is unavailable; waiting for it\n\n"
            quiet_since = time.monotonic()
            STREAMS_END.wait(STREAM_RETRY)
            continue
        _OUTAGE.ended()
        for notification in found:
            data = orjson.dumps(notification.model_dump(mode="json"))
            yield b"id: %d\ndata: %s\n\n" % (notification.position, data)
            position = notification.position
        if found:
            quiet_since = time.monotonic()
            continue
        if time.monotonic() - quiet_since >= STREAM_HEARTBEAT:
            yield b": still here\n\n"
            quiet_since = time.monotonic()
        STREAMS_END.wait(STREAM_POLL)
        yield b""  # sends nothing; lets the server stop a stream whose client left
