"""The web console: where operators answer the agents (docs/console.md).

Server-rendered pages under ``/console/`` in ``devs serve``: Jinja2 with
autoescaping, one small script and one style sheet served from this package
(nothing from another origin). An operator signs in with its token; the
session cookie (HttpOnly, SameSite=Strict, Secure over https) holds the
operator's name and a time, signed (itsdangerous) with a key derived from the
hash of the operator's current token: a rotation or a removal ends its
sessions, and every worker of one database checks it alike.

Every page is sent with a Content-Security-Policy that admits this origin's
script and style only (no inline script, no other origin), and every form
POST must come from this origin (its ``Origin`` header, else its ``Referer``):
another origin's is a 403 and writes nothing. Every answer is recorded with
the signed-in operator as its actor.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from fastapi.routing import APIRoute
from itsdangerous import BadSignature, SignatureExpired, TimestampSigner
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from devs.adapters.console_svg import bar_chart_svg, dag_svg, state_chart_svg
from devs.domain import (
    DevsError,
    HandoffEntry,
    InvalidInput,
    NotFound,
    PendingSession,
    RecoveryService,
    RunState,
    StoreError,
    TaskSummary,
)
from devs.domain.errors import Claimed, StaleAnswer
from devs.domain.names import HUMAN_DEADLINE, Resolution, SessionReason
from devs.domain.operators import TOKEN_SHAPE
from devs.domain.output import shown as bidi_shown
from devs.domain.redaction import excerpt
from devs.domain.task import FailureRecord
from devs.domain.values import DELIVERY_STATES

PREFIX = "/console"
COOKIE = "devs_console"
SESSION_SECONDS = 12 * 3600
"""How long a console session lasts before signing in again (12 hours)."""
LIVE_POLL = 0.5
"""Seconds between the live stream's looks at the end of the log."""
LIVE_HEARTBEAT = 15.0
SESSION_RECHECK = 60.0
"""Seconds between checks that a live stream's session still holds."""
INBOX_MAX = 200
"""Items the inbox shows (oldest first); it says how many more wait."""
HISTORY_SHOWN = 200
"""Events of a task's history its page shows: the latest ones (``devs
history`` and ``GET /tasks/{id}/history`` page through all)."""
FORM_MAX = 16 * 1024
"""Bytes a console form may send (its fields are a token, a task id, a
commit, a resolution and a reason); a larger body is refused unread."""
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
STATIC = {"console.js": "text/javascript", "console.css": "text/css"}

templates = Environment(
    loader=PackageLoader("devs.adapters", "console_templates"),
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


# ------------------------------------------------------------------ sessions


def _signer(key: bytes) -> TimestampSigner:
    return TimestampSigner(
        key, salt="devs-console-session", digest_method=hashlib.sha256
    )


def session_cookie(service: RecoveryService, name: str, secret: bytes) -> str:
    """A signed session for operator ``name``."""
    key = service.roster().key_of(name, secret)
    if key is None:
        raise NotFound(f"unknown operator {name!r}")
    encoded = base64.urlsafe_b64encode(name.encode()).rstrip(b"=")
    return _signer(key).sign(encoded).decode("ascii")


def session_operator(
    service: RecoveryService, cookie: str | None, secret: bytes
) -> str | None:
    """The operator a session cookie was signed for, if it is still good:
    signed with that operator's current key, at most
    :data:`SESSION_SECONDS` old."""
    if not cookie or len(cookie) > 1_000:
        return None
    encoded = cookie.split(".", 1)[0]
    try:
        name = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    key = service.roster().key_of(name, secret)
    if key is None:
        return None
    try:
        _signer(key).unsign(cookie, max_age=SESSION_SECONDS)
    except (BadSignature, SignatureExpired):
        return None
    return name


# -------------------------------------------------------------- the inbox


WHY = {
    SessionReason.MAX_RETRIES: "Escalation",
    SessionReason.BLACKLISTED_STRATEGY: "Blacklist pause",
}
KINDS = {
    "escalation": "Escalation",
    "entropy": "Entropy pause",
    "stuck": "Stuck pause",
    "blacklist": "Blacklist pause",
    "handoff": "Hand-off",
}
"""The inbox's ``why`` filter: each kind of stop, and what the page calls it."""


@dataclass
class Item:
    """One thing waiting for a person: a pending session or a hand-off."""

    task_id: str
    kind: str  # "session" or "handoff"
    why: str
    since: datetime
    """When the wait began (a hand-off made by a deadline: when the wait it
    ended began, so "waiting" does not start again)."""
    task: TaskSummary | None
    failure_count: int
    last_error: str
    claimed_by: str | None = None
    signals: list[str] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    entropy: float | None = None
    deadline: datetime | None = None
    """When a session is handed off unless someone answers first."""
    reason_kind: str = "escalation"
    """One of :data:`KINDS`."""
    version: int = 0
    """The task's version the item was drawn for: its forms answer it."""
    gate: str | None = None
    """The last failure's gate, exit code and when."""
    exit_code: int | None = None
    strategies: list[str] = field(default_factory=list)
    """Every strategy its failures name, each once, in the order first tried."""

    @property
    def agent(self) -> str | None:
        return self.task.agent if self.task is not None else None

    @property
    def run_id(self) -> str | None:
        return self.task.run_id if self.task is not None else None


def _why(session: PendingSession, task: TaskSummary | None) -> tuple[str, str]:
    """What the page calls a session's stop, and its :data:`KINDS` key."""
    if session.reason is SessionReason.ENTROPY_LIMIT:
        pending = task.pending_session if task is not None else None
        if pending is not None and pending.entropy_source == "derived":
            return "Stuck pause", "stuck"
        return "Entropy pause", "entropy"
    if session.reason is SessionReason.BLACKLISTED_STRATEGY:
        return WHY[session.reason], "blacklist"
    return WHY.get(session.reason, str(session.reason)), "escalation"


def _task_or_none(service: RecoveryService, task_id: str) -> TaskSummary | None:
    try:
        return service.task(task_id)
    except NotFound:
        return None


def _signals(task: TaskSummary | None) -> list[str]:
    if task is None or task.stuck is None:
        return []
    return [signal.text for signal in task.stuck.signals]


def _failures(
    task: TaskSummary | None, entry: HandoffEntry | None = None
) -> tuple[FailureRecord, ...]:
    if task is not None and task.failure_history:
        return task.failure_history
    if entry is not None:
        return entry.payload.failure_history
    return ()


def _strategies(failures: tuple[FailureRecord, ...]) -> list[str]:
    """Every strategy the failures name, each once, first tried first (a
    hook-recorded task has no lesson for them: its failures name them)."""
    seen: dict[str, None] = {}
    for failure in failures:
        if failure.strategy:
            seen.setdefault(failure.strategy, None)
    return list(seen)


def _lessons(service: RecoveryService, task_id: str) -> list[str]:
    try:
        lessons = service.lessons(task_id)
    except NotFound:
        return []
    return [f"{lesson.failed_strategy}: {lesson.rca_summary}" for lesson in lessons]


def _wait_began(
    service: RecoveryService, entry: HandoffEntry, task: TaskSummary | None
) -> datetime:
    """When a hand-off's wait began: its enqueueing, or for one a deadline
    made, when the session it ended opened (its deadline less the policy's
    ``human_deadline``), so "waiting" goes on counting."""
    began = entry.payload.enqueued_at
    if entry.payload.reason != HUMAN_DEADLINE or task is None:
        return began
    allowed = task.policy.human_deadline
    if allowed is None:
        return began
    with contextlib.suppress(DevsError):
        recent = service.history(task.task_id, after=max(0, task.version - 20))
        for event in reversed(recent):
            deadline = event.changes.get("deadline_at")
            if event.event.endswith("DeadlineExpired") and isinstance(deadline, str):
                moment = datetime.fromisoformat(deadline)
                return moment - timedelta(seconds=allowed)
    return began


INBOX_SCAN = 2_000
"""Waits the inbox reads in all (oldest first) before it filters them."""


def inbox_items(
    service: RecoveryService, only: str | None = None
) -> tuple[list[Item], int]:
    """Every pending session and open hand-off (or only task ``only``'s),
    oldest first (at most :data:`INBOX_SCAN`), and how many there are in
    all."""
    sessions: list[PendingSession] = service.pending_sessions()
    handoffs: list[HandoffEntry] = service.handoff_queue()
    if only is not None:
        sessions = [s for s in sessions if s.task_id == only]
        handoffs = [h for h in handoffs if h.payload.task_id == only]
    waiting: list[tuple[datetime, Any]] = [(s.opened_at, s) for s in sessions]
    waiting += [(h.payload.enqueued_at, h) for h in handoffs]
    waiting.sort(key=lambda pair: pair[0])
    items = []
    for since, entry in waiting[:INBOX_SCAN]:
        session = isinstance(entry, PendingSession)
        task_id = entry.task_id if session else entry.payload.task_id
        task = _task_or_none(service, task_id)
        failures = _failures(task, None if session else entry)
        last = failures[-1] if failures else None
        common = {
            "task_id": task_id,
            "task": task,
            "signals": _signals(task),
            "lessons": _lessons(service, task_id),
            "version": task.version if task is not None else 0,
            "gate": last.gate if last is not None else None,
            "exit_code": last.exit_code if last is not None else None,
            "strategies": _strategies(failures),
            "claimed_by": entry.claimed_by,
        }
        if session:
            why, kind = _why(entry, task)
            item = Item(
                kind="session",
                why=why,
                reason_kind=kind,
                since=since,
                failure_count=entry.failure_count,
                last_error=last.last_error if last is not None else "",
                entropy=entry.entropy_score,
                deadline=entry.deadline_at,
                **common,
            )
        else:
            item = Item(
                kind="handoff",
                why=(
                    "Hand-off: nobody answered before the deadline"
                    if entry.payload.reason == HUMAN_DEADLINE
                    else "Hand-off"
                ),
                reason_kind="handoff",
                since=_wait_began(service, entry, task),
                failure_count=entry.payload.failure_count,
                last_error=entry.payload.last_error
                or (last.last_error if last is not None else ""),
                **common,
            )
        items.append(item)
    return items, len(waiting)


@dataclass(frozen=True)
class Filters:
    """The inbox's filters and order, from its query parameters (a GET
    form: they work without a script)."""

    view: str = "cards"
    """``cards`` or ``list`` (one row per stop)."""
    why: str = ""
    """A :data:`KINDS` key, or every kind."""
    agent: str = ""
    run: str = ""
    claimed: str = ""
    """``claimed``, ``unclaimed``, ``mine``, or any."""
    q: str = ""
    """Part of a task id."""
    sort: str = "waited"
    """``waited`` (longest wait first) or ``deadline`` (soonest first)."""

    @classmethod
    def of(cls, query: Any) -> Filters:
        def pick(name: str, allowed: tuple[str, ...], default: str = "") -> str:
            value = str(query.get(name) or "")
            return value if value in allowed else default

        return cls(
            view=pick("view", ("cards", "list"), "cards"),
            why=pick("why", tuple(KINDS)),
            agent=str(query.get("agent") or "")[:200],
            run=str(query.get("run") or "")[:200],
            claimed=pick("claimed", ("claimed", "unclaimed", "mine")),
            q=str(query.get("q") or "").strip()[:200],
            sort=pick("sort", ("waited", "deadline"), "waited"),
        )

    def query(self, **changed: str) -> str:
        """These filters as a query string (``changed`` replacing some)."""
        values = {
            "view": self.view,
            "why": self.why,
            "agent": self.agent,
            "run": self.run,
            "claimed": self.claimed,
            "q": self.q,
            "sort": self.sort,
            **changed,
        }
        defaults = {"view": "cards", "sort": "waited"}
        kept = {k: v for k, v in values.items() if v and v != defaults.get(k)}
        return "&".join(f"{k}={quote(v, safe='')}" for k, v in kept.items())

    @property
    def active(self) -> bool:
        return bool(self.why or self.agent or self.run or self.claimed or self.q)


def chosen(items: list[Item], filters: Filters, operator: str) -> list[Item]:
    """The items ``filters`` keep, in their order."""
    kept = []
    needle = filters.q.casefold()
    for item in items:
        if filters.why and item.reason_kind != filters.why:
            continue
        if filters.agent and item.agent != filters.agent:
            continue
        if filters.run and item.run_id != filters.run:
            continue
        if filters.claimed == "claimed" and not item.claimed_by:
            continue
        if filters.claimed == "unclaimed" and item.claimed_by:
            continue
        if filters.claimed == "mine" and item.claimed_by != operator:
            continue
        if needle and needle not in item.task_id.casefold():
            continue
        kept.append(item)
    if filters.sort == "deadline":
        far = datetime.max.replace(tzinfo=UTC)
        kept.sort(key=lambda item: (item.deadline or far, item.since))
    return kept


# ----------------------------------------------------------------- answers


ACTIONS = ("resume", "rewind", "skip", "resolve", "claim", "release", "take_over")
"""Every answer a console form sends (``POST /console/actions/ACTION``)."""
NEEDS_REASON = {
    "rewind": "rewind it",
    "skip": "skip it",
    "resolve": "resolve it",
    "take_over": "take it over",
}
"""The answers refused without a reason (it goes in the task's history)."""
CONFIRMED = ("rewind", "skip", "resolve")
"""The answers that end a task or move its run: each asks to confirm first."""
DONE = {
    "resume": "You resumed {task}: its agent goes on.",
    "rewind": "You rewound {task}: its agent starts again from the commit.",
    "skip": "You skipped {task}: its run moves on without it.",
    "claim": "You claimed {task}: until you release it, others' answers are refused.",
    "release": "You released {task}: anyone may answer it now.",
    "take_over": "You took {task} over: it is yours to answer.",
    "resolve": "You resolved {task}: {resolution}.",
}
RESOLUTION_WORDS = {
    "complete": "completed by hand",
    "skip": "skipped, its run moves on",
    "return": "returned to its agent",
}


def _done_message(query: Any) -> str | None:
    """The sentence a page says after an answer (``?done=ACTION&task=ID``):
    written here, never taken from the address."""
    action = str(query.get("done") or "")
    if action not in DONE:
        return None
    task = excerpt(str(query.get("task") or "the task"), 200)
    resolution = RESOLUTION_WORDS.get(str(query.get("resolution") or ""), "done")
    return bidi_shown(DONE[action].format(task=task, resolution=resolution))


def _consequence(action: str, fields: dict[str, str], task: TaskSummary | None) -> str:
    """What an answer that asks to confirm will do, in a sentence."""
    if action == "skip":
        return (
            "The task ends as SKIPPED and its run moves on to the nodes after "
            "it. This cannot be undone."
        )
    if action == "rewind":
        commit = fields.get("to_commit", "").strip() or (
            (task.starting_commit if task is not None else None)
            or "its starting commit"
        )
        return (
            f"The task goes back to work from commit {commit}: its agent starts "
            "again from there."
        )
    resolution = fields.get("resolution", "")
    if resolution == "complete":
        return "The task ends as COMPLETED (done by hand) and its run moves on."
    if resolution == "skip":
        return "The task ends as SKIPPED and its run moves on without it."
    agent = (task.agent if task is not None else None) or "its agent"
    failures = task.consecutive_failures if task is not None else 0
    return (
        f"The task goes back to {agent}, which failed it {failures} times in a "
        "row: it runs again."
    )


def _stale_message(service: RecoveryService, error: StaleAnswer, task_id: str) -> str:
    """Who moved the task on since the page was drawn, and its state now."""
    state = "changed"
    actor = None
    with contextlib.suppress(DevsError):
        state = str(service.task(task_id).state)
        entries = service.history(task_id, after=error.answered or 0, limit=100)
        for entry in reversed(entries):
            who = entry.changes.get("actor")
            if isinstance(who, str) and who:
                actor = who
                break
    if actor is not None:
        said = bidi_shown(actor)
        return f"{said} answered first: the task is now {state}. Nothing was done."
    return (
        f"The task moved on since this page was drawn: it is now {state}. "
        "Nothing was done."
    )


def _claimed_message(holder: str | None) -> str:
    return (
        f"{bidi_shown(holder or 'Someone else')} is on it (claimed): take it over "
        "to answer "
        "it (your reason is kept below). Nothing was done."
    )


def _back(fields: dict[str, str]) -> str | None:
    back = fields.get("back", "")
    if (
        back.startswith(PREFIX + "/")
        and "//" not in back
        and "\\" not in back
        and back.isprintable()
        and len(back) <= 1_000
    ):
        return back
    return None


def _with_done(target: str, action: str, task_id: str, fields: dict[str, str]) -> str:
    said = f"done={action}&task={quote(task_id, safe='')}"
    if action == "resolve":
        said += f"&resolution={quote(fields.get('resolution', ''), safe='')}"
    target = target.split("#", 1)[0]
    return f"{target}{'&' if '?' in target else '?'}{said}"


# ------------------------------------------------------------------- pages


def _page(
    request: Request, template: str, status: int = 200, **context: Any
) -> HTMLResponse:
    html = templates.get_template(template).render(
        base=PREFIX,
        resolutions=[r.value for r in Resolution],
        **context,
    )
    return HTMLResponse(html, status, headers=HEADERS)


def _to_login(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/login", 303, headers=HEADERS)


def _same_origin(request: Request) -> bool:
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


def _refusal(
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


def _status_of(error: DevsError) -> int:
    return error.http_status if 400 <= error.http_status < 600 else 409


def _refused_origin() -> HTMLResponse:
    return _refusal(
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
                answer = _refusal(
                    _status_of(error),
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
        from devs.adapters.http import STREAMS_END

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


def mount(
    app: FastAPI,
    service_of: Callable[[], RecoveryService],
    writer: Any,
    *,
    secret: str | None = None,
) -> None:
    """Add the console's routes to ``app``: ``service_of()`` gives the app's
    service; ``writer.run(call)`` runs a command where the app runs its
    commands (its writer thread); ``secret`` signs the sessions (default: a
    random one, good for this app only)."""
    router = APIRouter(prefix=PREFIX, include_in_schema=False, route_class=ConsoleRoute)
    key = secret.encode() if secret is not None else secrets.token_bytes(32)
    watch = LogWatch(service_of)
    cache: dict[str, Any] = {}

    async def in_thread(call: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(call)

    async def operator_of(request: Request) -> str | None:
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            return None
        service = service_of()
        name: str | None = await in_thread(
            lambda: session_operator(service, cookie, key)
        )
        setattr(request.state, OPERATOR_STATE, name)
        return name

    def inbox_at(service: RecoveryService) -> tuple[int, list[Item], int]:
        """The inbox as the read models hold it at the end of the log now,
        built once per log position for every console of this process."""
        end = service.recorder.max_notification_id() or 0
        cached = cache.get("inbox")
        if cached is not None and cached[0] == end:
            return cached  # type: ignore[no-any-return]
        position = service.catch_up()
        items, total = inbox_items(service)
        answer = (position, items, total)
        if position >= end:
            cache["inbox"] = answer
        return answer

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        media = STATIC.get(name)
        if media is None:
            return Response("not found", 404, media_type="text/plain")
        content = (files("devs.adapters") / "console_static" / name).read_bytes()
        return Response(
            content,
            media_type=media,
            headers={
                "Cache-Control": "max-age=300",
                "X-Content-Type-Options": "nosniff",
            },
        )

    @router.get("/login")
    async def login_page(request: Request) -> Response:
        return _page(request, "login.html", title="Sign in", operator=None)

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not _same_origin(request):
            return _refused_origin()
        token = (await read_form(request)).get("token", "").strip()
        service = service_of()
        name = None
        if TOKEN_SHAPE.fullmatch(token):
            name = await in_thread(lambda: service.roster().holder(token))
        if name is None:
            return _page(
                request,
                "login.html",
                401,
                title="Sign in",
                operator=None,
                error="That token is not an operator's token (it may have been "
                "rotated, or its operator removed). Ask for a new one: "
                "devs operator rotate NAME.",
            )
        cookie = await in_thread(lambda: session_cookie(service, name, key))
        answer = RedirectResponse(f"{PREFIX}/", 303, headers=HEADERS)
        answer.set_cookie(
            COOKIE,
            cookie,
            max_age=SESSION_SECONDS,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return answer

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        if not _same_origin(request):
            return _refused_origin()
        answer = RedirectResponse(f"{PREFIX}/login", 303, headers=HEADERS)
        answer.delete_cookie(COOKIE, path=PREFIX)
        return answer

    @router.get("")
    async def bare() -> Response:
        return RedirectResponse(f"{PREFIX}/", 307, headers=HEADERS)

    def inbox_view(
        request: Request, operator: str
    ) -> Callable[[], tuple[int, list[Item], int, Filters, list[Item]]]:
        filters = Filters.of(request.query_params)
        service = service_of()

        def read() -> tuple[int, list[Item], int, Filters, list[Item]]:
            position, every, _ = inbox_at(service)
            kept = chosen(every, filters, operator)
            return position, kept[:INBOX_MAX], len(kept), filters, every

        return read

    def inbox_context(
        operator: str, items: list[Item], total: int, filters: Filters
    ) -> dict[str, Any]:
        return {
            "operator": operator,
            "items": items,
            "total": total,
            "filters": filters,
            "back": f"{PREFIX}/" + (f"?{filters.query()}" if filters.query() else ""),
        }

    @router.get("/")
    async def inbox(request: Request) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        position, items, total, filters, every = await in_thread(
            inbox_view(request, operator)
        )
        return _page(
            request,
            "inbox.html",
            title=f"({total}) Inbox",
            position=position,
            done=_done_message(request.query_params),
            kinds=KINDS,
            agents=sorted({i.agent for i in every if i.agent}),
            runs=sorted({i.run_id for i in every if i.run_id}),
            **inbox_context(operator, items, total, filters),
        )

    @router.get("/inbox")
    async def inbox_fragment(request: Request) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return Response("sign in", 401, headers=HEADERS)
        service = service_of()
        after = _position(request.query_params.get("after"))
        view = inbox_view(request, operator)

        def read() -> tuple[int, list[Item], int, Filters, list[Item]]:
            if after is not None:
                # At most 2 s; then what the read models hold now.
                with contextlib.suppress(DevsError):
                    service.wait_for(after, timeout=2.0)
            return view()

        _, items, total, filters, _ = await in_thread(read)
        template = "inbox_rows.html" if filters.view == "list" else "inbox_items.html"
        html = templates.get_template(template).render(
            base=PREFIX, **inbox_context(operator, items, total, filters)
        )
        return HTMLResponse(html, headers={**HEADERS, "X-Inbox-Total": str(total)})

    @router.get("/live")
    async def live(request: Request) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return Response("sign in", 401, headers=HEADERS)
        after = _position(request.query_params.get("after"))

        async def still_signed_in() -> bool:
            return await operator_of(request) == operator

        return StreamingResponse(
            _log_moves(watch, after, still_signed_in),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @router.get("/tasks/{task_id:path}")
    async def task_page(request: Request, task_id: str) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        service = service_of()

        def read() -> dict[str, Any]:
            task = service.task(task_id)
            return {
                "task": task,
                "report": service.failure_report(task_id),
                "history": service.history(
                    task_id, after=max(0, task.version - HISTORY_SHOWN)
                ),
                "lessons": service.lessons(task_id),
                "chart": Markup(state_chart_svg(task.state)),
                "item": _item_of(service, task),
            }

        context = await in_thread(read)  # an unknown task: ConsoleRoute's 404
        return _page(
            request,
            "task.html",
            title=task_id,
            operator=operator,
            done=_done_message(request.query_params),
            **context,
        )

    @router.get("/runs")
    async def runs_page(request: Request) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        service = service_of()
        run_ids, more = await in_thread(lambda: _run_ids(service))
        runs = await in_thread(lambda: _runs(service, run_ids))
        return _page(
            request,
            "runs.html",
            title="Runs",
            operator=operator,
            runs=runs,
            more=more,
            scanned=RUNS_SCANNED,
        )

    @router.get("/runs/{run_id:path}")
    async def run_page(request: Request, run_id: str) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        service = service_of()
        run = await in_thread(lambda: service.run_state(run_id))
        return _page(
            request,
            "run.html",
            title=run_id,
            operator=operator,
            run=run,
            dag=Markup(dag_svg(run)),
        )

    @router.get("/metrics")
    async def metrics_page(request: Request) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        service = service_of()
        figures = await in_thread(service.metrics)
        waits = figures.time_to_human
        charts = [
            bar_chart_svg(
                "Tasks by state",
                [
                    (str(state), count)
                    for state, count in figures.tasks_by_state.items()
                ],
            ),
            bar_chart_svg(
                "Loop rate (tasks that ever stopped for a human)",
                [("loop rate", figures.loop_rate * 100)],
                unit="%",
            ),
            bar_chart_svg(
                "Time to a human (seconds)",
                [
                    ("median", waits.p50 or 0.0),
                    ("90th percentile", waits.p90 or 0.0),
                    ("mean", waits.mean or 0.0),
                ],
                unit=" s",
            ),
            bar_chart_svg(
                "Hand-offs by resolution",
                [
                    (str(end), count)
                    for end, count in figures.handoffs_by_resolution.items()
                ],
            ),
            bar_chart_svg(
                "Stuck tasks by signal",
                [("stuck tasks", figures.stuck_tasks)]
                + [(kind, count) for kind, count in figures.stuck_signals.items()],
            ),
        ]
        return _page(
            request,
            "metrics.html",
            title="Metrics",
            operator=operator,
            metrics=figures,
            charts=[Markup(chart) for chart in charts],
        )

    @router.get("/outbox")
    async def outbox_page(request: Request) -> Response:
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        service = service_of()
        state = request.query_params.get("state") or None
        if state is not None and state not in DELIVERY_STATES:
            state = None
        report = await in_thread(
            lambda: service.webhooks(state=state, limit=200)  # type: ignore[arg-type]
        )
        return _page(
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
    async def redeliver(request: Request) -> Response:
        if not _same_origin(request):
            return _refused_origin()
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        fields = await read_form(request)
        service = service_of()
        message_id = fields.get("message_id", "")
        if fields.get("confirmed") != "1":
            report = await in_thread(lambda: service.webhooks(limit=500))
            deliveries = [d for d in report.deliveries if d.message_id == message_id]
            return _page(
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
            return _refusal(_status_of(error), message, operator=operator)
        said = quote(f"{done.count} deliveries due again", safe="")
        return RedirectResponse(f"{PREFIX}/outbox?done={said}", 303, headers=HEADERS)

    def answer_page(
        request: Request,
        operator: str,
        action: str,
        fields: dict[str, str],
        status: int,
        message: str,
        service: RecoveryService,
    ) -> HTMLResponse:
        """A refused answer: the message, and the task's answer form again as
        the task is now (its version), with what was typed kept."""
        task_id = fields.get("task_id", "")
        task = _task_or_none(service, task_id) if task_id else None
        item = _item_of(service, task) if task is not None else None
        return _page(
            request,
            "answer.html",
            status,
            title=f"Not done: {task_id}",
            operator=operator,
            task_id=task_id,
            task=task,
            item=item,
            message=message,
            action=action,
            typed=fields,
            back=_back(fields) or f"{PREFIX}/",
        )

    @router.post("/actions/{action}")
    async def act(request: Request, action: str) -> Response:
        if not _same_origin(request):
            return _refused_origin()
        operator = await operator_of(request)
        if operator is None:
            return _to_login(request)
        fields = await read_form(request)
        if action not in ACTIONS:
            message = f"there is no action {excerpt(action, 40)!r}"
            return _refusal(404, message, operator=operator)
        task_id = fields.get("task_id", "")
        # A textarea sends its lines with CRLF: recorded with LF.
        reason = fields.get("reason", "").replace("\r\n", "\n").strip()
        written = fields.get("version", "")
        service = service_of()

        def again(status: int, message: str) -> Awaitable[HTMLResponse]:
            return in_thread(
                lambda: answer_page(
                    request, operator, action, fields, status, message, service
                )
            )

        task = await in_thread(lambda: service.task(task_id))  # unknown: 404 page
        if not written.isdigit() or len(written) > 18:
            return await again(
                422,
                "This form did not say which version of the task it answers: "
                "here it is as it is now. Nothing was done.",
            )
        version = int(written)
        holder = task.claimed_by
        if holder and holder != operator and action != "take_over":
            return await again(409, _claimed_message(holder))
        if version != task.version:  # before asking anything more
            stale = StaleAnswer(
                "stale", task_id=task_id, version=task.version, answered=version
            )
            message = await in_thread(lambda: _stale_message(service, stale, task_id))
            return await again(412, message)
        if action in NEEDS_REASON and not reason:
            return await again(
                422, f"Write why you {NEEDS_REASON[action]}: the reason is recorded."
            )
        resolution = fields.get("resolution", "")
        if action == "resolve" and resolution not in RESOLUTION_WORDS:
            return await again(
                422,
                "Choose how to resolve it: complete it, skip it, or return it "
                "to its agent.",
            )
        if action in CONFIRMED and fields.get("confirmed") != "1":
            return _page(
                request,
                "confirm.html",
                title=f"Confirm: {action} {task_id}",
                operator=operator,
                action=action,
                task=task,
                typed=fields,
                consequence=_consequence(action, fields, task),
                resolution_words=RESOLUTION_WORDS,
                back=_back(fields) or f"{PREFIX}/",
            )
        said = reason or "(no reason given)"
        calls: dict[str, Callable[[], Any]] = {
            "resume": lambda: service.resume(
                task_id, actor=operator, reason=said, if_version=version
            ),
            "rewind": lambda: service.rewind(
                task_id,
                actor=operator,
                reason=said,
                to_commit=fields.get("to_commit", "").strip() or None,
                if_version=version,
            ),
            "skip": lambda: service.skip(
                task_id, actor=operator, reason=said, if_version=version
            ),
            "claim": lambda: service.claim(task_id, actor=operator, if_version=version),
            "release": lambda: service.release(
                task_id, actor=operator, if_version=version
            ),
            "take_over": lambda: service.take_over(
                task_id, actor=operator, reason=said, if_version=version
            ),
            "resolve": lambda: service.resolve_handoff(
                task_id,
                actor=operator,
                resolution=resolution,  # type: ignore[arg-type]
                reason=said,
                if_version=version,
            ),
        }
        try:
            await writer.run(calls[action])
        except Claimed as error:
            return await again(409, _claimed_message(error.claimed_by))
        except StaleAnswer as error:
            stale = error
            message = await in_thread(lambda: _stale_message(service, stale, task_id))
            return await again(412, message)
        except DevsError as error:
            return await again(_status_of(error), f"Not done: {error}")
        target = _back(fields) or f"{PREFIX}/"
        return RedirectResponse(
            _with_done(target, action, task_id, fields), 303, headers=HEADERS
        )

    @router.api_route("/{rest:path}", methods=["GET", "POST"])
    async def unknown(request: Request, rest: str) -> Response:
        """Any other address under the console: a 404 page, not JSON."""
        operator = await operator_of(request)
        return _refusal(
            404,
            "There is no such page in the console.",
            operator=operator,
        )

    app.include_router(router)


def _item_of(service: RecoveryService, task: TaskSummary) -> Item | None:
    items, _ = inbox_items(service, only=task.task_id)
    return items[0] if items else None


RUNS_SCANNED = 10_000
"""Tasks the runs page reads to find the runs (in task-id order)."""


def _run_ids(service: RecoveryService) -> tuple[list[str], bool]:
    """The runs of the first :data:`RUNS_SCANNED` tasks, and whether there
    are tasks past them (whose runs may be missing from the list)."""
    seen: dict[str, None] = {}
    entries = service.tasks(limit=RUNS_SCANNED)
    for entry in entries:
        if entry.run_id is not None:
            seen[entry.run_id] = None
    more = len(entries) == RUNS_SCANNED and bool(
        service.tasks(after=entries[-1].task_id, limit=1)
    )
    return sorted(seen), more


@dataclass
class RunLine:
    """One run on the runs page: its state and how far its nodes are."""

    run: RunState
    nodes: int
    completed: int
    skipped: int
    started: int
    waiting: int
    """Nodes stopped for a person (paused)."""


def _runs(service: RecoveryService, run_ids: list[str]) -> list[RunLine]:
    lines = []
    for run_id in run_ids[:RUNS_SHOWN]:
        try:
            run = service.run_state(run_id)
        except NotFound:
            continue
        lines.append(
            RunLine(
                run=run,
                nodes=len(run.order),
                completed=len(run.completed),
                skipped=len(run.skipped),
                started=len(run.started),
                waiting=len(run.paused_by),
            )
        )
    return lines


RUNS_SHOWN = 500
"""Runs the runs page describes (by id)."""


def _position(text: str | None) -> int | None:
    if text is None or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


async def _log_moves(
    watch: LogWatch, after: int | None, signed_in: Callable[[], Awaitable[bool]]
) -> AsyncIterator[bytes]:
    """An SSE stream with one event each time the log grows (its data: the
    new end): the console then fetches what changed. It ends with the server,
    or when its session no longer holds (checked every
    :data:`SESSION_RECHECK` seconds: a rotated operator stops hearing)."""
    from devs.adapters.http import STREAMS_END

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


__all__ = ["COOKIE", "PREFIX", "SESSION_SECONDS", "mount"]
