"""The live stream: one server-sent event each time the log grows, so an
open console fetches what changed (``GET /console/live``). One look at the
end of the log for every open console of the process (:class:`LogWatch`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from devs.adapters.console.pages import (
    HEADERS,
    AppConsole,
    ConsoleRoute,
    position_of,
)
from devs.adapters.console.sessions import operator_of
from devs.adapters.http.streams import STREAMS_END
from devs.domain import RecoveryService
from devs.domain.redaction import excerpt

LIVE_POLL = 0.5
"""Seconds between the live stream's looks at the end of the log."""
LIVE_HEARTBEAT = 15.0
SESSION_RECHECK = 60.0
"""Seconds between checks that a live stream's session still holds."""

router = APIRouter(route_class=ConsoleRoute)


class LogWatch:
    """One look at the end of the log every :data:`LIVE_POLL` seconds for
    every open console of this process (not one per console), while any is
    open; each waits on the loop, holding no thread."""

    def __init__(self, service_of: Callable[[], RecoveryService]) -> None:
        self.service_of = service_of
        self.end: int | None = None
        self.failure: str | None = None
        self.changed = asyncio.Condition()
        self.listeners = 0
        self.task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while self.listeners and not STREAMS_END.is_set():
            service = self.service_of()
            try:
                end = await asyncio.to_thread(service.recorder.max_notification_id)
            except Exception as error:  # a store outage: say so, go on looking
                self.failure = excerpt(str(error), 200)
            else:
                self.failure = None
                self.end = end or 0
            async with self.changed:
                self.changed.notify_all()
            await asyncio.sleep(LIVE_POLL)
        self.task = None

    async def next(self, timeout: float) -> None:
        """Wait for the next look (at most ``timeout`` seconds)."""
        if self.task is None:
            self.task = asyncio.create_task(self._poll())
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout)


async def log_moves(
    watch: LogWatch, after: int | None, signed_in: Callable[[], Awaitable[bool]]
) -> AsyncIterator[bytes]:
    """An SSE stream with one event each time the log grows (its data: the
    new end): the console then fetches what changed. It ends with the server,
    or when its session no longer holds (checked every
    :data:`SESSION_RECHECK` seconds: a rotated operator stops hearing)."""
    yield b"retry: 1000\n\n"
    last = after
    quiet_since = checked = time.monotonic()
    watch.listeners += 1
    try:
        while not STREAMS_END.is_set():
            await watch.next(LIVE_HEARTBEAT)
            now = time.monotonic()
            if now - checked >= SESSION_RECHECK:
                checked = now
                if not await signed_in():
                    yield b"event: signed-out\ndata: {}\n\n"
                    return
            end = watch.end
            if watch.failure is not None:
                yield b": the store is unavailable; waiting for it\n\n"
            elif end is not None and last is None:
                last = end
            elif end is not None and last is not None and end > last:
                last = end
                quiet_since = now
                yield b"id: %d\nevent: log\ndata: %d\n\n" % (end, end)
            if now - quiet_since >= LIVE_HEARTBEAT:
                quiet_since = now
                yield b": quiet\n\n"
    finally:
        watch.listeners -= 1


@router.get("/live")
async def live(request: Request, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return Response("sign in", 401, headers=HEADERS)
    after = position_of(request.query_params.get("after"))

    async def still_signed_in() -> bool:
        return await operator_of(request, console) == operator

    return StreamingResponse(
        log_moves(console.watch, after, still_signed_in),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
