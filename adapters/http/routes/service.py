"""Liveness, readiness and the read models' position."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from devs.adapters.http.contract import ErrorBody, Health, Readiness, ReadPosition
from devs.adapters.http.dispatch import Devs, HttpRoute
from devs.domain import (
    InvalidInput,
)
from devs.domain.values import POSITION_MAX

router = APIRouter(tags=["service"], route_class=HttpRoute)


@router.get("/healthz", openapi_extra={"security": []})
async def healthz() -> Health:
    """The process is up (no token needed)."""
    return Health(ok=True)


@router.get("/readyz", responses={503: {"model": Readiness}})
async def readyz(served: Devs) -> Any:
    """The store is reachable, can be written, and the read models caught up:
    answered within about a second (503 with the reason otherwise). A store
    opened read-only (its file, folder or mount cannot be written) answers
    queries, but every command there would be a 503: not ready."""
    readiness = await served.readiness()
    if readiness.ready and getattr(served.service.factory, "read_only", False):
        reason = (
            "the database cannot be written here: it was opened read-only (its "
            "file, its folder or its mount is read-only), so every command "
            "fails; queries answer"
        )
        readiness = Readiness(ready=False, position=readiness.position, reason=reason)
    if not readiness.ready:
        return JSONResponse(readiness.model_dump(), 503)
    return readiness


@router.get("/position", responses={504: {"model": ErrorBody}})
def read_position(
    served: Devs,
    after: Annotated[
        int,
        Query(ge=0, le=POSITION_MAX, description="the log position to wait for"),
    ] = 0,
    timeout: Annotated[
        float | None,
        Query(
            gt=0,
            le=300,
            allow_inf_nan=False,
            description=(
                "seconds to wait at most, and never longer than the server's "
                "DEVS_READ_WAIT (its default)"
            ),
        ),
    ] = None,
) -> ReadPosition:
    """Wait until the read models folded log position ``after``, at most
    ``timeout`` seconds and never longer than the server's read wait (a
    client cannot hold a worker's thread longer than any query may), and
    give the position they reached (504 ``not_caught_up`` when the wait runs
    out; 409 ``position_not_recorded`` at once past the log's end):
    ``wait_for`` over HTTP."""
    wait = served.read_wait if timeout is None else min(timeout, served.read_wait)
    try:
        position = served.service.wait_for(after, timeout=wait)
    except InvalidInput as error:  # past the log's end: named as sent
        error.field = "after"
        raise
    return ReadPosition(position=position)
