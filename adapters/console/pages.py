"""How every console page is drawn, refused and reached: the templates and
their filters, the headers, the origin check, the form reader, and the
per-app state (:class:`Console`) that the routes reach through
:func:`console_of` (a FastAPI dependency on ``app.state``)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from devs.domain import (
    DevsError,
    InvalidInput,
    NotFound,
    RecoveryService,
    StoreError,
    TaskSummary,
)
from devs.domain.names import Resolution
from devs.domain.output import shown as bidi_shown
from devs.domain.redaction import excerpt

if TYPE_CHECKING:
    from devs.adapters.console.live import LogWatch

T = TypeVar("T")

PREFIX = "/console"
COOKIE = "devs_console"
SESSION_SECONDS = 12 * 3600
"""How long a console session lasts before signing in again (12 hours)."""
FORM_MAX = 16 * 1024
"""Bytes a console form may send (its fields are a token, a task id, a
commit, a resolution, a budget and a reason); a larger body is refused
unread."""
TEXT_SHOWN = 2_000
"""Characters of an error, an output or a strategy a page shows at most."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, never no-referrer: with no-referrer, a form's POST carries
    # "Origin: null" and the origin check below could not tell it is ours.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

templates = Environment(
    loader=PackageLoader("devs.adapters.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["segment"] = lambda value: quote(str(value), safe="")
templates.filters["shown"] = lambda value: bidi_shown(excerpt(str(value), TEXT_SHOWN))
"""Every agent-supplied text a page shows: cut to :data:`TEXT_SHOWN`
characters, its bidirectional controls written as visible ``<U+202E>``."""


def _utc(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _when(moment: datetime | None) -> Markup | str:
    """A time as every page writes it: ``<time datetime="ISO (UTC)"
    title="… UTC">… UTC</time>``, which console.js rewrites in the
    reader's local time (the title keeps the UTC time)."""
    if moment is None:
        return "-"
    utc = _utc(moment)
    iso = moment.astimezone(UTC).isoformat()
    return Markup('<time class="at" datetime="{}" title="{}">{}</time>').format(
        iso, utc, utc
    )


def _waited(moment: datetime, now: datetime) -> str:
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def _left(moment: datetime, now: datetime) -> str:
    """A deadline as the page says it: how long is left, or that it passed
    (the sweeper hands the task off within a second or two)."""
    seconds = int((moment - now).total_seconds())
    if seconds <= 0:
        return "passed: handing off"
    return _waited(now - timedelta(seconds=seconds), now) + " left"


templates.filters["when"] = _when
templates.filters["utc"] = _utc
templates.filters["ident"] = lambda value: hashlib.sha256(
    str(value).encode()
).hexdigest()[:12]
templates.filters["left"] = lambda moment: _left(moment, datetime.now(UTC))
templates.filters["iso"] = lambda moment: moment.astimezone(UTC).isoformat()
# How long an item has waited, at the time the page is drawn (an inbox built
# once per log position is drawn again as the minutes pass).
templates.filters["waited"] = lambda moment: _waited(moment, datetime.now(UTC))


def _amount(value: float) -> str:
    """A budget in USD as a person writes it: ``2.5``, ``1,000``,
    ``0.000001`` (at most six decimals, no trailing zeros)."""
    return f"{value:,.6f}".rstrip("0").rstrip(".")


def _share(spent: float, budget: float | None) -> str:
    """How much of a budget is spent: `` (85%)``, `` (105%, over budget)``;
    nothing without a budget."""
    if budget is None or budget <= 0:
        return ""
    percent = f"{int(spent / budget * 100):,}%"  # 99.9% is 99%: not yet spent
    return f" ({percent}, over budget)" if spent >= budget else f" ({percent})"


# Spend, as `devs spend` writes it: USD to four decimals, a budget as
# written, token counts with thousands separators.
templates.filters["usd"] = lambda value: f"{value:,.4f}"
templates.filters["amount"] = _amount
templates.filters["grouped"] = lambda value: f"{value:,}"
templates.filters["share"] = _share


# ------------------------------------------------------------ the app's state


class Writer(Protocol):
    """Where the app runs its commands (its writer thread)."""

    async def run(self, call: Callable[[], T]) -> T: ...


@dataclass
class Console:
    """What one app's console holds: how to reach the app's service, where
    its commands run, the key its sessions are signed with, the one look at
    the log its live streams share, and the inbox built at the last log
    position."""

    service_of: Callable[[], RecoveryService]
    writer: Writer
    key: bytes
    watch: LogWatch
    cache: dict[str, Any] = field(default_factory=dict)


STATE = "devs_console"
"""The attribute of ``app.state`` that holds the app's :class:`Console`."""


def console_of(request: Request) -> Console:
    """The :class:`Console` of the app serving ``request`` (a dependency)."""
    console: Console = getattr(request.app.state, STATE)
    return console


AppConsole = Annotated[Console, Depends(console_of)]
"""A route's parameter for its app's :class:`Console`."""


async def in_thread(call: Callable[[], T]) -> T:
    """``call()`` off the event loop (a read of the service)."""
    return await asyncio.to_thread(call)


def task_or_none(service: RecoveryService, task_id: str) -> TaskSummary | None:
    try:
        return service.task(task_id)
    except NotFound:
        return None


# ------------------------------------------------------------------- pages


DONE = {
    "resume": "You resumed {task}: its agent goes on.",
    "rewind": "You rewound {task}: its agent starts again from the commit.",
    "skip": "You skipped {task}: its run moves on without it.",
    "claim": "You claimed {task}: until you release it, others' answers are refused.",
    "release": "You released {task}: anyone may answer it now.",
    "take_over": "You took {task} over: it is yours to answer.",
    "resolve": "You resolved {task}: {resolution}.",
    "raise_budget": (
        "You raised the budget of {task}: resume it to let its agent go on."
    ),
}
RESOLUTION_WORDS = {
    "complete": "completed by hand",
    "skip": "skipped, its run moves on",
    "return": "returned to its agent",
}


def done_message(query: Any) -> str | None:
    """The sentence a page says after an answer (``?done=ACTION&task=ID``):
    written here, never taken from the address."""
    action = str(query.get("done") or "")
    if action not in DONE:
        return None
    task = excerpt(str(query.get("task") or "the task"), 200)
    resolution = RESOLUTION_WORDS.get(str(query.get("resolution") or ""), "done")
    return bidi_shown(DONE[action].format(task=task, resolution=resolution))


def page(
    request: Request, template: str, status: int = 200, **context: Any
) -> HTMLResponse:
    html = templates.get_template(template).render(
        base=PREFIX,
        resolutions=[r.value for r in Resolution],
        **context,
    )
    return HTMLResponse(html, status, headers=HEADERS)


def to_login(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/login", 303, headers=HEADERS)


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this origin: its ``Origin``
    header (every browser sends one with a form's POST), else its
    ``Referer``, names this scheme, host and port."""
    host = request.headers.get("host")
    if not host:
        return False
    ours = f"{request.url.scheme}://{host}".lower()
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer")
        if origin == "null" or not referer:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin.lower() == ours


OPERATOR_STATE = "console_operator"
"""Where a request's signed-in operator is kept (``request.state``), for
the header of a refusal page."""


def refusal(
    status: int,
    message: str,
    *,
    title: str | None = None,
    operator: str | None = None,
) -> HTMLResponse:
    """Every refusal of the console: ``refused.html`` with ``status``."""
    body = templates.get_template("refused.html").render(
        base=PREFIX,
        title=title or ("Not found" if status == 404 else "Not done"),
        message=message,
        operator=operator,
    )
    return HTMLResponse(body, status, headers=HEADERS)


def status_of(error: DevsError) -> int:
    return error.http_status if 400 <= error.http_status < 600 else 409


def refused_origin() -> HTMLResponse:
    return refusal(
        403,
        "This form was sent from another site (its Origin is not this "
        "console's): nothing was done.",
        title="Refused",
    )


class ConsoleRoute(APIRoute):
    """A console page whose refusals are pages: a service error (a bad id,
    a store that cannot be used) is ``refused.html`` with the error's
    status, never the API's JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def paged(request: Request) -> Response:
            try:
                return await handler(request)
            except DevsError as error:
                answer = refusal(
                    status_of(error),
                    str(error),
                    operator=getattr(request.state, OPERATOR_STATE, None),
                )
                if isinstance(error, StoreError):
                    answer.headers["Retry-After"] = "1"
                return answer

        return paged


class FormTooLarge(InvalidInput):
    """A console form over :data:`FORM_MAX` bytes."""

    http_status = 413


async def read_form(request: Request) -> dict[str, str]:
    """A form's fields (``application/x-www-form-urlencoded``), read up to
    :data:`FORM_MAX` bytes: a larger body is refused before it is all read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > FORM_MAX:
        raise FormTooLarge(f"the form is larger than {FORM_MAX:,} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > FORM_MAX:
            raise FormTooLarge(f"the form is larger than {FORM_MAX:,} bytes")
        chunks.append(chunk)
    text = b"".join(chunks).decode("utf-8", "replace")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        raise InvalidInput("the form has too many fields") from None
    return dict(pairs)


def position_of(text: str | None) -> int | None:
    """A log position from a query parameter (``after``); ``None`` when it
    is not one."""
    if text is None or not text.isdigit() or len(text) > 18:
        return None
    return int(text)
