"""The outbox: what was sent to the webhooks and the people's channels, and
what failed (``GET /console/outbox``), and redelivering one message or every
failed one, confirmed first (``POST /console/outbox/redeliver``)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from devs.adapters.console.pages import (
    HEADERS,
    PREFIX,
    AppConsole,
    ConsoleRoute,
    in_thread,
    page,
    read_form,
    refusal,
    refused_origin,
    same_origin,
    status_of,
    to_login,
)
from devs.adapters.console.sessions import operator_of
from devs.domain import DevsError
from devs.domain.redaction import excerpt
from devs.domain.values import DELIVERY_STATES

router = APIRouter(route_class=ConsoleRoute)


@router.get("/outbox")
async def outbox_page(request: Request, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    service = console.service_of()
    state = request.query_params.get("state") or None
    if state is not None and state not in DELIVERY_STATES:
        state = None
    report = await in_thread(
        lambda: service.webhooks(state=state, limit=200)  # type: ignore[arg-type]
    )
    return page(
        request,
        "outbox.html",
        title="Outbox",
        operator=operator,
        report=report,
        state=state,
        states=DELIVERY_STATES,
        dead_count=sum(channel.dead for channel in report.channels),
        shown_of={c.channel: c.shown for c in report.channels},
        done=excerpt(request.query_params.get("done", ""), 200),
    )


@router.post("/outbox/redeliver")
async def redeliver(request: Request, console: AppConsole) -> Response:
    if not same_origin(request):
        return refused_origin()
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    fields = await read_form(request)
    service = console.service_of()
    message_id = fields.get("message_id", "")
    if fields.get("confirmed") != "1":
        report = await in_thread(lambda: service.webhooks(limit=500))
        deliveries = [d for d in report.deliveries if d.message_id == message_id]
        return page(
            request,
            "redeliver.html",
            title="Confirm: redeliver",
            operator=operator,
            every=fields.get("failed") == "1",
            message_id=message_id,
            deliveries=deliveries,
            shown_of={c.channel: c.shown for c in report.channels},
            dead_count=sum(channel.dead for channel in report.channels),
        )
    try:
        if fields.get("failed") == "1":
            done = await in_thread(service.redeliver_failed)
        else:
            done = await in_thread(lambda: service.redeliver(message_id))
    except DevsError as error:
        message = f"redeliver: {error}"
        return refusal(status_of(error), message, operator=operator)
    said = quote(f"{done.count} deliveries due again", safe="")
    return RedirectResponse(f"{PREFIX}/outbox?done={said}", 303, headers=HEADERS)
